// What the CUDA backend's hot path no longer waits for: device-side checks of token and target
// ids reported at the next wait (the first bad op's row and id, though the ids have changed
// since), more checking ops than flags between two waits, staged uploads that leave the
// caller's buffer free at once, and copy_async into page-locked host memory.
#include "catch_compat.h"

#include "gpu_test_util.h"

using namespace strata;
using namespace strata::gpu_test;

namespace {

// A (2, 16) token batch of ids below 50, with `bad` at `row` when row ≥ 0.
std::vector<int32_t> ids_with(int row, int32_t bad) {
  std::vector<int32_t> ids(32);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 7 % 50);
  if (row >= 0) ids[static_cast<size_t>(row)] = bad;
  return ids;
}

}  // namespace

TEST_CASE("gpu: device ids are checked without a wait and the first bad op is reported at the next one") {
  const int64_t V = 50, C = 64;
  Mirrored tokens({2, 16}, DType::I32), wte({V, C}, DType::F32), wpe({16, C}, DType::F32), out({2, 16, C}, DType::F32);
  Mirrored logits({32, 64}, DType::F32), targets({32}, DType::I32);
  wte.randomize(1);
  wpe.randomize(2);
  logits.randomize(3);
  tokens.set_ints(ids_with(19, -1));   // batch row 1, position 3
  targets.set_ints(ids_with(0, 50));   // a later op's bad target
  // No throw, no wait.
  gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 0, V);
  gpu().softmax_cross_entropy(logits.gpu_tensor, Tensor(), targets.gpu_tensor, static_cast<int>(V), true, 1.0f);
  // The ids are overwritten before the host looks: the flag carried the bad id itself.
  tokens.set_ints(ids_with(-1, 0));
  CHECK_THROWS_WITH(gpu().synchronize(), strata_catch::Contains("token id -1 at batch row 1, position 3"));
  CHECK_NOTHROW(gpu().synchronize());  // reported once; the flags are free again
  gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 0, V);
  CHECK_NOTHROW(gpu().synchronize());
  // A read-back waits too, so it reports as well.
  targets.set_ints(ids_with(5, 77));
  gpu().softmax_cross_entropy(logits.gpu_tensor, Tensor(), targets.gpu_tensor, static_cast<int>(V), false, 1.0f);
  CHECK_THROWS_WITH(gpu().sum_squares(logits.gpu_tensor), strata_catch::Contains("target token id 77 at row 5"));
  CHECK_NOTHROW(gpu().synchronize());
}

TEST_CASE("gpu: more checking ops than flags between two waits") {
  const int V = 50, C = 8;
  const int ops = 1500;  // DeferredIdChecks::kFlags is 1024: the flags fill up and are resolved on the way
  // The filler: an embedding of one device token, the cheapest checking op.
  Mirrored token({1, 1}, DType::I32), wte({V, C}, DType::F32), wpe({1, C}, DType::F32), out({1, 1, C}, DType::F32);
  wte.randomize(5);
  wpe.randomize(6);
  token.set_ints({7});
  const auto embed = [&] {
    gpu().embedding_forward(out.gpu_tensor, token.gpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 0, V);
  };
  Mirrored logits({4, 64}, DType::F32), targets({4}, DType::I32), losses({4}, DType::F32);
  logits.randomize(4);
  for (int i = 0; i < ops; ++i) embed();
  CHECK_NOTHROW(gpu().synchronize());
  // A bad target early in a long run: reported by the wait the full flags force, or the last one.
  targets.set_ints({1, 2, 60, 3});
  gpu().softmax_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor, V, false, 1.0f);
  bool reported = false;
  try {
    for (int i = 0; i < ops; ++i) embed();
    gpu().synchronize();
  } catch (const UserError& e) {
    reported = std::string(e.what()).find("target token id 60 at row 2") != std::string::npos;
  }
  CHECK(reported);
  CHECK_NOTHROW(gpu().synchronize());
}

TEST_CASE("gpu: staged uploads free the caller's buffer at once and copy_async lands by synchronize") {
  const int64_t n = 4096;
  const int rounds = 20;  // more than the staging ring's slots
  Buffer device = gpu().allocate(static_cast<size_t>(rounds * n) * sizeof(float));
  std::vector<float> source(static_cast<size_t>(n));
  for (int r = 0; r < rounds; ++r) {
    for (int64_t i = 0; i < n; ++i) source[static_cast<size_t>(i)] = static_cast<float>(r * n + i);
    gpu().copy(Tensor(source.data(), DType::F32, {n}), device.view(static_cast<size_t>(r * n) * sizeof(float), DType::F32, {n}));
    std::fill(source.begin(), source.end(), -1.0f);  // the caller reuses its buffer at once
  }
  Buffer host = gpu().allocate_host(static_cast<size_t>(rounds * n) * sizeof(float));
  CHECK(host.device() == Device::CPU);
  gpu().copy_async(device.view(0, DType::F32, {rounds * n}), Tensor(host.data(), DType::F32, {rounds * n}));
  gpu().synchronize();
  const auto* landed = static_cast<const float*>(host.data());
  for (int64_t i = 0; i < rounds * n; ++i) REQUIRE(landed[i] == static_cast<float>(i));
  // An upload too large for a slot takes the waiting path, with the same result.
  std::vector<float> large(size_t{1} << 19, 3.0f);  // 2 MiB
  Buffer large_device = gpu().allocate(large.size() * sizeof(float));
  const int64_t count = static_cast<int64_t>(large.size());
  gpu().copy(Tensor(large.data(), DType::F32, {count}), large_device.view(0, DType::F32, {count}));
  std::vector<float> back(large.size());
  gpu().copy(large_device.view(0, DType::F32, {count}), Tensor(back.data(), DType::F32, {count}));
  CHECK(back == large);
  Mirrored wrong({7}, DType::F32);
  CHECK_THROWS_AS(gpu().copy_async(device.view(0, DType::F32, {8}), Tensor(host.data(), DType::F32, {7})),
                  std::invalid_argument);
}
