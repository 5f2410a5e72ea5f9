// Core utilities: dtype conversions, RNG determinism and statistics, tensor views.
#include "catch_compat.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/core.h"

using namespace strata;

TEST_CASE("bf16 rounds to nearest even and round-trips representable values") {
  CHECK(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  CHECK(bf16_to_float(float_to_bf16(-3.5f)) == -3.5f);
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  CHECK(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("fp16 conversion matches IEEE binary16") {
  CHECK(float_to_fp16(1.0f) == 0x3c00);
  CHECK(float_to_fp16(-2.0f) == 0xc000);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);
  CHECK(float_to_fp16(70000.0f) == 0x7c00);                     // overflow to inf
  CHECK(float_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);        // smallest subnormal
  CHECK(fp16_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(fp16_to_float(0x3555) == Approx(0.333251953125f));
  for (uint32_t h = 0; h < 0x7c00; ++h) {                      // every finite positive half
    REQUIRE(float_to_fp16(fp16_to_float(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("counter-based RNG is a pure function of seed, stream and index") {
  CHECK(rng_bits(1, 2, 3) == rng_bits(1, 2, 3));
  CHECK(rng_bits(1, 2, 3) != rng_bits(1, 2, 4));
  CHECK(rng_bits(1, 2, 3) != rng_bits(1, 3, 3));
  Rng a(42, 7);
  a.normal();
  a.normal();
  const RngState saved = a.state();
  const float next = a.normal();
  Rng b;
  b.restore(saved);
  CHECK(b.normal() == next);
}

TEST_CASE("RNG normal draws have mean 0 and variance 1") {
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng_normal(3, 9, static_cast<uint64_t>(i));
    sum += x;
    sum_sq += x * x;
  }
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sum_sq / n - 1.0) < 0.01);
}

TEST_CASE("Tensor reports shape and bytes, and f32() checks the dtype") {
  std::vector<float> storage(6, 0.0f);
  Tensor t(storage.data(), DType::F32, {2, 3});
  CHECK(t.numel() == 6);
  CHECK(t.bytes() == 24);
  CHECK(t.shape_string() == "(2, 3)");
  CHECK(t.f32()[5] == 0.0f);
  std::vector<uint16_t> halves(5);
  Tensor h(halves.data(), DType::BF16, {5});
  CHECK(h.bytes() == 10);
  CHECK_THROWS_AS(h.f32(), std::logic_error);
}
