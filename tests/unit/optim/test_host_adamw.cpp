// The host AdamW of offloaded optimizer state against the CPU backend's adamw_update, bit for
// bit: every instruction set this CPU runs, every copy dtype, AdamW and Adam + L2, split over
// threads or not, with the edge values of the roundings (fp16 overflow and subnormals, NaN);
// and AdamW stepped in pieces on host state equal to the same AdamW on the backend.
#include "catch_compat.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "optim/optim.h"

using namespace strata;

namespace {

struct State {
  std::vector<float> param, grad, m, v;
  std::vector<uint16_t> copy16;
  std::vector<float> copy32;
};

State random_state(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  State s;
  for (int64_t i = 0; i < n; ++i) {
    s.param.push_back(normal(rng));
    s.grad.push_back(normal(rng) * 1e-2f);
    s.m.push_back(normal(rng) * 1e-3f);
    s.v.push_back(std::abs(normal(rng)) * 1e-5f);
  }
  // Values whose roundings take the conversions' special paths.
  const float edges[] = {70000.0f, 65519.0f, 65520.0f, -65536.0f, 3.0e-8f, -6.0e-8f, 1.0e-5f, 0.0f, -0.0f,
                         std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()};
  int64_t at = 5;
  for (float e : edges) {
    if (at >= n) break;
    s.param[static_cast<size_t>(at)] = e;
    at += 37;
  }
  if (n > 500) s.grad[499] = std::numeric_limits<float>::quiet_NaN();
  s.copy16.assign(static_cast<size_t>(n), 0);
  s.copy32.assign(static_cast<size_t>(n), 0.0f);
  return s;
}

AdamWArgs some_args(bool decoupled) {
  AdamWArgs a;
  a.lr = 3e-4;
  a.beta1 = 0.9;
  a.beta2 = 0.95;
  a.eps = 1e-8;
  a.weight_decay = 0.1;
  a.bias_correction1 = 1.0 - std::pow(0.9, 3.0);
  a.bias_correction2 = 1.0 - std::pow(0.95, 3.0);
  a.grad_scale = 0.37;
  a.decoupled = decoupled;
  return a;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

Tensor host(std::vector<float>& v) { return Tensor(v.data(), DType::F32, {static_cast<int64_t>(v.size())}); }

}  // namespace

TEST_CASE("host AdamW equals the CPU backend's adamw_update bit for bit") {
  const int64_t n = 100003;  // several tasks and a tail shorter than a vector
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  ThreadPool pool(3);
  std::vector<HostSimd> simds = {HostSimd::Scalar};
  if (host_simd_best() >= HostSimd::Avx2) simds.push_back(HostSimd::Avx2);
  if (host_simd_best() >= HostSimd::Avx512) simds.push_back(HostSimd::Avx512);
  for (HostSimd simd : simds) {
    for (DType copy : {DType::I32 /* none */, DType::F32, DType::BF16, DType::F16}) {
      for (bool decoupled : {true, false}) {
        for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
          INFO(host_simd_name(simd) << " copy " << dtype_name(copy) << " decoupled " << decoupled << " threads "
                                    << (threads ? 3 : 1));
          const AdamWArgs args = some_args(decoupled);
          State want = random_state(n, 7), got = random_state(n, 7);
          const bool has_copy = copy != DType::I32;
          auto copy_tensor = [&](State& s) {
            if (!has_copy) return Tensor();
            void* data = copy == DType::F32 ? static_cast<void*>(s.copy32.data()) : static_cast<void*>(s.copy16.data());
            return Tensor(data, copy, {n});
          };
          cpu->adamw_update(host(want.param), host(want.grad), host(want.m), host(want.v), copy_tensor(want), args);
          HostAdamWData d;
          d.param = got.param.data();
          d.grad = got.grad.data();
          d.exp_avg = got.m.data();
          d.exp_avg_sq = got.v.data();
          d.param_copy = has_copy ? copy_tensor(got).data : nullptr;
          d.copy_dtype = has_copy ? copy : DType::F32;
          d.n = n;
          host_adamw_update(d, args, simd, threads);
          CHECK(same_bits(got.param, want.param));
          CHECK(same_bits(got.m, want.m));
          CHECK(same_bits(got.v, want.v));
          CHECK(same_bits(got.copy16, want.copy16));
          CHECK(same_bits(got.copy32, want.copy32));
        }
      }
    }
  }
}

TEST_CASE("host AdamW refuses what it cannot do") {
  float x = 0.0f;
  HostAdamWData d{&x, &x, &x, &x, nullptr, DType::F32, 1};
  AdamWArgs args = some_args(true);
  args.bias_correction1 = 0.0;
  CHECK_THROWS_AS(host_adamw_update(d, args, HostSimd::Scalar, nullptr), std::invalid_argument);
  d.param_copy = &x;
  d.copy_dtype = DType::I32;
  CHECK_THROWS_AS(host_adamw_update(d, some_args(true), HostSimd::Scalar, nullptr), std::invalid_argument);
}

TEST_CASE("AdamW on host state, stepped in pieces, equals AdamW on the backend") {
  const int64_t n = 5000;
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  ThreadPool pool(2);
  const std::vector<ParamRange> ranges = {{0, 1200, true}, {1200, 300, false}, {1500, 3500, true}};
  AdamWSettings settings;
  settings.weight_decay = 0.05;
  HostPlacement placement{false, host_simd_best(), &pool};
  AdamW on_device(*cpu, settings, ranges, n);
  AdamW on_host(*cpu, settings, ranges, n, &placement);
  CHECK(on_host.on_host());
  CHECK_FALSE(on_device.on_host());
  State a = random_state(n, 11), b = random_state(n, 11);
  for (float& p : a.param) p = std::isfinite(p) ? p : 1.0f;  // several steps: keep them finite
  for (float& p : b.param) p = std::isfinite(p) ? p : 1.0f;
  a.grad[499] = b.grad[499] = 0.5f;
  const int64_t cuts[] = {0, 700, 1250, 1251, 4096, n};
  for (int step = 0; step < 3; ++step) {
    const float lr = 1e-3f * static_cast<float>(step + 1);
    on_device.step(host(a.param), host(a.grad), lr, 0.5f,
                   Tensor(a.copy16.data(), DType::BF16, {n}));
    on_host.begin_pieces(lr, 0.5f);
    for (size_t k = 0; k + 1 < std::size(cuts); ++k) {
      const int64_t begin = cuts[k], count = cuts[k + 1] - cuts[k];
      on_host.update_piece(begin, count, b.param.data() + begin, b.grad.data() + begin, b.copy16.data() + begin,
                           DType::BF16);
    }
  }
  CHECK(on_host.steps_taken() == 3);
  CHECK(same_bits(a.param, b.param));
  CHECK(same_bits(a.copy16, b.copy16));
  CHECK(std::memcmp(on_device.exp_avg().data, on_host.exp_avg().data, n * sizeof(float)) == 0);
  CHECK(std::memcmp(on_device.exp_avg_sq().data, on_host.exp_avg_sq().data, n * sizeof(float)) == 0);
}
