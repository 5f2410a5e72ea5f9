// The layernorm forward, plain and with the residual add fused, against the CPU backend: every word
// count the one-pass kernels (rows held in registers) are built for, rows that take the scalar
// kernels (widths that are no whole number of 16-byte words, misaligned tensors, rows too wide),
// every type, residual in place.
#include "catch_compat.h"

#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "layernorm.cuh"

using namespace strata;
using namespace strata::gpu_test;

namespace {

struct Shape {
  int64_t rows, cols;
};

constexpr DType kAllTypes[] = {DType::F32, DType::BF16, DType::F16};

std::string label(DType dtype, Shape s) {
  return std::string(dtype_name(dtype)) + " rows=" + std::to_string(s.rows) + " cols=" + std::to_string(s.cols);
}

// The GPU's out/mean/rstd against the CPU's (the existing bounds: output rounded once, statistics
// within 1e-5), then the same call again must give the same bits.
void check_forward(Shape s, DType dtype, const std::vector<float>& inputs, uint64_t seed) {
  Mirrored inp({s.rows, s.cols}, dtype), w({s.cols}, dtype), b({s.cols}, dtype), out({s.rows, s.cols}, dtype);
  Mirrored mean({s.rows}, DType::F32), rstd({s.rows}, DType::F32);
  inp.set(inputs);
  w.randomize(seed + 1);
  b.randomize(seed + 2);
  const std::string what = label(dtype, s);
  cpu().layernorm_forward(out.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor, inp.cpu_tensor, w.cpu_tensor, b.cpu_tensor);
  gpu().layernorm_forward(out.gpu_tensor, mean.gpu_tensor, rstd.gpu_tensor, inp.gpu_tensor, w.gpu_tensor, b.gpu_tensor);
  check_output(out.gpu_values(), out.cpu_values(), dtype, kRoundedOnceUlps, "layernorm out " + what);
  check_relative(mean.gpu_values(), mean.cpu_values(), 1e-5, "layernorm mean " + what);
  check_relative(rstd.gpu_values(), rstd.cpu_values(), 1e-5, "layernorm rstd " + what);
  const auto out1 = out.gpu_bytes(), mean1 = mean.gpu_bytes(), rstd1 = rstd.gpu_bytes();
  gpu().layernorm_forward(out.gpu_tensor, mean.gpu_tensor, rstd.gpu_tensor, inp.gpu_tensor, w.gpu_tensor, b.gpu_tensor);
  INFO("repeat of " << what);
  CHECK(out.gpu_bytes() == out1);
  CHECK(mean.gpu_bytes() == mean1);
  CHECK(rstd.gpu_bytes() == rstd1);
}

std::vector<float> normal_values(int64_t n, float scale, uint64_t seed) {
  Mirrored m({n}, DType::F32);
  m.randomize(seed, scale);
  return m.cpu_values();
}

// residual = a + b, then the layernorm of the rounded sum, against the CPU; the unfused GPU
// forward of that residual must give the same bits (the model's recomputation relies on it), and
// so must the fused call with the residual written over a, then over b.
void check_residual(Shape s, DType dtype, uint64_t seed) {
  Mirrored a({s.rows, s.cols}, dtype), b({s.rows, s.cols}, dtype), w({s.cols}, dtype), bias({s.cols}, dtype);
  Mirrored residual({s.rows, s.cols}, dtype), out({s.rows, s.cols}, dtype);
  Mirrored mean({s.rows}, DType::F32), rstd({s.rows}, DType::F32);
  a.randomize(seed, 2.0f);
  b.randomize(seed + 1);
  w.randomize(seed + 2);
  bias.randomize(seed + 3);
  const std::string what = label(dtype, s);
  cpu().residual_layernorm_forward(residual.cpu_tensor, out.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor, a.cpu_tensor,
                                   b.cpu_tensor, w.cpu_tensor, bias.cpu_tensor);
  gpu().residual_layernorm_forward(residual.gpu_tensor, out.gpu_tensor, mean.gpu_tensor, rstd.gpu_tensor, a.gpu_tensor,
                                   b.gpu_tensor, w.gpu_tensor, bias.gpu_tensor);
  INFO(what);
  CHECK(residual.gpu_values() == residual.cpu_values());  // one rounded add on both sides
  check_output(out.gpu_values(), out.cpu_values(), dtype, kRoundedOnceUlps, "residual layernorm out " + what);
  check_relative(mean.gpu_values(), mean.cpu_values(), 1e-5, "residual layernorm mean " + what);
  check_relative(rstd.gpu_values(), rstd.cpu_values(), 1e-5, "residual layernorm rstd " + what);
  Mirrored out2({s.rows, s.cols}, dtype), mean2({s.rows}, DType::F32), rstd2({s.rows}, DType::F32);
  gpu().layernorm_forward(out2.gpu_tensor, mean2.gpu_tensor, rstd2.gpu_tensor, residual.gpu_tensor, w.gpu_tensor,
                          bias.gpu_tensor);
  CHECK(out2.gpu_bytes() == out.gpu_bytes());
  CHECK(mean2.gpu_bytes() == mean.gpu_bytes());
  CHECK(rstd2.gpu_bytes() == rstd.gpu_bytes());
  for (const bool over_a : {true, false}) {
    Mirrored a2({s.rows, s.cols}, dtype), b2({s.rows, s.cols}, dtype), out3({s.rows, s.cols}, dtype);
    a2.set(a.cpu_values());
    b2.set(b.cpu_values());
    Mirrored& in_place = over_a ? a2 : b2;
    gpu().residual_layernorm_forward(in_place.gpu_tensor, out3.gpu_tensor, mean2.gpu_tensor, rstd2.gpu_tensor,
                                     a2.gpu_tensor, b2.gpu_tensor, w.gpu_tensor, bias.gpu_tensor);
    INFO("residual written over " << (over_a ? "a" : "b"));
    CHECK(in_place.gpu_bytes() == residual.gpu_bytes());
    CHECK(out3.gpu_bytes() == out.gpu_bytes());
    CHECK(rstd2.gpu_bytes() == rstd.gpu_bytes());
  }
}

}  // namespace

TEST_CASE("gpu: layernorm forward's one-pass kernel holds rows up to 16 words per lane") {
  // 16-byte words per lane, rounded up to a compiled count; 0: the scalar kernel.
  CHECK(cuda::layernorm_forward_words(768, 2) == 4);    // GPT-2 124M bf16: 96 words, 3 per lane
  CHECK(cuda::layernorm_forward_words(768, 4) == 8);    // fp32: 6 per lane
  CHECK(cuda::layernorm_forward_words(1600, 2) == 8);   // GPT-2 1558M bf16: 200 words, 6 or 7 per lane
  CHECK(cuda::layernorm_forward_words(1600, 4) == 16);  // fp32: 12 or 13 per lane
  CHECK(cuda::layernorm_forward_words(8, 2) == 2);      // one word: lane 0 alone
  CHECK(cuda::layernorm_forward_words(100, 4) == 2);    // fp32 rows of 25 words
  CHECK(cuda::layernorm_forward_words(4096, 2) == 16);
  CHECK(cuda::layernorm_forward_words(100, 2) == 0);  // 200 bytes: no whole 16-byte words
  CHECK(cuda::layernorm_forward_words(771, 4) == 0);
  CHECK(cuda::layernorm_forward_words(4104, 2) == 0);  // wider than 16 words per lane
  CHECK(cuda::layernorm_forward_words(2056, 4) == 0);
}

TEST_CASE("gpu: layernorm forward matches the CPU, every type and word count") {
  // 1031 rows: not a multiple of the 8 rows per block. 768 and 1600 columns: GPT-2 124M and
  // 1558M (4 and 8 words per lane in 16 bits, 8 and 16 in fp32); 100 and 771: the scalar
  // fallback in 16 bits (fp32 rows of 100 are 25 whole words); 8: one word; 4096: 16 words in
  // 16 bits, the fallback in fp32.
  const Shape shapes[] = {{1031, 768}, {37, 1600}, {9, 100}, {5, 771}, {3, 8}, {2, 4096}};
  for (const Shape s : shapes) {
    for (const DType dtype : kAllTypes) {
      const std::vector<float> inputs = normal_values(s.rows * s.cols, 3.0f, 61 + static_cast<uint64_t>(s.cols));
      check_forward(s, dtype, inputs, 62);
    }
  }
}

TEST_CASE("gpu: layernorm forward keeps double two-pass statistics for rows far from zero") {
  // fp32 rows of mean 1000 and standard deviation 0.01: Σ(x − mean)² over a row is about 0.08,
  // where one-pass fp32 statistics (Σx² − (Σx)² / n, with Σx² near 7.7e8 and its ulp 64) would
  // keep no digit of it.
  const Shape s{67, 768};
  std::vector<float> inputs = normal_values(s.rows * s.cols, 0.01f, 71);
  for (float& v : inputs) v += 1000.0f;
  check_forward(s, DType::F32, inputs, 72);
}

TEST_CASE("gpu: layernorm forward on misaligned tensors takes the scalar kernel and matches the CPU") {
  const int64_t n = 19, c = 768;
  for (const DType dtype : {DType::F32, DType::BF16}) {
    Mirrored inp({n * c + 1}, dtype), out({n * c + 1}, dtype), w({c}, dtype), b({c}, dtype);
    Mirrored mean({n}, DType::F32), rstd({n}, DType::F32);
    inp.randomize(81, 3.0f);
    w.randomize(82);
    b.randomize(83);
    cpu().layernorm_forward(shifted_view(out.cpu_tensor, {n, c}), mean.cpu_tensor, rstd.cpu_tensor,
                            shifted_view(inp.cpu_tensor, {n, c}), w.cpu_tensor, b.cpu_tensor);
    gpu().layernorm_forward(shifted_view(out.gpu_tensor, {n, c}), mean.gpu_tensor, rstd.gpu_tensor,
                            shifted_view(inp.gpu_tensor, {n, c}), w.gpu_tensor, b.gpu_tensor);
    const std::string what = label(dtype, {n, c}) + ", misaligned";
    const auto got = out.gpu_values(), want = out.cpu_values();
    check_output(std::vector<float>(got.begin() + 1, got.end()), std::vector<float>(want.begin() + 1, want.end()),
                 dtype, kRoundedOnceUlps, "layernorm out " + what);
    check_relative(rstd.gpu_values(), rstd.cpu_values(), 1e-5, "layernorm rstd " + what);
  }
}

TEST_CASE("gpu: residual layernorm forward matches the CPU, in place over a or b") {
  const Shape shapes[] = {{1031, 768}, {37, 1600}, {9, 100}};
  for (const Shape s : shapes) {
    for (const DType dtype : kAllTypes) check_residual(s, dtype, 90 + static_cast<uint64_t>(s.cols));
  }
}
