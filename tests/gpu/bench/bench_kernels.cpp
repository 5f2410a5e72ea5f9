// bench_kernels: times every CUDA backend op at GPT-2 124M shapes (one layer's tensors, the LM
// head and the optimizer over 124M parameters) with CUDA events, and sets each time against
// its floor: bytes moved at the measured copy bandwidth, or FLOPs at the dense peak.
// Usage: bench_kernels [--batch B] [--seq T] [--dtype bf16|f32] [--iters N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "attention.cuh"
#include "backend/cuda/cuda_backend.h"
#include "core/check.h"
#include "core/rng.h"

using namespace strata;

namespace {

constexpr double kPeakBf16Flops = 989e12;  // H100 SXM / H200 dense bf16 (datasheet)
constexpr double kPeakFp32Flops = 67e12;   // H100 SXM fp32 without tensor cores

struct Options {
  int64_t batch = 16, seq = 1024;
  DType dtype = DType::BF16;
  int iters = 20;
  int64_t channels = 768;  // GPT-2 124M; 1558M is 1600 channels in 25 heads
  int64_t heads = 12;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!value) {
      std::fprintf(stderr, "bench_kernels: %s needs a value\n", arg.c_str());
      std::exit(2);
    }
    if (arg == "--batch") o.batch = std::atoll(value);
    else if (arg == "--seq") o.seq = std::atoll(value);
    else if (arg == "--iters") o.iters = std::atoi(value);
    else if (arg == "--dtype") o.dtype = std::string(value) == "f32" ? DType::F32 : DType::BF16;
    else if (arg == "--channels") o.channels = std::atoll(value);
    else if (arg == "--heads") o.heads = std::atoll(value);
    else {
      std::fprintf(stderr,
                   "usage: bench_kernels [--batch B] [--seq T] [--channels C] [--heads NH] [--dtype bf16|f32] "
                   "[--iters N]\n");
      std::exit(2);
    }
    ++i;
  }
  if (o.heads <= 0 || o.channels <= 0 || o.channels % o.heads != 0) {
    std::fprintf(stderr, "bench_kernels: --channels %lld is not a multiple of --heads %lld\n",
                 static_cast<long long>(o.channels), static_cast<long long>(o.heads));
    std::exit(2);
  }
  return o;
}

// Device memory handed out as tensors, filled with N(0, scale) values.
class Pool {
 public:
  explicit Pool(cuda::CudaBackend& gpu) : gpu_(gpu) {}
  Tensor make(DType dtype, std::initializer_list<int64_t> dims, float scale = 1.0f) {
    Tensor t(nullptr, dtype, dims, Device::CUDA);
    buffers_.push_back(gpu_.allocate(t.bytes()));
    t.data = buffers_.back().data();
    if (dtype == DType::I32) return t;
    constexpr int64_t kChunk = int64_t{1} << 20;
    std::vector<float> random(static_cast<size_t>(kChunk));
    Rng rng(buffers_.size(), 3);
    for (float& v : random) v = rng.normal() * scale;
    std::vector<uint8_t> converted(static_cast<size_t>(kChunk) * dtype_size(dtype));
    convert_elements(random.data(), DType::F32, converted.data(), dtype, random.size());
    for (int64_t at = 0; at < t.numel(); at += kChunk) {
      const int64_t n = std::min(kChunk, t.numel() - at);
      Tensor dst(static_cast<char*>(t.data) + at * static_cast<int64_t>(dtype_size(dtype)), dtype, {n}, Device::CUDA);
      gpu_.copy(Tensor(converted.data(), dtype, {n}), dst);
    }
    return t;
  }
  // Token ids in [0, range): uniform, or, with zipf, text-like (id k drawn with weight
  // 1/(k+1), so the commonest id fills several percent of a batch, as "," or " the" do).
  Tensor ids(std::initializer_list<int64_t> dims, int64_t range, bool zipf = false) {
    Tensor t = make(DType::I32, dims);
    std::vector<int32_t> host(static_cast<size_t>(t.numel()));
    Rng rng(99, 4);
    std::vector<double> cumulative;
    if (zipf) {
      double total = 0.0;
      for (int64_t k = 0; k < range; ++k) cumulative.push_back(total += 1.0 / static_cast<double>(k + 1));
      for (double& c : cumulative) c /= total;
    }
    for (int32_t& id : host) {
      if (!zipf) {
        id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(range)));
        continue;
      }
      const double u = rng.uniform();
      const auto at = std::lower_bound(cumulative.begin(), cumulative.end(), u);
      id = static_cast<int32_t>(std::min<int64_t>(at - cumulative.begin(), range - 1));
    }
    gpu_.copy(Tensor(host.data(), DType::I32, {t.numel()}), t);
    return t;
  }

 private:
  cuda::CudaBackend& gpu_;
  std::vector<Buffer> buffers_;
};

struct Row {
  std::string name;
  double ms, bytes, flops, floor_ms;
};

class Bench {
 public:
  Bench(cuda::CudaBackend& gpu, int iters, double bandwidth, double peak_flops)
      : gpu_(gpu), iters_(iters), bandwidth_(bandwidth), peak_flops_(peak_flops) {}

  // in_total false: printed, left out of TOTAL (a kernel kept only to be timed against its successor).
  void run(const std::string& name, double bytes, double flops, const std::function<void()>& op,
           bool in_total = true) {
    for (int i = 0; i < 3; ++i) op();
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, gpu_.stream()));
    for (int i = 0; i < iters_; ++i) op();
    CUDA_CHECK(cudaEventRecord(stop, gpu_.stream()));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float total_ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&total_ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    const double ms = total_ms / iters_;
    const double floor_ms = std::max(bytes / bandwidth_, flops / peak_flops_) * 1e3;
    if (in_total) rows_.push_back({name, ms, bytes, flops, floor_ms});
    std::printf("%-58s %10.1f us %8.0f GB/s %8.1f TFLOP/s  floor %9.1f us  %5.1f%%\n", name.c_str(), ms * 1e3,
                bytes / ms / 1e6, flops / ms / 1e9, floor_ms * 1e3, 100.0 * floor_ms / ms);
    std::fflush(stdout);
  }

  void summary() const {
    double total = 0.0, floor = 0.0;
    for (const Row& r : rows_) {
      total += r.ms;
      floor += r.floor_ms;
    }
    std::printf("TOTAL %.3f ms over %zu ops, floor %.3f ms (%.1f%% of floor)\n", total, rows_.size(), floor,
                100.0 * floor / total);
  }

 private:
  cuda::CudaBackend& gpu_;
  int iters_;
  double bandwidth_, peak_flops_;
  std::vector<Row> rows_;
};

// Device-to-device copy bandwidth (read + write bytes per second) over a 1 GiB buffer.
double measure_copy_bandwidth(cuda::CudaBackend& gpu) {
  const size_t bytes = size_t{1} << 30;
  Buffer a = gpu.allocate(bytes), b = gpu.allocate(bytes);
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, gpu.stream()));
  CUDA_CHECK(cudaEventRecord(start, gpu.stream()));
  constexpr int kReps = 10;
  for (int i = 0; i < kReps; ++i)
    CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, gpu.stream()));
  CUDA_CHECK(cudaEventRecord(stop, gpu.stream()));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return 2.0 * static_cast<double>(bytes) * kReps / (ms * 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("bench_kernels: no usable GPU\n");
    return 77;
  }
  try {
    cuda::CudaBackend gpu(0);
    const int64_t B = o.batch, T = o.seq, C = o.channels, NH = o.heads, V = 50257, Vp = 50304, N = B * T;
    const int64_t params = 124475904;  // GPT-2 124M with the padded vocabulary
    const DType dt = o.dtype;
    const double es = static_cast<double>(dtype_size(dt));
    const double bandwidth = measure_copy_bandwidth(gpu);
    const double peak = dt == DType::F32 ? kPeakFp32Flops : kPeakBf16Flops;
    std::printf("bench_kernels: %s, B=%lld T=%lld %s, copy bandwidth %.0f GB/s, peak %.0f TFLOP/s\n",
                gpu.name().c_str(), static_cast<long long>(B), static_cast<long long>(T), dtype_name(dt),
                bandwidth / 1e9, peak / 1e12);
    std::printf("%-58s %13s %13s %16s %16s %6s\n", "op", "time", "bandwidth", "compute", "floor", "eff");
    Bench bench(gpu, o.iters, bandwidth, peak);
    Pool pool(gpu);

    const Tensor x = pool.make(dt, {N, C}), x2 = pool.make(dt, {N, C}), y = pool.make(dt, {N, C});
    const Tensor qkv = pool.make(dt, {B, T, 3 * C}), dqkv = pool.make(dt, {B, T, 3 * C});
    const Tensor att = pool.make(dt, {B, T, C}), datt = pool.make(dt, {B, T, C});
    const Tensor lse = pool.make(DType::F32, {B, NH, T});
    const Tensor w_qkv = pool.make(dt, {C, 3 * C}, 0.02f), b_qkv = pool.make(dt, {3 * C});
    const Tensor w_fc = pool.make(dt, {C, 4 * C}, 0.02f), b_fc = pool.make(dt, {4 * C});
    const Tensor w_proj = pool.make(dt, {4 * C, C}, 0.02f), b_c = pool.make(dt, {C});
    const Tensor h = pool.make(dt, {N, 4 * C}), h_pre = pool.make(dt, {N, 4 * C}), dh = pool.make(dt, {N, 4 * C});
    const Tensor dw_fc = pool.make(DType::F32, {C, 4 * C}), db_fc = pool.make(DType::F32, {4 * C});
    const Tensor ln_w = pool.make(dt, {C}), ln_b = pool.make(dt, {C});
    const Tensor mean = pool.make(DType::F32, {N}), rstd = pool.make(DType::F32, {N}), res = pool.make(dt, {N, C});
    const Tensor dln_w = pool.make(DType::F32, {C}), dln_b = pool.make(DType::F32, {C});
    const Tensor wte = pool.make(dt, {Vp, C}, 0.02f), wpe = pool.make(dt, {1024, C}, 0.02f);
    const Tensor dwte = pool.make(DType::F32, {Vp, C}), dwpe = pool.make(DType::F32, {1024, C});
    const Tensor tokens = pool.ids({B, T}, V), targets = pool.ids({N}, V);
    const Tensor text_tokens = pool.ids({B, T}, V, true);
    const Tensor logits = pool.make(dt, {N, Vp}), losses = pool.make(DType::F32, {N});

    const double nc = static_cast<double>(N * C);
    const double gemm_flops_c = 2.0 * N * C * C;
    bench.run("matmul qkv (N,C)x(C,3C)+b", es * (nc + C * 3.0 * C + 3 * nc), 3 * gemm_flops_c,
              [&] { gpu.matmul(qkv, x, w_qkv, b_qkv, false, false, false); });
    bench.run("matmul fc (N,C)x(C,4C)+b", es * (nc + 4.0 * C * C + 4 * nc), 4 * gemm_flops_c,
              [&] { gpu.matmul(h, x, w_fc, b_fc, false, false, false); });
    // Whether cuBLASLt took a GELU epilogue for these shapes, from one untimed call.
    const auto epilogue_taken = [&](const std::function<void()>& call) {
      const size_t before = gpu.unfused_epilogue_gemms();
      call();
      return gpu.unfused_epilogue_gemms() == before ? std::string(" [fused]") : std::string(" [unfused: refused]");
    };
    const auto gelu_fc = [&] { gpu.matmul_gelu(h, h_pre, x, w_fc, b_fc, false, false); };
    bench.run("matmul_gelu fc (GELU epilogue)" + epilogue_taken(gelu_fc), es * (nc + 4.0 * C * C + 8 * nc),
              4 * gemm_flops_c, gelu_fc);
    bench.run("matmul fc proj (N,4C)x(4C,C)+b", es * (4 * nc + 4.0 * C * C + nc), 4 * gemm_flops_c,
              [&] { gpu.matmul(y, h, w_proj, b_c, false, false, false); });
    bench.run("matmul dinp fc = dh x W^T", es * (4 * nc + 4.0 * C * C + nc), 4 * gemm_flops_c,
              [&] { gpu.matmul(y, dh, w_fc, Tensor(), false, true, false); });
    const auto dgelu_proj = [&] { gpu.matmul_dgelu(dh, h_pre, y, w_proj, false, true); };
    bench.run("matmul_dgelu dinp proj (DGELU epilogue)" + epilogue_taken(dgelu_proj),
              es * (nc + 4.0 * C * C + 8 * nc), 4 * gemm_flops_c, dgelu_proj);
    bench.run("matmul dW fc += x^T dh (fp32 acc)", es * (nc + 4 * nc) + 8.0 * 4 * C * C, 4 * gemm_flops_c,
              [&] { gpu.matmul(dw_fc, x, dh, Tensor(), true, false, true); });
    // The same product with dbias from cuBLASLt's bias-gradient epilogue (what training runs in
    // 16 bits), against the two rows above and "bias_backward" below.
    const auto dw_dbias_fc = [&] { gpu.linear_backward(Tensor(), dw_fc, db_fc, dh, x, w_fc); };
    bench.run("matmul dW fc + dbias (BGRADA epilogue)" + epilogue_taken(dw_dbias_fc),
              es * (nc + 4 * nc) + 8.0 * 4 * C * C, 4 * gemm_flops_c, dw_dbias_fc);
    bench.run("matmul lm head (N,C)x(Vp,C)^T", es * (nc + Vp * C + static_cast<double>(N) * Vp),
              2.0 * N * C * Vp, [&] { gpu.matmul(logits, x, wte, Tensor(), false, true, false); });
    bench.run("bias_backward (N,4C)", es * 4 * nc + 8.0 * 4 * C, 0, [&] { gpu.bias_backward(db_fc, dh); });
    bench.run("layernorm_forward", es * 2 * nc + 8.0 * N, 0,
              [&] { gpu.layernorm_forward(y, mean, rstd, x, ln_w, ln_b); });
    // Fused with the residual add (read a and b, write residual and y); left out of TOTAL, which
    // holds the add and the layernorm above.
    bench.run("residual_layernorm_forward", es * 4 * nc + 8.0 * N, 0,
              [&] { gpu.residual_layernorm_forward(res, y, mean, rstd, x, x2, ln_w, ln_b); }, false);
    bench.run("layernorm_backward", es * 4 * nc + 8.0 * N, 0,
              [&] { gpu.layernorm_backward(x2, dln_w, dln_b, y, x, ln_w, mean, rstd); });
    bench.run("gelu_forward (N,4C)", es * 8 * nc, 0, [&] { gpu.gelu_forward(h, h_pre); });
    bench.run("gelu_backward (N,4C)", es * 12 * nc, 0, [&] { gpu.gelu_backward(dh, dh, h_pre); });
    bench.run("add residual (N,C)", es * 3 * nc, 0, [&] { gpu.add(y, y, x); });
    // QKᵀ and PV at 2·T²·hd FLOPs each per (b, h), half of it under the causal mask; the
    // backward's five products count as 2.5 forwards. The label names the kernels the launcher
    // picks for these tensors.
    const int64_t hd = C / NH;
    const double attn_flops = 4.0 * B * NH * T * T * hd / 2;
    const cuda::ElemType et = dt == DType::BF16 ? cuda::ElemType::BF16 : cuda::ElemType::F32;
    const bool attn_tensor_cores = cuda::attention_uses_tensor_cores(
        et, hd, cuda::aligned16(qkv.data) && cuda::aligned16(att.data) && cuda::aligned16(dqkv.data) &&
                    cuda::aligned16(datt.data));
    const bool bf16_tensor_cores = attn_tensor_cores && dt == DType::BF16;
    const std::string attn_path = !attn_tensor_cores  ? " [fp32 cores]"
                                  : bf16_tensor_cores ? " [tensor cores, P rounded once]"
                                                      : " [tensor cores]";
    const auto attention_rows = [&](const std::string& label, bool in_total) {
      bench.run("attention_forward" + label, es * (3 * nc + nc) + 4.0 * B * NH * T, attn_flops,
                [&] { gpu.attention_forward(att, lse, qkv, static_cast<int>(NH)); }, in_total);
      bench.run("attention_backward" + label, es * (3 * nc + 3 * nc + 2 * nc) + 4.0 * B * NH * T, 2.5 * attn_flops,
                [&] { gpu.attention_backward(dqkv, datt, qkv, att, lse, static_cast<int>(NH)); }, in_total);
    };
    // Training's default (model.attention_probabilities: rounded) counts in TOTAL; the hi + lo
    // split (within the 2 ulps the op tests hold bf16 to) is timed beside it.
    gpu.set_attention_probabilities(AttentionProbabilities::Rounded);
    attention_rows(attn_path, true);
    if (bf16_tensor_cores) {
      gpu.set_attention_probabilities(AttentionProbabilities::Split);
      attention_rows(" [tensor cores, P as bf16 hi+lo]", false);
    }
    const int vocab = static_cast<int>(V);
    bench.run("embedding_forward", es * 3 * nc + 4.0 * N, 0, [&] { gpu.embedding_forward(x, tokens, wte, wpe, 0, vocab); });
    bench.run("embedding_backward", es * nc + 8.0 * 2 * nc + 4.0 * N, 0,
              [&] { gpu.embedding_backward(dwte, dwpe, x, tokens, 0, vocab); });
    bench.run("embedding_backward (text-like ids)", es * nc + 8.0 * 2 * nc + 4.0 * N, 0,
              [&] { gpu.embedding_backward(dwte, dwpe, x, text_tokens, 0, vocab); });
    // The benchmark rewrites the same logits each pass; values stay finite (dlogits are bounded).
    bench.run("softmax_cross_entropy + dlogits", es * 2.0 * N * Vp, 0,
              [&] { gpu.softmax_cross_entropy(logits, losses, targets, static_cast<int>(V), true, 1.0f / N); });
    // Tensor parallelism at TP 2, without the all-reduces between passes: the three
    // cross-entropy passes on the second rank's half of the vocabulary (its padding included)
    // read the slice twice and rewrite it once, against the fused row above over all columns.
    {
      const int64_t Vs = Vp / 2;
      const Tensor slice_logits = pool.make(dt, {N, Vs}), row_max = pool.make(DType::F32, {N});
      const Tensor stats = pool.make(DType::F32, {2, N}), dwte_slice = pool.make(DType::F32, {Vs, C});
      bench.run("vocab_parallel CE 3 passes + dlogits (TP 2 slice)", es * 4.0 * N * Vs + 24.0 * N, 0, [&] {
        gpu.vocab_parallel_max(row_max, slice_logits, Vs, static_cast<int>(V));
        gpu.vocab_parallel_sum_exp(stats, slice_logits, row_max, targets, Vs, static_cast<int>(V));
        gpu.vocab_parallel_cross_entropy(slice_logits, losses, targets, row_max, stats, Vs, static_cast<int>(V), true,
                                         1.0f / N);
      });
      // The first rank's slice: text-like ids fall mostly in it, the busier rank.
      bench.run("embedding_backward (TP 2 slice of rank 0, text-like ids)", es * nc + 8.0 * 2 * nc + 4.0 * N, 0,
                [&] { gpu.embedding_backward(dwte_slice, dwpe, x, text_tokens, 0, vocab); });
    }

    const Tensor p = pool.make(DType::F32, {params}), g = pool.make(DType::F32, {params}, 1e-3f);
    const Tensor m = pool.make(DType::F32, {params}, 0.0f), v = pool.make(DType::F32, {params}, 0.0f);
    const Tensor p16 = pool.make(DType::BF16, {params});
    AdamWArgs args;
    args.lr = 6e-4;
    args.weight_decay = 0.1;
    args.bias_correction1 = 0.1;
    args.bias_correction2 = 0.05;
    bench.run("adamw_update + bf16 copy (124M)", 30.0 * params, 0,
              [&] { gpu.adamw_update(p, g, m, v, p16, args); });
    bench.run("sum_squares (124M fp32)", 4.0 * params, 0, [&] { (void)gpu.sum_squares(g); });
    bench.run("cast fp32 -> bf16 (124M)", 6.0 * params, 0, [&] { gpu.cast(p, p16); });
    bench.summary();
    const MemoryStats mem = gpu.memory_stats();
    std::printf("memory: strata peak %.2f GiB, device used %.2f of %.2f GiB, %zu GEMM plans cached\n",
                mem.peak_allocated_bytes / 1073741824.0, mem.device_used_bytes / 1073741824.0,
                mem.device_total_bytes / 1073741824.0, gpu.gemm_plans_cached());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
