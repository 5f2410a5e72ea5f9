// SplitMix64-style mixing of (seed, stream, index); Box-Muller for normals computed in
// double so results do not depend on the platform's float libm.
#include "core/rng.h"

#include <cmath>

namespace strata {
namespace {
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t rng_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ULL);
  h = mix64(h ^ (stream + 0x632be59bd9b4e019ULL));
  return mix64(h ^ (index * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL));
}

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(rng_bits(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t bits = rng_bits(seed, stream, index);
  // Two 26-bit uniforms from one draw; u1 in (0, 1] keeps the log finite.
  const double u1 = (static_cast<double>(bits >> 38) + 1.0) / 67108864.0;
  const double u2 = static_cast<double>((bits >> 12) & ((1ULL << 26) - 1)) / 67108864.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

uint64_t rng_stream_id(const char* name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ULL;
  return h;
}

uint64_t Rng::below(uint64_t n) {
  if (n <= 1) return 0;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t r;
  do r = next_u64();
  while (r >= limit);
  return r % n;
}

}  // namespace strata
