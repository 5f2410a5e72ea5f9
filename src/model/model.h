// Public header of src/model: the GPT-2 parameter registry (ParamSpec, from which TP slicing,
// ZeRO partitioning, checkpoints and export derive) and the Gpt model with a hand-written
// backward over one flat parameter buffer, one flat gradient buffer and one activation arena.
#pragma once
#include <cstddef>
#include <cstdint>
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

class Gpt {
 public:
  // Allocates parameters, gradients (zeroed) and activations for up to max_batch sequences
  // of dims.seq_len tokens on the backend's device. Parameters start at zero: call
  // init_weights or load them.
  Gpt(const GptDims& dims, Backend& backend, int max_batch, ActivationRecompute recompute);
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptDims& dims() const { return dims_; }
  const std::vector<ParamSpec>& params() const { return specs_; }
  const ParamSpec& param(const std::string& name) const;  // throws std::out_of_range naming it
  Tensor params_flat();                                   // fp32, gpt_param_count elements
  Tensor grads_flat();                                    // same layout as params_flat
  Tensor param_tensor(const std::string& name);           // view with the spec's shape
  Tensor grad_tensor(const std::string& name);

  // GPT-2 init: element i of tensor `name` is rng_normal(seed, rng_stream_id(name), i) · std
  // with std 0.02 (wte, wpe, c_attn, c_fc weights) or 0.02/√(2·n_layer) (c_proj weights);
  // biases 0, LN weights 1; wte rows ≥ vocab_size 0. Independent of layout and rank.
  void init_weights(uint64_t seed);

  // tokens/targets: (B, T) int32 row-major host arrays, B ≤ max_batch, T ≤ seq_len.
  // Returns the mean loss over the B·T tokens. Token ids ≥ vocab_size throw UserError.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Adds the gradient of (Σ over the last forward's tokens of loss_token · dloss) into
  // grads_flat(). Requires the immediately preceding forward() (of the same batch).
  void backward(float dloss);
  void zero_grads();

  // Inference: logits (B, T, padded_vocab) for tokens (B, T) (no loss); the view is valid
  // until the next call. Invalidates a pending backward.
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
  // One block; with write_output false the residual output (not needed by backward) is skipped.
  void block_forward(int layer, const BlockActs& acts, Tensor input, Tensor output, bool write_output, int B, int T);
  void block_backward(int layer, const BlockActs& acts, Tensor input, Tensor dresidual, int B, int T);
  BlockActs block_acts(int layer, int B, int T) const;
  BlockParams block_params(int layer, bool grads);
  Tensor residual(int index, int B, int T) const;  // block `index`'s input; index L: last output
  Tensor act(size_t offset, std::initializer_list<int64_t> dims, DType dtype = DType::F32) const;
  Tensor spec_view(const ParamSpec& spec, const Buffer& buffer) const;

  GptDims dims_;
  Backend& backend_;
  int max_batch_;
  ActivationRecompute recompute_;
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> spec_index_;
  Buffer params_;
  Buffer grads_;
  Buffer activations_;

  // Arena layout (byte offsets), fixed for (max_batch, seq_len).
  std::vector<BlockOffsets> block_offsets_;  // L entries (None) or 1 (Full)
  size_t residual_offset_ = 0;               // (L + 1) × (B, T, C)
  size_t tokens_offset_ = 0, targets_offset_ = 0;
  size_t block_out_offset_ = 0;              // (B, T, C) projection output before the residual add
  size_t lnf_offset_ = 0, lnf_mean_offset_ = 0, lnf_rstd_offset_ = 0;
  size_t logits_offset_ = 0, losses_offset_ = 0;
  size_t dresidual_offset_ = 0, dnarrow_offset_ = 0, dwide_offset_ = 0;  // backward scratch

  bool backward_ready_ = false;
  int last_batch_ = 0, last_seq_ = 0;
  std::vector<float> host_losses_;
};

}  // namespace strata
