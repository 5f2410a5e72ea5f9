// Public header of src/backend: the Backend interface holding every op the model and the
// optimizer need, the owned device Buffer, and the factory for the CPU backend (the fp32
// ground truth; BF16/F16 tensors are converted to fp32 on load and rounded back on store).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "core/core.h"

namespace strata {

// Memory owned on a backend's device; freed (with the backend's own release function) when
// the buffer is destroyed. Move-only.
class Buffer {
 public:
  using Release = void (*)(void*);
  Buffer() = default;
  Buffer(void* data, size_t bytes, Device device, Release release)
      : data_(data), bytes_(bytes), device_(device), release_(release) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // A tensor view at a byte offset; throws std::out_of_range when it would not fit.
  Tensor view(size_t offset, DType dtype, std::initializer_list<int64_t> dims) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::CPU;
  Release release_ = nullptr;
};

// Ordinary (pageable) host memory, 256-byte aligned and zero-filled, outside every backend's
// accounting: host state that no copy_async touches (offloaded optimizer state not pinned).
Buffer allocate_pageable_host(size_t bytes);

// One AdamW step's scalars. Bias corrections are passed in (not derived from a step count)
// so that schedules, skipped steps and resumes stay the optimizer's business.
struct AdamWArgs {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double bias_correction1 = 1.0;  // 1 − β1^t
  double bias_correction2 = 1.0;  // 1 − β2^t
  double grad_scale = 1.0;        // gradients are multiplied by this first (clip coefficient, 1/loss scale)
  bool decoupled = true;          // true: AdamW decay p *= 1 − lr·wd; false: L2, g += wd·p
};

// AdamWArgs' scalars rounded to fp32 once, as torch rounds its Python floats before its fp32
// kernels: every host implementation of the step starts from these (the CUDA kernels' scalars
// are rounded the same way, in cuda_args).
struct AdamWFloats {
  float decay, l2, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps, grad_scale;
};
AdamWFloats adamw_floats(const AdamWArgs& args);

// What a backend's allocator holds. allocated/peak count this process's live buffers of that
// backend kind (all instances); device_used/device_total describe the whole device as its
// driver reports it (context, libraries and other processes included; 0 where not known).
struct MemoryStats {
  size_t allocated_bytes = 0;
  size_t peak_allocated_bytes = 0;
  size_t device_used_bytes = 0;
  size_t device_total_bytes = 0;
};

// Conventions for every op:
// - Tensors are views; "(N, C)" means the op reads the tensor as N rows of C contiguous
//   elements, whatever its ndim (leading dims are flattened), unless stated otherwise.
// - "overwrites" means the output's previous contents are ignored; "accumulates" means +=.
// - An undefined Tensor (data == nullptr) passed where an argument is marked optional skips
//   that part of the op.
// - Shape or device mismatches are programming errors: std::invalid_argument naming the op.
// - Ops are not thread-safe: one backend instance serves one thread.
// How bf16 attention takes the softmax probabilities P and their gradients dS into its 16-bit
// products (model.attention_probabilities): Rounded to bf16 once, FlashAttention's and PyTorch
// SDPA's numerics and the faster; or Split into a bf16 hi + lo pair (~16 significant bits), closer
// to fp32 attention. Only tensor-core attention has such products (the CUDA backend's, bf16 at
// head sizes 64 and 128); elsewhere P is fp32 and both give the same result.
enum class AttentionProbabilities : uint8_t { Rounded, Split };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  virtual MemoryStats memory_stats() const = 0;
  // Dense bf16 peak of the device in FLOP/s, the denominator of MFU; 0 when not known (the
  // CPU, or a GPU not in strata's table).
  virtual double peak_flops() const = 0;
  // Starts a new high-water mark at what is allocated now (e.g. after set-up).
  virtual void reset_peak_memory() = 0;
  // Returns once every op issued so far has finished (ops may run asynchronously on a device;
  // on the CPU they have already finished): for timings, and before reading what copy_async
  // wrote. A bad token or target id found on the device by an op since the last wait throws
  // its UserError here (see embedding_forward).
  virtual void synchronize() = 0;
  // The CUDA stream (a cudaStream_t) the backend enqueues its ops on, so that other CUDA work
  // (NCCL collectives) can be ordered after them; nullptr for a backend whose ops finish
  // before they return.
  virtual void* cuda_stream() const = 0;
  // Sets how bf16 attention rounds P and dS (CUDA starts with Split, what its op tests hold to
  // 1e-2; training sets the config's choice). attention_numerics says, for the start-up banner,
  // how attention at this dtype and head size computes P: the default is fp32.
  virtual void set_attention_probabilities(AttentionProbabilities) {}
  virtual std::string attention_numerics(DType dtype, int64_t head_size) const;

  // ---- memory and whole-tensor ops ----
  // Zero-filled memory on this backend's device, 256-byte aligned.
  virtual Buffer allocate(size_t bytes) = 0;
  // dst = src, same dtype and numel; either side may be host memory or this device's memory.
  // Returns when the host side may be reused (a copy to the host waits for the device).
  virtual void copy(Tensor src, Tensor dst) = 0;
  // Host memory for copy_async's host side (Device::CPU, 256-byte aligned, zero-filled):
  // page-locked on a device, so a copy to or from it does not hold the host thread.
  virtual Buffer allocate_host(size_t bytes) = 0;
  // dst = src as copy does, but in the backend's order of ops: the copy has landed once
  // synchronize() returns, and the host side (from allocate_host) must not be read or written
  // before then. What the hot path uses to bring values back without waiting for them.
  virtual void copy_async(Tensor src, Tensor dst) = 0;
  // dst = src converted between F32, BF16 and F16 (round to nearest even); same numel.
  virtual void cast(Tensor src, Tensor dst) = 0;
  virtual void zero(Tensor t) = 0;                 // any dtype
  virtual void fill(Tensor t, float value) = 0;    // float dtypes
  virtual void scale(Tensor t, float factor) = 0;  // t *= factor
  // Σ t², accumulated in double in a fixed order (deterministic); used for the grad norm.
  virtual double sum_squares(Tensor t) = 0;

  // ---- layers ----
  // out (M, N) = op(a) · op(b) [+ bias (N)], where op(a) is (M, K) — a stored (M, K), or
  // (K, M) when trans_a — and op(b) is (K, N) — b stored (K, N), or (N, K) when trans_b.
  // accumulate: out += …, else out is overwritten. bias is optional.
  virtual void matmul(Tensor out, Tensor a, Tensor b, Tensor bias, bool trans_a, bool trans_b,
                      bool accumulate) = 0;
  // dbias (N) += Σ over rows of dout (M, N).
  virtual void bias_backward(Tensor dbias, Tensor dout) = 0;
  // out (M, N) += bias (N) on every row, rounded to out's dtype: the bias of a row-parallel
  // linear layer, added once after its partial products were summed over the TP group.
  virtual void add_bias(Tensor out, Tensor bias) = 0;
  // out = a + b elementwise (same numel); out may alias a or b.
  virtual void add(Tensor out, Tensor a, Tensor b) = 0;

  // out (N, C) = (inp − mean) · rstd · weight + bias, eps 1e-5, biased variance; overwrites.
  // mean, rstd (N): saved for backward (overwritten); optional.
  virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                 Tensor bias) = 0;
  // The residual connection and the next layernorm: residual (N, C) = a + b, rounded to its
  // dtype, then out, mean, rstd = layernorm_forward of that rounded residual; all overwritten.
  // residual may alias a or b. A backend may fuse the two passes; by default add then
  // layernorm_forward.
  virtual void residual_layernorm_forward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b,
                                          Tensor weight, Tensor bias);
  // Accumulates dinp (N, C), dweight (C), dbias (C) from dout (N, C) and the saved mean, rstd.
  virtual void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                  Tensor weight, Tensor mean, Tensor rstd) = 0;

  // Tanh-approximated GELU ("gelu_new"): out = ½x(1 + tanh(√(2/π)(x + 0.044715x³))); overwrites.
  virtual void gelu_forward(Tensor out, Tensor inp) = 0;
  // dinp = dout · gelu'(inp); overwrites; dinp may alias dout.
  virtual void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) = 0;

  // Causal self-attention. qkv (B, T, 3C) laid out [q | k | v], each C wide with n_head heads
  // of C/n_head contiguous elements. out (B, T, C) (heads contiguous, same layout as q) and
  // lse (B, n_head, T), the log-sum-exp of each row of scaled scores, are overwritten.
  // Scores are q·kᵀ/√head_dim.
  virtual void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head) = 0;
  // dqkv (B, T, 3C) is overwritten from dout (B, T, C); scores are recomputed from qkv and lse;
  // out is the forward output.
  virtual void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                  int n_head) = 0;

  // Token + position embedding. wte (V_slice, C) holds rows [vocab_start, vocab_start + V_slice)
  // of the embedding table: the whole table with vocab_start 0, or one rank's slice of it under
  // tensor parallelism (vocab-parallel embedding). tokens (B, T) I32; wpe (≥T, C), optional.
  // out (B, T, C) = wte[id − vocab_start] for ids inside the slice, 0 for the vocabulary's other
  // ids (another rank holds their rows), plus wpe[t] when wpe is defined; overwrites. A token id
  // outside [0, vocab_size) throws UserError: at once for host tokens; for tokens in device
  // memory, at the latest by the next synchronize() or copy to the host (a device checks them
  // without waiting; the message names the op, the id and its position).
  virtual void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int64_t vocab_start,
                                 int vocab_size) = 0;
  // dwte (V_slice, C) and dwpe (optional) accumulate dout (B, T, C) in a fixed order
  // (deterministic): dwpe every dout row, over b in order; each dwte row the dout rows of its id,
  // in pieces (kEmbeddingGradPiece), the order every backend shares bit for bit. Ids outside the
  // slice add nothing to dwte. An id outside [0, vocab_size) is a programming error here (the
  // forward reported it): std::invalid_argument for host tokens, skipped for device tokens.
  virtual void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int64_t vocab_start,
                                  int vocab_size) = 0;

  // Fused softmax + cross-entropy over rows of logits (N, Vp) of which only the first
  // vocab_size columns are real (the padding is masked out). targets (N) I32.
  // losses (N), optional, overwritten with logsumexp(logits[n, :V]) − logits[n, target].
  // write_dlogits: logits are replaced by dlogits = dloss · (softmax − onehot(target)) over
  // the real columns and 0 over the padding. A target outside [0, V) throws UserError (device
  // targets: as for embedding_forward's tokens).
  virtual void softmax_cross_entropy(Tensor logits, Tensor losses, Tensor targets, int vocab_size,
                                     bool write_dlogits, float dloss) = 0;

  // Vocab-parallel cross-entropy (tensor parallelism), in three passes around two all-reduces
  // over the TP group, so that no rank ever holds the full logits. logits (N, V_slice) are the
  // columns [vocab_start, vocab_start + V_slice) of the full logits; a column is real when its
  // global index is below vocab_size (the rest is padding). targets (N) I32 are global ids in
  // [0, vocab_size) (UserError otherwise).
  // 1. row_max (N) F32, overwritten: the maximum of each row over the slice's real columns
  //    (−inf where the slice has none). The caller all-reduces it with Max.
  virtual void vocab_parallel_max(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size) = 0;
  // 2. With row_max the maximum over the whole vocabulary: stats (2, N) F32, overwritten:
  //    stats[0, n] = Σ exp(logit − row_max[n]) over the slice's real columns, and
  //    stats[1, n] = logits[n, target − vocab_start] when the target falls inside the slice,
  //    else 0. The caller all-reduces it with Sum.
  virtual void vocab_parallel_sum_exp(Tensor stats, Tensor logits, Tensor row_max, Tensor targets,
                                      int64_t vocab_start, int vocab_size) = 0;
  // 3. With the summed stats: losses (N), optional, overwritten with row_max + log(stats[0]) −
  //    stats[1]; write_dlogits: logits = dloss · (exp(logit − row_max) / stats[0] −
  //    onehot(target)) over the real columns and 0 over the padding.
  virtual void vocab_parallel_cross_entropy(Tensor logits, Tensor losses, Tensor targets, Tensor row_max,
                                            Tensor stats, int64_t vocab_start, int vocab_size, bool write_dlogits,
                                            float dloss) = 0;

  // One torch.optim.AdamW step (torch's operation order) over a contiguous range; param,
  // exp_avg and exp_avg_sq are updated in place, grad is only read (the scaling and the L2
  // term are applied to a private copy). All four have the same numel. param_copy (optional,
  // same numel, any float dtype) is overwritten with the updated param rounded as cast
  // rounds: the 16-bit working copy of mixed precision, written in the same pass.
  virtual void adamw_update(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_copy,
                            const AdamWArgs& args) = 0;

  // ---- conveniences built from the ops above, shared by every backend ----
  // Linear layer with weights in HF Conv1D layout: out (N, Out) = inp (N, In) · weight (In, Out)
  // + bias (Out); overwrites; bias optional.
  void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
  // The MLP's first projection and its activation: pre (N, Out) = inp · weight + bias and
  // out (N, Out) = gelu(pre), both overwritten (pre is kept for the backward). A backend may
  // fuse the two (a GEMM epilogue); by default linear_forward then gelu_forward.
  virtual void linear_gelu_forward(Tensor out, Tensor pre, Tensor inp, Tensor weight, Tensor bias);
  // dinp (N, In) = dout · weightᵀ, overwritten (optional); dweight (In, Out) += inpᵀ · dout;
  // dbias (Out) += Σ dout (optional). A backend may fuse the bias gradient into the weight
  // gradient's product (a GEMM epilogue); by default matmul then bias_backward.
  virtual void linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight);
  // linear_backward of a layer whose input is gelu(pre), carried on through the GELU:
  // dpre (N, In) = (dout · weightᵀ) ⊙ gelu'(pre), overwritten; dweight and dbias as
  // linear_backward (inp = gelu(pre)). A backend may fuse the GELU gradient into the product
  // (a GEMM epilogue); by default linear_backward then gelu_backward.
  virtual void linear_backward_gelu(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                                    Tensor pre);
};

std::unique_ptr<Backend> make_cpu_backend();
// The CPU backend acting as a separate device: its buffers are Device::Simulated and
// inaccessible (PROT_NONE) except while one of its own ops runs, so any host access from
// outside the backend faults at once; ops refuse host tensors (copy excepted) as the CUDA
// backend does. Results are bit-identical to make_cpu_backend(). For tests: it proves that
// the model, engine, optimizer, communication staging and checkpoints treat backend memory
// as device memory. Selected with STRATA_SIMULATE_DEVICE=1 and `device: cpu`.
std::unique_ptr<Backend> make_guarded_cpu_backend();
// The CUDA backend on GPU `device_index` (UserError when the build has no CUDA, or the GPU
// is missing or unusable).
std::unique_ptr<Backend> make_cuda_backend(int device_index);
// GPUs visible to this process (0 without CUDA in the build, without a driver, or without a GPU).
int cuda_device_count();
// The head sizes the CUDA backend's attention kernels take: a multiple of 16 up to 128 (the
// same rule as kernels/attention.cuh, which the launchers check; a unit test holds them equal).
// Known in every build, so that a plan made without CUDA still says so.
bool cuda_attention_head_dim_supported(int64_t head_dim);
// Dense bf16 peak FLOP/s of a GPU from its name (H100 SXM/HBM3 and H200: 989e12, H100 PCIe/NVL
// 756e12 and 835e12, A100: 312e12); 0 for others.
double gpu_peak_flops(const std::string& device_name);

// The order in which embedding backward adds dout rows into a dwte row, the same in every
// backend so that their results match bit for bit: sort the positions whose ids fall in the
// table by (row, position); cut each row's positions into pieces wherever the index in that sort
// is a multiple of kEmbeddingGradPiece; sum each piece from zero in position order and add the
// pieces to the row in order. Pieces let a GPU spread a frequent token's thousands of positions
// over many blocks and still add in one fixed order.
constexpr int64_t kEmbeddingGradPiece = 64;

// Argument checks shared by the backend implementations.
// Throws std::invalid_argument "<op>: <what>" unless ok (a programming error, see above).
void require(bool ok, const char* op, const std::string& what);
// A tensor read as a matrix: (numel / last dim, last dim).
int64_t rows_of(const Tensor& t);
int64_t cols_of(const Tensor& t);
// The shape of an embedding op, checked: tokens I32 (B, T); per_token (out or dout) (B·T, C);
// table (wte or dwte, whole or a slice) (rows, C); positions (wpe or dwpe), optional, (≥ T, C);
// vocab_start ≥ 0 and vocab_size > 0.
struct EmbeddingShape {
  int64_t batch = 0, seq = 0, channels = 0, rows = 0;
};
EmbeddingShape embedding_shape(const char* op, const Tensor& per_token, const Tensor& tokens, const Tensor& table,
                               const Tensor& positions, int64_t vocab_start, int vocab_size);

}  // namespace strata
