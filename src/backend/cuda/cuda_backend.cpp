// CUDA backend, part 1: device setup, memory, whole-tensor ops, elementwise layers, embeddings
// and AdamW. Part 2 (cuda_layers.cpp) holds the GEMM-shaped layers. Every op enqueues on the
// backend's one stream; the host waits only where a value or a user error must come back.
#ifdef STRATA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "adamw.cuh"
#include "attention.cuh"
#include "backend/cuda/cublaslt_gemm.h"
#include "backend/cuda/cuda_args.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/host_sync.h"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "reduce.cuh"

namespace strata {
namespace cuda {
namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper
static_assert(kEmbeddingPieceRows == kEmbeddingGradPiece,
              "the embedding backward's pieces are the order every backend shares (backend.h)");

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

CudaBackend::CudaBackend(int device_index) : device_index_(device_index) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    const std::string why = rc != cudaSuccess ? cudaGetErrorString(rc) : "no device found";
    cudaGetLastError();
    throw UserError("device: cuda needs a usable NVIDIA GPU, but CUDA reports: " + why +
                    "; set device: cpu or run on a machine with a GPU and driver");
  }
  if (device_index < 0 || device_index >= count) {
    throw UserError("CUDA device " + std::to_string(device_index) + " does not exist: this machine shows " +
                    std::to_string(count) + " GPU(s) (check CUDA_VISIBLE_DEVICES and the ranks per node)");
  }
  CUDA_CHECK(cudaSetDevice(device_index));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  device_name_ = prop.name;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<GemmRunner>(stream_, kGemmWorkspaceBytes);
  uploads_ = std::make_unique<StagedUploads>(stream_);
  id_checks_ = std::make_unique<DeferredIdChecks>(stream_);
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&result_host_), sizeof(double)));
}

CudaBackend::~CudaBackend() {
  // No checks here: a destructor must not abort the job while it is unwinding from an error.
  if (stream_) cudaStreamSynchronize(stream_);
  gemm_.reset();
  device_free(scratch_);
  uploads_.reset();
  id_checks_.reset();
  if (result_host_) cudaFreeHost(result_host_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const { return "cuda:" + std::to_string(device_index_) + " (" + device_name_ + ")"; }

void CudaBackend::synchronize() { wait(); }

void CudaBackend::wait() {
  id_checks_->before_wait();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  id_checks_->after_wait();
}

BadIdFlag* CudaBackend::id_flag(bool targets, int64_t seq, int64_t vocab) {
  if (id_checks_->full()) wait();
  return id_checks_->flag_for(targets ? DeferredIdChecks::Ids::Targets : DeferredIdChecks::Ids::Tokens, seq, vocab);
}

void CudaBackend::set_allow_tf32(bool allow) { gemm_->set_allow_tf32(allow); }

void CudaBackend::set_attention_probabilities(AttentionProbabilities probabilities) {
  attention_bf16_operands_ = probabilities == AttentionProbabilities::Rounded ? AttentionBf16Operands::Rounded
                                                                              : AttentionBf16Operands::Split;
}

std::string CudaBackend::attention_numerics(DType dtype, int64_t head_size) const {
  // The tensors the model passes are 256-byte aligned allocations: alignment does not decide.
  const ElemType type = elem_type_of(dtype, "attention_numerics", "the activations");
  if (!attention_uses_tensor_cores(type, head_size, /*aligned=*/true)) return Backend::attention_numerics(dtype, head_size);
  if (dtype == DType::F16) return "fp16 tensor cores, probabilities rounded to fp16 once";
  return attention_bf16_operands_ == AttentionBf16Operands::Rounded
             ? "bf16 tensor cores, probabilities and their gradients rounded to bf16 once"
             : "bf16 tensor cores, probabilities and their gradients as bf16 hi + lo pairs";
}

size_t CudaBackend::gemm_plans_cached() const { return gemm_->cached_plans(); }
size_t CudaBackend::unfused_epilogue_gemms() const { return gemm_->unfused_epilogue_gemms(); }

MemoryStats CudaBackend::memory_stats() const {
  MemoryStats stats;
  const DeviceMemoryCounters counters = device_memory_counters();
  stats.allocated_bytes = counters.allocated_bytes;
  stats.peak_allocated_bytes = counters.peak_allocated_bytes;
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  stats.device_used_bytes = total_bytes - free_bytes;
  stats.device_total_bytes = total_bytes;
  return stats;
}

void CudaBackend::reset_peak_memory() { reset_device_memory_peak(); }

void* CudaBackend::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier ops may still read the old scratch
    device_free(scratch_);
    scratch_ = nullptr;
    const size_t grown = std::max(bytes, scratch_bytes_ + scratch_bytes_ / 2);
    scratch_bytes_ = (grown + (size_t{1} << 20) - 1) >> 20 << 20;
    scratch_ = device_alloc(scratch_bytes_);
  }
  return scratch_;
}

void CudaBackend::upload_ids(void* dst, const int32_t* ids, size_t bytes) {
  if (uploads_->upload(dst, ids, bytes)) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, ids, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse `ids` once we return
}

const int32_t* CudaBackend::device_ids(const Tensor& ids, void* staging) {
  if (ids.device != Device::CPU) return ids.as<int32_t>();
  upload_ids(staging, ids.as<int32_t>(), ids.bytes());
  return static_cast<const int32_t*>(staging);
}

Buffer CudaBackend::allocate(size_t bytes) {
  void* p = device_alloc(bytes);
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return Buffer(p, bytes, Device::CUDA, &device_free);
}

namespace {

// Both ends of a copy: the same dtype and element count. False when there is nothing to copy.
bool copy_needed(const char* op, const Tensor& src, const Tensor& dst) {
  require(src.dtype == dst.dtype && src.numel() == dst.numel(), op,
          "src " + src.shape_string() + " " + dtype_name(src.dtype) + " vs dst " + dst.shape_string() + " " +
              dtype_name(dst.dtype));
  return src.data != dst.data && src.bytes() > 0;
}

void free_host(void* p) { cudaFreeHost(p); }

}  // namespace

void CudaBackend::copy(Tensor src, Tensor dst) {
  if (!copy_needed("copy", src, dst)) return;
  // The caller may reuse or read host memory as soon as we return: a small upload is staged,
  // anything else to or from the host waits.
  if (src.device == Device::CPU && dst.device != Device::CPU && uploads_->upload(dst.data, src.data, src.bytes())) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, stream_));
  if (src.device == Device::CPU || dst.device == Device::CPU) wait();
}

Buffer CudaBackend::allocate_host(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(bytes, 1)));
  std::memset(p, 0, bytes);
  return Buffer(p, bytes, Device::CPU, &free_host);
}

void CudaBackend::copy_async(Tensor src, Tensor dst) {
  if (!copy_needed("copy_async", src, dst)) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDefault, stream_));
}

void CudaBackend::cast(Tensor src, Tensor dst) {
  require_device("cast", {&src, &dst});
  require(src.numel() == dst.numel(), "cast", "src " + src.shape_string() + " vs dst " + dst.shape_string());
  CUDA_CHECK(cuda::cast(src.data, elem_type_of(src, "cast", "src"), dst.data, elem_type_of(dst, "cast", "dst"),
                        src.numel(), stream_));
}

void CudaBackend::zero(Tensor t) {
  require_device("zero", {&t});
  if (t.bytes() > 0) CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
}

void CudaBackend::fill(Tensor t, float value) {
  require_device("fill", {&t});
  CUDA_CHECK(cuda::fill(t.data, elem_type_of(t, "fill", "t"), t.numel(), value, stream_));
}

void CudaBackend::scale(Tensor t, float factor) {
  require_device("scale", {&t});
  CUDA_CHECK(cuda::scale(t.data, elem_type_of(t, "scale", "t"), t.numel(), factor, stream_));
}

double CudaBackend::sum_squares(Tensor t) {
  require_device("sum_squares", {&t});
  const ElemType type = elem_type_of(t, "sum_squares", "t");
  const size_t partial_bytes = align256(sum_squares_workspace_bytes(t.numel()));
  char* base = static_cast<char*>(scratch(partial_bytes + sizeof(double)));
  auto* partials = reinterpret_cast<double*>(base);
  auto* result = reinterpret_cast<double*>(base + partial_bytes);
  CUDA_CHECK(cuda::sum_squares(t.data, type, t.numel(), partials, result, stream_));
  CUDA_CHECK(cudaMemcpyAsync(result_host_, result, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  wait();
  return *result_host_;
}

void CudaBackend::add(Tensor out, Tensor a, Tensor b) {
  require_device("add", {&out, &a, &b});
  require(out.numel() == a.numel() && out.numel() == b.numel(), "add",
          out.shape_string() + " = " + a.shape_string() + " + " + b.shape_string());
  const ElemType type = common_elem_type("add", {&out, &a, &b});
  CUDA_CHECK(cuda::add(out.data, a.data, b.data, type, out.numel(), stream_));
}

void CudaBackend::gelu_forward(Tensor out, Tensor inp) {
  require_device("gelu_forward", {&out, &inp});
  require(out.numel() == inp.numel(), "gelu_forward", out.shape_string() + " vs " + inp.shape_string());
  const ElemType type = common_elem_type("gelu_forward", {&out, &inp});
  CUDA_CHECK(cuda::gelu_forward(out.data, inp.data, type, out.numel(), stream_));
}

void CudaBackend::gelu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  require_device("gelu_backward", {&dinp, &dout, &inp});
  require(dinp.numel() == inp.numel() && dout.numel() == inp.numel(), "gelu_backward",
          dinp.shape_string() + ", " + dout.shape_string() + ", " + inp.shape_string());
  const ElemType type = common_elem_type("gelu_backward", {&dinp, &dout, &inp});
  CUDA_CHECK(cuda::gelu_backward(dinp.data, dout.data, inp.data, type, inp.numel(), stream_));
}

void CudaBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int64_t vocab_start,
                                    int vocab_size) {
  const char* op = "embedding_forward";
  require_device(op, {&out, &wte, &wpe});
  const EmbeddingShape s = embedding_shape(op, out, tokens, wte, wpe, vocab_start, vocab_size);
  const ElemType type = common_elem_type(op, {&out, &wte, &wpe});
  if (tokens.device == Device::CPU) {
    const int32_t* host = tokens.as<int32_t>();
    for (int64_t i = 0; i < s.batch * s.seq; ++i)
      if (host[i] < 0 || host[i] >= vocab_size) throw_token_error(host[i], i, s.seq, vocab_size);
  }
  const int32_t* ids = device_ids(tokens, tokens.device == Device::CPU ? scratch(tokens.bytes()) : nullptr);
  // Host tokens were checked above; device tokens are checked by the kernel, read at the next wait.
  BadIdFlag* bad_id = tokens.device == Device::CPU ? nullptr : id_flag(/*targets=*/false, s.seq, vocab_size);
  CUDA_CHECK(cuda::embedding_forward(out.data, ids, wte.data, wpe.data, type, s.batch, s.seq, s.channels, s.rows,
                                     vocab_start, vocab_size, bad_id, stream_));
}

void CudaBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int64_t vocab_start,
                                     int vocab_size) {
  const char* op = "embedding_backward";
  require_device(op, {&dwte, &dwpe, &dout});
  const EmbeddingShape s = embedding_shape(op, dout, tokens, dwte, dwpe, vocab_start, vocab_size);
  const ElemType dwte_type = elem_type_of(dwte, op, "dwte");
  const ElemType dwpe_type = dwpe.defined() ? elem_type_of(dwpe, op, "dwpe") : ElemType::F32;
  const ElemType dout_type = elem_type_of(dout, op, "dout");
  if (tokens.device == Device::CPU) {
    const int32_t* host = tokens.as<int32_t>();
    for (int64_t i = 0; i < s.batch * s.seq; ++i) {
      require(host[i] >= 0 && host[i] < vocab_size, op,
              "token id " + std::to_string(host[i]) + " outside [0, " + std::to_string(vocab_size) + ")");
    }
  }
  const size_t ids_bytes = tokens.device == Device::CPU ? align256(tokens.bytes()) : 0;
  const size_t sort_bytes = embedding_backward_workspace_bytes(s.batch * s.seq, s.rows, s.channels);
  char* base = static_cast<char*>(scratch(ids_bytes + sort_bytes));
  const int32_t* ids = device_ids(tokens, base);
  // Device ids outside the slice, bad ones included (the forward reported those), add nothing.
  CUDA_CHECK(cuda::embedding_backward(dwte.data, dwte_type, dwpe.data, dwpe_type, dout.data, dout_type, ids, s.batch,
                                      s.seq, s.channels, s.rows, vocab_start, base + ids_bytes, sort_bytes, stream_));
}

void CudaBackend::adamw_update(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_copy,
                               const AdamWArgs& args) {
  const char* op = "adamw_update";
  require_device(op, {&param, &grad, &exp_avg, &exp_avg_sq, &param_copy});
  const int64_t n = param.numel();
  require(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n &&
              (!param_copy.defined() || param_copy.numel() == n),
          op,
          "param " + param.shape_string() + ", grad " + grad.shape_string() + ", exp_avg " + exp_avg.shape_string() +
              ", exp_avg_sq " + exp_avg_sq.shape_string());
  require(args.bias_correction1 > 0 && args.bias_correction2 > 0, op,
          "bias corrections must be positive (1 − β^t with t ≥ 1)");
  float* m = f32_or_null(exp_avg, op, "exp_avg");
  float* v = f32_or_null(exp_avg_sq, op, "exp_avg_sq");
  require(m && v, op, "exp_avg and exp_avg_sq are required");
  const ElemType copy_type = param_copy.defined() ? elem_type_of(param_copy, op, "param_copy") : ElemType::BF16;
  CUDA_CHECK(cuda::adamw_update(param.data, elem_type_of(param, op, "param"), grad.data, elem_type_of(grad, op, "grad"),
                                m, v, param_copy.data, copy_type, n, adamw_scalars(args), stream_));
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  return std::make_unique<cuda::CudaBackend>(device_index);
}

}  // namespace strata
#endif  // STRATA_HAVE_CUDA
