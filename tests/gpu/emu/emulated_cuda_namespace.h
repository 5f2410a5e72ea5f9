// Force-included into the unchanged GPU op tests when they are built against the emulated CUDA
// backend: their strata::cuda names (CudaBackend, ElemType, ...) resolve to the namespace that
// transform_kernels.py gave the emulated copies of src/backend/cuda and kernels/.
#pragma once

namespace strata::emulated_cuda {}
namespace strata {
namespace cuda = emulated_cuda;
}  // namespace strata
