// Mixed-precision emulation (BF16/F16 tensors behave as the fp32 op on the rounded values,
// stored rounded) and the AdamW update against values produced by torch.optim (1.13).
#include "catch_compat.h"

#include <cmath>
#include <functional>

#include "backend/backend.h"
#include "backend_test_util.h"

using namespace strata;
using namespace strata::test;

namespace {

// Half-precision storage for a float vector, plus the fp32 values it actually holds.
struct HalfTensor {
  std::vector<uint16_t> bits;
  Tensor tensor;
  HalfTensor(const std::vector<float>& values, DType dtype, std::initializer_list<int64_t> dims)
      : bits(values.size()) {
    convert_elements(values.data(), DType::F32, bits.data(), dtype, values.size());
    tensor = Tensor(bits.data(), dtype, dims);
  }
  std::vector<float> as_float() const {
    std::vector<float> out(bits.size());
    convert_elements(bits.data(), tensor.dtype, out.data(), DType::F32, bits.size());
    return out;
  }
};

// Expected storage bits: the fp32 result rounded to the half type.
std::vector<uint16_t> rounded(const std::vector<float>& values, DType dtype) {
  std::vector<uint16_t> out(values.size());
  convert_elements(values.data(), DType::F32, out.data(), dtype, values.size());
  return out;
}

}  // namespace

TEST_CASE("BF16 matmul equals the fp32 matmul of the rounded inputs, stored rounded") {
  auto backend = make_cpu_backend();
  const int m = 6, n = 5, k = 8;
  HostTensor a({m, k}), b({k, n}), bias({n}), seed_out({m, n});
  fill_normal(a.values, 1);
  fill_normal(b.values, 2);
  fill_normal(bias.values, 3);
  fill_normal(seed_out.values, 4);
  for (DType dtype : {DType::BF16, DType::F16}) {
    HalfTensor ha(a.values, dtype, {m, k}), hb(b.values, dtype, {k, n}), hout(seed_out.values, dtype, {m, n});
    // The fp32 op on exactly the values the half tensors hold.
    HostTensor fa({m, k}), fb({k, n}), fout({m, n});
    fa.values = ha.as_float();
    fb.values = hb.as_float();
    fout.values = hout.as_float();
    fa.tensor.data = fa.values.data();
    fb.tensor.data = fb.values.data();
    fout.tensor.data = fout.values.data();
    backend->matmul(fout.tensor, fa.tensor, fb.tensor, bias.tensor, false, false, /*accumulate=*/true);
    backend->matmul(hout.tensor, ha.tensor, hb.tensor, bias.tensor, false, false, /*accumulate=*/true);
    CHECK(hout.bits == rounded(fout.values, dtype));
  }
}

TEST_CASE("BF16 layernorm and F16 gelu/add emulate storage rounding through one helper") {
  auto backend = make_cpu_backend();
  const int n = 4, c = 24;
  HostTensor x({n, c}), w({c}), b({c}), out32({n, c}), mean({n}), rstd({n});
  fill_normal(x.values, 5, 2.0f);
  fill_normal(w.values, 6);
  fill_normal(b.values, 7);
  HalfTensor hx(x.values, DType::BF16, {n, c}), hout(std::vector<float>(n * c), DType::BF16, {n, c});
  HostTensor fx({n, c});
  fx.values = hx.as_float();
  fx.tensor.data = fx.values.data();
  backend->layernorm_forward(out32.tensor, mean.tensor, rstd.tensor, fx.tensor, w.tensor, b.tensor);
  backend->layernorm_forward(hout.tensor, Tensor(), Tensor(), hx.tensor, w.tensor, b.tensor);
  CHECK(hout.bits == rounded(out32.values, DType::BF16));

  HalfTensor hg(x.values, DType::F16, {n, c});
  HostTensor fg({n, c}), gelu32({n, c});
  fg.values = hg.as_float();
  fg.tensor.data = fg.values.data();
  backend->gelu_forward(gelu32.tensor, fg.tensor);
  backend->gelu_forward(hg.tensor, hg.tensor);  // in place on half storage
  CHECK(hg.bits == rounded(gelu32.values, DType::F16));
  // The rounding is real: fp16 storage differs from the fp32 result somewhere.
  CHECK(hg.as_float() != gelu32.values);
}

namespace {

struct AdamCase {
  std::vector<float> param, exp_avg, exp_avg_sq;
};

AdamCase run_two_steps(Backend& backend, bool decoupled, float grad_multiplier, double grad_scale) {
  AdamCase s{{0.5f, -1.25f, 2.0f, 0.0f, -0.03125f, 3.5f}, std::vector<float>(6), std::vector<float>(6)};
  const std::vector<std::vector<float>> grads = {{0.1f, -0.2f, 0.3f, 0.05f, -1.5f, 0.0f},
                                                 {-0.4f, 0.25f, 0.125f, -0.05f, 0.75f, 2.0f}};
  for (int step = 1; step <= 2; ++step) {
    std::vector<float> g = grads[static_cast<size_t>(step - 1)];
    for (float& v : g) v *= grad_multiplier;
    const std::vector<float> g_before = g;
    AdamWArgs args;
    args.lr = 0.01;
    args.beta1 = 0.9;
    args.beta2 = 0.95;
    args.eps = 1e-8;
    args.weight_decay = 0.1;
    args.bias_correction1 = 1.0 - std::pow(0.9, step);
    args.bias_correction2 = 1.0 - std::pow(0.95, step);
    args.grad_scale = grad_scale;
    args.decoupled = decoupled;
    backend.adamw_update(Tensor(s.param.data(), DType::F32, {6}), Tensor(g.data(), DType::F32, {6}),
                         Tensor(s.exp_avg.data(), DType::F32, {6}), Tensor(s.exp_avg_sq.data(), DType::F32, {6}),
                         Tensor(), args);
    REQUIRE(g == g_before);  // the gradient buffer is only read
  }
  return s;
}

}  // namespace

TEST_CASE("AdamW matches two steps of torch.optim.AdamW and torch.optim.Adam (L2)") {
  auto backend = make_cpu_backend();
  // Printed by torch 1.13 (CPU, AVX2): AdamW(lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
  // and Adam with the same arguments (weight decay as an L2 term on the gradient).
  const std::vector<float> adamw_param = {0.494544536f, -1.23913407f, 1.97688293f, -0.00946368277f, -0.018513836f, 3.48565412f};
  const std::vector<float> adamw_m = {-0.0310000014f, 0.00699999928f, 0.0395000018f, -0.000499999849f, -0.0600000024f, 0.200000003f};
  const std::vector<float> adamw_v = {0.00847500097f, 0.00502500031f, 0.00505625037f, 0.000243750008f, 0.135000005f, 0.200000003f};
  const std::vector<float> l2_param = {0.494175136f, -1.2364105f, 1.98027945f, -0.00937486161f, -0.0185470879f, 3.48175144f};
  const std::vector<float> l2_m = {-0.0216000006f, -0.0166500006f, 0.0773999989f, -0.000599999737f, -0.0604937524f, 0.266400009f};
  const std::vector<float> l2_v = {0.00722880056f, 0.0058109886f, 0.0171237998f, 0.000248800003f, 0.135286614f, 0.281708807f};

  const AdamCase adamw = run_two_steps(*backend, true, 1.0f, 1.0);
  check_close(adamw.param, adamw_param, 0, 0, "AdamW param");
  check_close(adamw.exp_avg, adamw_m, 0, 0, "AdamW exp_avg");
  check_close(adamw.exp_avg_sq, adamw_v, 0, 0, "AdamW exp_avg_sq");
  const AdamCase l2 = run_two_steps(*backend, false, 1.0f, 1.0);
  check_close(l2.param, l2_param, 0, 0, "Adam-L2 param");
  check_close(l2.exp_avg, l2_m, 0, 0, "Adam-L2 exp_avg");
  check_close(l2.exp_avg_sq, l2_v, 0, 0, "Adam-L2 exp_avg_sq");

  // grad_scale is applied before anything else: 4·g scaled by 1/4 is exactly g.
  const AdamCase scaled = run_two_steps(*backend, true, 4.0f, 0.25);
  CHECK(scaled.param == adamw.param);
  CHECK(scaled.exp_avg == adamw.exp_avg);
  CHECK(scaled.exp_avg_sq == adamw.exp_avg_sq);
}
