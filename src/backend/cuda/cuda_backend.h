// Public header of src/backend/cuda: the CUDA backend (every Backend op on device tensors, on
// one stream, with cuBLASLt GEMMs and the kernels/ library) and its factory. Built only when
// CUDA is found (STRATA_HAVE_CUDA); ops are asynchronous except where a result must reach the
// host (sum_squares, copies to the host, synchronize); device-side id checks are read then.
#pragma once
#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace strata {
namespace cuda {

class GemmRunner;
class StagedUploads;     // host_sync.h
class DeferredIdChecks;  // host_sync.h
enum class GemmEpilogue : uint8_t;
enum class AttentionBf16Operands : uint8_t;  // kernels/attention.cuh


// Dtype rules (std::invalid_argument otherwise): tensors an op reads and writes together share
// one float dtype (F32, BF16 or F16), except that gradient accumulators (dbias, dweight, dwte,
// dwpe) may have their own float dtype, matmul may write F32 from BF16/F16 inputs, and saved
// statistics (layernorm mean/rstd, attention lse) are F32, as are the AdamW moments.
class CudaBackend final : public Backend {
 public:
  // Binds the calling thread to the device; a missing or unusable device is a UserError.
  explicit CudaBackend(int device_index);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::CUDA; }
  std::string name() const override;
  // allocated/peak: strata's own cudaMalloc'd memory (all CUDA backends of the process);
  // device_used: cudaMemGetInfo's total − free (context, cuBLASLt and other processes too).
  MemoryStats memory_stats() const override;
  void reset_peak_memory() override;
  double peak_flops() const override { return gpu_peak_flops(device_name_); }

  Buffer allocate(size_t bytes) override;
  void copy(Tensor src, Tensor dst) override;
  Buffer allocate_host(size_t bytes) override;  // cudaMallocHost
  void copy_async(Tensor src, Tensor dst) override;
  void cast(Tensor src, Tensor dst) override;
  void zero(Tensor t) override;
  void fill(Tensor t, float value) override;
  void scale(Tensor t, float factor) override;
  double sum_squares(Tensor t) override;

  void matmul(Tensor out, Tensor a, Tensor b, Tensor bias, bool trans_a, bool trans_b, bool accumulate) override;
  void bias_backward(Tensor dbias, Tensor dout) override;
  void add(Tensor out, Tensor a, Tensor b) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias) override;
  // One kernel: each row's sum is rounded, stored and normalized in a single pass.
  void residual_layernorm_forward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b,
                                  Tensor weight, Tensor bias) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                          Tensor mean, Tensor rstd) override;
  void gelu_forward(Tensor out, Tensor inp) override;
  // bf16/fp16: one GEMM with cuBLASLt's GELU+bias epilogue (GELU of the fp32 accumulator);
  // fp32: the unfused ops, which match the CPU backend's rounding.
  void linear_gelu_forward(Tensor out, Tensor pre, Tensor inp, Tensor weight, Tensor bias) override;
  // bf16/fp16 with an fp32 (or the inputs') gradient dtype: dweight and the column sums of
  // dout from one GEMM with cuBLASLt's bias-gradient epilogue, the sums then added to dbias;
  // fp32: the unfused ops, which match the CPU backend's rounding.
  void linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight) override;
  // bf16/fp16: dpre from one GEMM with cuBLASLt's DGELU epilogue (the product in fp32, times
  // gelu'(pre), rounded once); fp32: the unfused ops, which match the CPU backend's rounding.
  void linear_backward_gelu(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                            Tensor pre) override;
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head) override;
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head) override;
  // tokens may be in host or device memory; wte, out and wpe share one dtype; the gradients of
  // the backward may have their own (fp32 accumulation under 16-bit dout).
  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int64_t vocab_start,
                         int vocab_size) override;
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int64_t vocab_start,
                          int vocab_size) override;
  // targets may be in host or device memory.
  void softmax_cross_entropy(Tensor logits, Tensor losses, Tensor targets, int vocab_size, bool write_dlogits,
                             float dloss) override;
  void adamw_update(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_copy,
                    const AdamWArgs& args) override;

  // ---- tensor parallelism (cuda_tensor_parallel.cpp) ----
  // out F32, BF16 or F16; bias any float type (the fp32 sum is rounded once to out's dtype).
  void add_bias(Tensor out, Tensor bias) override;
  void vocab_parallel_max(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size) override;
  // targets may be in host or device memory (then read back only when one is out of range).
  void vocab_parallel_sum_exp(Tensor stats, Tensor logits, Tensor row_max, Tensor targets, int64_t vocab_start,
                              int vocab_size) override;
  // Host targets are range-checked again; device ones are not (pass 2 checked them; here a
  // target is only compared with column indices, never used as an address).
  void vocab_parallel_cross_entropy(Tensor logits, Tensor losses, Tensor targets, Tensor row_max, Tensor stats,
                                    int64_t vocab_start, int vocab_size, bool write_dlogits, float dloss) override;

  // ---- CUDA-only extras (not in the Backend interface yet) ----
  // out (M, N) = gelu(op(a) · op(b) + bias) in one cuBLASLt call with the GELU epilogue;
  // pre_gelu (M, N), out's dtype, receives a·b + bias for the backward.
  void matmul_gelu(Tensor out, Tensor pre_gelu, Tensor a, Tensor b, Tensor bias, bool trans_a, bool trans_b);
  // out (M, N) = (op(a) · op(b)) ⊙ gelu'(pre_gelu) in one cuBLASLt call with the DGELU epilogue;
  // pre_gelu (M, N) in out's dtype is read.
  void matmul_dgelu(Tensor out, Tensor pre_gelu, Tensor a, Tensor b, bool trans_a, bool trans_b);
  // fp32 GEMMs may use TF32 tensor cores (off by default: exact fp32 like the CPU reference).
  void set_allow_tf32(bool allow);
  // Split (the start) keeps bf16 attention within 1e-2 of fp32; Rounded is FlashAttention's
  // numerics (kernels/attention.cuh, AttentionBf16Operands).
  void set_attention_probabilities(AttentionProbabilities probabilities) override;
  std::string attention_numerics(DType dtype, int64_t head_size) const override;
  size_t gemm_plans_cached() const;
  size_t unfused_epilogue_gemms() const;  // epilogue GEMMs that ran unfused (GemmRunner)
  cudaStream_t stream() const { return stream_; }
  int device_index() const { return device_index_; }
  void synchronize() override;
  void* cuda_stream() const override { return stream_; }

 private:
  void gelu_epilogue_gemm(const char* op, GemmEpilogue epilogue, Tensor out, Tensor pre_gelu, Tensor a, Tensor b,
                          Tensor bias, bool trans_a, bool trans_b);
  // Grow-only device scratch shared by the ops (they run in stream order, so one op's use
  // ends before the next op's kernels start); returns its base.
  void* scratch(size_t bytes);
  // Waits for the stream, then throws the UserError of the first bad id a device check found.
  void wait();
  // The device flag for one op's check of device-resident ids (see DeferredIdChecks).
  unsigned long long* id_flag(bool targets, int64_t seq, int64_t vocab);
  // Copies host token or target ids to device memory: the caller may reuse its buffer once the
  // op returns (staged through page-locked memory, or waited for when too large).
  void upload_ids(void* dst, const int32_t* ids, size_t bytes);
  // Device ids for an op: `ids` itself when in device memory, else uploaded to `staging`.
  const int32_t* device_ids(const Tensor& ids, void* staging);

  int device_index_ = 0;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GemmRunner> gemm_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  AttentionBf16Operands attention_bf16_operands_{};  // zero: Split
  std::unique_ptr<StagedUploads> uploads_;
  std::unique_ptr<DeferredIdChecks> id_checks_;
  double* result_host_ = nullptr;    // pinned
};

}  // namespace cuda


}  // namespace strata
#endif  // STRATA_HAVE_CUDA
