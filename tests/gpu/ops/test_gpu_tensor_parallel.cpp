// GPU ops of tensor parallelism against the CPU backend in every float type: the row-parallel
// bias, the vocab-parallel embedding (ids inside and outside the slice, with and without
// positions, host and device ids, packed and unpacked rows) and the three passes of the
// vocab-parallel cross-entropy (a slice in the middle, one holding padding, one with no real
// column), whose composition over 2 and 4 slices reproduces the fused softmax cross-entropy;
// determinism, argument checks and the out-of-range token and target errors.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

#include "gpu_test_util.h"

using namespace strata;
using namespace strata::gpu_test;

namespace {
const DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16};

// The columns [first, first + count) of every row of a (rows, cols) tensor's values.
std::vector<float> columns(const std::vector<float>& all, int64_t cols, int64_t first, int64_t count) {
  std::vector<float> out;
  for (size_t r = 0; r < all.size() / static_cast<size_t>(cols); ++r) {
    const auto row = all.begin() + static_cast<int64_t>(r) * cols;
    out.insert(out.end(), row + first, row + first + count);
  }
  return out;
}

Tensor or_none(bool present, const Tensor& t) { return present ? t : Tensor(); }
}  // namespace

TEST_CASE("gpu: add_bias adds the bias to every row like the CPU") {
  for (DType dtype : kFloatTypes) {
    // The bias in out's dtype, or in fp32: the CUDA op reads any float type.
    for (DType bias_type : {dtype, DType::F32}) {
      for (int64_t n : {int64_t{96}, int64_t{97}}) {
        Mirrored out({77, n}, dtype), bias({n}, bias_type);
        out.randomize(1);
        bias.randomize(2);
        cpu().add_bias(out.cpu_tensor, bias.cpu_tensor);
        gpu().add_bias(out.gpu_tensor, bias.gpu_tensor);
        INFO(dtype_name(dtype) << " out, " << dtype_name(bias_type) << " bias, N = " << n);
        CHECK(out.gpu_values() == out.cpu_values());  // one rounding of the same fp32 sum
      }
    }
  }
  Mirrored out({4, 8}, DType::F32), bias({8}, DType::F32), short_bias({7}, DType::F32);
  CHECK_THROWS_AS(gpu().add_bias(out.gpu_tensor, short_bias.gpu_tensor), std::invalid_argument);
  CHECK_THROWS_AS(gpu().add_bias(out.gpu_tensor, bias.cpu_tensor), std::invalid_argument);
}

TEST_CASE("gpu: the vocab-parallel embedding embeds its slice's ids and zeros for the others") {
  const int64_t B = 3, T = 40, rows = 16;
  const int V = 50;
  for (DType dtype : kFloatTypes) {
    for (int64_t C : {int64_t{64}, int64_t{37}}) {  // 37: rows not a whole number of 16-byte packs
      for (int64_t start : {int64_t{0}, int64_t{16}, int64_t{48}}) {  // the last slice holds padding rows too
        for (bool positions : {true, false}) {
          // Gradients in fp32 (mixed precision's accumulation buffers) or in the activations' dtype.
          const DType grad_type = positions ? DType::F32 : dtype;
          Mirrored tokens({B, T}, DType::I32), wte({rows, C}, dtype), wpe({T, C}, dtype), out({B, T, C}, dtype);
          Mirrored dout({B, T, C}, dtype), dwte({rows, C}, grad_type), dwpe({T, C}, grad_type);
          tokens.randomize(11, 1.0f, V);
          wte.randomize(12);
          wpe.randomize(13);
          out.randomize(14);
          dout.randomize(15);
          dwte.randomize(16);
          dwpe.randomize(17);
          INFO(dtype_name(dtype) << " C " << C << " slice at " << start
                                 << (positions ? " with positions" : " without positions"));
          cpu().embedding_forward(out.cpu_tensor, tokens.cpu_tensor, wte.cpu_tensor,
                                  or_none(positions, wpe.cpu_tensor), start, V);
          gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor,
                                  or_none(positions, wpe.gpu_tensor), start, V);
          CHECK(out.gpu_values() == out.cpu_values());  // one rounding of the same fp32 sum
          gpu().embedding_forward(out.gpu_tensor, tokens.cpu_tensor, wte.gpu_tensor,
                                  or_none(positions, wpe.gpu_tensor), start, V);  // host ids
          CHECK(out.gpu_values() == out.cpu_values());

          const std::vector<float> dwte_before = dwte.cpu_values(), dwpe_before = dwpe.cpu_values();
          cpu().embedding_backward(dwte.cpu_tensor, or_none(positions, dwpe.cpu_tensor), dout.cpu_tensor,
                                   tokens.cpu_tensor, start, V);
          gpu().embedding_backward(dwte.gpu_tensor, or_none(positions, dwpe.gpu_tensor), dout.gpu_tensor,
                                   tokens.gpu_tensor, start, V);
          CHECK(dwte.gpu_values() == dwte.cpu_values());  // the same additions in the same order
          CHECK(dwpe.gpu_values() == dwpe.cpu_values());  // untouched without positions
          // Again from the same gradients with host ids: the same bits (host ids, and determinism).
          const auto dwte_bits = dwte.gpu_bytes(), dwpe_bits = dwpe.gpu_bytes();
          dwte.set(dwte_before);
          dwpe.set(dwpe_before);
          gpu().embedding_backward(dwte.gpu_tensor, or_none(positions, dwpe.gpu_tensor), dout.gpu_tensor,
                                   tokens.cpu_tensor, start, V);
          CHECK(dwte.gpu_bytes() == dwte_bits);
          CHECK(dwpe.gpu_bytes() == dwpe_bits);
        }
      }
    }
  }
  // Rows [8, 16) of a 24-id vocabulary: every row whose id is outside the slice (below, above)
  // is exactly its position embedding, or zero without positions.
  const int vocab = 24;
  Mirrored tokens({1, 5}, DType::I32), wte({8, 16}, DType::BF16), wpe({5, 16}, DType::BF16);
  Mirrored out({1, 5, 16}, DType::BF16);
  tokens.set_ints({0, 9, 7, 23, 16});
  wte.randomize(21);
  wpe.randomize(22);
  gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 8, vocab);
  std::vector<float> got = out.gpu_values();
  const std::vector<float> positions = wpe.cpu_values(), table = wte.cpu_values();
  for (size_t t : {size_t{0}, size_t{2}, size_t{3}, size_t{4}})
    for (size_t c = 0; c < 16; ++c) CHECK(got[t * 16 + c] == positions[t * 16 + c]);
  gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, Tensor(), 8, vocab);
  got = out.gpu_values();
  for (size_t c = 0; c < 16; ++c) {
    CHECK(got[16 + c] == table[16 + c]);  // id 9 is the slice's row 1
    for (size_t t : {size_t{0}, size_t{2}, size_t{3}, size_t{4}}) CHECK(got[t * 16 + c] == 0.0f);
  }

  // Ids outside the vocabulary are the user's errors under a slice too: device ids at the next
  // wait (the first bad row), host ids at once.
  tokens.set_ints({0, 9, 7, 100, -3});
  gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 8, vocab);
  CHECK_THROWS_WITH(gpu().synchronize(), strata_catch::Contains("token id 100 at batch row 0, position 3"));
  CHECK_THROWS_AS(gpu().embedding_forward(out.gpu_tensor, tokens.cpu_tensor, wte.gpu_tensor, Tensor(), 8, vocab),
                  UserError);
  CHECK_NOTHROW(gpu().synchronize());

  // Argument checks: host tables, mixed dtypes, too few positions, a negative start, no vocabulary.
  Mirrored wpe_f32({5, 16}, DType::F32), short_wpe({4, 16}, DType::BF16);
  CHECK_THROWS_AS(gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.cpu_tensor, Tensor(), 8, vocab),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, wpe_f32.gpu_tensor, 8, vocab),
      std::invalid_argument);
  CHECK_THROWS_AS(
      gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, short_wpe.gpu_tensor, 8, vocab),
      std::invalid_argument);
  CHECK_THROWS_AS(gpu().embedding_backward(wte.gpu_tensor, Tensor(), out.gpu_tensor, tokens.gpu_tensor, -1, vocab),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpu().embedding_backward(wte.gpu_tensor, Tensor(), out.gpu_tensor, tokens.gpu_tensor, 8, 0),
                  std::invalid_argument);
}

TEST_CASE("gpu: the three vocab-parallel cross-entropy passes match the CPU on every kind of slice") {
  const int64_t N = 130, V = 700;
  for (DType dtype : kFloatTypes) {
    // 256 columns: rows of whole 16-byte packs; 250: element by element.
    for (int64_t slice : {int64_t{256}, int64_t{250}}) {
      // The slices at 0 and `slice` are all real, the third holds padding (188 or 200 real
      // columns), the fourth has no real column.
      for (int64_t start : {int64_t{0}, slice, 2 * slice, 3 * slice}) {
        Mirrored logits({N, slice}, dtype), targets({N}, DType::I32), row_max({N}, DType::F32),
            stats({2, N}, DType::F32);
        Mirrored losses({N}, DType::F32);
        logits.randomize(31, 3.0f);
        targets.randomize(32, 1.0f, static_cast<int32_t>(V));
        const std::string what = std::string(dtype_name(dtype)) + " width " + std::to_string(slice) + " slice at " +
                                 std::to_string(start);
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
        cpu().vocab_parallel_sum_exp(stats.cpu_tensor, logits.cpu_tensor, row_max.cpu_tensor, targets.cpu_tensor,
                                     start, static_cast<int>(V));
        gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor, targets.gpu_tensor,
                                     start, static_cast<int>(V));
        const std::vector<float> gs = stats.gpu_values(), cs = stats.cpu_values();
        if (start < V) {
          check_relative({gs.begin(), gs.begin() + N}, {cs.begin(), cs.begin() + N}, 1e-5, "sums " + what);
        } else {
          for (int64_t i = 0; i < N; ++i) REQUIRE(gs[static_cast<size_t>(i)] == 0.0f);
        }
        CHECK(std::vector<float>(gs.begin() + N, gs.end()) == std::vector<float>(cs.begin() + N, cs.end()));
        const auto stats_bits = stats.gpu_bytes();
        gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor, targets.cpu_tensor,
                                     start, static_cast<int>(V));  // host targets
        CHECK(stats.gpu_bytes() == stats_bits);

        // Pass 3 on the CPU's statistics, so that only this pass is compared.
        std::vector<float> sums = stats.cpu_values();
        for (int64_t i = 0; i < N; ++i) sums[static_cast<size_t>(i)] += 1.0f;  // other slices' share: a positive sum
        stats.set(sums);
        const std::vector<float> logits_before = logits.cpu_values();
        // Losses only: the logits stay as they are.
        cpu().vocab_parallel_cross_entropy(logits.cpu_tensor, losses.cpu_tensor, targets.cpu_tensor,
                                           row_max.cpu_tensor, stats.cpu_tensor, start, static_cast<int>(V), false,
                                           1.0f);
        gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor,
                                           row_max.gpu_tensor, stats.gpu_tensor, start, static_cast<int>(V), false,
                                           1.0f);
        check_relative(losses.gpu_values(), losses.cpu_values(), 1e-5, "losses alone " + what);
        CHECK(logits.gpu_values() == logits_before);
        cpu().vocab_parallel_cross_entropy(logits.cpu_tensor, losses.cpu_tensor, targets.cpu_tensor,
                                           row_max.cpu_tensor, stats.cpu_tensor, start, static_cast<int>(V), true,
                                           0.25f);
        gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor,
                                           row_max.gpu_tensor, stats.gpu_tensor, start, static_cast<int>(V), true,
                                           0.25f);
        check_relative(losses.gpu_values(), losses.cpu_values(), 1e-5, "losses " + what);
        const std::vector<float> dl = logits.gpu_values();
        if (start < V) check_output(dl, logits.cpu_values(), dtype, kRoundedOnceUlps, "dlogits " + what);
        const int64_t real = std::clamp<int64_t>(V - start, 0, slice);
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = real; j < slice; ++j) REQUIRE(dl[static_cast<size_t>(i * slice + j)] == 0.0f);
        // Again with host targets: the same bits.
        const auto dlogits_bits = logits.gpu_bytes(), losses_bits = losses.gpu_bytes();
        logits.set(logits_before);
        gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.cpu_tensor,
                                           row_max.gpu_tensor, stats.gpu_tensor, start, static_cast<int>(V), true,
                                           0.25f);
        CHECK(logits.gpu_bytes() == dlogits_bits);
        CHECK(losses.gpu_bytes() == losses_bits);
      }
    }
  }
}

TEST_CASE("gpu: vocab-parallel cross-entropy over 2 and 4 slices equals the fused cross-entropy") {
  const int64_t N = 96, Vp = 1024;
  for (DType dtype : kFloatTypes) {
    // V 700: over 4 slices the last one has no real column (its maxima are −inf, its sums 0).
    for (int64_t V : {int64_t{1000}, int64_t{700}}) {
      Mirrored whole({N, Vp}, dtype), targets({N}, DType::I32), want_losses({N}, DType::F32);
      whole.randomize(41, 4.0f);
      targets.randomize(42, 1.0f, static_cast<int32_t>(V));
      const std::vector<float> logits = whole.cpu_values();
      gpu().softmax_cross_entropy(whole.gpu_tensor, want_losses.gpu_tensor, targets.gpu_tensor, static_cast<int>(V),
                                  true, 0.5f);
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
          gpu().vocab_parallel_cross_entropy(x.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor,
                                             max_slice.gpu_tensor, stats_slice.gpu_tensor, r * width,
                                             static_cast<int>(V), true, 0.5f);
          const std::vector<float> d = x.gpu_values();
          for (int64_t i = 0; i < N; ++i)
            std::copy(d.begin() + i * width, d.begin() + (i + 1) * width, dlogits.begin() + i * Vp + r * width);
        }
        const std::string what = std::string(dtype_name(dtype)) + " V " + std::to_string(V) + " over " +
                                 std::to_string(t) + " slices";
        check_relative(losses.gpu_values(), want_losses.gpu_values(), 1e-5, "losses " + what);
        check_output(dlogits, want_dlogits, dtype, kRoundedOnceUlps, "dlogits " + what);
      }
    }
  }
}

TEST_CASE("gpu: vocab-parallel passes repeat bit for bit, and a bad target is a user error") {
  const int64_t N = 64, slice = 25152, V = 50257;  // GPT-2's vocabulary over 2 ranks, the second slice
  Mirrored logits({N, slice}, DType::BF16), targets({N}, DType::I32), row_max({N}, DType::F32);
  Mirrored stats({2, N}, DType::F32), losses({N}, DType::F32);
  logits.randomize(51, 2.0f);
  targets.randomize(52, 1.0f, static_cast<int32_t>(V));
  gpu().vocab_parallel_max(row_max.gpu_tensor, logits.gpu_tensor, slice, static_cast<int>(V));
  const auto max_bits = row_max.gpu_bytes();
  gpu().vocab_parallel_max(row_max.gpu_tensor, logits.gpu_tensor, slice, static_cast<int>(V));
  CHECK(row_max.gpu_bytes() == max_bits);
  gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor, targets.gpu_tensor, slice,
                               static_cast<int>(V));
  const auto first = stats.gpu_bytes();
  gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor, targets.gpu_tensor, slice,
                               static_cast<int>(V));
  CHECK(stats.gpu_bytes() == first);
  gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor, row_max.gpu_tensor,
                                     stats.gpu_tensor, slice, static_cast<int>(V), true, 1.0f);
  const auto dlogits = logits.gpu_bytes(), loss_bits = losses.gpu_bytes();
  logits.randomize(51, 2.0f);
  gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor, row_max.gpu_tensor,
                                     stats.gpu_tensor, slice, static_cast<int>(V), true, 1.0f);
  CHECK(logits.gpu_bytes() == dlogits);
  CHECK(losses.gpu_bytes() == loss_bits);

  // A target of vocab_size or a negative one, in device or host memory; the message names the row.
  for (int32_t wrong : {static_cast<int32_t>(V), -1}) {
    std::vector<int32_t> bad(static_cast<size_t>(N), 3);
    bad[7] = wrong;
    targets.set_ints(bad);
    INFO("target " << wrong);
    gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor, targets.gpu_tensor, slice,
                                 static_cast<int>(V));
    CHECK_THROWS_WITH(gpu().synchronize(),
                      strata_catch::Contains("target token id " + std::to_string(wrong) + " at row 7"));
    CHECK_THROWS_AS(gpu().vocab_parallel_sum_exp(stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor,
                                                 targets.cpu_tensor, slice, static_cast<int>(V)),
                    UserError);
    CHECK_THROWS_AS(gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, Tensor(), targets.cpu_tensor,
                                                       row_max.gpu_tensor, stats.gpu_tensor, slice,
                                                       static_cast<int>(V), true, 1.0f),
                    UserError);
  }

  // Argument checks: fp32 statistics of the right size, device tensors, a non-negative start.
  Mirrored max_bf16({N}, DType::BF16), short_stats({N}, DType::F32);
  targets.randomize(52, 1.0f, static_cast<int32_t>(V));
  CHECK_THROWS_AS(gpu().vocab_parallel_max(max_bf16.gpu_tensor, logits.gpu_tensor, slice, static_cast<int>(V)),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpu().vocab_parallel_max(row_max.gpu_tensor, logits.cpu_tensor, slice, static_cast<int>(V)),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpu().vocab_parallel_max(row_max.gpu_tensor, logits.gpu_tensor, -1, static_cast<int>(V)),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpu().vocab_parallel_sum_exp(short_stats.gpu_tensor, logits.gpu_tensor, row_max.gpu_tensor,
                                               targets.gpu_tensor, slice, static_cast<int>(V)),
                  std::invalid_argument);
  CHECK_THROWS_AS(gpu().vocab_parallel_cross_entropy(logits.gpu_tensor, Tensor(), targets.gpu_tensor,
                                                     row_max.gpu_tensor, short_stats.gpu_tensor, slice,
                                                     static_cast<int>(V), true, 1.0f),
                  std::invalid_argument);
}
