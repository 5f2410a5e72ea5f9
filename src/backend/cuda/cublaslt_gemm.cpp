// cuBLASLt plans and the row-major → column-major mapping (see cublaslt_gemm.h). A plan is built
// once per key: descriptor, layouts and the heuristic's best algorithm for our workspace; later
// calls only set the per-call pointers (bias, GELU pre-activation) and launch.
#ifdef STRATA_HAVE_CUDA
#include "backend/cuda/cublaslt_gemm.h"

#include <stdexcept>
#include <string>

#include "backend/cuda/cuda_args.h"
#include "backend/cuda/device_memory.h"
#include "core/check.h"
#include "core/log.h"
#include "elementwise.cuh"

namespace strata::cuda {

ColumnMajorGemm column_major_view(const GemmProblem& p) {
  ColumnMajorGemm g;
  const auto m = static_cast<uint64_t>(p.m), n = static_cast<uint64_t>(p.n), k = static_cast<uint64_t>(p.k);
  g.m = n;
  g.n = m;
  g.k = k;
  // A = b: stored row-major (k, n) is column-major (n, k); stored (n, k) is column-major (k, n).
  g.trans_first = p.trans_b;
  g.first_rows = p.trans_b ? k : n;
  g.first_cols = p.trans_b ? n : k;
  g.first_ld = static_cast<int64_t>(g.first_rows);
  // B = a: stored (m, k) is column-major (k, m); stored (k, m) is column-major (m, k).
  g.trans_second = p.trans_a;
  g.second_rows = p.trans_a ? m : k;
  g.second_cols = p.trans_a ? k : m;
  g.second_ld = static_cast<int64_t>(g.second_rows);
  return g;
}

GemmProblem make_gemm_problem(const char* op, const Tensor& out, const Tensor& a, const Tensor& b,
                              const Tensor& bias, bool trans_a, bool trans_b, bool accumulate) {
  GemmProblem p;
  const int64_t a_rows = rows_of(a), a_cols = cols_of(a), b_rows = rows_of(b), b_cols = cols_of(b);
  p.m = trans_a ? a_cols : a_rows;
  p.k = trans_a ? a_rows : a_cols;
  p.n = trans_b ? b_rows : b_cols;
  const int64_t b_k = trans_b ? b_cols : b_rows;
  require(b_k == p.k, op,
          "inner dimensions differ: a " + a.shape_string() + (trans_a ? "ᵀ" : "") + " · b " + b.shape_string() +
              (trans_b ? "ᵀ" : ""));
  require(cols_of(out) == p.n && rows_of(out) == p.m, op,
          "out " + out.shape_string() + " is not (" + std::to_string(p.m) + ", " + std::to_string(p.n) + ")");
  require(!bias.defined() || bias.numel() == p.n, op,
          "bias " + bias.shape_string() + " for " + std::to_string(p.n) + " columns");
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.accumulate = accumulate;
  p.ab_type = elem_type_of(a, op, "a");
  require(a.dtype == b.dtype, op, std::string("a and b must share a dtype, got ") + dtype_name(a.dtype) + " and " +
                                      dtype_name(b.dtype));
  p.out_type = elem_type_of(out, op, "out");
  require(out.dtype == a.dtype || out.dtype == DType::F32, op,
          std::string("out must be ") + dtype_name(a.dtype) + " or F32 for " + dtype_name(a.dtype) + " inputs, got " +
              dtype_name(out.dtype));
  require(!bias.defined() || bias.dtype == out.dtype, op,
          std::string("bias must have out's dtype ") + dtype_name(out.dtype) + ", got " + dtype_name(bias.dtype));
  p.epilogue = bias.defined() ? GemmEpilogue::Bias : GemmEpilogue::None;
  return p;
}

bool gelu_epilogue_fusable(const GemmProblem& p) { return p.n % 8 == 0; }

bool GemmKey::operator==(const GemmKey& o) const {
  const GemmProblem &x = problem, &y = o.problem;
  return x.m == y.m && x.n == y.n && x.k == y.k && x.trans_a == y.trans_a && x.trans_b == y.trans_b &&
         x.accumulate == y.accumulate && x.ab_type == y.ab_type && x.out_type == y.out_type &&
         x.epilogue == y.epilogue && tf32 == o.tf32 && align_a == o.align_a && align_b == o.align_b &&
         align_out == o.align_out && align_bias == o.align_bias && align_aux == o.align_aux;
}

size_t GemmKeyHash::operator()(const GemmKey& key) const {
  const GemmProblem& p = key.problem;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<uint64_t>(p.m));
  mix(static_cast<uint64_t>(p.n));
  mix(static_cast<uint64_t>(p.k));
  mix(static_cast<uint64_t>(p.trans_a) | static_cast<uint64_t>(p.trans_b) << 1 |
      static_cast<uint64_t>(p.accumulate) << 2 | static_cast<uint64_t>(key.tf32) << 3 |
      static_cast<uint64_t>(p.ab_type) << 8 | static_cast<uint64_t>(p.out_type) << 16 |
      static_cast<uint64_t>(p.epilogue) << 24);
  mix(static_cast<uint64_t>(key.align_a) | static_cast<uint64_t>(key.align_b) << 8 |
      static_cast<uint64_t>(key.align_out) << 16 | static_cast<uint64_t>(key.align_bias) << 24 |
      static_cast<uint64_t>(key.align_aux) << 32);
  return static_cast<size_t>(h);
}

uint8_t alignment_class(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint8_t a = 16;
  while (a > 1 && address % a != 0) a = static_cast<uint8_t>(a / 2);
  return a;
}

namespace {

cudaDataType_t cuda_type(ElemType t) {
  switch (t) {
    case ElemType::BF16: return CUDA_R_16BF;
    case ElemType::F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& value) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

bool reads_bias(GemmEpilogue e) { return e == GemmEpilogue::Bias || e == GemmEpilogue::GeluBias; }
bool uses_aux(GemmEpilogue e) { return e == GemmEpilogue::GeluBias || e == GemmEpilogue::DGelu; }
// The epilogues whose vector (bias or bias gradient) sits behind the descriptor's bias pointer.
bool uses_bias_pointer(GemmEpilogue e) { return reads_bias(e) || e == GemmEpilogue::BiasGrad; }

void set_call_pointers(cublasLtMatmulDesc_t desc, const GemmProblem& p, const GemmPointers& ptrs) {
  if (reads_bias(p.epilogue)) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ptrs.bias);
  if (p.epilogue == GemmEpilogue::BiasGrad) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ptrs.bias_grad);
  if (uses_aux(p.epilogue)) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ptrs.pre_gelu);
}

std::string describe(const GemmProblem& p) {
  return "(" + std::to_string(p.m) + " × " + std::to_string(p.k) + ") · (" + std::to_string(p.k) + " × " +
         std::to_string(p.n) + ")" + (p.trans_a ? " trans_a" : "") + (p.trans_b ? " trans_b" : "");
}

}  // namespace

struct GemmRunner::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;                                // the heuristic offered an algorithm
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;    // what the heuristic returned
  ~Plan() {
    if (out) cublasLtMatrixLayoutDestroy(out);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

GemmRunner::GemmRunner(cudaStream_t stream, size_t workspace_bytes)
    : stream_(stream), workspace_bytes_(workspace_bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_ = device_alloc(workspace_bytes_);
}

GemmRunner::~GemmRunner() {
  plans_.clear();
  device_free(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

GemmRunner::Plan& GemmRunner::plan_for(const GemmKey& key, const GemmPointers& ptrs) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const GemmProblem& p = key.problem;
  const ColumnMajorGemm g = column_major_view(p);
  auto plan = std::make_unique<Plan>();
  const bool fp32_inputs = p.ab_type == ElemType::F32;
  const cublasComputeType_t compute = fp32_inputs && key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (p.epilogue == GemmEpilogue::Bias) epilogue = CUBLASLT_EPILOGUE_BIAS;
  if (p.epilogue == GemmEpilogue::GeluBias) epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  if (p.epilogue == GemmEpilogue::DGelu) epilogue = CUBLASLT_EPILOGUE_DGELU;
  if (p.epilogue == GemmEpilogue::BiasGrad) epilogue = CUBLASLT_EPILOGUE_BGRADA;
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (uses_bias_pointer(p.epilogue)) set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(p.out_type));
  if (uses_aux(p.epilogue)) {
    // The aux data type is left at its default (D's type): other values are for narrow
    // (fp8) precisions only.
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(g.m));
  }
  set_call_pointers(plan->desc, p, ptrs);  // the heuristic sees the real bias/aux pointers
  const cudaDataType_t ab = cuda_type(p.ab_type), out = cuda_type(p.out_type);
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->first, ab, g.first_rows, g.first_cols, g.first_ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->second, ab, g.second_rows, g.second_cols, g.second_ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->out, out, g.m, g.n, static_cast<int64_t>(g.m)));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes_);
  // A and B of cuBLASLt are our b and a.
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key.align_b));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key.align_a));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(key.align_out));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key.align_out));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->first, plan->second,
                                                               plan->out, plan->out, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  plan->status = status;
  plan->found = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan->found) plan->algo = result.algo;
  if (!plan->found && p.epilogue != GemmEpilogue::None && p.epilogue != GemmEpilogue::Bias) {
    const char* epilogue_name = p.epilogue == GemmEpilogue::GeluBias ? "GELU"
                                : p.epilogue == GemmEpilogue::DGelu  ? "GELU-gradient"
                                                                     : "bias-gradient";
    const char* kernel_name = p.epilogue == GemmEpilogue::GeluBias ? "GELU"
                              : p.epilogue == GemmEpilogue::DGelu  ? "GELU backward"
                                                                   : "column-sum";
    log_warn("cuBLASLt offers no {} epilogue for the GEMM {} (status {}): a {} kernel follows it instead",
             epilogue_name, describe(p), static_cast<int>(status), kernel_name);
  }
  return *plans_.emplace(key, std::move(plan)).first->second;
}

GemmKey GemmRunner::key_of(const GemmProblem& problem, const GemmPointers& ptrs) const {
  GemmKey key;
  key.problem = problem;
  key.tf32 = allow_tf32_ && problem.ab_type == ElemType::F32;
  key.align_a = alignment_class(ptrs.a);
  key.align_b = alignment_class(ptrs.b);
  key.align_out = alignment_class(ptrs.out);
  const void* bias_vector = problem.epilogue == GemmEpilogue::BiasGrad ? ptrs.bias_grad : ptrs.bias;
  key.align_bias = bias_vector ? alignment_class(bias_vector) : 0;
  key.align_aux = ptrs.pre_gelu ? alignment_class(ptrs.pre_gelu) : 0;
  return key;
}

// GeluBias: a bias GEMM into pre_gelu, then the GELU kernel into out. DGelu: a plain GEMM into
// out, then the GELU backward kernel on it in place.
void GemmRunner::run_gelu_unfused(const GemmProblem& problem, const GemmPointers& ptrs) {
  ++unfused_epilogue_gemms_;
  const bool forward = problem.epilogue == GemmEpilogue::GeluBias;
  GemmProblem product = problem;
  product.epilogue = forward ? GemmEpilogue::Bias : GemmEpilogue::None;
  GemmPointers product_ptrs = ptrs;
  if (forward) product_ptrs.out = ptrs.pre_gelu;
  product_ptrs.pre_gelu = nullptr;
  run(product, product_ptrs);
  const int64_t n = problem.m * problem.n;
  if (forward) {
    CUDA_CHECK(cuda::gelu_forward(ptrs.out, ptrs.pre_gelu, problem.out_type, n, stream_));
  } else {
    CUDA_CHECK(cuda::gelu_backward(ptrs.out, ptrs.out, ptrs.pre_gelu, problem.out_type, n, stream_));
  }
}

void GemmRunner::run(const GemmProblem& problem, const GemmPointers& ptrs) {
  const bool gelu = uses_aux(problem.epilogue);
  if (gelu && !gelu_epilogue_fusable(problem)) {
    run_gelu_unfused(problem, ptrs);
    return;
  }
  Plan& plan = plan_for(key_of(problem, ptrs), ptrs);
  if (!plan.found) {
    if (gelu) {
      run_gelu_unfused(problem, ptrs);
      return;
    }
    throw std::runtime_error("cuBLASLt has no algorithm for the GEMM " + describe(problem) + " (status " +
                             std::to_string(static_cast<int>(plan.status)) + ")");
  }
  launch(plan, problem, ptrs);
}

bool GemmRunner::run_if_offered(const GemmProblem& problem, const GemmPointers& ptrs) {
  Plan& plan = plan_for(key_of(problem, ptrs), ptrs);
  if (!plan.found) {
    ++unfused_epilogue_gemms_;
    return false;
  }
  launch(plan, problem, ptrs);
  return true;
}

void GemmRunner::launch(Plan& plan, const GemmProblem& problem, const GemmPointers& ptrs) {
  set_call_pointers(plan.desc, problem, ptrs);
  const float alpha = 1.0f, beta = problem.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, ptrs.b, plan.first, ptrs.a, plan.second, &beta, ptrs.out,
                              plan.out, ptrs.out, plan.out, &plan.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
