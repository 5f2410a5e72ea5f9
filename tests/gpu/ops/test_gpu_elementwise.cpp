// GPU whole-tensor and elementwise ops against the CPU backend on fresh random inputs: copies,
// casts, zero/fill/scale, sum of squares, add, GELU forward/backward and AdamW (bit-exact in
// fp32), plus memory accounting and determinism.
#include "catch_compat.h"

#include "gpu_test_util.h"

using namespace strata;
using namespace strata::gpu_test;

namespace {
const DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16};
}

TEST_CASE("gpu: copy round-trips host → device → device → host and zero clears") {
  Mirrored a({1000, 3}, DType::F32), b({1000, 3}, DType::F32);
  a.randomize(1);
  gpu().copy(a.gpu_tensor, b.gpu_tensor);
  CHECK(b.gpu_values() == a.cpu_values());
  gpu().zero(b.gpu_tensor);
  for (float v : b.gpu_values()) REQUIRE(v == 0.0f);
  Mirrored wrong({7}, DType::F32);
  CHECK_THROWS_AS(gpu().copy(a.gpu_tensor, wrong.gpu_tensor), std::invalid_argument);
}

TEST_CASE("gpu: cast matches the CPU conversion for every pair of float types") {
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      Mirrored src({4099}, from), dst({4099}, to);
      src.randomize(11, 3.0f);
      cpu().cast(src.cpu_tensor, dst.cpu_tensor);
      gpu().cast(src.gpu_tensor, dst.gpu_tensor);
      INFO(dtype_name(from) << " → " << dtype_name(to));
      CHECK(dst.gpu_values() == dst.cpu_values());  // round to nearest even on both sides
    }
  }
}

TEST_CASE("gpu: fill and scale agree with the CPU backend") {
  for (DType dtype : kFloatTypes) {
    Mirrored t({33, 77}, dtype);
    t.randomize(3);
    cpu().scale(t.cpu_tensor, -0.37f);
    gpu().scale(t.gpu_tensor, -0.37f);
    CHECK(t.gpu_values() == t.cpu_values());
    cpu().fill(t.cpu_tensor, 1.25f);
    gpu().fill(t.gpu_tensor, 1.25f);
    CHECK(t.gpu_values() == t.cpu_values());
  }
}

TEST_CASE("gpu: sum_squares is the CPU's double sum and repeats bit for bit") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t n : {1, 1000, 3 * 1024 * 1024 + 5}) {
      Mirrored t({n}, dtype);
      t.randomize(static_cast<uint64_t>(n), 0.1f);
      const double expected = cpu().sum_squares(t.cpu_tensor);
      const double first = gpu().sum_squares(t.gpu_tensor);
      const double second = gpu().sum_squares(t.gpu_tensor);
      INFO(dtype_name(dtype) << " n=" << n);
      CHECK(first == Approx(expected).epsilon(1e-12));
      CHECK(first == second);
    }
  }
}

TEST_CASE("gpu: add and GELU forward/backward match the CPU backend") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    // Odd sizes exercise the scalar tail after the 16-byte packs.
    Mirrored a({37, 129}, dtype), b({37, 129}, dtype), out({37, 129}, dtype), g({37, 129}, dtype);
    a.randomize(5, 2.0f);
    b.randomize(6, 2.0f);
    g.randomize(7);
    INFO(dtype_name(dtype));
    cpu().add(out.cpu_tensor, a.cpu_tensor, b.cpu_tensor);
    gpu().add(out.gpu_tensor, a.gpu_tensor, b.gpu_tensor);
    CHECK(out.gpu_values() == out.cpu_values());
    cpu().gelu_forward(out.cpu_tensor, a.cpu_tensor);
    gpu().gelu_forward(out.gpu_tensor, a.gpu_tensor);
    check_output(out.gpu_values(), out.cpu_values(), dtype, kRoundedOnceUlps, "gelu_forward");
    cpu().gelu_backward(g.cpu_tensor, g.cpu_tensor, a.cpu_tensor);  // dinp aliases dout
    gpu().gelu_backward(g.gpu_tensor, g.gpu_tensor, a.gpu_tensor);
    check_output(g.gpu_values(), g.cpu_values(), dtype, kRoundedOnceUlps, "gelu_backward");
  }
  Mirrored f({8}, DType::F32), h({8}, DType::BF16);
  CHECK_THROWS_AS(gpu().add(f.gpu_tensor, f.gpu_tensor, h.gpu_tensor), std::invalid_argument);
  CHECK_THROWS_AS(gpu().add(f.gpu_tensor, f.cpu_tensor, f.gpu_tensor), std::invalid_argument);
}

TEST_CASE("gpu: AdamW is bit-identical to the CPU backend in fp32, both decay modes") {
  for (bool decoupled : {true, false}) {
    const int64_t n = 100003;
    Mirrored p({n}, DType::F32), g({n}, DType::F32), m({n}, DType::F32), v({n}, DType::F32);
    Mirrored copy({n}, DType::BF16), cast_copy({n}, DType::BF16);
    p.randomize(21);
    g.randomize(22, 0.01f);
    m.randomize(23, 0.001f);
    std::vector<float> squares = g.cpu_values();
    for (float& s : squares) s = s * s;
    v.set(squares);
    AdamWArgs args;
    args.lr = 6e-4;
    args.weight_decay = 0.1;
    args.beta2 = 0.95;
    args.bias_correction1 = 1 - 0.9 * 0.9;
    args.bias_correction2 = 1 - 0.95 * 0.95;
    args.grad_scale = 0.7;
    args.decoupled = decoupled;
    for (int step = 0; step < 3; ++step) {
      cpu().adamw_update(p.cpu_tensor, g.cpu_tensor, m.cpu_tensor, v.cpu_tensor, copy.cpu_tensor, args);
      gpu().adamw_update(p.gpu_tensor, g.gpu_tensor, m.gpu_tensor, v.gpu_tensor, copy.gpu_tensor, args);
    }
    INFO((decoupled ? "AdamW" : "Adam + L2"));
    CHECK(p.gpu_values() == p.cpu_values());
    CHECK(m.gpu_values() == m.cpu_values());
    CHECK(v.gpu_values() == v.cpu_values());
    CHECK(copy.gpu_values() == copy.cpu_values());
    cpu().cast(p.cpu_tensor, cast_copy.cpu_tensor);  // the fused copy rounds as cast does
    CHECK(copy.cpu_values() == cast_copy.cpu_values());
  }
}

TEST_CASE("gpu: AdamW on bf16 parameters with fp32 gradients matches the CPU emulation") {
  const int64_t n = 4096;
  Mirrored p({n}, DType::BF16), g({n}, DType::F32), m({n}, DType::F32), v({n}, DType::F32);
  p.randomize(31);
  g.randomize(32, 0.1f);
  AdamWArgs args;
  args.lr = 1e-2;
  cpu().adamw_update(p.cpu_tensor, g.cpu_tensor, m.cpu_tensor, v.cpu_tensor, Tensor(), args);
  gpu().adamw_update(p.gpu_tensor, g.gpu_tensor, m.gpu_tensor, v.gpu_tensor, Tensor(), args);
  CHECK(p.gpu_values() == p.cpu_values());
  CHECK(v.gpu_values() == v.cpu_values());
}

TEST_CASE("gpu: allocations are counted and zero-filled") {
  const auto before = gpu().memory_stats();
  {
    Buffer buffer = gpu().allocate(size_t{64} << 20);
    const auto during = gpu().memory_stats();
    CHECK(during.allocated_bytes == before.allocated_bytes + (size_t{64} << 20));
    CHECK(during.peak_allocated_bytes >= during.allocated_bytes);
    CHECK(during.device_used_bytes > 0);
    CHECK(during.device_total_bytes >= during.device_used_bytes);
    std::vector<float> host(1024, 1.0f);
    gpu().copy(buffer.view(0, DType::F32, {1024}), Tensor(host.data(), DType::F32, {1024}));
    for (float v : host) REQUIRE(v == 0.0f);
  }
  CHECK(gpu().memory_stats().allocated_bytes == before.allocated_bytes);
}
