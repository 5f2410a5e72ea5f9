// Backend pieces common to every implementation: the owned Buffer and the linear-layer
// conveniences, which reduce to matmul/bias_backward so a new backend only writes the ops.
#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace strata {

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    if (data_ && release_) release_(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    release_ = std::exchange(other.release_, nullptr);
  }
  return *this;
}

Buffer::~Buffer() {
  if (data_ && release_) release_(data_);
}

Buffer allocate_pageable_host(size_t bytes) {
  const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  void* p = std::aligned_alloc(256, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return Buffer(p, bytes, Device::CPU, [](void* q) { std::free(q); });
}

AdamWFloats adamw_floats(const AdamWArgs& a) {
  AdamWFloats f;
  f.decay = static_cast<float>(1.0 - a.lr * a.weight_decay);
  f.l2 = static_cast<float>(a.weight_decay);
  f.beta1 = static_cast<float>(a.beta1);
  f.one_minus_beta1 = static_cast<float>(1.0 - a.beta1);
  f.beta2 = static_cast<float>(a.beta2);
  f.one_minus_beta2 = static_cast<float>(1.0 - a.beta2);
  f.step_size = static_cast<float>(a.lr / a.bias_correction1);
  f.bc2_sqrt = static_cast<float>(std::sqrt(a.bias_correction2));
  f.eps = static_cast<float>(a.eps);
  f.grad_scale = static_cast<float>(a.grad_scale);
  return f;
}

Tensor Buffer::view(size_t offset, DType dtype, std::initializer_list<int64_t> dims) const {
  Tensor t(nullptr, dtype, dims, device_);
  if (offset + t.bytes() > bytes_) {
    throw std::out_of_range("Buffer::view: " + t.shape_string() + " at byte " + std::to_string(offset) +
                            " exceeds the buffer's " + std::to_string(bytes_) + " bytes");
  }
  t.data = static_cast<char*>(data_) + offset;
  return t;
}

std::string Backend::attention_numerics(DType, int64_t) const { return "scores and probabilities in fp32"; }

void Backend::linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  matmul(out, inp, weight, bias, /*trans_a=*/false, /*trans_b=*/false, /*accumulate=*/false);
}

void Backend::residual_layernorm_forward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a, Tensor b,
                                         Tensor weight, Tensor bias) {
  add(residual, a, b);
  layernorm_forward(out, mean, rstd, residual, weight, bias);
}

void Backend::linear_gelu_forward(Tensor out, Tensor pre, Tensor inp, Tensor weight, Tensor bias) {
  linear_forward(pre, inp, weight, bias);
  gelu_forward(out, pre);
}

void Backend::linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                              Tensor weight) {
  if (dinp.defined()) matmul(dinp, dout, weight, Tensor(), false, /*trans_b=*/true, false);
  matmul(dweight, inp, dout, Tensor(), /*trans_a=*/true, false, /*accumulate=*/true);
  if (dbias.defined()) bias_backward(dbias, dout);
}

void Backend::linear_backward_gelu(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                                   Tensor pre) {
  linear_backward(dpre, dweight, dbias, dout, inp, weight);
  gelu_backward(dpre, dpre, pre);
}

int cuda_device_count() {
#ifdef STRATA_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error here, just none
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

bool cuda_attention_head_dim_supported(int64_t head_dim) {
  return head_dim > 0 && head_dim <= 128 && head_dim % 16 == 0;
}

#ifndef STRATA_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int) {
  throw UserError("device: cuda, but this strata was built without CUDA; install the CUDA Toolkit and rebuild "
                  "(scripts/build.sh), or set device: cpu");
}
#endif

double gpu_peak_flops(const std::string& name) {
  const auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  if (has("H200")) return 989e12;
  if (has("H100")) {
    if (has("PCIe")) return 756e12;
    if (has("NVL")) return 835e12;
    return 989e12;  // SXM (HBM3)
  }
  if (has("A100")) return 312e12;
  return 0.0;
}

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

int64_t cols_of(const Tensor& t) { return t.ndim == 0 ? 1 : t.dim(-1); }

int64_t rows_of(const Tensor& t) {
  const int64_t cols = cols_of(t);
  return cols == 0 ? 0 : t.numel() / cols;
}

EmbeddingShape embedding_shape(const char* op, const Tensor& per_token, const Tensor& tokens, const Tensor& table,
                               const Tensor& positions, int64_t vocab_start, int vocab_size) {
  require(tokens.dtype == DType::I32 && tokens.ndim == 2, op, "tokens must be I32 (B, T), got " + tokens.shape_string());
  EmbeddingShape s;
  s.batch = tokens.dim(0);
  s.seq = tokens.dim(1);
  s.channels = cols_of(table);
  s.rows = rows_of(table);
  require(cols_of(per_token) == s.channels && rows_of(per_token) == s.batch * s.seq, op,
          per_token.shape_string() + " for tokens " + tokens.shape_string() + " and table " + table.shape_string());
  require(!positions.defined() || (cols_of(positions) == s.channels && rows_of(positions) >= s.seq), op,
          "positions " + positions.shape_string() + " too small for T=" + std::to_string(s.seq));
  require(vocab_start >= 0 && vocab_size > 0, op,
          "vocab_start " + std::to_string(vocab_start) + ", vocab_size " + std::to_string(vocab_size));
  return s;
}

}  // namespace strata
