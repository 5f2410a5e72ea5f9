# Compiler settings shared by every strata target: warnings, -Werror, sanitizers, ccache.
find_program(STRATA_CCACHE ccache)
if(STRATA_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${STRATA_CCACHE})
  set(CMAKE_C_COMPILER_LAUNCHER ${STRATA_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${STRATA_CCACHE})
endif()

add_library(strata_warnings INTERFACE)
target_compile_options(strata_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
if(STRATA_WERROR)
  target_compile_options(strata_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

if(STRATA_SANITIZE)
  add_compile_options(-fsanitize=${STRATA_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${STRATA_SANITIZE})
endif()

# Release-grade math for the CPU backend while keeping IEEE semantics (no -ffast-math:
# the reference must be reproducible bit for bit).
if(CMAKE_BUILD_TYPE MATCHES "Rel")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-O2>)
endif()
