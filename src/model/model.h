// Public header of src/model: the GPT-2 parameter registry (ParamSpec, from which TP slicing,
// ZeRO partitioning, checkpoints and export derive), the ParamStore through which the model
// reaches its parameters and gradients layer group by layer group, and the Gpt model with a
// hand-written backward.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace strata {

struct GptDims {
  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;
  int vocab_size = 0;    // real vocabulary; logits beyond it are masked out of the loss
  int padded_vocab = 0;  // rows of wte (≥ vocab_size)
  int seq_len = 0;       // rows of wpe, the longest sequence
};

// Full: keep only each block's input in forward; recompute the block in backward.
enum class ActivationRecompute { None, Full };

struct ParamSpec {
  std::string name;            // HuggingFace GPT-2 name, e.g. "h.3.attn.c_attn.weight", "wte.weight"
  std::vector<int64_t> shape;  // global shape, HF layout; wte is (padded_vocab, C)
  int tp_split_dim = -1;       // -1 replicated; else the dim tensor parallelism splits
  int layer = -1;              // block index; -1 for wte/wpe, n_layer for ln_f
  bool weight_decay = false;   // true for 2-D weights (matrices and embeddings)
  int64_t offset = 0;          // element offset in the flat parameter/gradient buffer
  int64_t numel = 0;
};

// Order: wte, wpe, h.0.* … h.{L-1}.*, ln_f.*; inside a block HF's order (ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; weight before bias). Offsets are packed densely.
// TP split dims: c_attn/c_fc weight and bias on the output dim, attn/mlp c_proj weights on
// the input dim (0), wte on the vocab dim (0, Megatron's vocab-parallel embedding).
// Throws UserError on dims that do not describe a valid model.
std::vector<ParamSpec> gpt_param_specs(const GptDims& dims);
// Σ numel over the specs.
int64_t gpt_param_count(const GptDims& dims);

// Elements [begin, begin + count) of parameter `spec`'s GPT-2 initial value (see
// Gpt::init_weights): a pure function of (seed, name, element index), so any rank can
// initialise any slice on its own.
void gpt_init_values(const GptDims& dims, const ParamSpec& spec, uint64_t seed, int64_t begin, int64_t count,
                     float* out);

// ---- layer groups and parameter storage ----------------------------------------------
// The model reaches parameters one layer group at a time: group 0 is the embeddings (wte,
// wpe), group 1 + l is block l, group n_layer + 1 is ln_f. Each is a contiguous element range
// of the flat layout (ParamSpec::offset).
struct LayerGroup {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t numel() const { return end - begin; }
};
inline int param_group(const ParamSpec& spec) { return spec.layer + 1; }
std::vector<LayerGroup> gpt_layer_groups(const std::vector<ParamSpec>& specs);

enum class Pass { Forward, Backward };

// Where parameters and gradients live. The model brackets every use of a group with
// acquire/release, so an implementation may keep only a shard and fetch groups on demand.
// Views returned for a group are laid out like the flat buffer's range of that group:
// parameter `spec` starts at element (spec.offset − group.begin) of the returned view.
// Parameters are the working copy in param_dtype() (F32, or BF16/F16 under mixed precision);
// gradients are always fp32, so micro-batches accumulate without low-precision rounding.
// Forward acquires groups in the order 0, 1, …, L + 1 (holding 0 until the logits are done);
// backward in the order 0, L + 1, L, …, 1 (holding 0 until the embedding gradient is done).
class ParamStore {
 public:
  virtual ~ParamStore() = default;
  virtual DType param_dtype() const { return DType::F32; }
  virtual void* acquire_params(int group, Pass pass) = 0;
  virtual void release_params(int group, Pass pass) = 0;
  // Where backward accumulates the group's gradient (+=); release_grads says that the
  // gradient of the current backward for that group is complete.
  virtual float* acquire_grads(int group) = 0;
  virtual void release_grads(int group) = 0;
};

// The default store: every parameter in one flat buffer of `param_dtype`, every gradient in
// one flat fp32 buffer. `capacity` (≥ numel) lets a caller pad the buffers, e.g. to a
// multiple of the data-parallel size; the padding stays zero.
class FlatParamStore final : public ParamStore {
 public:
  FlatParamStore(Backend& backend, const std::vector<ParamSpec>& specs, int64_t capacity = 0,
                 DType param_dtype = DType::F32);
  DType param_dtype() const override { return param_dtype_; }
  void* acquire_params(int group, Pass) override {
    return static_cast<char*>(params_.data()) + groups_.at(static_cast<size_t>(group)).begin * dtype_size(param_dtype_);
  }
  void release_params(int, Pass) override {}
  float* acquire_grads(int group) override { return grads_base() + groups_.at(static_cast<size_t>(group)).begin; }
  void release_grads(int) override {}

  int64_t numel() const { return numel_; }
  int64_t capacity() const { return capacity_; }
  Tensor params() const { return params_.view(0, param_dtype_, {numel_}); }  // numel elements
  Tensor grads() const { return grads_.view(0, DType::F32, {numel_}); }
  Tensor padded_params() const { return params_.view(0, param_dtype_, {capacity_}); }
  Tensor padded_grads() const { return grads_.view(0, DType::F32, {capacity_}); }

 private:
  float* grads_base() const { return static_cast<float*>(grads_.data()); }
  std::vector<LayerGroup> groups_;
  int64_t numel_ = 0, capacity_ = 0;
  DType param_dtype_ = DType::F32;
  Buffer params_, grads_;
};

class Gpt {
 public:
  // Allocates activations for up to max_batch sequences of dims.seq_len tokens on the
  // backend's device. Without `store` the model owns a FlatParamStore (parameters start at
  // zero: call init_weights or load them); otherwise `store` (which must outlive the model)
  // provides parameters and gradients. `dtype` is the working precision: the owned store's
  // parameters, GEMM inputs and stored activations (and their gradients) are kept in it,
  // while per-row statistics (layernorm mean/rstd, attention log-sum-exp, losses) stay fp32.
  // An external store must hand out parameters of the same dtype (std::logic_error if not).
  Gpt(const GptDims& dims, Backend& backend, int max_batch, ActivationRecompute recompute,
      ParamStore* store = nullptr, DType dtype = DType::F32);
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptDims& dims() const { return dims_; }
  DType dtype() const { return dtype_; }
  // The backend holding the model's memory: views returned below are in its memory, which
  // code outside the backend reaches only through backend().copy.
  Backend& backend() const { return backend_; }
  const std::vector<ParamSpec>& params() const { return specs_; }
  const ParamSpec& param(const std::string& name) const;  // throws std::out_of_range naming it
  const std::vector<LayerGroup>& groups() const { return groups_; }
  // The flat views below need a FlatParamStore (the default); otherwise std::logic_error.
  bool has_flat_store() const { return flat_ != nullptr; }
  Tensor params_flat();                                   // dtype(), gpt_param_count elements
  Tensor grads_flat();                                    // fp32, same layout as params_flat
  Tensor param_tensor(const std::string& name);           // view with the spec's shape
  Tensor grad_tensor(const std::string& name);

  // Called during backward right after a group's gradient is complete (group order
  // L + 1, L, …, 1, 0), e.g. to start reducing it while backward goes on.
  void set_grad_ready_callback(std::function<void(int group)> callback) { grad_ready_ = std::move(callback); }

  // GPT-2 init: element i of tensor `name` is rng_normal(seed, rng_stream_id(name), i) · std
  // with std 0.02 (wte, wpe, c_attn, c_fc weights) or 0.02/√(2·n_layer) (c_proj weights);
  // biases 0, LN weights 1; wte rows ≥ vocab_size 0. Independent of layout and rank. Values
  // are rounded to dtype() when that is not fp32.
  void init_weights(uint64_t seed);

  // tokens/targets: (B, T) int32 row-major host arrays, B ≤ max_batch, T ≤ seq_len.
  // Returns the mean loss over the B·T tokens. Token ids ≥ vocab_size throw UserError.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // forward for training: the same loss, and in the same pass over the logits the gradient
  // of the loss with weight `dloss` per token, which the following backward(dloss) uses (one
  // read of the (B·T, Vp) logits fewer).
  float forward_for_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss);
  // Adds the gradient of (Σ over the last forward's tokens of loss_token · dloss) into the
  // store's gradients. Requires the immediately preceding forward() of the same batch, or
  // forward_for_backward() with the same dloss (std::logic_error otherwise).
  void backward(float dloss);
  void zero_grads();  // flat store only

  // Inference: logits (B, T, padded_vocab) in dtype() for tokens (B, T) (no loss); the view
  // is valid until the next call. Invalidates a pending backward.
  Tensor forward_logits(const int32_t* tokens, int B, int T);

  size_t activation_bytes() const { return activations_.bytes(); }

 private:
  // Views of one block's saved activations (per layer with ActivationRecompute::None, one shared set
  // with ActivationRecompute::Full) for the current (B, T).
  struct BlockActs {
    Tensor ln1, ln1_mean, ln1_rstd, qkv, atty, lse, x_mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };
  struct BlockParams {
    Tensor ln1_w, ln1_b, attn_w, attn_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b, proj_w, proj_b;
  };
  // Byte offsets of one block's activations inside the arena.
  struct BlockOffsets {
    size_t ln1, ln1_mean, ln1_rstd, qkv, atty, lse, x_mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;
  };

  void check_batch(int B, int T) const;
  void load_tokens(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Embedding, all blocks, final LN and logits for the loaded tokens.
  void run_forward(int B, int T);
  // One block from its input (the residual stream) up to the MLP's output projection, left in
  // the block_out scratch: the caller adds it to x_mid, fused with the next layernorm. ln1_done:
  // the caller already wrote acts.ln1 (and its statistics) of this input. With project false
  // the output projection (not needed by backward's recomputation) is skipped.
  void block_forward(const BlockParams& p, const BlockActs& acts, Tensor input, bool ln1_done, bool project, int B,
                     int T);
  void block_backward(const BlockParams& p, const BlockParams& g, const BlockActs& acts, Tensor input,
                      Tensor dresidual, int B, int T);
  BlockActs block_acts(int layer, int B, int T) const;
  // Views of block `layer`'s tensors inside a group view returned by the store.
  BlockParams block_params(int layer, void* group_base, DType dtype) const;
  // Parameter `spec` inside a group view of `dtype` (store parameters or fp32 gradients).
  Tensor group_view(void* group_base, DType dtype, const ParamSpec& spec) const;
  Tensor param_view(void* group_base, const ParamSpec& spec) const { return group_view(group_base, dtype_, spec); }
  Tensor grad_view(float* group_base, const ParamSpec& spec) const { return group_view(group_base, DType::F32, spec); }
  FlatParamStore& flat_store() const;
  Tensor residual(int index, int B, int T) const;  // block `index`'s input; index L: last output
  // A view into the activation arena; by default in the working dtype.
  Tensor act(size_t offset, std::initializer_list<int64_t> dims) const { return act(offset, dims, dtype_); }
  Tensor act(size_t offset, std::initializer_list<int64_t> dims, DType dtype) const;

  GptDims dims_;
  Backend& backend_;
  int max_batch_;
  ActivationRecompute recompute_;
  DType dtype_;
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> spec_index_;
  std::vector<LayerGroup> groups_;
  std::unique_ptr<FlatParamStore> owned_store_;
  ParamStore* store_ = nullptr;
  FlatParamStore* flat_ = nullptr;  // store_ when it is a FlatParamStore
  std::function<void(int)> grad_ready_;
  Buffer activations_;

  // Arena layout (byte offsets), fixed for (max_batch, seq_len).
  std::vector<BlockOffsets> block_offsets_;  // L entries (None) or 1 (Full)
  size_t residual_offset_ = 0;               // (L + 1) × (B, T, C)
  size_t tokens_offset_ = 0, targets_offset_ = 0;
  size_t block_out_offset_ = 0;              // (B, T, C) projection output before the residual add
  size_t lnf_offset_ = 0, lnf_mean_offset_ = 0, lnf_rstd_offset_ = 0;
  size_t logits_offset_ = 0, losses_offset_ = 0;
  size_t dresidual_offset_ = 0, dnarrow_offset_ = 0, dwide_offset_ = 0;  // backward scratch

  // Forward, the per-token losses, optionally dlogits (weight dloss) in the same pass; returns
  // the mean loss.
  float forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T, bool write_dlogits, float dloss);
  // The mean of the losses just computed (reading them back to the host).
  float mean_loss(int B, int T);
  bool backward_ready_ = false;
  bool dlogits_ready_ = false;  // forward_for_backward wrote dlogits for dlogits_weight_
  float dlogits_weight_ = 0.0f;
  int last_batch_ = 0, last_seq_ = 0;
  std::vector<float> host_losses_;
};

}  // namespace strata
