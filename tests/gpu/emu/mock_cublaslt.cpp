// cuBLASLt on the CPU for the emulator (mock/cublasLt.h): the documented matmul semantics —
// column-major layouts with leading dimensions, TRANSA/TRANSB, alpha/beta with C (C unread when
// beta is 0), f32/bf16/f16 operands, products in double rounded once to D's type, the BIAS and
// GELU_AUX_BIAS epilogues, the DGELU one (the product times the tanh-GELU's derivative at the
// aux input) and BGRADA (op(A)'s row sums over k, in D's type, behind the bias pointer) — and
// the argument checks that make the real library refuse a call.
#include <cblas.h>
#include <cublasLt.h>

#include <vector>

namespace strata::emu::cuda_api {

struct EmulatedLtContext {
  int live = 1;
};
struct EmulatedMatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t bias_type = -1, aux_type = -1;  // -1: D's type (the documented default)
};
struct EmulatedMatrixLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct EmulatedMatmulPreference {
  uint64_t max_workspace = 0;
  uint32_t alignment[4] = {256, 256, 256, 256};  // A, B, C, D; 256 is the documented default
};

namespace {

constexpr uint64_t kAlgoMagic = 0x53545241544c4741ull;
constexpr size_t kAlgoWorkspace = size_t{4} << 20;  // what the emulated algorithm claims to use

size_t type_bytes(int32_t type) { return type == CUDA_R_32F ? 4 : 2; }

template <typename V>
cublasStatus_t read_attribute(const void* buf, size_t size, V* value) {
  if (!buf || size != sizeof(V)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(value, buf, sizeof(V));
  return CUBLAS_STATUS_SUCCESS;
}

bool has_bias(uint32_t epilogue) { return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
// The epilogues whose bias pointer holds a vector: read (a bias) or written (a bias gradient).
bool has_bias_vector(uint32_t epilogue) { return has_bias(epilogue) || epilogue == CUBLASLT_EPILOGUE_BGRADA; }
// The epilogues with a GELU input matrix: written by GELU_AUX_BIAS, read by DGELU.
bool has_aux(uint32_t epilogue) { return epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_DGELU; }

uint64_t alignment_of(const void* p, uint64_t most) {
  uint64_t a = most;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

struct Shape {
  uint64_t m, n, k;
};

// The checks cuBLASLt makes of a configuration before it picks or runs an algorithm.
cublasStatus_t check_configuration(const EmulatedMatmulDesc* desc, const EmulatedMatrixLayout* a,
                                   const EmulatedMatrixLayout* b, const EmulatedMatrixLayout* c,
                                   const EmulatedMatrixLayout* d, Shape* shape) {
  if (!desc || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
  if (desc->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool ab_ok = a->type == CUDA_R_32F || a->type == CUDA_R_16BF || a->type == CUDA_R_16F;
  if (!ab_ok || b->type != a->type || c->type != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->type != a->type && d->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc->compute != CUBLAS_COMPUTE_32F && desc->compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint64_t m = d->rows, n = d->cols;
  const uint64_t k = desc->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t a_m = desc->trans_a == CUBLAS_OP_N ? a->rows : a->cols;
  const uint64_t b_k = desc->trans_b == CUBLAS_OP_N ? b->rows : b->cols;
  const uint64_t b_n = desc->trans_b == CUBLAS_OP_N ? b->cols : b->rows;
  if (a_m != m || b_k != k || b_n != n || c->rows != m || c->cols != n) return CUBLAS_STATUS_INVALID_VALUE;
  const uint32_t e = desc->epilogue;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
      e != CUBLASLT_EPILOGUE_DGELU && e != CUBLASLT_EPILOGUE_BGRADA)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulator implements these five only
  // Bias (and bias gradient) elements have D's type (the exceptions are integer and FP8 kernels).
  if (has_bias_vector(e) && (desc->bias_type == -1 ? d->type : desc->bias_type) != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (has_aux(e)) {
    // The GELU input's leading dimension must be a multiple of 8 and at least D's rows.
    if (desc->aux_ld % 8 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc->aux_ld < static_cast<int64_t>(m)) return CUBLAS_STATUS_INVALID_VALUE;
    if ((desc->aux_type == -1 ? d->type : desc->aux_type) != d->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  *shape = {m, n, k};
  return CUBLAS_STATUS_SUCCESS;
}

uint64_t configuration_key(const EmulatedMatmulDesc* desc, const EmulatedMatrixLayout* a,
                           const EmulatedMatrixLayout* d) {
  return static_cast<uint64_t>(desc->compute) | static_cast<uint64_t>(desc->epilogue) << 8 |
         static_cast<uint64_t>(a->type) << 24 | static_cast<uint64_t>(d->type) << 32 |
         static_cast<uint64_t>(desc->trans_a) << 40 | static_cast<uint64_t>(desc->trans_b) << 41;
}

double load(const void* p, int32_t type, size_t i) {
  switch (type) {
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Rounds to float toward zero and marks inexactness in the last bit (round to odd), so that a
// second rounding to a 16-bit type gives the correctly rounded double → 16-bit result.
float round_to_odd(double v) {
  float f = static_cast<float>(v);
  if (std::isfinite(f) && static_cast<double>(f) != v) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    bits |= 1u;
    std::memcpy(&f, &bits, sizeof(f));
  }
  return f;
}

void store(void* p, int32_t type, size_t i, double v) {
  switch (type) {
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(round_to_odd(v)); break;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __float2half_rn(round_to_odd(v)); break;
    default: static_cast<float*>(p)[i] = static_cast<float>(v); break;
  }
}

// TF32 keeps 10 explicit mantissa bits; inputs are rounded to nearest (ties away) on the way in.
double to_tf32(double v) {
  float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if (std::isfinite(f)) bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// A stored matrix as dense column-major doubles (leading dimension = rows).
std::vector<double> dense(const void* p, const EmulatedMatrixLayout& layout, bool tf32) {
  std::vector<double> out(layout.rows * layout.cols);
  for (uint64_t j = 0; j < layout.cols; ++j)
    for (uint64_t i = 0; i < layout.rows; ++i) {
      const double v = load(p, layout.type, j * static_cast<uint64_t>(layout.ld) + i);
      out[j * layout.rows + i] = tf32 ? to_tf32(v) : v;
    }
  return out;
}

void require_device_range(const void* p, uint64_t rows, uint64_t cols, int64_t ld, size_t element, const char* what) {
  const size_t bytes = ((cols - 1) * static_cast<uint64_t>(ld) + rows) * element;
  if (rows == 0 || cols == 0) return;
  if (!in_device_memory(p, bytes))
    throw EmulationError(std::string("cublasLtMatmul: ") + what + " (" + std::to_string(bytes) +
                         " bytes) is not inside one device allocation: an illegal address on a GPU");
}

double gelu(double x) {
  const double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(inner));
}

double gelu_derivative(double x) {
  const double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double t = std::tanh(inner);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new EmulatedLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion() { return 130000; }

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new EmulatedMatmulDesc();
  (*desc)->compute = compute;
  (*desc)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return read_attribute(buf, size, &desc->trans_a);
    case CUBLASLT_MATMUL_DESC_TRANSB: return read_attribute(buf, size, &desc->trans_b);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return read_attribute(buf, size, &desc->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return read_attribute(buf, size, &desc->bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return read_attribute(buf, size, &desc->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return read_attribute(buf, size, &desc->aux_ld);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return read_attribute(buf, size, &desc->bias_type);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return read_attribute(buf, size, &desc->aux_type);
    default: return CUBLAS_STATUS_INVALID_VALUE;  // not emulated
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  if (ld < static_cast<int64_t>(std::max<uint64_t>(rows, 1))) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new EmulatedMatrixLayout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new EmulatedMatmulPreference();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return read_attribute(buf, size, &pref->max_workspace);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return read_attribute(buf, size, &pref->alignment[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return read_attribute(buf, size, &pref->alignment[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return read_attribute(buf, size, &pref->alignment[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return read_attribute(buf, size, &pref->alignment[3]);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// One algorithm: it may assume exactly the alignments the preference promises (and, for the
// bias and GELU input, the alignment their pointers had, up to 16 bytes), and uses up to
// kAlgoWorkspace of workspace when the preference allows it.
namespace {
uint32_t g_refused_epilogue = CUBLASLT_EPILOGUE_DEFAULT;
bool g_accumulate_in_output_type = false;

// v rounded to a stored type and read back.
double rounded_to(int32_t type, double v) {
  unsigned char element[4];
  store(element, type, 0, v);
  return load(element, type, 0);
}

// The planted accumulator bug: product(i, j) = Σ_k op(A)(i, k) · op(B)(k, j), the running sum
// rounded to D's type after every term.
void accumulate_in_output_type(std::vector<double>& product, const std::vector<double>& da,
                               const EmulatedMatrixLayout& a, bool trans_a, const std::vector<double>& db,
                               const EmulatedMatrixLayout& b, bool trans_b, const Shape& s, int32_t d_type) {
  for (uint64_t j = 0; j < s.n; ++j)
    for (uint64_t i = 0; i < s.m; ++i) {
      double sum = 0.0;
      for (uint64_t kk = 0; kk < s.k; ++kk) {
        const double x = trans_a ? da[i * a.rows + kk] : da[kk * a.rows + i];
        const double y = trans_b ? db[kk * b.rows + j] : db[j * b.rows + kk];
        sum = rounded_to(d_type, sum + x * y);
      }
      product[j * s.m + i] = sum;
    }
}
}  // namespace

void mock_cublaslt_refuse_epilogue(cublasLtEpilogue_t epilogue) { g_refused_epilogue = epilogue; }
void mock_cublaslt_accumulate_in_output_type(bool on) { g_accumulate_in_output_type = on; }

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!pref || requested <= 0 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  Shape shape{};
  const cublasStatus_t status = check_configuration(desc, a, b, c, d, &shape);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  for (uint32_t alignment : pref->alignment)
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (g_refused_epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc->epilogue == g_refused_epilogue)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  cublasLtMatmulHeuristicResult_t& r = results[0];
  r = cublasLtMatmulHeuristicResult_t{};
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = configuration_key(desc, a, d);
  for (int i = 0; i < 4; ++i) r.algo.data[2 + i] = std::min<uint64_t>(pref->alignment[i], 256);
  r.algo.data[6] = (desc->bias ? alignment_of(desc->bias, 16) : 1) | (desc->aux ? alignment_of(desc->aux, 16) : 1) << 8;
  r.algo.data[7] = std::min<uint64_t>(pref->max_workspace, kAlgoWorkspace);
  r.workspaceSize = static_cast<size_t>(r.algo.data[7]);
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  check_stream(stream, "cublasLtMatmul");
  Shape s{};
  const cublasStatus_t status = check_configuration(desc, a_layout, b_layout, c_layout, d_layout, &s);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (!alpha || !beta || !a || !b || !d || !algo) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo->data[0] != kAlgoMagic || algo->data[1] != configuration_key(desc, a_layout, d_layout))
    return CUBLAS_STATUS_INVALID_VALUE;  // an algorithm chosen for another configuration
  // In place (C == D) needs identical layouts.
  if (c == d && c_layout->ld != d_layout->ld) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo->data[7] > workspace_bytes || (algo->data[7] > 0 && !workspace)) return CUBLAS_STATUS_INVALID_VALUE;
  const void* pointers[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i)
    if (pointers[i] && reinterpret_cast<uintptr_t>(pointers[i]) % algo->data[2 + i] != 0)
      return CUBLAS_STATUS_NOT_SUPPORTED;  // less aligned than the algorithm was chosen for
  const uint32_t e = desc->epilogue;
  if (has_bias_vector(e) && !desc->bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (has_aux(e) && !desc->aux) return CUBLAS_STATUS_INVALID_VALUE;
  if (has_bias_vector(e) && reinterpret_cast<uintptr_t>(desc->bias) % (algo->data[6] & 0xff) != 0)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (has_aux(e) && reinterpret_cast<uintptr_t>(desc->aux) % (algo->data[6] >> 8) != 0)
    return CUBLAS_STATUS_NOT_SUPPORTED;

  float alpha_f, beta_f;
  std::memcpy(&alpha_f, alpha, sizeof(float));
  std::memcpy(&beta_f, beta, sizeof(float));
  const size_t ab_bytes = type_bytes(a_layout->type), d_bytes = type_bytes(d_layout->type);
  require_device_range(a, a_layout->rows, a_layout->cols, a_layout->ld, ab_bytes, "A");
  require_device_range(b, b_layout->rows, b_layout->cols, b_layout->ld, ab_bytes, "B");
  if (beta_f != 0.0f) require_device_range(c, s.m, s.n, c_layout->ld, d_bytes, "C");
  require_device_range(d, s.m, s.n, d_layout->ld, d_bytes, "D");
  if (has_bias_vector(e)) require_device_range(desc->bias, s.m, 1, static_cast<int64_t>(s.m), d_bytes, "the bias");
  if (has_aux(e)) require_device_range(desc->aux, s.m, s.n, desc->aux_ld, d_bytes, "the aux");
  if (algo->data[7] > 0 && !in_device_memory(workspace, static_cast<size_t>(algo->data[7])))
    throw EmulationError("cublasLtMatmul: the workspace is not inside one device allocation");

  const bool tf32 = desc->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  std::vector<double> product(s.m * s.n, 0.0);
  if (s.k > 0) {
    const std::vector<double> da = dense(a, *a_layout, tf32), db = dense(b, *b_layout, tf32);
    cblas_dgemm(CblasColMajor, desc->trans_a == CUBLAS_OP_T ? CblasTrans : CblasNoTrans,
                desc->trans_b == CUBLAS_OP_T ? CblasTrans : CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
                static_cast<int>(s.k), 1.0, da.data(), static_cast<int>(std::max<uint64_t>(a_layout->rows, 1)),
                db.data(), static_cast<int>(std::max<uint64_t>(b_layout->rows, 1)), 0.0, product.data(),
                static_cast<int>(std::max<uint64_t>(s.m, 1)));
    if (g_accumulate_in_output_type && d_layout->type != CUDA_R_32F)
      accumulate_in_output_type(product, da, *a_layout, desc->trans_a == CUBLAS_OP_T, db, *b_layout,
                                desc->trans_b == CUBLAS_OP_T, s, d_layout->type);
  }
  if (e == CUBLASLT_EPILOGUE_BGRADA) {  // Σ over k of op(A)'s row i, before D is written
    const std::vector<double> da = dense(a, *a_layout, tf32);
    for (uint64_t i = 0; i < s.m; ++i) {
      double sum = 0.0;
      for (uint64_t kk = 0; kk < s.k; ++kk)
        sum += desc->trans_a == CUBLAS_OP_N ? da[kk * a_layout->rows + i] : da[i * a_layout->rows + kk];
      store(const_cast<void*>(desc->bias), d_layout->type, i, sum);
    }
  }
  // Every element is computed before D is written, so C may alias D.
  for (uint64_t j = 0; j < s.n; ++j)
    for (uint64_t i = 0; i < s.m; ++i) {
      double& v = product[j * s.m + i];
      v *= static_cast<double>(alpha_f);
      if (beta_f != 0.0f)
        v += static_cast<double>(beta_f) * load(c, c_layout->type, j * static_cast<uint64_t>(c_layout->ld) + i);
      if (has_bias(e)) v += load(desc->bias, d_layout->type, i);  // bias per row of D
    }
  for (uint64_t j = 0; j < s.n; ++j)
    for (uint64_t i = 0; i < s.m; ++i) {
      const double v = product[j * s.m + i];
      if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        store(desc->aux, d_layout->type, j * static_cast<uint64_t>(desc->aux_ld) + i, v);
        store(d, d_layout->type, j * static_cast<uint64_t>(d_layout->ld) + i, gelu(v));
      } else if (e == CUBLASLT_EPILOGUE_DGELU) {
        const double x = load(desc->aux, d_layout->type, j * static_cast<uint64_t>(desc->aux_ld) + i);
        store(d, d_layout->type, j * static_cast<uint64_t>(d_layout->ld) + i, v * gelu_derivative(x));
      } else {
        store(d, d_layout->type, j * static_cast<uint64_t>(d_layout->ld) + i, v);
      }
    }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace strata::emu::cuda_api
