# Third-party dependencies, all from Debian packages (scripts/install-deps.sh), plus CUDA
# from /usr/local/cuda when present.
find_package(MPI REQUIRED COMPONENTS C)
find_package(yaml-cpp REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(Threads REQUIRED)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(STRATA_CBLAS_INCLUDE cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include REQUIRED)

set(STRATA_HAVE_CUDA OFF)
if(NOT STRATA_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  # Architectures are passed as explicit -gencode flags (kernels/CMakeLists.txt); this
  # stops CMake from probing a default that CUDA 13 no longer supports.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    # CMake 3.25's FindCUDAToolkit tags CUDA::nvToolsExt as deprecated without checking that it
    # exists, and CUDA 13 no longer ships that library: an empty stand-in keeps the module working.
    if(NOT TARGET CUDA::nvToolsExt)
      add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(STRATA_HAVE_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but no CUDA compiler was found (looked in PATH and /usr/local/cuda)")
  endif()
endif()
message(STATUS "strata: CUDA backend ${STRATA_HAVE_CUDA}")
