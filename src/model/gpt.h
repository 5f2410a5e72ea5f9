// Part of src/model's public header (model.h): the Gpt model (forward, hand-written backward,
// losses, sampling logits) over a ParamStore, its activation arena, and a pipeline stage's
// chunks of it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "model/param_specs.h"
#include "model/param_store.h"

namespace strata {

// None: keep every activation backward reads. Selective: keep the attention's input (q, k, v)
// but not its core's output (the attention output and its log-sum-exp): backward recomputes the
// attention core (scores, softmax and their product with v) per layer, as Korthikanti et al. do.
// Full: keep only each block's input in forward; recompute the block in backward.
enum class ActivationRecompute { None, Selective, Full };

// The activation arena by what it holds. per_layer: what one block keeps from its forward for
// its backward (the quantity Korthikanti et al.'s formulas give), layers = n_layer × per_layer;
// shared: one block's recompute scratch (selective: the attention core's output; full: a whole
// block's activations); other: the embedding output, the final layernorm, logits, losses and
// backward scratch. total = layers + shared + other. scratch: the part of total a forward or
// backward uses only while it runs (shared, and the products and gradients between a block's
// layers): a pipeline stage's models share one copy of it (build_stage_models).
struct ActivationBytes {
  size_t per_layer = 0, layers = 0, shared = 0, other = 0, total = 0, scratch = 0;
};

// Byte offsets of the activation arena's slots (planned in gpt_arena.cpp). Residual i is at
// residual + i·residual_stride; blocks has one entry per layer (recompute none, selective) or one
// shared entry (full). "padded rows" are the micro-batch's B·T token rows (rounded up to a multiple
// of TP under sequence parallelism), "local rows" this rank's share of them under SP.
struct GptArenaLayout {
  struct Block {
    size_t ln1, ln1_mean, ln1_rstd, qkv, atty, lse, x_mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  std::vector<Block> blocks;
  size_t shared_atty = 0, shared_lse = 0;  // selective recompute: the recomputed attention core
  size_t residual = 0, residual_stride = 0;
  size_t tokens = 0, targets = 0;
  size_t block_out = 0;  // (padded rows, C) a row-parallel layer's product
  size_t gathered = 0;   // SP: (padded rows, C) a gathered layernorm output
  size_t lnf = 0, lnf_mean = 0, lnf_rstd = 0;
  size_t lnf_full = 0;   // SP: (padded rows, C) ln_f's output gathered
  size_t logits = 0, losses = 0;
  size_t row_max = 0, loss_stats = 0;  // TP: the vocab-parallel loss's statistics
  size_t dresidual = 0, dnarrow = 0, dwide = 0;  // backward scratch
  size_t dfull = 0;       // SP: (padded rows, C) a gathered output gradient
  size_t sample_row = 0;  // TP: (padded_vocab) one row of logits gathered
  // Offsets from here on are in the scratch (at offset − scratch_base there); those below it in
  // the model's own arena, which keeps them from a micro-batch's forward to its backward.
  size_t scratch_base = 0;
};

// The activation arena a Gpt with these settings allocates, without allocating it (for memory
// estimates before anything is allocated); `layout`, when given, receives its offsets.
// `chunk`: the arena of one model chunk (its layers; the head's buffers only with the head).
ActivationBytes gpt_activation_bytes(const GptDims& dims, int max_batch, ActivationRecompute recompute, DType dtype,
                                     int tp_size, bool sequence_parallel, GptArenaLayout* layout = nullptr,
                                     GptChunk chunk = {});

class TensorParallel;

class Gpt {
 public:
  // Allocates activations for up to max_batch sequences of dims.seq_len tokens on the
  // backend's device. Without `store` the model owns a FlatParamStore (parameters start at
  // zero: call init_weights or load them); otherwise `store` (which must outlive the model)
  // provides parameters and gradients. `dtype` is the working precision: the owned store's
  // parameters, GEMM inputs and stored activations (and their gradients) are kept in it,
  // while per-row statistics (layernorm mean/rstd, attention log-sum-exp, losses) stay fp32.
  // An external store must hand out parameters of the same dtype (std::logic_error if not).
  // `tp` (optional, must outlive the model): this rank's tensor-parallel group; the model then
  // holds this rank's slices (gpt_param_specs(dims, {tp rank, tp size})): its heads of the
  // attention, its columns of the MLP, its rows of the vocabulary.
  // `chunk` (pipeline parallelism): the model holds and runs that chunk only; `layout` (with an
  // external store) the rank's flat layout the store uses (gpt_rank_specs), where the chunk's
  // parameters take their offsets from. `scratch` (optional, at least activation_breakdown().scratch
  // bytes, outliving the model): the activation scratch, shared with other models that never
  // run at the same time; without it the model allocates its own.
  Gpt(const GptDims& dims, Backend& backend, int max_batch, ActivationRecompute recompute,
      ParamStore* store = nullptr, DType dtype = DType::F32, TensorParallel* tp = nullptr, GptChunk chunk = {},
      const std::vector<ParamSpec>* layout = nullptr, const Buffer* scratch = nullptr);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptDims& dims() const { return dims_; }
  DType dtype() const { return dtype_; }
  // The backend holding the model's memory: views returned below are in its memory, which
  // code outside the backend reaches only through backend().copy.
  Backend& backend() const { return backend_; }
  // This rank's parameters: slices under tensor parallelism.
  const std::vector<ParamSpec>& params() const { return specs_; }
  const ParamSpec& param(const std::string& name) const;  // throws std::out_of_range naming it
  const std::vector<LayerGroup>& groups() const { return groups_; }
  int tp_size() const;
  int tp_rank() const;
  // The flat views below need a FlatParamStore (the default); otherwise std::logic_error.
  bool has_flat_store() const { return flat_ != nullptr; }
  Tensor params_flat();                                   // dtype(), this rank's parameter count
  Tensor grads_flat();                                    // fp32, same layout as params_flat
  Tensor param_tensor(const std::string& name);           // view with the spec's shape
  Tensor grad_tensor(const std::string& name);

  // Called during backward right after a group's gradient is complete (group order
  // L + 1, L, …, 1, 0), e.g. to start reducing it while backward goes on.
  void set_grad_ready_callback(std::function<void(int group)> callback) { grad_ready_ = std::move(callback); }

  // GPT-2 init: element i of tensor `name` is rng_normal(seed, rng_stream_id(name), i) · std
  // with std 0.02 (wte, wpe, c_attn, c_fc weights) or 0.02/√(2·n_layer) (c_proj weights);
  // biases 0, LN weights 1; wte rows ≥ vocab_size 0. Independent of layout and rank (i is the
  // element's index in the global tensor). Values are rounded to dtype() when not fp32.
  void init_weights(uint64_t seed);

  // tokens/targets: (B, T) int32 row-major host arrays, B ≤ max_batch, T ≤ seq_len.
  // Returns the mean loss over the B·T tokens (waiting for the device: for evaluation and
  // tests; training logs its losses, see forward_chunk). Token ids ≥ vocab_size throw
  // UserError. Under tensor parallelism every rank of the group calls it with the same batch
  // (and gets the same loss). Losses logged and not yet taken are dropped.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // forward for training: the same loss, and in the same pass over the logits the gradient
  // of the loss with weight `dloss` per token, which the following backward(dloss) uses (one
  // read of the (B·T, Vp) logits fewer).
  float forward_for_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss);
  // Adds the gradient of (Σ over the last forward's tokens of loss_token · dloss) into the
  // store's gradients. Requires the immediately preceding forward() of the same batch, or
  // forward_for_backward() with the same dloss (std::logic_error otherwise).
  // Under sequence parallelism each TP rank's gradients of the replicated layernorm parameters
  // cover only its token rows; with complete_partial_grads they are summed over the group
  // (after adding this backward's part) before the groups are released. A caller that
  // accumulates several micro-batches into the same gradient buffers passes false for all but
  // the last, so the sum is formed once over the accumulated parts.
  void backward(float dloss, bool complete_partial_grads = true);
  void zero_grads();  // flat store only

  // Inference: logits (B, T, V_slice) in dtype() for tokens (B, T) (no loss), the columns of
  // this rank's vocabulary slice (all Vp columns without TP); the view is valid until the next
  // call. Invalidates a pending backward.
  Tensor forward_logits(const int32_t* tokens, int B, int T);
  // The last position's logits of the real vocabulary (vocab_size values) for a (1, T) context,
  // in fp32 on the host, gathered from every TP rank's slice (all ranks of the group call it).
  std::vector<float> last_token_logits(const int32_t* tokens, int T);

  // ---- pipeline chunks ----
  const GptChunk& chunk() const { return chunk_; }
  // Runs the chunk on a (B, T) micro-batch: from `tokens` through the embeddings (first chunk),
  // else from chunk_input(); to the loss with `targets` (last chunk: the per-token losses are
  // logged, and with for_backward the dlogits of weight dloss written), else into
  // chunk_output(). backward_chunk then runs the chunk's backward from the loss (last chunk) or
  // from chunk_output_grad(), leaving the gradient of the chunk's input in chunk_input_grad()
  // (not the first chunk). Nothing here waits for the device.
  void forward_chunk(const int32_t* tokens, const int32_t* targets, int B, int T, bool for_backward, float dloss);
  // The mean loss of each micro-batch the last chunk has logged since the previous call, in
  // order, and an empty log. Waits for the device: call it once per step (the hot path's one
  // read-back of losses).
  std::vector<float> take_losses();
  void backward_chunk(float dloss, bool complete_partial_grads = true);
  // (local rows, C) in dtype(): this rank's rows of the residual stream under SP, else B·T.
  Tensor chunk_input(int B, int T) const;
  Tensor chunk_output(int B, int T) const;
  Tensor chunk_output_grad(int B, int T) const;
  Tensor chunk_input_grad(int B, int T) const { return chunk_output_grad(B, T); }  // the same buffer, later

  // The activation bytes this model allocated: its arena, and its scratch unless it shares one.
  size_t activation_bytes() const { return activations_.bytes() + own_scratch_.bytes(); }
  const ActivationBytes& activation_breakdown() const { return activation_bytes_; }

 private:
  // Views of one block's saved activations for the current batch: per layer (recompute None),
  // or partly / wholly one shared set (Selective: atty and lse; Full: everything).
  struct BlockActs {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, lse, x_mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  struct BlockParams {
    Tensor ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, proj_w, proj_b;
  };
  // The current batch's shapes. rows = B·T token rows; padded: rows rounded up to a multiple of
  // TP under sequence parallelism (inference on an odd count; the pad rows are zero tokens whose
  // results are dropped), else rows; local: the residual stream's rows on this rank (padded / TP
  // under SP, else rows).
  struct Batch {
    int B = 0, T = 0;
    int64_t rows = 0, padded = 0, local = 0;
  };

  // Block parameters in gpt_param_specs order: spec index block_first_spec(l) + k.
  static constexpr size_t kBlockSpecs = 12, kLn1WeightSpec = 0, kLn2WeightSpec = 6;
  // The first B·T rows of a (≥ B·T, cols) tensor, viewed as (B, T, cols) for the ops that need
  // the batch's sequence structure (embedding positions, causal attention).
  static Tensor sequences(const Tensor& t, int B, int T);
  // A (padded rows, C) scratch slot at `offset`, and this rank's rows of it: under SP where a
  // reduce-scatter leaves this rank's part of the sum; otherwise the whole.
  Tensor all_rows(size_t offset, const Batch& batch) const;
  Tensor own_rows(size_t offset, const Batch& batch) const;

  void plan_arena();
  void check_batch(int B, int T) const;
  Batch batch_of(int B, int T) const;
  void load_tokens(const int32_t* tokens, const int32_t* targets, const Batch& batch);
  // The checks and token load of an inference forward (`caller` names it in errors).
  Batch load_for_inference(const int32_t* tokens, int B, int T, const char* caller);
  // Embedding, all blocks, final LN and logits for the loaded tokens; with last_row_only the
  // logits of the batch's last row alone, in the logits' first row (what sampling reads: the
  // head is about a third of a small model's forward).
  void run_forward(const Batch& batch, bool last_row_only = false);
  void embed(const Batch& batch, void* embeddings);
  // One block from its input (the residual stream) up to the MLP's output projection, reduced
  // over TP and with its bias, in mlp_out(): the caller adds it to x_mid, fused with the next
  // layernorm. ln1_done: the caller already wrote acts.ln1 (and its statistics) of this input.
  // With project false the output projection (not needed by backward's recomputation) is skipped.
  void block_forward(const BlockParams& p, const BlockActs& acts, Tensor input, bool ln1_done, bool project,
                     const Batch& batch);
  // A row-parallel layer's product (no bias) in block_out, summed over TP (g) into this rank's
  // rows, plus the bias; returns those rows. Without TP the plain linear layer.
  Tensor row_parallel_forward(Tensor inp, Tensor weight, Tensor bias, const Batch& batch);
  void block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& acts, Tensor input,
                      Tensor dresidual, const Batch& batch);
  void loss_forward(const Batch& batch, bool write_dlogits, float dloss);
  // The tied head's gradients and this rank's rows of d(ln_f output), summed over TP (f's backward).
  Tensor head_backward(const Batch& batch, void* embeddings, float* dembeddings);
  // SP: sums the gradients of the layernorm parameters in group `group` over the TP group.
  void complete_layernorm_grads(int group, float* grads);
  BlockActs block_acts(int layer, const Batch& batch) const;
  // Views of block `layer`'s tensors inside a group view returned by the store.
  BlockParams block_params(int layer, void* group_base, DType dtype) const;
  // Parameter `spec` inside a group view of `dtype` (store parameters or fp32 gradients).
  Tensor group_view(void* group_base, DType dtype, const ParamSpec& spec) const;
  Tensor param_view(void* group_base, const ParamSpec& spec) const { return group_view(group_base, dtype_, spec); }
  Tensor grad_view(float* group_base, const ParamSpec& spec) const { return group_view(group_base, DType::F32, spec); }
  FlatParamStore& flat_store() const;
  // Block (layer_begin + index)'s input; index local_layers(): the chunk's last output.
  Tensor residual(int index, const Batch& batch) const;
  // The sum of the last row-parallel layer (block_forward's MLP output): this rank's rows.
  Tensor mlp_out(const Batch& batch) const;
  // A view into the activation arena; by default in the working dtype.
  Tensor act(size_t offset, std::initializer_list<int64_t> dims) const { return act(offset, dims, dtype_); }
  Tensor act(size_t offset, std::initializer_list<int64_t> dims, DType dtype) const;
  bool tp_active() const;
  bool sequence_parallel() const;

  GptDims dims_;
  GptChunk chunk_;  // layer_end resolved
  int local_layers() const { return chunk_.layer_end - chunk_.layer_begin; }
  // Index into specs_ of block `layer`'s first parameter, and of ln_f.weight.
  size_t block_first_spec(int layer) const {
    return (chunk_.embedding || chunk_.head ? 2 : 0) + kBlockSpecs * static_cast<size_t>(layer - chunk_.layer_begin);
  }
  size_t lnf_spec() const { return specs_.size() - 2; }
  Backend& backend_;
  int max_batch_;
  ActivationRecompute recompute_;
  DType dtype_;
  TensorParallel* tp_ = nullptr;
  std::unique_ptr<TensorParallel> no_tp_;  // when no group is given: every TP operation a no-op
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> spec_index_;
  std::vector<LayerGroup> groups_;
  std::unique_ptr<FlatParamStore> owned_store_;
  ParamStore* store_ = nullptr;
  FlatParamStore* flat_ = nullptr;  // store_ when it is a FlatParamStore
  std::function<void(int)> grad_ready_;
  Buffer activations_;   // what a micro-batch keeps from its forward to its backward
  Buffer own_scratch_;   // the scratch, when no shared one was given
  const Buffer* scratch_ = nullptr;
  ActivationBytes activation_bytes_;

  // This rank's widths: attention (C / TP, n_head / TP heads), MLP (4C / TP), vocabulary slice.
  int64_t attn_width_ = 0, heads_ = 0, mlp_width_ = 0, vocab_rows_ = 0, vocab_start_ = 0;

  GptArenaLayout arena_;  // byte offsets of the activations, fixed for (max_batch, seq_len)

  // Forward, the per-token losses, optionally dlogits (weight dloss) in the same pass; returns
  // the mean loss (waiting for it).
  float forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T, bool write_dlogits, float dloss);
  // Queues the copy of the losses just computed into the loss log, growing it when full.
  void log_losses(const Batch& batch);
  bool backward_ready_ = false;
  bool dlogits_ready_ = false;  // forward_for_backward wrote dlogits for dlogits_weight_
  float dlogits_weight_ = 0.0f;
  Batch last_batch_;
  // The loss log: per-token losses of the micro-batches since take_losses(), copied to host
  // memory in the backend's order of ops (copy_async), read after one wait.
  Buffer logged_losses_;                // F32, backend_.allocate_host
  std::vector<int64_t> logged_rows_;    // tokens of each logged micro-batch, in order
  int64_t logged_count_ = 0;            // floats used in logged_losses_
  std::vector<int32_t> padded_ids_;  // host staging of token/target ids with the SP pad rows
};

// The models of one pipeline stage (without a pipeline: the whole model): one Gpt per chunk and
// in-flight micro-batch slot, chunk c's slots[c] copies one after another (chunk 0's first), all
// on `store` (which must outlive them) in this rank's flat `layout` (gpt_rank_specs, also
// outliving them), sharing `scratch`, which this allocates (the largest chunk's; it must outlive
// them): a stage runs one forward or backward at a time.
std::vector<std::unique_ptr<Gpt>> build_stage_models(const GptDims& dims, Backend& backend, int max_batch,
                                                     ActivationRecompute recompute, ParamStore& store, DType dtype,
                                                     TensorParallel* tp, const std::vector<GptChunk>& chunks,
                                                     const std::vector<int>& slots,
                                                     const std::vector<ParamSpec>& layout, Buffer& scratch);

}  // namespace strata
