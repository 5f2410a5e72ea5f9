// GPU flash attention against the CPU backend's explicit T×T attention: forward output and lse,
// backward dqkv from the same saved tensors, for T = 64, 128, 1024 with head dims 64 and 128,
// generic head dims and ragged T, in fp32 and bf16; the backward must repeat bit for bit.
#include <catch2/catch.hpp>

#include "gpu_test_util.h"

using namespace strata;
using namespace strata::gpu_test;

namespace {

struct Case {
  int64_t batch, seq, heads, head_dim;
};

void check_attention(const Case& c, DType dtype) {
  const int64_t C = c.heads * c.head_dim;
  const std::string what = std::string(dtype_name(dtype)) + " B=" + std::to_string(c.batch) + " T=" +
                           std::to_string(c.seq) + " NH=" + std::to_string(c.heads) + " hd=" + std::to_string(c.head_dim);
  Mirrored qkv({c.batch, c.seq, 3 * C}, dtype), out({c.batch, c.seq, C}, dtype), lse({c.batch, c.heads, c.seq}, DType::F32);
  Mirrored dout({c.batch, c.seq, C}, dtype), dqkv({c.batch, c.seq, 3 * C}, dtype);
  qkv.randomize(static_cast<uint64_t>(c.seq * 131 + c.head_dim), 1.5f);
  dout.randomize(static_cast<uint64_t>(c.seq * 137 + c.head_dim));
  const int nh = static_cast<int>(c.heads);

  cpu().attention_forward(out.cpu_tensor, lse.cpu_tensor, qkv.cpu_tensor, nh);
  gpu().attention_forward(out.gpu_tensor, lse.gpu_tensor, qkv.gpu_tensor, nh);
  check_relative(out.gpu_values(), out.cpu_values(), tolerance(dtype), "attention out " + what);
  check_relative(lse.gpu_values(), lse.cpu_values(), 1e-5, "attention lse " + what);

  // The backward reads the CPU's forward results on both sides, so it is judged alone.
  out.sync_to_gpu();
  lse.sync_to_gpu();
  cpu().attention_backward(dqkv.cpu_tensor, dout.cpu_tensor, qkv.cpu_tensor, out.cpu_tensor, lse.cpu_tensor, nh);
  gpu().attention_backward(dqkv.gpu_tensor, dout.gpu_tensor, qkv.gpu_tensor, out.gpu_tensor, lse.gpu_tensor, nh);
  const std::vector<float> got = dqkv.gpu_values(), expected = dqkv.cpu_values();
  // q, k and v gradients have different magnitudes: judge each third on its own scale.
  for (int part = 0; part < 3; ++part) {
    std::vector<float> g, e;
    for (int64_t row = 0; row < c.batch * c.seq; ++row)
      for (int64_t j = 0; j < C; ++j) {
        const size_t at = static_cast<size_t>(row * 3 * C + part * C + j);
        g.push_back(got[at]);
        e.push_back(expected[at]);
      }
    check_relative(g, e, tolerance(dtype), std::string("attention d") + "qkv"[part] + " " + what);
  }
  const auto first = dqkv.gpu_bytes();
  gpu().zero(dqkv.gpu_tensor);
  gpu().attention_backward(dqkv.gpu_tensor, dout.gpu_tensor, qkv.gpu_tensor, out.gpu_tensor, lse.gpu_tensor, nh);
  CHECK(dqkv.gpu_bytes() == first);
}

}  // namespace

TEST_CASE("gpu: attention at T = 64, 128 and 1024 with head dims 64 and 128") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t seq : {64, 128, 1024}) {
      for (int64_t head_dim : {64, 128}) {
        const int64_t batch = seq == 1024 ? 1 : 2;
        check_attention({batch, seq, 2, head_dim}, dtype);
      }
    }
  }
}

TEST_CASE("gpu: attention with generic head dims and a sequence length that is not a tile multiple") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    check_attention({2, 100, 3, 48}, dtype);
    check_attention({1, 200, 2, 80}, dtype);
    check_attention({3, 1, 2, 16}, dtype);
  }
}

TEST_CASE("gpu: attention rejects head dims the kernels do not cover") {
  Mirrored qkv({1, 8, 3 * 24}, DType::F32), out({1, 8, 24}, DType::F32), lse({1, 1, 8}, DType::F32);
  CHECK_THROWS_AS(gpu().attention_forward(out.gpu_tensor, lse.gpu_tensor, qkv.gpu_tensor, 1), std::invalid_argument);
}
