// `strata plan --calibrate --out FILE`: measures the machine it runs on, with every rank of the
// job measuring at once (as they will train): the backend's matrix product (a large one for the
// peak; forward and backward at the model's shape for the efficiency), its attention core and a
// layer's elementwise passes forward and backward, streaming memory bandwidth, the cost of a tiny
// kernel, and an MPI all-reduce's bandwidth and latency. Rank 0 writes the profile.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>

#include "backend/backend.h"
#include "core/core.h"
#include "plan/plan_internal.h"
#include "train/train.h"

namespace strata {
namespace {

// The best time of `rounds` runs of fn (after one warm-up), the ranks lined up before each.
template <typename Fn>
double best_seconds(Backend& be, Comm& world, int rounds, Fn&& fn) {
  fn();
  be.synchronize();
  double best = std::numeric_limits<double>::max();
  for (int r = 0; r < rounds; ++r) {
    world.barrier();
    const Timer timer;
    fn();
    be.synchronize();
    best = std::min(best, timer.seconds());
  }
  return best;
}

struct Shape {
  int64_t tokens = 2048, d_model = 768, n_head = 12, batch = 1, seq = 2048;
};

Shape model_shape_of(const PlanOptions& o, int world_size) {
  Shape s;
  if (o.config_path.empty()) return s;
  PlanOptions whole = o;
  whole.explain = false;
  const Config cfg = load_plan_config(whole, world_size);
  s.d_model = *cfg.model.d_model;
  s.n_head = *cfg.model.n_head;
  s.seq = cfg.model.seq_len;
  s.batch = cfg.derived.micro_batch;
  s.tokens = s.batch * s.seq;
  return s;
}

struct Measured {
  double peak_tflops = 0, gemm_tflops = 0, attn_tflops = 0, stream_gbs = 0, elementwise_gbs = 0, op_us = 0;
  double peak_fp32_tflops = 0;  // a large fp32 product's (the same as peak_tflops on the CPU)
};

// The rate of an n × n × n product in dtype dt (the best of three).
double square_product_tflops(Backend& be, Comm& world, int64_t n, DType dt) {
  const size_t bytes = static_cast<size_t>(n * n) * dtype_size(dt);
  Buffer p = be.allocate(bytes), q = be.allocate(bytes), r = be.allocate(bytes);
  const double sec = best_seconds(be, world, 3, [&] {
    be.matmul(r.view(0, dt, {n, n}), p.view(0, dt, {n, n}), q.view(0, dt, {n, n}), {}, false, false, false);
  });
  return 2.0 * n * n * n / sec / 1e12;
}

// Normal values in a whole buffer of dt (the transcendental functions of GELU run at their
// true speed only away from zero).
void fill_random(Backend& be, const Buffer& buf, DType dt) {
  const int64_t n = static_cast<int64_t>(buf.bytes() / dtype_size(dt));
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = rng_normal(7, 0, static_cast<uint64_t>(i));
  const Tensor from(host.data(), DType::F32, {n});
  if (dt == DType::F32) {
    be.copy(from, buf.view(0, dt, {n}));
    return;
  }
  Buffer wide = be.allocate(static_cast<size_t>(n) * 4);
  be.copy(from, wide.view(0, DType::F32, {n}));
  be.cast(wide.view(0, DType::F32, {n}), buf.view(0, dt, {n}));
}

// Scratch tensors of one layer's shapes: N token rows of C (and 4C) elements.
struct LayerScratch {
  LayerScratch(Backend& be, const Shape& s, DType dt)
      : dt(dt), e(dtype_size(dt)), N(s.tokens), C(s.d_model), a(be.allocate(N * 4 * C * e)),
        b(be.allocate(N * 4 * C * e)), c(be.allocate(N * 4 * C * e)), w(be.allocate(C * 4 * C * e)),
        dw(be.allocate(C * 4 * C * e)), stats(be.allocate(N * 8 + s.batch * s.n_head * s.seq * 4)) {
    for (const Buffer* buf : {&a, &b, &c, &w, &dw}) fill_random(be, *buf, dt);
  }
  Tensor rows(const Buffer& buf, int64_t width) const { return buf.view(0, dt, {N, width}); }
  Tensor vec(const Buffer& buf) const { return buf.view(0, dt, {C}); }
  Tensor stat(int64_t i) const { return stats.view(static_cast<size_t>(i * N * 4), DType::F32, {N}); }
  DType dt;
  int64_t e, N, C;
  Buffer a, b, c, w, dw, stats;
};

// The model's own accounting, timed: a layer's widest matrix product forward and backward (3 × 2·N·C·4C
// FLOPs), the causal attention core forward and backward (2·C·T·N FLOPs forward, 2.5 times that
// backward), and a layer's elementwise passes forward and backward (two layernorms, two residual
// adds, the GELU: 3 × 18·C bytes per token row in the time model).
Measured measure_backend(Backend& be, Comm& world, const Shape& s, DType dt) {
  Measured m;
  LayerScratch x(be, s, dt);
  const int64_t N = x.N, C = x.C;
  // The peak: a large square product (and on a GPU an fp32 one, which runs without tensor cores).
  const bool gpu = be.device() == Device::CUDA;
  log_info("calibrate: matrix products (a large one, then the layer's own forward and backward)");
  m.peak_tflops = square_product_tflops(be, world, gpu ? 8192 : 1024, dt);
  m.peak_fp32_tflops = gpu ? square_product_tflops(be, world, 4096, DType::F32) : m.peak_tflops;
  const Tensor w = x.w.view(0, dt, {C, 4 * C}), dw = x.dw.view(0, dt, {C, 4 * C});
  const double gemm = best_seconds(be, world, 5, [&] {
    be.matmul(x.rows(x.b, 4 * C), x.rows(x.a, C), w, {}, false, false, false);
    be.matmul(x.rows(x.c, C), x.rows(x.b, 4 * C), w, {}, false, true, false);
    be.matmul(dw, x.rows(x.a, C), x.rows(x.b, 4 * C), {}, true, false, false);
  });
  m.gemm_tflops = 3 * 2.0 * N * C * 4 * C / gemm / 1e12;
  const Tensor qkv = x.a.view(0, dt, {s.batch, s.seq, 3 * C}), dqkv = x.c.view(0, dt, {s.batch, s.seq, 3 * C});
  const Tensor out = x.b.view(0, dt, {s.batch, s.seq, C}), dout = x.b.view(N * C * x.e, dt, {s.batch, s.seq, C});
  const Tensor lse = x.stats.view(static_cast<size_t>(N * 8), DType::F32, {s.batch, s.n_head, s.seq});
  const int heads = static_cast<int>(s.n_head);
  log_info("calibrate: the attention core forward and backward");
  const double attn = best_seconds(be, world, 3, [&] {
    be.attention_forward(out, lse, qkv, heads);
    be.attention_backward(dqkv, dout, qkv, out, lse, heads);
  });
  m.attn_tflops = 3.5 * 2.0 * C * s.seq * N / attn / 1e12;
  log_info("calibrate: a layer's elementwise passes, memory bandwidth, a tiny kernel");
  const double elementwise = best_seconds(be, world, 5, [&] {
    for (int i = 0; i < 2; ++i) {
      be.layernorm_forward(x.rows(x.b, C), x.stat(0), x.stat(1), x.rows(x.a, C), x.vec(x.w), x.vec(x.dw));
      be.add(x.rows(x.c, C), x.rows(x.a, C), x.rows(x.b, C));
      be.layernorm_backward(x.rows(x.c, C), x.vec(x.dw), x.vec(x.dw), x.rows(x.b, C), x.rows(x.a, C), x.vec(x.w),
                            x.stat(0), x.stat(1));
      be.add(x.rows(x.b, C), x.rows(x.a, C), x.rows(x.c, C));
    }
    be.gelu_forward(x.rows(x.b, 4 * C), x.rows(x.a, 4 * C));
    be.gelu_backward(x.rows(x.c, 4 * C), x.rows(x.b, 4 * C), x.rows(x.a, 4 * C));
  });
  m.elementwise_gbs = 3 * 18.0 * C * x.e * N / elementwise / 1e9;
  const int64_t big = (int64_t{64} << 20) / 4;  // 64 MiB of fp32 per operand
  Buffer p = be.allocate(big * 4), q = be.allocate(big * 4), r = be.allocate(big * 4);
  const double stream = best_seconds(be, world, 5, [&] {
    be.add(r.view(0, DType::F32, {big}), p.view(0, DType::F32, {big}), q.view(0, DType::F32, {big}));
  });
  m.stream_gbs = 3.0 * big * 4 / stream / 1e9;
  const double tiny = best_seconds(be, world, 3, [&] {
    for (int i = 0; i < 100; ++i)
      be.add(r.view(0, DType::F32, {16}), p.view(0, DType::F32, {16}), q.view(0, DType::F32, {16}));
  });
  m.op_us = tiny / 100 * 1e6;
  return m;
}

// A ring all-reduce's latency per step (a 4-byte one over 2(p−1) steps) and bus bandwidth.
LinkProfile measure_link(Comm& world) {
  const int p = world.size();
  if (p < 2) return {};
  std::vector<float> small(1), big(static_cast<size_t>(16 << 20) / 4);
  double t_small = std::numeric_limits<double>::max(), t_big = t_small;
  for (int r = 0; r < 5; ++r) {
    world.barrier();
    Timer timer;
    for (int i = 0; i < 50; ++i) world.all_reduce(Tensor(small.data(), DType::F32, {1}));
    t_small = std::min(t_small, timer.seconds() / 50);
    world.barrier();
    timer.reset();
    world.all_reduce(Tensor(big.data(), DType::F32, {static_cast<int64_t>(big.size())}));
    t_big = std::min(t_big, timer.seconds());
  }
  const double steps = 2.0 * (p - 1);
  const double latency = t_small / steps;
  const double bytes = 2.0 * (p - 1) / p * static_cast<double>(big.size() * 4);
  return {bytes / std::max(1e-9, t_big - steps * latency) / 1e9, latency * 1e6};
}

}  // namespace

int run_calibration(const MpiRuntime* mpi, const PlanOptions& o) {
  if (!mpi) throw std::logic_error("run_calibration: MPI is not up");
  if (o.calibrate_out.empty()) throw UserError("strata plan --calibrate: give --out FILE (the profile to write)");
  const Shape shape = model_shape_of(o, mpi->world_size());
  std::unique_ptr<Comm> world = make_mpi_comm(mpi->world(), "world");
  const int local = mpi->local_size();
  std::unique_ptr<Backend> be;
#ifdef STRATA_HAVE_CUDA
  if (cuda_device_count() > 0) be = make_cuda_backend(mpi->local_rank() % cuda_device_count());
#endif
  if (!be) {
    be = make_cpu_backend();
    limit_blas_threads(*mpi);
  }
  const bool gpu = be->device() == Device::CUDA;
  log_info("calibrating {} rank(s) ({} per node) on the {} backend at d_model {}, {} tokens per micro-batch",
           world->size(), local, gpu ? "CUDA" : "CPU", shape.d_model, shape.tokens);
  if (world->size() == 1 && mpi->world_rank() == 0) {
    log_warn("calibrating one rank: no link between ranks is measured (the profile's links are a copy through "
             "memory) and its node holds one rank; run it under mpirun with the ranks per node the job will use");
  }
  const Measured m = measure_backend(*be, *world, shape, gpu ? DType::BF16 : DType::F32);
  const LinkProfile link = measure_link(*world);
  HardwareProfile hw;
  // The file's name without its extension, in letters, digits, '.', '_' and '-'.
  const std::string file = o.calibrate_out.substr(o.calibrate_out.find_last_of('/') + 1);
  for (char c : file.substr(0, file.rfind('.'))) hw.name += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ? c : '-';
  if (hw.name.empty()) hw.name = "calibrated";
  hw.gpu = gpu;
  // A CPU node's rates are the sum of its ranks' (each measured while the others ran).
  const double node = gpu ? 1 : local;
  hw.peak_tflops_16bit = m.peak_tflops * node;
  hw.peak_tflops_fp32 = m.peak_fp32_tflops * node;
  hw.gemm_efficiency = std::min(1.0, m.gemm_tflops / m.peak_tflops);
  hw.attention_efficiency = std::min(1.0, m.attn_tflops / m.peak_tflops);
  hw.memory_bandwidth_gbs = m.stream_gbs * node;
  hw.memory_efficiency = std::min(1.0, m.elementwise_gbs / m.stream_gbs);
  hw.op_overhead_us = m.op_us;
  hw.gpus_per_node = local;
  if (gpu) {
    const MemoryStats st = be->memory_stats();
    hw.memory_gib = static_cast<double>(st.device_total_bytes) / (1 << 30);
    hw.reserved_gib = static_cast<double>(st.device_used_bytes) / (1 << 30) + 1.0;
  } else {
    hw.memory_gib = static_cast<double>(meminfo_bytes("MemTotal:")) / (1 << 30);
    hw.reserved_gib = static_cast<double>(meminfo_bytes("MemTotal:") - meminfo_bytes("MemAvailable:")) / (1 << 30);
  }
  hw.host_memory_gib = static_cast<double>(meminfo_bytes("MemTotal:")) / (1 << 30);
  hw.host_memory_bandwidth_gbs = gpu ? m.stream_gbs : hw.memory_bandwidth_gbs;
  hw.host_link_gbs = gpu ? 25 : hw.memory_bandwidth_gbs;
  // One rank measures no link: a message then costs what copying it through memory does.
  hw.intra_node = link.bandwidth_gbs > 0 ? link : LinkProfile{hw.memory_bandwidth_gbs / 2, 1};
  hw.inter_node = hw.intra_node;
  if (mpi->world_rank() == 0) {
    const std::string source = fmt::format(
        "strata plan --calibrate on {} ({} rank(s), {} per node), d_model {}, {} tokens per micro-batch; peak = a "
        "large matrix product's measured rate; gemm_efficiency at the model's own shape (multiprocessors 0: its "
        "tiles' losses are in it); inter_node = intra_node (one node measured){}",
        mpi->hostname(), world->size(), local, shape.d_model, shape.tokens,
        gpu ? "; host_link_gbs not measured (PCIe Gen4 x16 assumed)" : "");
    std::ofstream out(o.calibrate_out);
    out << hardware_profile_yaml(hw, source);
    if (!out) throw UserError(fmt::format("--out: cannot write {}", o.calibrate_out));
    log_info("peak {:.3g} TFLOP/s, model GEMM {:.0f}%, attention {:.0f}%, memory {:.3g} GB/s (elementwise {:.0f}%), "
             "kernel {:.2g} µs, link {:.3g} GB/s {:.3g} µs; wrote {}",
             hw.peak_tflops_16bit, 100 * hw.gemm_efficiency, 100 * hw.attention_efficiency, hw.memory_bandwidth_gbs,
             100 * hw.memory_efficiency, hw.op_overhead_us, hw.intra_node.bandwidth_gbs, hw.intra_node.latency_us,
             o.calibrate_out);
  }
  return 0;
}

}  // namespace strata
