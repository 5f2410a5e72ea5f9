// AdamW over host memory, for optimizer state offloaded from the device: the arithmetic of
// CpuBackend::adamw_update (torch's order, torch's FMAs) bit for bit, in AVX-512 or AVX2 lanes
// chosen at run time, the working-dtype copy rounded in the same pass, spread over a pool.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "optim/optim.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata {
namespace {

// The fp32 scalars (adamw_floats: the CPU backend's own), the step size negated as the
// reference negates it.
struct Scalars {
  float decay, l2, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps, grad_scale;
  bool decoupled;
};

Scalars scalars_of(const AdamWArgs& a) {
  const AdamWFloats f = adamw_floats(a);
  return {f.decay, f.l2, f.beta1, f.one_minus_beta1, f.beta2, f.one_minus_beta2, -f.step_size, f.bc2_sqrt, f.eps,
          f.grad_scale, a.decoupled};
}

void store_copy(const HostAdamWData& d, int64_t i, float value) {
  switch (d.copy_dtype) {
    case DType::F32: static_cast<float*>(d.param_copy)[i] = value; break;
    case DType::BF16: static_cast<uint16_t*>(d.param_copy)[i] = float_to_bf16(value); break;
    case DType::F16: static_cast<uint16_t*>(d.param_copy)[i] = float_to_fp16(value); break;
    default: break;
  }
}

// Elements [begin, end), one at a time: the reference the lanes below must equal.
void update_scalar(const HostAdamWData& d, const Scalars& s, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float g = d.grad[i] * s.grad_scale;
    float p = d.param[i];
    if (s.decoupled) {
      p = p * s.decay;
    } else {
      g = std::fma(p, s.l2, g);
    }
    const float m = std::fma(g, s.one_minus_beta1, d.exp_avg[i] * s.beta1);
    const float v = std::fma(s.one_minus_beta2 * g, g, d.exp_avg_sq[i] * s.beta2);
    const float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
    p = p + s.neg_step_size * m / denom;
    d.param[i] = p;
    d.exp_avg[i] = m;
    d.exp_avg_sq[i] = v;
    if (d.param_copy) store_copy(d, i, p);
  }
}

#if defined(__x86_64__)
// GCC 12's AVX-512 headers start vectors from _mm*_undefined_*(), which its own
// -Wmaybe-uninitialized then reports at every inlined use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// float_to_bf16 in 32-bit lanes: round to nearest even, NaN kept quiet.
__attribute__((target("avx2"))) __m256i bf16_bits_avx2(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

__attribute__((target("avx2,fma,f16c"))) void update_avx2(const HostAdamWData& d, const Scalars& s, int64_t begin,
                                                          int64_t end) {
  const __m256 gs = _mm256_set1_ps(s.grad_scale), decay = _mm256_set1_ps(s.decay), l2 = _mm256_set1_ps(s.l2);
  const __m256 b1 = _mm256_set1_ps(s.beta1), omb1 = _mm256_set1_ps(s.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(s.beta2), omb2 = _mm256_set1_ps(s.one_minus_beta2);
  const __m256 nstep = _mm256_set1_ps(s.neg_step_size), bc2 = _mm256_set1_ps(s.bc2_sqrt), eps = _mm256_set1_ps(s.eps);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 g = _mm256_mul_ps(_mm256_loadu_ps(d.grad + i), gs);
    __m256 p = _mm256_loadu_ps(d.param + i);
    if (s.decoupled) {
      p = _mm256_mul_ps(p, decay);
    } else {
      g = _mm256_fmadd_ps(p, l2, g);
    }
    const __m256 m = _mm256_fmadd_ps(g, omb1, _mm256_mul_ps(_mm256_loadu_ps(d.exp_avg + i), b1));
    const __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(omb2, g), g, _mm256_mul_ps(_mm256_loadu_ps(d.exp_avg_sq + i), b2));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
    p = _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(nstep, m), denom));
    _mm256_storeu_ps(d.param + i, p);
    _mm256_storeu_ps(d.exp_avg + i, m);
    _mm256_storeu_ps(d.exp_avg_sq + i, v);
    if (!d.param_copy) continue;
    uint16_t* half = static_cast<uint16_t*>(d.param_copy) + i;
    if (d.copy_dtype == DType::F32) {
      _mm256_storeu_ps(static_cast<float*>(d.param_copy) + i, p);
    } else if (d.copy_dtype == DType::BF16) {
      const __m256i r = bf16_bits_avx2(p);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(half),
                       _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    } else if (_mm256_movemask_ps(_mm256_cmp_ps(p, p, _CMP_UNORD_Q)) == 0) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(half), _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
    } else {  // the conversion instruction keeps a NaN's payload; cast writes the canonical one
      for (int k = 0; k < 8; ++k) half[k] = float_to_fp16(d.param[i + k]);
    }
  }
  update_scalar(d, s, i, end);
}

__attribute__((target("avx512f"))) __m512i bf16_bits_avx512(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

__attribute__((target("avx512f"))) void update_avx512(const HostAdamWData& d, const Scalars& s,
                                                               int64_t begin, int64_t end) {
  const __m512 gs = _mm512_set1_ps(s.grad_scale), decay = _mm512_set1_ps(s.decay), l2 = _mm512_set1_ps(s.l2);
  const __m512 b1 = _mm512_set1_ps(s.beta1), omb1 = _mm512_set1_ps(s.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(s.beta2), omb2 = _mm512_set1_ps(s.one_minus_beta2);
  const __m512 nstep = _mm512_set1_ps(s.neg_step_size), bc2 = _mm512_set1_ps(s.bc2_sqrt), eps = _mm512_set1_ps(s.eps);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 g = _mm512_mul_ps(_mm512_loadu_ps(d.grad + i), gs);
    __m512 p = _mm512_loadu_ps(d.param + i);
    if (s.decoupled) {
      p = _mm512_mul_ps(p, decay);
    } else {
      g = _mm512_fmadd_ps(p, l2, g);
    }
    const __m512 m = _mm512_fmadd_ps(g, omb1, _mm512_mul_ps(_mm512_loadu_ps(d.exp_avg + i), b1));
    const __m512 v = _mm512_fmadd_ps(_mm512_mul_ps(omb2, g), g, _mm512_mul_ps(_mm512_loadu_ps(d.exp_avg_sq + i), b2));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2), eps);
    p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(nstep, m), denom));
    _mm512_storeu_ps(d.param + i, p);
    _mm512_storeu_ps(d.exp_avg + i, m);
    _mm512_storeu_ps(d.exp_avg_sq + i, v);
    if (!d.param_copy) continue;
    uint16_t* half = static_cast<uint16_t*>(d.param_copy) + i;
    if (d.copy_dtype == DType::F32) {
      _mm512_storeu_ps(static_cast<float*>(d.param_copy) + i, p);
    } else if (d.copy_dtype == DType::BF16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(half), _mm512_cvtepi32_epi16(bf16_bits_avx512(p)));
    } else if (_mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q) == 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(half),
                          _mm512_maskz_cvtps_ph(0xffff, p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else {
      for (int k = 0; k < 16; ++k) half[k] = float_to_fp16(d.param[i + k]);
    }
  }
  update_scalar(d, s, i, end);
}
#pragma GCC diagnostic pop
#endif

// Elements per task: large enough that scheduling is noise, small enough to balance threads.
constexpr int64_t kTaskElements = int64_t{1} << 15;

}  // namespace

HostSimd host_simd_best() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return HostSimd::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return HostSimd::Avx2;
#endif
  return HostSimd::Scalar;
}

const char* host_simd_name(HostSimd simd) {
  switch (simd) {
    case HostSimd::Scalar: return "scalar";
    case HostSimd::Avx2: return "avx2";
    case HostSimd::Avx512: return "avx512";
  }
  return "?";
}

void host_adamw_update(const HostAdamWData& data, const AdamWArgs& args, HostSimd simd, ThreadPool* pool) {
  if (args.bias_correction1 <= 0 || args.bias_correction2 <= 0)
    throw std::invalid_argument("host_adamw_update: bias corrections must be positive (1 − β^t with t ≥ 1)");
  if (data.param_copy && data.copy_dtype != DType::F32 && data.copy_dtype != DType::BF16 && data.copy_dtype != DType::F16)
    throw std::invalid_argument("host_adamw_update: the parameter copy must be F32, BF16 or F16");
  if (simd > host_simd_best()) throw std::invalid_argument(std::string("host_adamw_update: this CPU has no ") + host_simd_name(simd));
  const Scalars s = scalars_of(args);
  auto piece = [&](int64_t begin, int64_t end) {
    switch (simd) {
#if defined(__x86_64__)
      case HostSimd::Avx512: update_avx512(data, s, begin, end); return;
      case HostSimd::Avx2: update_avx2(data, s, begin, end); return;
#endif
      default: update_scalar(data, s, begin, end); return;
    }
  };
  const int64_t tasks = (data.n + kTaskElements - 1) / kTaskElements;
  if (!pool || tasks <= 1) {
    piece(0, data.n);
    return;
  }
  pool->run(tasks, [&](int64_t t) { piece(t * kTaskElements, std::min(data.n, (t + 1) * kTaskElements)); });
}

}  // namespace strata
