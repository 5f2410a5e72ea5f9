// Helpers shared by the backend tests: host tensors backed by vectors, seeded random fills
// and a closeness check that reports the worst element.
#pragma once
#include "catch_compat.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace strata::test {

// Host fp32 storage plus a tensor view of it.
struct HostTensor {
  std::vector<float> values;
  Tensor tensor;
  HostTensor(std::initializer_list<int64_t> dims, float fill = 0.0f) {
    Tensor shape_only(nullptr, DType::F32, dims);
    values.assign(static_cast<size_t>(shape_only.numel()), fill);
    tensor = Tensor(values.data(), DType::F32, dims);
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  float& operator[](size_t i) { return values[i]; }
  size_t size() const { return values.size(); }
  std::vector<double> as_double() const { return std::vector<double>(values.begin(), values.end()); }
};

inline void fill_normal(std::vector<float>& v, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed, 1);
  for (float& x : v) x = rng.normal() * scale;
}

// |actual − expected| ≤ abs_tol + rel_tol · |expected| for every element; on failure names
// the worst element.
template <typename A, typename E>
void check_close(const A& actual, const E& expected, double rel_tol, double abs_tol, const std::string& what) {
  REQUIRE(actual.size() == expected.size());
  double worst_excess = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    const double excess = std::abs(a - e) - (abs_tol + rel_tol * std::abs(e));
    if (!(excess <= worst_excess)) {  // also catches NaN
      worst_excess = std::isnan(excess) ? INFINITY : excess;
      worst = i;
    }
  }
  INFO(what << ": worst element " << worst << " actual " << static_cast<double>(actual[worst]) << " expected "
            << static_cast<double>(expected[worst]));
  CHECK(worst_excess <= 0.0);
}

}  // namespace strata::test
