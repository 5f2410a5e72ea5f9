// Checking macros for every CUDA, cuBLAS(Lt), NCCL and MPI call: on failure they print
// the call, file, line, rank and the library's message, then abort the whole job so no
// rank is left hanging in a collective. The CUDA/NCCL macros expand only where used, so
// this header needs none of those libraries' headers.
#pragma once
#include <string>

namespace strata {

[[noreturn]] void fail_call(const char* api, const char* call, long code, const std::string& detail,
                            const char* file, int line);
std::string mpi_error_string(int code);

}  // namespace strata

#define MPI_CHECK(call)                                                                        \
  do {                                                                                         \
    int strata_mpi_rc_ = (call);                                                               \
    if (strata_mpi_rc_ != 0)                                                                   \
      ::strata::fail_call("MPI", #call, strata_mpi_rc_, ::strata::mpi_error_string(strata_mpi_rc_), \
                          __FILE__, __LINE__);                                                 \
  } while (0)

#define CUDA_CHECK(call)                                                                           \
  do {                                                                                             \
    cudaError_t strata_cuda_rc_ = (call);                                                          \
    if (strata_cuda_rc_ != cudaSuccess)                                                            \
      ::strata::fail_call("CUDA", #call, static_cast<long>(strata_cuda_rc_),                       \
                          cudaGetErrorString(strata_cuda_rc_), __FILE__, __LINE__);                \
  } while (0)

#define CUBLAS_CHECK(call)                                                                         \
  do {                                                                                             \
    cublasStatus_t strata_cublas_rc_ = (call);                                                     \
    if (strata_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::strata::fail_call("cuBLAS", #call, static_cast<long>(strata_cublas_rc_),                   \
                          cublasLtGetStatusString(strata_cublas_rc_), __FILE__, __LINE__);           \
  } while (0)

#define NCCL_CHECK(call)                                                                           \
  do {                                                                                             \
    ncclResult_t strata_nccl_rc_ = (call);                                                         \
    if (strata_nccl_rc_ != ncclSuccess)                                                            \
      ::strata::fail_call("NCCL", #call, static_cast<long>(strata_nccl_rc_),                       \
                          ncclGetErrorString(strata_nccl_rc_), __FILE__, __LINE__);                \
  } while (0)
