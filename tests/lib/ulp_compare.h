// Low-precision results judged in ulps (units in the last place) of their own format: a bf16
// element one representable step away from its reference is 1 ulp off at any magnitude, which a
// flat relative tolerance cannot say (one bf16 step is 2⁻⁸ to 2⁻⁷ of a value).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/dtype.h"

namespace strata::test {

// The spacing of `format`'s values at magnitude x: 2^(e − p + 1) for |x| in [2^e, 2^(e+1)),
// p being the significand's bits (24 for f32, 11 for f16, 8 for bf16); below the normal range,
// the subnormal spacing.
inline double ulp_at(double x, DType format) {
  int bits = 24, min_exponent = -126;
  if (format == DType::F16) {
    bits = 11;
    min_exponent = -14;
  } else if (format == DType::BF16) {
    bits = 8;
  }
  const double magnitude = std::fabs(x);
  const int exponent = magnitude > 0.0 && std::isfinite(magnitude) ? std::ilogb(magnitude) : min_exponent;
  return std::ldexp(1.0, std::max(exponent, min_exponent) - (bits - 1));
}

struct UlpError {
  double worst = 0.0;  // in ulps; infinite for a NaN
  size_t at = 0;
  double mean_abs = 0.0;  // mean |expected|, the floor of the magnitude an error is judged at
};

// max_i |actual_i − expected_i| / ulp_at(max(|expected_i|, mean |expected|)). Elements smaller
// than the tensor's typical magnitude are judged at that magnitude: near zero, where large terms
// cancel, both sides carry the rounding noise of the terms, not of the small result.
inline UlpError worst_ulp_error(const std::vector<float>& actual, const std::vector<float>& expected, DType format) {
  UlpError e;
  for (float v : expected) e.mean_abs += std::fabs(static_cast<double>(v));
  if (!expected.empty()) e.mean_abs /= static_cast<double>(expected.size());
  for (size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    const double want = expected[i];
    const double step = ulp_at(std::max(std::fabs(want), e.mean_abs), format);
    const double ulps = std::fabs(static_cast<double>(actual[i]) - want) / step;
    if (!(ulps <= e.worst)) {  // NaN counts as the worst
      e.worst = std::isnan(ulps) ? INFINITY : ulps;
      e.at = i;
    }
  }
  return e;
}

}  // namespace strata::test
