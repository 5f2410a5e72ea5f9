// cuBLASLt opened on its first call instead of linked: its library (over 500 MB) spends about
// 0.4 s of every process start in its initialisers, which a CPU run, `strata config` or `plan`,
// and every rank of a CPU job would pay for nothing. Each cuBLASLt function the project calls is
// defined here, with cublasLt.h's declaration, and forwards to the library's own, looked up once.
// (Not under src/backend/cuda: the emulated build links its mock cuBLASLt in place of this file.)
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

namespace {

struct Library {
  void* handle = nullptr;
  std::string failure;  // why it could not be opened
};

// The library of the major version built against: by the loader's search (the binary's run path,
// ld.so.conf), else beside the CUDA runtime the binary was linked with.
const Library& library() {
  static const Library opened = [] {
    Library lib;
    const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    lib.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) return lib;
    lib.failure = dlerror();
    Dl_info runtime{};
    if (dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &runtime) && runtime.dli_fname) {
      const std::string path = runtime.dli_fname;
      const std::string beside = path.substr(0, path.rfind('/') + 1) + name;
      lib.handle = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib.handle) lib.failure.clear();
    }
    return lib;
  }();
  return opened;
}

// The library's own `name`, typed as cublasLt.h declares it; null when it is not there.
template <class Fn>
Fn real(const char* name) {
  void* handle = library().handle;
  return handle ? reinterpret_cast<Fn>(dlsym(handle, name)) : nullptr;
}

template <class Fn, class... Args>
cublasStatus_t call(Fn fn, Args... args) {
  return fn ? fn(args...) : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // namespace

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  static const auto fn = real<decltype(&cublasLtCreate)>("cublasLtCreate");
  return call(fn, handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  static const auto fn = real<decltype(&cublasLtDestroy)>("cublasLtDestroy");
  return call(fn, handle);
}

// Also names the reason when the library could not be opened (every call then fails with
// CUBLAS_STATUS_NOT_INITIALIZED, and the checking macros print this string).
const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  static const auto fn = real<decltype(&cublasLtGetStatusString)>("cublasLtGetStatusString");
  if (fn) return fn(status);
  static const std::string missing = "cuBLASLt could not be opened: " + library().failure;
  return missing.c_str();
}

size_t CUBLASWINAPI cublasLtGetVersion() {  // 0 when the library could not be opened
  static const auto fn = real<decltype(&cublasLtGetVersion)>("cublasLtGetVersion");
  return fn ? fn() : 0;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                                           cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                                           cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  static const auto fn = real<decltype(&cublasLtMatmul)>("cublasLtMatmul");
  return call(fn, handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc, algo, workspace,
              workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                                                           cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                                                           cublasLtMatmulPreference_t preference, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  static const auto fn = real<decltype(&cublasLtMatmulAlgoGetHeuristic)>("cublasLtMatmulAlgoGetHeuristic");
  return call(fn, handle, desc, a_desc, b_desc, c_desc, d_desc, preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  static const auto fn = real<decltype(&cublasLtMatmulDescCreate)>("cublasLtMatmulDescCreate");
  return call(fn, desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  static const auto fn = real<decltype(&cublasLtMatmulDescDestroy)>("cublasLtMatmulDescDestroy");
  return call(fn, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attribute, const void* value,
                                                           size_t bytes) {
  static const auto fn = real<decltype(&cublasLtMatmulDescSetAttribute)>("cublasLtMatmulDescSetAttribute");
  return call(fn, desc, attribute, value, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  static const auto fn = real<decltype(&cublasLtMatmulPreferenceCreate)>("cublasLtMatmulPreferenceCreate");
  return call(fn, preference);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  static const auto fn = real<decltype(&cublasLtMatmulPreferenceDestroy)>("cublasLtMatmulPreferenceDestroy");
  return call(fn, preference);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                                 cublasLtMatmulPreferenceAttributes_t attribute,
                                                                 const void* value, size_t bytes) {
  static const auto fn =
      real<decltype(&cublasLtMatmulPreferenceSetAttribute)>("cublasLtMatmulPreferenceSetAttribute");
  return call(fn, preference, attribute, value, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  static const auto fn = real<decltype(&cublasLtMatrixLayoutCreate)>("cublasLtMatrixLayoutCreate");
  return call(fn, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  static const auto fn = real<decltype(&cublasLtMatrixLayoutDestroy)>("cublasLtMatrixLayoutDestroy");
  return call(fn, layout);
}
