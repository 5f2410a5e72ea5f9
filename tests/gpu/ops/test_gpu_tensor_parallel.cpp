// GPU ops of tensor parallelism against the CPU backend: the row-parallel bias, the
// vocab-parallel embedding (ids inside and outside the slice, with and without positions, host
// and device ids) and the three passes of the vocab-parallel cross-entropy (a slice in the
// middle, one holding padding, one with no real column), whose composition over 2 and 4 slices
// reproduces the fused softmax cross-entropy; determinism and the out-of-range target error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu_test_util.h"

using namespace strata;
using namespace strata::gpu_test;

namespace {
const DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16};

// The rows [first, first + count) of a (rows, cols) Mirrored tensor's values.
std::vector<float> columns(const std::vector<float>& all, int64_t cols, int64_t first, int64_t count) {
  std::vector<float> out;
  for (size_t r = 0; r < all.size() / static_cast<size_t>(cols); ++r) {
    const auto row = all.begin() + static_cast<int64_t>(r) * cols;
    out.insert(out.end(), row + first, row + first + count);
  }
  return out;
}
}  // namespace

TEST_CASE("gpu: add_bias adds the bias to every row like the CPU") {
  for (DType dtype : kFloatTypes) {
    Mirrored out({77, 96}, dtype), bias({96}, dtype);
    out.randomize(1);
    bias.randomize(2);
    cpu().add_bias(out.cpu_tensor, bias.cpu_tensor);
    gpu().add_bias(out.gpu_tensor, bias.gpu_tensor);
    INFO(dtype_name(dtype));
    CHECK(out.gpu_values() == out.cpu_values());  // one rounding of the same fp32 sum
  }
}

TEST_CASE("gpu: the vocab-parallel embedding embeds its slice's ids and zeros for the others") {
  const int64_t B = 3, T = 40, C = 64, V = 50, rows = 16;
  for (int64_t start : {int64_t{0}, int64_t{16}, int64_t{48}}) {  // the last slice holds padding rows too
    for (bool positions : {true, false}) {
      Mirrored tokens({B, T}, DType::I32), wte({rows, C}, DType::F32), wpe({T, C}, DType::F32);
      Mirrored out({B, T, C}, DType::F32), dout({B, T, C}, DType::F32), dwte({rows, C}, DType::F32),
          dwpe({T, C}, DType::F32);
      tokens.randomize(11, 1.0f, static_cast<int32_t>(V));
      wte.randomize(12);
      wpe.randomize(13);
      out.randomize(14);
      dout.randomize(15);
      dwte.randomize(16);
      dwpe.randomize(17);
      const Tensor cp = positions ? wpe.cpu_tensor : Tensor(), gp = positions ? wpe.gpu_tensor : Tensor();
      INFO("slice at " << start << (positions ? " with positions" : " without positions"));
      cpu().embedding_forward_slice(out.cpu_tensor, tokens.cpu_tensor, wte.cpu_tensor, cp, start);
      gpu().embedding_forward_slice(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, gp, start);
      CHECK(out.gpu_values() == out.cpu_values());
      gpu().embedding_forward_slice(out.gpu_tensor, tokens.cpu_tensor, wte.gpu_tensor, gp, start);  // host ids
      CHECK(out.gpu_values() == out.cpu_values());
      const Tensor cdp = positions ? dwpe.cpu_tensor : Tensor(), gdp = positions ? dwpe.gpu_tensor : Tensor();
      cpu().embedding_backward_slice(dwte.cpu_tensor, cdp, dout.cpu_tensor, tokens.cpu_tensor, start);
      gpu().embedding_backward_slice(dwte.gpu_tensor, gdp, dout.gpu_tensor, tokens.gpu_tensor, start);
      CHECK(dwte.gpu_values() == dwte.cpu_values());  // the same additions in the same order
      CHECK(dwpe.gpu_values() == dwpe.cpu_values());
    }
  }
  // Every row outside the slice is exactly the position embedding.
  Mirrored tokens({1, 4}, DType::I32), wte({8, 16}, DType::BF16), wpe({4, 16}, DType::BF16), out({1, 4, 16}, DType::BF16);
  tokens.set_ints({0, 9, 7, 100});
  wte.randomize(21);
  wpe.randomize(22);
  gpu().embedding_forward_slice(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 8);
  const std::vector<float> got = out.gpu_values(), positions = wpe.cpu_values();
  for (int64_t c = 0; c < 16; ++c) {
    CHECK(got[static_cast<size_t>(c)] == positions[static_cast<size_t>(c)]);
    CHECK(got[static_cast<size_t>(48 + c)] == positions[static_cast<size_t>(48 + c)]);
  }
}

TEST_CASE("gpu: the three vocab-parallel cross-entropy passes match the CPU on every kind of slice") {
  const int64_t N = 130, slice = 256, V = 700;  // slices start at 0, 256, 512 (188 real) and 768 (none real)
  for (DType dtype : kFloatTypes) {
    for (int64_t start : {int64_t{0}, int64_t{256}, int64_t{512}, int64_t{768}}) {
      Mirrored logits({N, slice}, dtype), targets({N}, DType::I32), row_max({N}, DType::F32), stats({2, N}, DType::F32);
      Mirrored losses({N}, DType::F32);
      logits.randomize(31, 3.0f);
      targets.randomize(32, 1.0f, static_cast<int32_t>(V));
      const std::string what = std::string(dtype_name(dtype)) + " slice at " + std::to_string(start);
      INFO(what);
      cpu().vocab_parallel_max(row_max.cpu_tensor, logits.cpu_tensor, start, static_cast<int>(V));
      gpu().vocab_parallel_max(row_max.gpu_tensor, logits.gpu_tensor, start, static_cast<int>(V));
      CHECK(row_max.gpu_values() == row_max.cpu_values());  // a maximum is exact
      if (start >= V) {
        for (float m : row_max.gpu_values()) REQUIRE(m == -std::numeric_limits<float>::infinity());
      }
      // Pass 2 and 3 need a finite maximum: the all-reduce over slices would provide one.
      std::vector<float> global_max(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) global_max[static_cast<size_t>(i)] = 1.5f + 0.01f * static_cast<float>(i);
      row_max.set(global_max);
      cpu().vocab_parallel_sum_exp(stats.cpu_tensor, logits.cpu_tensor, row_max.cpu_tensor, targets.cpu_tensor, start,
                                   static_cast<int>(V));
      gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor, targets.gpu_tensor, start,
                                   static_cast<int>(V));
      const std::vector<float> gs = stats.gpu_values(), cs = stats.cpu_values();
      if (start < V) check_relative({gs.begin(), gs.begin() + N}, {cs.begin(), cs.begin() + N}, 1e-5, "sums " + what);
      CHECK(std::vector<float>(gs.begin() + N, gs.end()) == std::vector<float>(cs.begin() + N, cs.end()));
      // Pass 3 on the CPU's statistics, so that only this pass is compared.
      std::vector<float> sums = stats.cpu_values();
      for (int64_t i = 0; i < N; ++i) sums[static_cast<size_t>(i)] += 1.0f;  // other slices' share: a positive sum
      stats.set(sums);
      cpu().vocab_parallel_cross_entropy(logits.cpu_tensor, losses.cpu_tensor, targets.cpu_tensor, row_max.cpu_tensor,
                                         stats.cpu_tensor, start, static_cast<int>(V), true, 0.25f);
      gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor, row_max.gpu_tensor,
                                         stats.gpu_tensor, start, static_cast<int>(V), true, 0.25f);
      check_relative(losses.gpu_values(), losses.cpu_values(), 1e-5, "losses " + what);
      const std::vector<float> dl = logits.gpu_values();
      if (start < V) check_relative(dl, logits.cpu_values(), tolerance(dtype), "dlogits " + what);
      const int64_t real = std::clamp<int64_t>(V - start, 0, slice);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = real; j < slice; ++j) REQUIRE(dl[static_cast<size_t>(i * slice + j)] == 0.0f);
    }
  }
}

TEST_CASE("gpu: vocab-parallel cross-entropy over 2 and 4 slices equals the fused cross-entropy") {
  const int64_t N = 96, Vp = 1024, V = 1000;
  for (DType dtype : {DType::F32, DType::BF16}) {
    Mirrored whole({N, Vp}, dtype), targets({N}, DType::I32), want_losses({N}, DType::F32);
    whole.randomize(41, 4.0f);
    targets.randomize(42, 1.0f, static_cast<int32_t>(V));
    const std::vector<float> logits = whole.cpu_values();
    gpu().softmax_cross_entropy(whole.gpu_tensor, want_losses.gpu_tensor, targets.gpu_tensor, static_cast<int>(V), true,
                                0.5f);
    const std::vector<float> want_dlogits = whole.gpu_values();
    for (int64_t t : {int64_t{2}, int64_t{4}}) {
      const int64_t width = Vp / t;
      std::vector<std::unique_ptr<Mirrored>> slices;
      std::vector<float> row_max(static_cast<size_t>(N), -std::numeric_limits<float>::infinity());
      std::vector<float> stats(static_cast<size_t>(2 * N), 0.0f);
      Mirrored max_slice({N}, DType::F32), stats_slice({2, N}, DType::F32), losses({N}, DType::F32);
      for (int64_t r = 0; r < t; ++r) {  // pass 1, and the Max all-reduce done here
        slices.push_back(std::make_unique<Mirrored>(std::initializer_list<int64_t>{N, width}, dtype));
        slices.back()->set(columns(logits, Vp, r * width, width));
        gpu().vocab_parallel_max(max_slice.gpu_tensor, slices.back()->gpu_tensor, r * width, static_cast<int>(V));
        const std::vector<float> m = max_slice.gpu_values();
        for (size_t i = 0; i < m.size(); ++i) row_max[i] = std::max(row_max[i], m[i]);
      }
      max_slice.set(row_max);
      for (int64_t r = 0; r < t; ++r) {  // pass 2, and the Sum all-reduce
        gpu().vocab_parallel_sum_exp(stats_slice.gpu_tensor, slices[static_cast<size_t>(r)]->gpu_tensor,
                                     max_slice.gpu_tensor, targets.gpu_tensor, r * width, static_cast<int>(V));
        const std::vector<float> s = stats_slice.gpu_values();
        for (size_t i = 0; i < s.size(); ++i) stats[i] += s[i];
      }
      stats_slice.set(stats);
      std::vector<float> dlogits(static_cast<size_t>(N * Vp));
      for (int64_t r = 0; r < t; ++r) {  // pass 3
        Mirrored& x = *slices[static_cast<size_t>(r)];
        gpu().vocab_parallel_cross_entropy(x.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor, max_slice.gpu_tensor,
                                           stats_slice.gpu_tensor, r * width, static_cast<int>(V), true, 0.5f);
        const std::vector<float> d = x.gpu_values();
        for (int64_t i = 0; i < N; ++i)
          std::copy(d.begin() + i * width, d.begin() + (i + 1) * width, dlogits.begin() + i * Vp + r * width);
      }
      const std::string what = std::string(dtype_name(dtype)) + " over " + std::to_string(t) + " slices";
      check_relative(losses.gpu_values(), want_losses.gpu_values(), 1e-5, "losses " + what);
      check_relative(dlogits, want_dlogits, tolerance(dtype), "dlogits " + what);
    }
  }
}

TEST_CASE("gpu: vocab-parallel passes repeat bit for bit, and a bad target is a user error") {
  const int64_t N = 64, slice = 25152, V = 50257;  // GPT-2's vocabulary over 2 ranks, the second slice
  Mirrored logits({N, slice}, DType::BF16), targets({N}, DType::I32), row_max({N}, DType::F32), stats({2, N}, DType::F32);
  logits.randomize(51, 2.0f);
  targets.randomize(52, 1.0f, static_cast<int32_t>(V));
  gpu().vocab_parallel_max(row_max.gpu_tensor, logits.gpu_tensor, slice, static_cast<int>(V));
  gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor, targets.gpu_tensor, slice,
                               static_cast<int>(V));
  const auto first = stats.gpu_bytes();
  gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor, targets.gpu_tensor, slice,
                               static_cast<int>(V));
  CHECK(stats.gpu_bytes() == first);
  gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, Tensor(), targets.gpu_tensor, row_max.gpu_tensor,
                                     stats.gpu_tensor, slice, static_cast<int>(V), true, 1.0f);
  const auto dlogits = logits.gpu_bytes();
  logits.randomize(51, 2.0f);
  gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, Tensor(), targets.gpu_tensor, row_max.gpu_tensor,
                                     stats.gpu_tensor, slice, static_cast<int>(V), true, 1.0f);
  CHECK(logits.gpu_bytes() == dlogits);

  std::vector<int32_t> bad(static_cast<size_t>(N), 3);
  bad[7] = static_cast<int32_t>(V);
  targets.set_ints(bad);
  CHECK_THROWS_WITH(gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor,
                                                 targets.gpu_tensor, slice, static_cast<int>(V)),
                    Catch::Contains("target token id 50257 at row 7"));
  CHECK_THROWS_AS(gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor,
                                               targets.cpu_tensor, slice, static_cast<int>(V)),
                  UserError);
}
