// cuBLASLt GEMMs for the CUDA backend: the Backend's row-major matmul (with transposes, bias and
// accumulate, plus optional GELU and bias-gradient epilogues) mapped onto cuBLASLt's column-major API, with one
// plan (matmul descriptor, layouts, heuristic algorithm) cached per problem key and one workspace.
#pragma once
#ifdef STRATA_HAVE_CUDA
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "core/tensor.h"
#include "kernel_types.cuh"

namespace strata::cuda {

enum class GemmEpilogue : uint8_t {
  None,
  Bias,         // out = a·b + bias
  GeluBias,     // out = gelu(a·b + bias), the pre-activation also written to `pre_gelu`
  DGelu,        // out = (a·b) ⊙ gelu'(pre_gelu): the GELU's backward fused into the product
  BiasGrad,     // out = a·b [+ out], and bias_grad (n) = Σ over k of op(b): b's column sums, the
                // bias gradient of a weight-gradient GEMM (cuBLASLt's BGRADA: its A is our b)
};

// A row-major request: out (m, n) = op(a) (m, k) · op(b) (k, n) [+ bias (n)].
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool accumulate = false;  // out += …
  ElemType ab_type = ElemType::F32;
  ElemType out_type = ElemType::F32;
  GemmEpilogue epilogue = GemmEpilogue::None;
};

// The same product as cuBLASLt sees it: column-major D (rows n, cols m) = op(A) · op(B) with
// A = the caller's b and B = the caller's a (row-major X is column-major Xᵀ).
struct ColumnMajorGemm {
  bool trans_first = false, trans_second = false;
  uint64_t first_rows = 0, first_cols = 0;    // A as stored
  int64_t first_ld = 0;
  uint64_t second_rows = 0, second_cols = 0;  // B as stored
  int64_t second_ld = 0;
  uint64_t m = 0, n = 0, k = 0;               // D is m × n, ld m
};
ColumnMajorGemm column_major_view(const GemmProblem& p);

// Checks the Backend::matmul arguments (shapes, dtypes: a and b share F32/BF16/F16, out is
// theirs or F32, bias is out's dtype) and returns the problem; throws std::invalid_argument.
GemmProblem make_gemm_problem(const char* op, const Tensor& out, const Tensor& a, const Tensor& b,
                              const Tensor& bias, bool trans_a, bool trans_b, bool accumulate);

// cuBLASLt's GELU epilogues need the pre-activation's leading dimension (n) to be a multiple of
// 8; GemmRunner::run computes other GeluBias problems as a Bias GEMM into pre_gelu plus the
// GELU kernel, and other DGelu problems as a plain GEMM plus the GELU backward kernel.
bool gelu_epilogue_fusable(const GemmProblem& p);

// Cache key of a plan: the problem, the compute mode and each pointer's alignment class
// (cuBLASLt picks kernels by alignment, up to 16 bytes; the heuristic reads the bias and GELU
// pre-activation pointers too, so their classes are part of the key).
struct GemmKey {
  GemmProblem problem;
  bool tf32 = false;
  uint8_t align_a = 0, align_b = 0, align_out = 0, align_bias = 0, align_aux = 0;
  bool operator==(const GemmKey& o) const;
};
struct GemmKeyHash {
  size_t operator()(const GemmKey& key) const;
};
// Largest power of two ≤ 16 dividing the address (16 for null).
uint8_t alignment_class(const void* p);

struct GemmPointers {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  const void* bias = nullptr;
  void* pre_gelu = nullptr;  // GeluBias (written) and DGelu (read): (m, n) in out's dtype
  void* bias_grad = nullptr;  // BiasGrad (overwritten): (n) in out's dtype
};

class GemmRunner {
 public:
  GemmRunner(cudaStream_t stream, size_t workspace_bytes);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Enqueues the product on the stream; k == 0 is handled by the caller. A GELU epilogue
  // cuBLASLt cannot fuse (shape, alignment, or no algorithm offered) runs unfused: a bias GEMM
  // into pre_gelu then the GELU kernel, or a plain GEMM then the GELU backward kernel; any
  // other GEMM without an algorithm throws, a BiasGrad one included (see run_if_offered).
  void run(const GemmProblem& problem, const GemmPointers& ptrs);
  // Enqueues the product if cuBLASLt offers an algorithm for it and returns true; otherwise
  // enqueues nothing, counts it as unfused and returns false, so that the caller computes it
  // another way (a BiasGrad GEMM: the plain GEMM and the column-sum kernel, whose workspace
  // the caller owns).
  bool run_if_offered(const GemmProblem& problem, const GemmPointers& ptrs);
  void set_allow_tf32(bool allow) { allow_tf32_ = allow; }
  size_t cached_plans() const { return plans_.size(); }
  // Epilogue GEMMs (GELU, DGELU, bias gradient) run unfused so far (a shape the epilogue cannot
  // take, or no algorithm offered): the fused path's absence shows here, not in the results.
  size_t unfused_epilogue_gemms() const { return unfused_epilogue_gemms_; }

 private:
  struct Plan;
  // The cached plan of key, made on first use; its algorithm may be missing (found == false),
  // which is cached too.
  Plan& plan_for(const GemmKey& key, const GemmPointers& ptrs);
  GemmKey key_of(const GemmProblem& problem, const GemmPointers& ptrs) const;
  void launch(Plan& plan, const GemmProblem& problem, const GemmPointers& ptrs);
  void run_gelu_unfused(const GemmProblem& problem, const GemmPointers& ptrs);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool allow_tf32_ = false;
  std::unordered_map<GemmKey, std::unique_ptr<Plan>, GemmKeyHash> plans_;
  size_t unfused_epilogue_gemms_ = 0;
};

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
