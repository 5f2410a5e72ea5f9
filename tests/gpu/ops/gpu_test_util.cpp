// Mirrored tensors and comparisons for the GPU op tests (see gpu_test_util.h).
#include "gpu_test_util.h"

#include <algorithm>
#include <iostream>

namespace strata::gpu_test {

Mirrored::Mirrored(std::initializer_list<int64_t> dims, DType dtype) {
  cpu_tensor = Tensor(nullptr, dtype, dims, Device::CPU);
  host_.assign(cpu_tensor.bytes() + 1, 0);
  cpu_tensor.data = host_.data();
  device_ = gpu().allocate(cpu_tensor.bytes());
  gpu_tensor = cpu_tensor;
  gpu_tensor.data = device_.data();
  gpu_tensor.device = Device::CUDA;
}

void Mirrored::randomize(uint64_t seed, float scale, int32_t int_range) {
  Rng rng(seed, 7);
  if (cpu_tensor.dtype == DType::I32) {
    std::vector<int32_t> ids(static_cast<size_t>(numel()));
    for (int32_t& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(int_range)));
    set_ints(ids);
    return;
  }
  std::vector<float> values(static_cast<size_t>(numel()));
  for (float& v : values) v = rng.normal() * scale;
  set(values);
}

void Mirrored::set(const std::vector<float>& values) {
  REQUIRE(static_cast<int64_t>(values.size()) == numel());
  convert_elements(values.data(), DType::F32, host_.data(), cpu_tensor.dtype, values.size());
  sync_to_gpu();
}

void Mirrored::set_ints(const std::vector<int32_t>& values) {
  REQUIRE(cpu_tensor.dtype == DType::I32);
  REQUIRE(static_cast<int64_t>(values.size()) == numel());
  std::memcpy(host_.data(), values.data(), values.size() * sizeof(int32_t));
  sync_to_gpu();
}

void Mirrored::sync_to_gpu() { gpu().copy(cpu_tensor, gpu_tensor); }

std::vector<float> Mirrored::cpu_values() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  convert_elements(cpu_tensor.data, cpu_tensor.dtype, out.data(), DType::F32, out.size());
  return out;
}

std::vector<uint8_t> Mirrored::gpu_bytes() const {
  std::vector<uint8_t> bytes(gpu_tensor.bytes());
  Tensor host = cpu_tensor;
  host.data = bytes.data();
  gpu().copy(gpu_tensor, host);
  return bytes;
}

std::vector<float> Mirrored::gpu_values() const {
  const std::vector<uint8_t> bytes = gpu_bytes();
  std::vector<float> out(static_cast<size_t>(numel()));
  convert_elements(bytes.data(), cpu_tensor.dtype, out.data(), DType::F32, out.size());
  return out;
}

void check_relative(const std::vector<float>& actual, const std::vector<float>& expected, double tol,
                    const std::string& what) {
  REQUIRE(actual.size() == expected.size());
  REQUIRE(!expected.empty());
  double mean_abs = 0.0;
  for (float e : expected) mean_abs += std::abs(static_cast<double>(e));
  mean_abs /= static_cast<double>(expected.size());
  INFO(what << ": mean |expected| " << mean_abs);
  REQUIRE(mean_abs > 0.0);
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double e = expected[i], a = actual[i];
    const double err = std::abs(a - e) / std::max(std::abs(e), mean_abs);
    if (!(err <= worst)) {  // NaN counts as the worst
      worst = std::isnan(err) ? INFINITY : err;
      worst_at = i;
    }
  }
  INFO(what << ": worst relative error " << worst << " at " << worst_at << " (gpu " << actual[worst_at] << ", cpu "
            << expected[worst_at] << ")");
  CHECK(worst <= tol);
}

void check_ulps(const std::vector<float>& actual, const std::vector<float>& expected, DType format, double max_ulps,
                const std::string& what) {
  REQUIRE(actual.size() == expected.size());
  REQUIRE(!expected.empty());
  const test::UlpError e = test::worst_ulp_error(actual, expected, format);
  std::cout << "ulps: " << what << ": worst " << e.worst << " (bound " << max_ulps << ")\n";
  INFO(what << ": mean |expected| " << e.mean_abs << "; worst " << e.worst << " " << dtype_name(format)
            << " ulps at " << e.at << " (gpu " << actual[e.at] << ", cpu " << expected[e.at] << ")");
  REQUIRE(e.mean_abs > 0.0);
  CHECK(e.worst <= max_ulps);
}

void check_output(const std::vector<float>& actual, const std::vector<float>& expected, DType dtype, double max_ulps,
                  const std::string& what) {
  if (dtype == DType::F32) {
    check_relative(actual, expected, 1e-5, what);
  } else {
    check_ulps(actual, expected, dtype, max_ulps, what);
  }
}

}  // namespace strata::gpu_test
