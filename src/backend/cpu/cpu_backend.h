// The CPU backend: fp32 compute with OpenBLAS GEMMs, the reference every other backend and
// parallel layout is compared against. Ops are split over cpu_backend.cpp (memory, elementwise,
// embedding of a whole table or a vocabulary slice, optimizer), cpu_layers.cpp (GEMM, layernorm,
// attention, cross-entropy) and cpu_tensor_parallel.cpp (row-parallel bias, vocab-parallel
// cross-entropy).
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"

namespace strata::cpu {

// Throws unless every defined tensor lives in host memory.
void require_host(const char* op, std::initializer_list<const Tensor*> tensors);

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::CPU; }
  std::string name() const override { return "cpu"; }
  // Counts every CpuBackend buffer of the process (device_* stay 0: host memory is the RSS).
  MemoryStats memory_stats() const override;
  void reset_peak_memory() override;
  double peak_flops() const override { return 0.0; }
  void synchronize() override {}
  void* cuda_stream() const override { return nullptr; }

  Buffer allocate(size_t bytes) override;
  void copy(Tensor src, Tensor dst) override;
  // Host memory is this backend's memory: allocate_host is allocate, copy_async is copy.
  Buffer allocate_host(size_t bytes) override { return allocate(bytes); }
  void copy_async(Tensor src, Tensor dst) override { copy(src, dst); }
  void cast(Tensor src, Tensor dst) override;
  void zero(Tensor t) override;
  void fill(Tensor t, float value) override;
  void scale(Tensor t, float factor) override;
  double sum_squares(Tensor t) override;

  void matmul(Tensor out, Tensor a, Tensor b, Tensor bias, bool trans_a, bool trans_b,
              bool accumulate) override;
  void bias_backward(Tensor dbias, Tensor dout) override;
  void add_bias(Tensor out, Tensor bias) override;
  void add(Tensor out, Tensor a, Tensor b) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                         Tensor bias) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                          Tensor weight, Tensor mean, Tensor rstd) override;
  void gelu_forward(Tensor out, Tensor inp) override;
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head) override;
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                          int n_head) override;
  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int64_t vocab_start,
                         int vocab_size) override;
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int64_t vocab_start,
                          int vocab_size) override;
  void softmax_cross_entropy(Tensor logits, Tensor losses, Tensor targets, int vocab_size,
                             bool write_dlogits, float dloss) override;
  // Tensor parallelism (cpu_tensor_parallel.cpp).
  void vocab_parallel_max(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size) override;
  void vocab_parallel_sum_exp(Tensor stats, Tensor logits, Tensor row_max, Tensor targets, int64_t vocab_start,
                              int vocab_size) override;
  void vocab_parallel_cross_entropy(Tensor logits, Tensor losses, Tensor targets, Tensor row_max, Tensor stats,
                                    int64_t vocab_start, int vocab_size, bool write_dlogits, float dloss) override;
  void adamw_update(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_copy,
                    const AdamWArgs& args) override;

 private:
  // One (batch, head) of attention in double: T×T scores and their gradient, and the (T, hs)
  // head slices; grown on demand.
  std::vector<double> scores_;
  std::vector<double> dscores_;
  std::vector<double> heads_;
};

}  // namespace strata::cpu
