// GPU layer ops against the CPU backend on fresh random inputs: matmul (all transpose, bias and
// accumulate variants, fp32 without TF32 and bf16, misaligned operands), the GELU epilogue, bias
// and layernorm gradients (the layernorm backward's one-pass and wide-row kernels), embeddings and
// the fused cross-entropy, with determinism checks for backwards.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "gpu_test_util.h"
#include "layernorm.cuh"

using namespace strata;
using namespace strata::gpu_test;

namespace {

// out (the GPU's GELU of its pre-activation) against the CPU's GELU of the GPU's own pre, so
// that the GELU is judged apart from the GEMM before it. fp32: 1e-4, for cuBLASLt's own tanh.
void check_gelu_of(const Mirrored& out, const Mirrored& pre, double max_ulps, const std::string& what) {
  const DType dtype = pre.cpu_tensor.dtype;
  Mirrored gpu_pre({pre.numel()}, dtype), expected({pre.numel()}, dtype);
  gpu_pre.set(pre.gpu_values());
  cpu().gelu_forward(expected.cpu_tensor, gpu_pre.cpu_tensor);
  if (dtype == DType::F32) {
    check_relative(out.gpu_values(), expected.cpu_values(), 1e-4, what);
  } else {
    check_ulps(out.gpu_values(), expected.cpu_values(), dtype, max_ulps, what);
  }
}

// fp32 weight and bias gradients: exact products of 16-bit operands summed in fp32 in another
// order (1e-4, as for the bf16 × bf16 → fp32 GEMM above), or fp32 operands (1e-5).
double gradient_tolerance(DType operands) { return operands == DType::F32 ? 1e-5 : 1e-4; }

// The backward from the CPU's statistics on both sides (so only the backward is compared), into
// dinp of `dtype` and dweight/dbias of `grads`; then the same backward from the same starting
// gradients must give the same bits.
void check_layernorm_backward(int64_t n, int64_t c, DType dtype, DType grads, uint64_t seed) {
  Mirrored inp({n, c}, dtype), w({c}, dtype), b({c}, dtype), out({n, c}, dtype);
  Mirrored mean({n}, DType::F32), rstd({n}, DType::F32);
  Mirrored dout({n, c}, dtype), dinp({n, c}, dtype), dw({c}, grads), db({c}, grads);
  inp.randomize(seed, 3.0f);
  w.randomize(seed + 1);
  b.randomize(seed + 2);
  dout.randomize(seed + 3);
  dinp.randomize(seed + 4);
  dw.randomize(seed + 5);
  db.randomize(seed + 6);
  const std::string what = std::string(dtype_name(dtype)) + " N=" + std::to_string(n) + " C=" + std::to_string(c) +
                           ", gradients " + dtype_name(grads);
  cpu().layernorm_forward(out.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor, inp.cpu_tensor, w.cpu_tensor, b.cpu_tensor);
  mean.sync_to_gpu();
  rstd.sync_to_gpu();
  const auto dinp0 = dinp.cpu_values(), dw0 = dw.cpu_values(), db0 = db.cpu_values();
  cpu().layernorm_backward(dinp.cpu_tensor, dw.cpu_tensor, db.cpu_tensor, dout.cpu_tensor, inp.cpu_tensor,
                           w.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor);
  gpu().layernorm_backward(dinp.gpu_tensor, dw.gpu_tensor, db.gpu_tensor, dout.gpu_tensor, inp.gpu_tensor,
                           w.gpu_tensor, mean.gpu_tensor, rstd.gpu_tensor);
  check_output(dinp.gpu_values(), dinp.cpu_values(), dtype, kRoundedOnceUlps, "layernorm dinp " + what);
  // Both add column sums of the same terms to the same starting values and round once.
  check_output(dw.gpu_values(), dw.cpu_values(), grads, kRoundedOnceUlps, "layernorm dweight " + what);
  check_output(db.gpu_values(), db.cpu_values(), grads, kRoundedOnceUlps, "layernorm dbias " + what);
  const auto dinp1 = dinp.gpu_bytes(), dw1 = dw.gpu_bytes(), db1 = db.gpu_bytes();
  dinp.set(dinp0);
  dw.set(dw0);
  db.set(db0);
  gpu().layernorm_backward(dinp.gpu_tensor, dw.gpu_tensor, db.gpu_tensor, dout.gpu_tensor, inp.gpu_tensor,
                           w.gpu_tensor, mean.gpu_tensor, rstd.gpu_tensor);
  INFO("repeat of " << what);
  CHECK(dinp.gpu_bytes() == dinp1);
  CHECK(dw.gpu_bytes() == dw1);
  CHECK(db.gpu_bytes() == db1);
}

}  // namespace

TEST_CASE("gpu: matmul matches the CPU for every transpose, bias and accumulate variant") {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape s : {Shape{37, 29, 53}, Shape{256, 2304, 768}}) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (int variant = 0; variant < 16; ++variant) {
        const bool ta = variant & 1, tb = variant & 2, with_bias = variant & 4, acc = variant & 8;
        // Shapes spelled out at the call: an initializer_list returned from a function would
        // outlive the array behind it.
        Mirrored a(ta ? std::initializer_list<int64_t>{s.k, s.m} : std::initializer_list<int64_t>{s.m, s.k}, dtype);
        Mirrored b(tb ? std::initializer_list<int64_t>{s.n, s.k} : std::initializer_list<int64_t>{s.k, s.n}, dtype);
        Mirrored bias({s.n}, dtype), out({s.m, s.n}, dtype);
        a.randomize(100 + variant);
        b.randomize(200 + variant, 0.05f);
        bias.randomize(300 + variant);
        out.randomize(400 + variant);
        const Tensor cb = with_bias ? bias.cpu_tensor : Tensor(), gb = with_bias ? bias.gpu_tensor : Tensor();
        cpu().matmul(out.cpu_tensor, a.cpu_tensor, b.cpu_tensor, cb, ta, tb, acc);
        gpu().matmul(out.gpu_tensor, a.gpu_tensor, b.gpu_tensor, gb, ta, tb, acc);
        check_output(out.gpu_values(), out.cpu_values(), dtype, kGemmUlps,
                     std::string("matmul ") + dtype_name(dtype) + " m" + std::to_string(s.m) + " variant " +
                           std::to_string(variant));
      }
    }
  }
}

TEST_CASE("gpu: a GEMM on misaligned operands gets a plan for their alignment") {
  // One element into a buffer: 4-byte (f32) and 2-byte (bf16) aligned operands must still work,
  // through a plan whose heuristic was told the weaker alignment.
  for (DType dtype : {DType::F32, DType::BF16}) {
    const int64_t m = 24, n = 40, k = 32;
    Mirrored a({m * k + 1}, dtype), b({k * n + 1}, dtype), out({m * n + 1}, dtype), expected({m, n}, dtype);
    a.randomize(7);
    b.randomize(8, 0.1f);
    cpu().matmul(expected.cpu_tensor, shifted_view(a.cpu_tensor, {m, k}), shifted_view(b.cpu_tensor, {k, n}), Tensor(),
                 false, false, false);
    const size_t plans = gpu().gemm_plans_cached();
    gpu().matmul(shifted_view(out.gpu_tensor, {m, n}), shifted_view(a.gpu_tensor, {m, k}),
                 shifted_view(b.gpu_tensor, {k, n}), Tensor(), false, false, false);
    CHECK(gpu().gemm_plans_cached() == plans + 1);
    std::vector<float> got = out.gpu_values();
    got.erase(got.begin());
    check_output(got, expected.cpu_values(), dtype, kGemmUlps, std::string("misaligned matmul ") + dtype_name(dtype));
  }
}

TEST_CASE("gpu: matmul accumulates bf16 products into an fp32 gradient and handles k = 0") {
  Mirrored inp({512, 768}, DType::BF16), dout({512, 2304}, DType::BF16), dweight({768, 2304}, DType::F32);
  inp.randomize(1);
  dout.randomize(2);
  dweight.randomize(3);
  cpu().matmul(dweight.cpu_tensor, inp.cpu_tensor, dout.cpu_tensor, Tensor(), true, false, true);
  gpu().matmul(dweight.gpu_tensor, inp.gpu_tensor, dout.gpu_tensor, Tensor(), true, false, true);
  check_relative(dweight.gpu_values(), dweight.cpu_values(), 1e-4, "bf16 × bf16 → fp32 accumulate");

  // k = 0 (a stored (k, m) = (0, 6), transposed): out = out + bias.
  Mirrored a({0, 6}, DType::F32), b({0, 5}, DType::F32), bias({5}, DType::F32), out({6, 5}, DType::F32);
  bias.randomize(4);
  out.randomize(5);
  cpu().matmul(out.cpu_tensor, a.cpu_tensor, b.cpu_tensor, bias.cpu_tensor, true, false, true);
  gpu().matmul(out.gpu_tensor, a.gpu_tensor, b.gpu_tensor, bias.gpu_tensor, true, false, true);
  CHECK(out.gpu_values() == out.cpu_values());
}

TEST_CASE("gpu: matmul_gelu equals matmul + bias then gelu_forward") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    Mirrored x({256, 768}, dtype), w({768, 3072}, dtype), bias({3072}, dtype);
    Mirrored pre({256, 3072}, dtype), out({256, 3072}, dtype);
    x.randomize(41);
    w.randomize(42, 0.03f);
    bias.randomize(43, 0.1f);
    cpu().matmul(pre.cpu_tensor, x.cpu_tensor, w.cpu_tensor, bias.cpu_tensor, false, false, false);
    cpu().gelu_forward(out.cpu_tensor, pre.cpu_tensor);
    gpu().matmul_gelu(out.gpu_tensor, pre.gpu_tensor, x.gpu_tensor, w.gpu_tensor, bias.gpu_tensor, false, false);
    check_output(pre.gpu_values(), pre.cpu_values(), dtype, kGemmUlps, "matmul_gelu pre-activation");
    check_gelu_of(out, pre, kGeluEpilogueUlps, "matmul_gelu output");
  }
}

TEST_CASE("gpu: bias_backward accumulates column sums deterministically") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    Mirrored dout({8192, 768}, dtype), dbias({768}, DType::F32);
    dout.randomize(51);
    dbias.randomize(52);
    const auto start = dbias.cpu_values();
    cpu().bias_backward(dbias.cpu_tensor, dout.cpu_tensor);
    gpu().bias_backward(dbias.gpu_tensor, dout.gpu_tensor);
    check_relative(dbias.gpu_values(), dbias.cpu_values(), 1e-5, std::string("bias_backward ") + dtype_name(dtype));
    const auto first = dbias.gpu_bytes();
    dbias.set(start);
    gpu().bias_backward(dbias.gpu_tensor, dout.gpu_tensor);
    CHECK(dbias.gpu_bytes() == first);
  }
}

TEST_CASE("gpu: layernorm forward and backward match the CPU and repeat bit for bit") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t c : {int64_t{768}, int64_t{100}}) {
      const int64_t n = 1031;
      Mirrored inp({n, c}, dtype), w({c}, dtype), b({c}, dtype), out({n, c}, dtype);
      Mirrored mean({n}, DType::F32), rstd({n}, DType::F32);
      inp.randomize(61, 3.0f);
      w.randomize(62);
      b.randomize(63);
      const std::string what = std::string(dtype_name(dtype)) + " C=" + std::to_string(c);
      cpu().layernorm_forward(out.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor, inp.cpu_tensor, w.cpu_tensor, b.cpu_tensor);
      gpu().layernorm_forward(out.gpu_tensor, mean.gpu_tensor, rstd.gpu_tensor, inp.gpu_tensor, w.gpu_tensor, b.gpu_tensor);
      check_output(out.gpu_values(), out.cpu_values(), dtype, kRoundedOnceUlps, "layernorm out " + what);
      check_relative(mean.gpu_values(), mean.cpu_values(), 1e-5, "layernorm mean " + what);
      check_relative(rstd.gpu_values(), rstd.cpu_values(), 1e-5, "layernorm rstd " + what);
      check_layernorm_backward(n, c, dtype, DType::F32, 64);
    }
  }
}

TEST_CASE("gpu: layernorm backward on partial vectors, strided rows, wide rows and every type") {
  struct Shape {
    int64_t rows, cols;
  };
  // 771 and 100 columns: no whole 16-byte vectors per row (the scalar path); 768: 8-wide bf16
  // and fp16, 4-wide fp32 vectors. 4100 rows: more than the 2048 warps of the fixed grid, so
  // warps stride over several rows each. 1 row: a single warp of a single block. 6200 columns:
  // too wide for the one-pass kernel's shared-memory sums, so the wide-row kernel.
  const Shape shapes[] = {{1, 768}, {1, 771}, {37, 768}, {1031, 771}, {4100, 100}, {4100, 768}, {37, 6200}};
  REQUIRE(cuda::layernorm_backward_shape(37, 6200).warps == 0);
  for (const Shape s : shapes) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      for (DType grads : {DType::F32, dtype}) {
        check_layernorm_backward(s.rows, s.cols, dtype, grads, 300 + static_cast<uint64_t>(s.cols));
        if (dtype == DType::F32) break;  // the activation type is fp32 already
      }
    }
  }
}

TEST_CASE("gpu: layernorm backward's parameter-gradient check would catch a dropped block partial") {
  // The one-pass kernel adds per-block partials; a kernel that lost one block's partial would
  // give the column sums without that block's rows. On the host: the reference without the rows
  // of one block (block 0 of the fixed grid: rows 0, ..., warps − 1 and every stride after)
  // differs from the full reference by far more than the 1e-5 the tests allow.
  const int64_t n = 4100, c = 768;
  const cuda::LayerNormBackwardShape shape = cuda::layernorm_backward_shape(n, c);
  REQUIRE(shape.warps > 0);
  REQUIRE(shape.blocks * shape.warps < n);  // warps stride over rows
  Mirrored inp({n, c}, DType::F32), w({c}, DType::F32), dout({n, c}, DType::F32), dinp({n, c}, DType::F32);
  Mirrored mean({n}, DType::F32), rstd({n}, DType::F32), out({n, c}, DType::F32), b({c}, DType::F32);
  Mirrored dw({c}, DType::F32), db({c}, DType::F32), dw_drop({c}, DType::F32), db_drop({c}, DType::F32);
  inp.randomize(81, 3.0f);
  w.randomize(82);
  b.randomize(83);
  dout.randomize(84);
  cpu().layernorm_forward(out.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor, inp.cpu_tensor, w.cpu_tensor, b.cpu_tensor);
  cpu().layernorm_backward(dinp.cpu_tensor, dw.cpu_tensor, db.cpu_tensor, dout.cpu_tensor, inp.cpu_tensor,
                           w.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor);
  std::vector<float> dropped = dout.cpu_values();
  const int64_t stride = shape.blocks * shape.warps;
  for (int64_t first = 0; first < shape.warps; ++first)
    for (int64_t row = first; row < n; row += stride)
      std::fill_n(dropped.begin() + row * c, c, 0.0f);
  dout.set(dropped);
  cpu().layernorm_backward(dinp.cpu_tensor, dw_drop.cpu_tensor, db_drop.cpu_tensor, dout.cpu_tensor, inp.cpu_tensor,
                           w.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor);
  const auto worst = [](const std::vector<float>& a, const std::vector<float>& e) {
    double mean_abs = 0.0, most = 0.0;
    for (float v : e) mean_abs += std::abs(static_cast<double>(v)) / static_cast<double>(e.size());
    for (size_t i = 0; i < a.size(); ++i)
      most = std::max(most, std::abs(static_cast<double>(a[i]) - e[i]) / std::max<double>(std::abs(e[i]), mean_abs));
    return most;
  };
  CHECK(worst(dw_drop.cpu_values(), dw.cpu_values()) > 100 * 1e-5);
  CHECK(worst(db_drop.cpu_values(), db.cpu_values()) > 100 * 1e-5);
}

TEST_CASE("gpu: embedding forward and backward are exact in fp32, with repeated tokens") {
  const int64_t B = 4, T = 64, C = 96, V = 50;  // few ids: many repeats per row of dwte
  Mirrored tokens({B, T}, DType::I32), wte({V, C}, DType::F32), wpe({128, C}, DType::F32), out({B, T, C}, DType::F32);
  Mirrored dout({B, T, C}, DType::F32), dwte({V, C}, DType::F32), dwpe({128, C}, DType::F32);
  tokens.randomize(71, 1.0f, static_cast<int32_t>(V));
  wte.randomize(72);
  wpe.randomize(73);
  dout.randomize(74);
  dwte.randomize(75);
  dwpe.randomize(76);
  cpu().embedding_forward(out.cpu_tensor, tokens.cpu_tensor, wte.cpu_tensor, wpe.cpu_tensor, 0, V);
  gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 0, V);
  CHECK(out.gpu_values() == out.cpu_values());
  gpu().embedding_forward(out.gpu_tensor, tokens.cpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 0, V);  // host ids
  CHECK(out.gpu_values() == out.cpu_values());
  cpu().embedding_backward(dwte.cpu_tensor, dwpe.cpu_tensor, dout.cpu_tensor, tokens.cpu_tensor, 0, V);
  gpu().embedding_backward(dwte.gpu_tensor, dwpe.gpu_tensor, dout.gpu_tensor, tokens.gpu_tensor, 0, V);
  // Same additions in the same order as the CPU: identical bits.
  CHECK(dwte.gpu_values() == dwte.cpu_values());
  CHECK(dwpe.gpu_values() == dwpe.cpu_values());

  std::vector<int32_t> bad(static_cast<size_t>(B * T), 3);
  bad[static_cast<size_t>(T + 5)] = static_cast<int32_t>(V);
  tokens.set_ints(bad);
  // Device tokens are checked on the device and reported at the next wait; host tokens at once.
  gpu().embedding_forward(out.gpu_tensor, tokens.gpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 0, V);
  CHECK_THROWS_WITH(gpu().synchronize(), strata_catch::Contains("token id " + std::to_string(V) + " at batch row 1, position 5"));
  CHECK_THROWS_AS(gpu().embedding_forward(out.gpu_tensor, tokens.cpu_tensor, wte.gpu_tensor, wpe.gpu_tensor, 0, V),
                  UserError);
}

TEST_CASE("gpu: embedding backward in bf16 with fp32 gradients matches the CPU") {
  // C 768: one group of columns per thread; C 1600 (GPT-2 XL): two, the second partial.
  for (int64_t C : {int64_t{768}, int64_t{1600}}) {
    const int64_t B = 2, T = 256, V = 1000;
    Mirrored tokens({B, T}, DType::I32), dout({B, T, C}, DType::BF16), dwte({V, C}, DType::F32),
        dwpe({T, C}, DType::F32);
    tokens.randomize(81, 1.0f, 40);
    dout.randomize(82);
    dwte.randomize(83);
    dwpe.randomize(84);
    cpu().embedding_backward(dwte.cpu_tensor, dwpe.cpu_tensor, dout.cpu_tensor, tokens.cpu_tensor, 0, V);
    gpu().embedding_backward(dwte.gpu_tensor, dwpe.gpu_tensor, dout.gpu_tensor, tokens.gpu_tensor, 0, V);
    INFO("C = " << C);
    CHECK(dwte.gpu_values() == dwte.cpu_values());
    CHECK(dwpe.gpu_values() == dwpe.cpu_values());
  }
}

TEST_CASE("gpu: softmax cross-entropy losses and dlogits over a padded vocabulary") {
  // Vp 1024: rows read as 16-byte words, V 777 ending inside one; Vp 1003: one value at a time.
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (auto [V, Vp] : {std::pair<int64_t, int64_t>{1000, 1024}, {777, 1024}, {777, 1003}}) {
      const int64_t N = 300;
      Mirrored logits({N, Vp}, dtype), targets({N}, DType::I32), losses({N}, DType::F32);
      logits.randomize(91, 4.0f);
      targets.randomize(92, 1.0f, static_cast<int32_t>(V));
      const std::string what = std::string(dtype_name(dtype)) + " V=" + std::to_string(V) + " Vp=" + std::to_string(Vp);
      cpu().softmax_cross_entropy(logits.cpu_tensor, losses.cpu_tensor, targets.cpu_tensor, static_cast<int>(V), false, 1.0f);
      gpu().softmax_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor, static_cast<int>(V), false, 1.0f);
      check_relative(losses.gpu_values(), losses.cpu_values(), 1e-5, "losses " + what);
      CHECK(logits.gpu_values() == logits.cpu_values());  // untouched without write_dlogits
      cpu().softmax_cross_entropy(logits.cpu_tensor, losses.cpu_tensor, targets.cpu_tensor, static_cast<int>(V), true, 1.0f / N);
      gpu().softmax_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.cpu_tensor, static_cast<int>(V), true, 1.0f / N);
      const std::vector<float> dl = logits.gpu_values();
      check_output(dl, logits.cpu_values(), dtype, kRoundedOnceUlps, "dlogits " + what);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = V; j < Vp; ++j) REQUIRE(dl[static_cast<size_t>(i * Vp + j)] == 0.0f);
    }
  }
  Mirrored logits({2, 64}, DType::F32), targets({2}, DType::I32);
  logits.randomize(93);
  targets.set_ints({1, 60});
  gpu().softmax_cross_entropy(logits.gpu_tensor, Tensor(), targets.gpu_tensor, 50, true, 1.0f);
  CHECK_THROWS_WITH(gpu().synchronize(), strata_catch::Contains("target token id 60 at row 1"));
  CHECK_THROWS_AS(gpu().softmax_cross_entropy(logits.gpu_tensor, Tensor(), targets.cpu_tensor, 50, true, 1.0f), UserError);
}

TEST_CASE("gpu: cross-entropy at GPT-2 vocabulary size repeats bit for bit") {
  const int64_t N = 64, V = 50257, Vp = 50304;
  Mirrored logits({N, Vp}, DType::BF16), targets({N}, DType::I32), losses({N}, DType::F32);
  logits.randomize(95, 2.0f);
  targets.randomize(96, 1.0f, static_cast<int32_t>(V));
  cpu().softmax_cross_entropy(logits.cpu_tensor, losses.cpu_tensor, targets.cpu_tensor, static_cast<int>(V), true, 0.5f);
  gpu().softmax_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor, static_cast<int>(V), true, 0.5f);
  check_relative(losses.gpu_values(), losses.cpu_values(), 1e-5, "losses at V=50257");
  check_ulps(logits.gpu_values(), logits.cpu_values(), DType::BF16, kRoundedOnceUlps, "dlogits at V=50257");
  const auto first_losses = losses.gpu_bytes();
  const auto first_dlogits = logits.gpu_bytes();
  logits.randomize(95, 2.0f);
  gpu().softmax_cross_entropy(logits.gpu_tensor, losses.gpu_tensor, targets.gpu_tensor, static_cast<int>(V), true, 0.5f);
  CHECK(losses.gpu_bytes() == first_losses);
  CHECK(logits.gpu_bytes() == first_dlogits);
}

TEST_CASE("gpu: matmul_gelu on a width the GELU epilogue cannot take runs unfused and matches the CPU") {
  // cuBLASLt's GELU epilogue needs the pre-activation's leading dimension (n) divisible by 8.
  for (DType dtype : {DType::F32, DType::BF16}) {
    Mirrored x({64, 96}, dtype), w({96, 100}, dtype), bias({100}, dtype);
    Mirrored pre({64, 100}, dtype), out({64, 100}, dtype);
    x.randomize(44);
    w.randomize(45, 0.1f);
    bias.randomize(46, 0.1f);
    cpu().matmul(pre.cpu_tensor, x.cpu_tensor, w.cpu_tensor, bias.cpu_tensor, false, false, false);
    cpu().gelu_forward(out.cpu_tensor, pre.cpu_tensor);
    gpu().matmul_gelu(out.gpu_tensor, pre.gpu_tensor, x.gpu_tensor, w.gpu_tensor, bias.gpu_tensor, false, false);
    const std::string what = std::string(dtype_name(dtype)) + " n=100";
    check_output(pre.gpu_values(), pre.cpu_values(), dtype, kGemmUlps, "matmul_gelu pre-activation " + what);
    check_gelu_of(out, pre, kRoundedOnceUlps, "matmul_gelu output " + what);  // the GELU kernel
  }
}

TEST_CASE("gpu: residual_layernorm_forward equals add then layernorm_forward, in place too") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (int64_t c : {int64_t{768}, int64_t{100}}) {
      const int64_t n = 1031;
      Mirrored a({n, c}, dtype), b({n, c}, dtype), w({c}, dtype), bias({c}, dtype);
      Mirrored residual({n, c}, dtype), out({n, c}, dtype), mean({n}, DType::F32), rstd({n}, DType::F32);
      a.randomize(71, 2.0f);
      b.randomize(72);
      w.randomize(73);
      bias.randomize(74);
      const std::string what = std::string(dtype_name(dtype)) + " C=" + std::to_string(c);
      cpu().residual_layernorm_forward(residual.cpu_tensor, out.cpu_tensor, mean.cpu_tensor, rstd.cpu_tensor,
                                       a.cpu_tensor, b.cpu_tensor, w.cpu_tensor, bias.cpu_tensor);
      gpu().residual_layernorm_forward(residual.gpu_tensor, out.gpu_tensor, mean.gpu_tensor, rstd.gpu_tensor,
                                       a.gpu_tensor, b.gpu_tensor, w.gpu_tensor, bias.gpu_tensor);
      // The residual is one rounded add: exact against the CPU's.
      CHECK(residual.gpu_values() == residual.cpu_values());
      check_output(out.gpu_values(), out.cpu_values(), dtype, kRoundedOnceUlps, "residual layernorm out " + what);
      check_relative(mean.gpu_values(), mean.cpu_values(), 1e-5, "residual layernorm mean " + what);
      check_relative(rstd.gpu_values(), rstd.cpu_values(), 1e-5, "residual layernorm rstd " + what);
      // The unfused GPU ops give the same bits (the model's recomputation relies on it).
      Mirrored out2({n, c}, dtype), mean2({n}, DType::F32), rstd2({n}, DType::F32);
      gpu().layernorm_forward(out2.gpu_tensor, mean2.gpu_tensor, rstd2.gpu_tensor, residual.gpu_tensor, w.gpu_tensor,
                              bias.gpu_tensor);
      CHECK(out2.gpu_bytes() == out.gpu_bytes());
      CHECK(rstd2.gpu_bytes() == rstd.gpu_bytes());
      // In place: the residual overwrites a.
      gpu().residual_layernorm_forward(a.gpu_tensor, out2.gpu_tensor, mean2.gpu_tensor, rstd2.gpu_tensor, a.gpu_tensor,
                                       b.gpu_tensor, w.gpu_tensor, bias.gpu_tensor);
      CHECK(a.gpu_bytes() == residual.gpu_bytes());
      CHECK(out2.gpu_bytes() == out.gpu_bytes());
    }
  }
}

TEST_CASE("gpu: linear_gelu_forward fuses in bf16 and stays exact in fp32") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    Mirrored x({128, 256}, dtype), w({256, 1024}, dtype), bias({1024}, dtype);
    Mirrored pre({128, 1024}, dtype), out({128, 1024}, dtype), pre2({128, 1024}, dtype), out2({128, 1024}, dtype);
    x.randomize(81);
    w.randomize(82, 0.05f);
    bias.randomize(83, 0.1f);
    cpu().linear_gelu_forward(out.cpu_tensor, pre.cpu_tensor, x.cpu_tensor, w.cpu_tensor, bias.cpu_tensor);
    gpu().linear_gelu_forward(out.gpu_tensor, pre.gpu_tensor, x.gpu_tensor, w.gpu_tensor, bias.gpu_tensor);
    const std::string what = dtype_name(dtype);
    check_output(pre.gpu_values(), pre.cpu_values(), dtype, kGemmUlps, "linear_gelu pre " + what);
    check_gelu_of(out, pre, kGeluEpilogueUlps, "linear_gelu out " + what);
    if (dtype == DType::F32) {
      // fp32 takes the unfused path: the same bits as matmul then gelu_forward on the GPU.
      gpu().matmul(pre2.gpu_tensor, x.gpu_tensor, w.gpu_tensor, bias.gpu_tensor, false, false, false);
      gpu().gelu_forward(out2.gpu_tensor, pre2.gpu_tensor);
      CHECK(out2.gpu_bytes() == out.gpu_bytes());
    }
  }
}

TEST_CASE("gpu: linear_backward_gelu fuses the GELU gradient in bf16 and stays exact in fp32") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    const int64_t N = 128, C = 64;  // the MLP's projection: (N, 4C) · (4C, C)
    Mirrored dout({N, C}, dtype), inp({N, 4 * C}, dtype), w({4 * C, C}, dtype), pre({N, 4 * C}, dtype);
    Mirrored dpre({N, 4 * C}, dtype), dw({4 * C, C}, DType::F32), db({C}, DType::F32);
    Mirrored dpre2({N, 4 * C}, dtype), dw2({4 * C, C}, DType::F32), db2({C}, DType::F32);
    dout.randomize(85, 0.1f);
    pre.randomize(86, 2.0f);
    inp.randomize(87);
    w.randomize(88, 0.05f);
    for (Mirrored* g : {&dw, &dw2}) g->randomize(89, 0.01f);
    for (Mirrored* g : {&db, &db2}) g->randomize(90, 0.01f);
    cpu().linear_backward_gelu(dpre.cpu_tensor, dw.cpu_tensor, db.cpu_tensor, dout.cpu_tensor, inp.cpu_tensor,
                               w.cpu_tensor, pre.cpu_tensor);
    gpu().linear_backward_gelu(dpre.gpu_tensor, dw.gpu_tensor, db.gpu_tensor, dout.gpu_tensor, inp.gpu_tensor,
                               w.gpu_tensor, pre.gpu_tensor);
    const std::string what = dtype_name(dtype);
    // The GEMM's own error, and the reference rounds the product to the output type before the
    // GELU gradient where the fused epilogue does not (as a GELU input is rounded).
    check_output(dpre.gpu_values(), dpre.cpu_values(), dtype, kGemmUlps + kGeluEpilogueUlps,
                 "linear_backward_gelu dpre " + what);
    check_relative(dw.gpu_values(), dw.cpu_values(), gradient_tolerance(dtype), "linear_backward_gelu dweight " + what);
    check_relative(db.gpu_values(), db.cpu_values(), gradient_tolerance(dtype), "linear_backward_gelu dbias " + what);
    // The weight and bias gradients are linear_backward's, bit for bit; in fp32 so is dpre
    // (the unfused ops: matmul then gelu_backward).
    gpu().linear_backward(dpre2.gpu_tensor, dw2.gpu_tensor, db2.gpu_tensor, dout.gpu_tensor, inp.gpu_tensor,
                          w.gpu_tensor);
    CHECK(dw2.gpu_bytes() == dw.gpu_bytes());
    CHECK(db2.gpu_bytes() == db.gpu_bytes());
    if (dtype == DType::F32) {
      gpu().gelu_backward(dpre2.gpu_tensor, dpre2.gpu_tensor, pre.gpu_tensor);
      CHECK(dpre2.gpu_bytes() == dpre.gpu_bytes());
    }
  }
}

TEST_CASE("gpu: linear_backward takes the bias gradient from the weight-gradient GEMM in bf16, exact in fp32") {
  for (DType dtype : {DType::F32, DType::BF16}) {
    const int64_t N = 256, In = 64, Out = 192;  // the QKV projection's shape, scaled down
    Mirrored dout({N, Out}, dtype), inp({N, In}, dtype), w({In, Out}, dtype), dinp({N, In}, dtype);
    Mirrored dw({In, Out}, DType::F32), db({Out}, DType::F32), dw2({In, Out}, DType::F32), db2({Out}, DType::F32);
    dout.randomize(101, 0.1f);
    inp.randomize(102);
    w.randomize(103, 0.05f);
    // Gradients that already hold a micro-batch: both must accumulate, not overwrite.
    for (Mirrored* g : {&dw, &dw2}) g->randomize(104, 0.01f);
    for (Mirrored* g : {&db, &db2}) g->randomize(105, 0.01f);
    cpu().linear_backward(dinp.cpu_tensor, dw.cpu_tensor, db.cpu_tensor, dout.cpu_tensor, inp.cpu_tensor,
                          w.cpu_tensor);
    gpu().linear_backward(dinp.gpu_tensor, dw.gpu_tensor, db.gpu_tensor, dout.gpu_tensor, inp.gpu_tensor,
                          w.gpu_tensor);
    const std::string what = dtype_name(dtype);
    check_output(dinp.gpu_values(), dinp.cpu_values(), dtype, kGemmUlps, "linear_backward dinp " + what);
    check_relative(dw.gpu_values(), dw.cpu_values(), gradient_tolerance(dtype), "linear_backward dweight " + what);
    check_relative(db.gpu_values(), db.cpu_values(), gradient_tolerance(dtype), "linear_backward dbias " + what);
    // The same accumulation by the unfused ops on the GPU.
    gpu().matmul(dw2.gpu_tensor, inp.gpu_tensor, dout.gpu_tensor, Tensor(), true, false, true);
    gpu().bias_backward(db2.gpu_tensor, dout.gpu_tensor);
    if (dtype == DType::F32) {  // fp32 runs the unfused ops
      CHECK(dw2.gpu_bytes() == dw.gpu_bytes());
      CHECK(db2.gpu_bytes() == db.gpu_bytes());
    } else {  // the fused GEMM's dweight and the column-sum kernel's dbias agree to fp32 rounding
      check_relative(dw.gpu_values(), dw2.gpu_values(), 1e-5, "fused against unfused dweight");
      check_relative(db.gpu_values(), db2.gpu_values(), 1e-5, "fused against unfused dbias");
    }
  }
}
