// GPU flash attention against the CPU backend's explicit T×T attention: forward output and lse,
// backward dqkv from the same saved tensors, in fp32, bf16 and fp16 at head dims 64 and 128 (the
// tensor-core kernels for 16-bit types) with T on and off the 64-row tile grid, generic head dims
// and misaligned tensors (the fp32 kernels); forward and backward must repeat bit for bit.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>

#include "attention.cuh"
#include "gpu_test_util.h"

using namespace strata;
using namespace strata::gpu_test;

namespace {

struct Case {
  int64_t batch, seq, heads, head_dim;
};

cuda::ElemType elem_type(DType dtype) {
  return dtype == DType::BF16 ? cuda::ElemType::BF16 : dtype == DType::F16 ? cuda::ElemType::F16 : cuda::ElemType::F32;
}

// Whether the launchers route this case to the tensor-core kernels (the test tensors are aligned).
bool takes_tensor_cores(DType dtype, int64_t head_dim) {
  return cuda::attention_uses_tensor_cores(elem_type(dtype), head_dim, true);
}

// bf16 operands rounded once (no hi/lo split) err by up to 2⁻⁹ per probability, which sums to a
// few percent of a typical element over a thousand keys; see AttentionBf16Operands.
double attention_ulps(DType dtype, int64_t head_dim, AttentionProbabilities operands) {
  if (dtype == DType::BF16 && takes_tensor_cores(dtype, head_dim) && operands == AttentionProbabilities::Rounded)
    return kAttentionRoundedOperandsUlps;
  if (!takes_tensor_cores(dtype, head_dim)) return kRoundedOnceUlps;  // the fp32 kernels
  return dtype == DType::F16 ? kAttentionF16Ulps : kAttentionBf16Ulps;
}

// Sets the backend's bf16 attention operands for one scope (the other tests expect Split).
class Bf16OperandsScope {
 public:
  explicit Bf16OperandsScope(AttentionProbabilities operands) { gpu().set_attention_probabilities(operands); }
  ~Bf16OperandsScope() { gpu().set_attention_probabilities(AttentionProbabilities::Split); }
  Bf16OperandsScope(const Bf16OperandsScope&) = delete;
  Bf16OperandsScope& operator=(const Bf16OperandsScope&) = delete;
};

std::string describe(const Case& c, DType dtype) {
  return std::string(dtype_name(dtype)) + " B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) +
         " NH=" + std::to_string(c.heads) + " hd=" + std::to_string(c.head_dim) +
         (takes_tensor_cores(dtype, c.head_dim) ? " (tensor cores)" : " (fp32 kernels)");
}

// Compares the q, k and v thirds of dqkv (B, T, 3C) separately: their magnitudes differ. With
// T = 1 the softmax has one input, so dq and dk are zero and both sides hold only rounding
// noise of dP − rowsum(dO ∘ O); there they must stay far below the size of dv.
void check_dqkv(const std::vector<float>& got, const std::vector<float>& expected, int64_t batch, int64_t seq,
                int64_t C, DType dtype, double max_ulps, const std::string& what) {
  std::vector<float> g[3], e[3];
  for (int64_t row = 0; row < batch * seq; ++row)
    for (int part = 0; part < 3; ++part)
      for (int64_t j = 0; j < C; ++j) {
        const size_t at = static_cast<size_t>(row * 3 * C + part * C + j);
        g[part].push_back(got[at]);
        e[part].push_back(expected[at]);
      }
  check_output(g[2], e[2], dtype, max_ulps, "attention dv " + what);
  if (seq > 1) {
    check_output(g[0], e[0], dtype, max_ulps, "attention dq " + what);
    check_output(g[1], e[1], dtype, max_ulps, "attention dk " + what);
    return;
  }
  double mean_dv = 0.0, largest = 0.0;
  for (float v : e[2]) mean_dv += std::abs(static_cast<double>(v));
  mean_dv /= static_cast<double>(e[2].size());
  for (int part = 0; part < 2; ++part)
    for (float v : g[part]) largest = std::max(largest, std::abs(static_cast<double>(v)));
  INFO("attention dq, dk at T = 1 " << what << ": largest " << largest << ", mean |dv| " << mean_dv);
  CHECK(largest <= 1e-3 * mean_dv);
}

void check_attention(const Case& c, DType dtype, AttentionProbabilities operands = AttentionProbabilities::Split) {
  const Bf16OperandsScope scope(operands);
  const int64_t C = c.heads * c.head_dim;
  const std::string what = describe(c, dtype) + (operands == AttentionProbabilities::Rounded ? " rounded" : "");
  const double max_ulps = attention_ulps(dtype, c.head_dim, operands);
  Mirrored qkv({c.batch, c.seq, 3 * C}, dtype), out({c.batch, c.seq, C}, dtype), lse({c.batch, c.heads, c.seq}, DType::F32);
  Mirrored dout({c.batch, c.seq, C}, dtype), dqkv({c.batch, c.seq, 3 * C}, dtype);
  qkv.randomize(static_cast<uint64_t>(c.seq * 131 + c.head_dim + c.heads), 1.5f);
  dout.randomize(static_cast<uint64_t>(c.seq * 137 + c.head_dim + c.heads));
  const int nh = static_cast<int>(c.heads);

  cpu().attention_forward(out.cpu_tensor, lse.cpu_tensor, qkv.cpu_tensor, nh);
  gpu().attention_forward(out.gpu_tensor, lse.gpu_tensor, qkv.gpu_tensor, nh);
  check_output(out.gpu_values(), out.cpu_values(), dtype, max_ulps, "attention out " + what);
  check_relative(lse.gpu_values(), lse.cpu_values(), 1e-5, "attention lse " + what);
  const auto out_bytes = out.gpu_bytes(), lse_bytes = lse.gpu_bytes();
  gpu().zero(out.gpu_tensor);
  gpu().attention_forward(out.gpu_tensor, lse.gpu_tensor, qkv.gpu_tensor, nh);
  CHECK(out.gpu_bytes() == out_bytes);
  CHECK(lse.gpu_bytes() == lse_bytes);

  // The backward reads the CPU's forward results on both sides, so it is judged alone.
  out.sync_to_gpu();
  lse.sync_to_gpu();
  cpu().attention_backward(dqkv.cpu_tensor, dout.cpu_tensor, qkv.cpu_tensor, out.cpu_tensor, lse.cpu_tensor, nh);
  gpu().attention_backward(dqkv.gpu_tensor, dout.gpu_tensor, qkv.gpu_tensor, out.gpu_tensor, lse.gpu_tensor, nh);
  check_dqkv(dqkv.gpu_values(), dqkv.cpu_values(), c.batch, c.seq, C, dtype, max_ulps, what);
  const auto first = dqkv.gpu_bytes();
  gpu().zero(dqkv.gpu_tensor);
  gpu().attention_backward(dqkv.gpu_tensor, dout.gpu_tensor, qkv.gpu_tensor, out.gpu_tensor, lse.gpu_tensor, nh);
  CHECK(dqkv.gpu_bytes() == first);
}

std::vector<float> device_values(const Tensor& t) {
  std::vector<uint8_t> bytes(t.bytes());
  Tensor host = t;
  host.data = bytes.data();
  host.device = Device::CPU;
  gpu().copy(t, host);
  std::vector<float> values(static_cast<size_t>(t.numel()));
  convert_elements(bytes.data(), t.dtype, values.data(), DType::F32, values.size());
  return values;
}

}  // namespace

TEST_CASE("gpu: attention at head dims 64 and 128 for T on and off the tile grid, every float type") {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t head_dim : {64, 128}) {
      CHECK(takes_tensor_cores(dtype, head_dim) == (dtype != DType::F32));
      for (int64_t seq : {1, 17, 64, 100, 1024}) {
        const int64_t batch = seq == 1024 ? 1 : 2, heads = seq == 1024 ? 2 : 3;
        check_attention({batch, seq, heads, head_dim}, dtype);
      }
    }
  }
}

TEST_CASE("gpu: bf16 attention with operands rounded once (FlashAttention's numerics) at head dims 64 and 128") {
  for (int64_t seq : {17, 100, 129}) check_attention({2, seq, 3, 64}, DType::BF16, AttentionProbabilities::Rounded);
  for (int64_t seq : {17, 129}) check_attention({2, seq, 2, 128}, DType::BF16, AttentionProbabilities::Rounded);
}

TEST_CASE("gpu: attention over many batch entries and heads, T a tile multiple plus one") {
  for (DType dtype : {DType::BF16, DType::F16}) {
    check_attention({3, 129, 4, 64}, dtype);
    check_attention({2, 65, 5, 128}, dtype);
  }
}

TEST_CASE("gpu: attention with generic head dims and a sequence length that is not a tile multiple") {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    CHECK_FALSE(takes_tensor_cores(dtype, 48));
    check_attention({2, 100, 3, 48}, dtype);
    check_attention({1, 200, 2, 80}, dtype);
    check_attention({3, 1, 2, 16}, dtype);
  }
}

TEST_CASE("gpu: 16-bit attention on tensors that are not 16-byte aligned takes the fp32 kernels") {
  const int64_t B = 2, T = 100, NH = 2, hd = 64, C = NH * hd;
  for (DType dtype : {DType::BF16, DType::F16}) {
    const std::string what = std::string(dtype_name(dtype)) + " misaligned qkv";
    Mirrored qkv({B, T, 3 * C}, dtype), out({B, T, C}, dtype), lse({B, NH, T}, DType::F32);
    Mirrored dout({B, T, C}, dtype), dqkv({B, T, 3 * C}, dtype);
    qkv.randomize(41, 1.5f);
    dout.randomize(43);
    // The same qkv one element into a larger buffer; dqkv likewise.
    Mirrored qkv_storage({B * T * 3 * C + 8}, dtype), dqkv_storage({B * T * 3 * C + 8}, dtype);
    std::vector<float> shifted(static_cast<size_t>(qkv_storage.numel()), 0.0f);
    const std::vector<float> values = qkv.cpu_values();
    std::copy(values.begin(), values.end(), shifted.begin() + 1);
    qkv_storage.set(shifted);
    const Tensor qkv_view = shifted_view(qkv_storage.gpu_tensor, {B, T, 3 * C});
    const Tensor dqkv_view = shifted_view(dqkv_storage.gpu_tensor, {B, T, 3 * C});
    REQUIRE_FALSE(cuda::aligned16(qkv_view.data));
    REQUIRE_FALSE(cuda::attention_uses_tensor_cores(elem_type(dtype), hd, cuda::aligned16(qkv_view.data)));

    cpu().attention_forward(out.cpu_tensor, lse.cpu_tensor, qkv.cpu_tensor, static_cast<int>(NH));
    gpu().attention_forward(out.gpu_tensor, lse.gpu_tensor, qkv_view, static_cast<int>(NH));
    check_output(out.gpu_values(), out.cpu_values(), dtype, kRoundedOnceUlps, "attention out " + what);
    check_relative(lse.gpu_values(), lse.cpu_values(), 1e-5, "attention lse " + what);

    out.sync_to_gpu();
    lse.sync_to_gpu();
    cpu().attention_backward(dqkv.cpu_tensor, dout.cpu_tensor, qkv.cpu_tensor, out.cpu_tensor, lse.cpu_tensor,
                             static_cast<int>(NH));
    gpu().attention_backward(dqkv_view, dout.gpu_tensor, qkv_view, out.gpu_tensor, lse.gpu_tensor,
                             static_cast<int>(NH));
    check_dqkv(device_values(dqkv_view), dqkv.cpu_values(), B, T, C, dtype, kRoundedOnceUlps, what);
  }
}

TEST_CASE("gpu: attention rejects head dims the kernels do not cover") {
  Mirrored qkv({1, 8, 3 * 24}, DType::F32), out({1, 8, 24}, DType::F32), lse({1, 1, 8}, DType::F32);
  CHECK_THROWS_AS(gpu().attention_forward(out.gpu_tensor, lse.gpu_tensor, qkv.gpu_tensor, 1), std::invalid_argument);
}
