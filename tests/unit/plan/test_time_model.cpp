// strata plan's step-time model: its bubble is the schedule tables' own, its ZeRO and TP
// collectives carry the volumes the traffic tests hold the communicators to, recompute adds what
// it recomputes, and hidden communication never exceeds the compute it hides under.
#include "catch_compat.h"

#include "plan/plan_internal.h"
#include "round_machine.h"

using namespace strata;

namespace {

ModelShape shape(int tp, int pp, int v, int micro_batches, PipeSchedule schedule) {
  ModelShape m;
  m.d_model = 1024;
  m.n_head = 16;
  m.seq_len = 1024;
  m.padded_vocab = 51200;
  m.micro_batch = 2;
  m.grad_accum = micro_batches;
  m.tp = tp;
  m.pp = pp;
  m.virtual_stages = v;
  m.schedule = schedule;
  m.elem_bytes = 2;
  m.peak_tflops = 100;
  m.memory_bandwidth_gbs = 1000;
  return m;
}

// pp stages of identical chunks (no embedding or head, so every stage costs the same).
std::vector<StageShape> even_stages(int pp, int v, int layers_per_chunk) {
  std::vector<StageShape> stages(static_cast<size_t>(pp));
  for (StageShape& s : stages) {
    s.chunks.assign(static_cast<size_t>(v), ChunkShape{layers_per_chunk, false, false});
    s.params = 1e9;
  }
  return stages;
}

}  // namespace

TEST_CASE("the bubble the plan charges is the schedule tables' own") {
  const HardwareProfile hw = round_machine();
  for (PipeSchedule kind : {PipeSchedule::OneFOneB, PipeSchedule::GPipe, PipeSchedule::Interleaved}) {
    const int v = kind == PipeSchedule::Interleaved ? 2 : 1;
    for (int p : {2, 4}) {
      for (int m : {p, 4 * p}) {
        INFO(pipe_schedule_name(kind) << " p=" << p << " m=" << m);
        const ModelShape model = shape(1, p, v, m, kind);
        const StepTime t = step_time(model, hw, even_stages(p, v, 2), DpShape{});
        const double pipeline = t.compute + t.tp_comm + t.pp_comm + t.bubble;
        CHECK(t.bubble / pipeline == Approx(pipe_bubble_theory({kind, p, v, m})).epsilon(1e-9));
      }
    }
  }
}

TEST_CASE("ZeRO's collectives carry the volumes the traffic tests hold the communicators to") {
  const HardwareProfile hw = round_machine();
  const ModelShape model = shape(1, 1, 1, 4, PipeSchedule::OneFOneB);
  const double psi = 1e9, d = 8, bw = 100e9, m = 4, grad = 4, param = 2;
  const double share = (d - 1) / d * psi / bw;
  const double want[4] = {2 * share * grad, share * (grad + param), share * (m * grad + param),
                          share * (m * grad + 2 * m * param)};
  for (int stage = 0; stage < 4; ++stage) {
    INFO("ZeRO " << stage);
    DpShape dp;
    dp.ranks = 8;
    dp.zero_stage = stage;
    dp.comm_bytes = grad;
    std::vector<StageShape> stages = even_stages(1, 1, 4);
    stages[0].params = psi;
    const StepTime t = step_time(model, hw, stages, dp);
    CHECK(t.dp_comm == Approx(want[stage]).epsilon(1e-12));
  }
}

TEST_CASE("TP moves a layer's activations four times per micro-batch, six with full recompute") {
  const HardwareProfile hw = round_machine();
  for (ActivationRecompute mode : {ActivationRecompute::None, ActivationRecompute::Full}) {
    ModelShape model = shape(4, 1, 1, 1, PipeSchedule::OneFOneB);
    model.recompute = mode;
    const ChunkCost c = chunk_cost(model, hw, ChunkShape{1, false, false});
    const double bytes = static_cast<double>(model.micro_batch) * model.seq_len * model.d_model * model.elem_bytes;
    const double all_reduce = 2.0 * 3 / 4 * bytes / 100e9;
    CHECK(c.tp_forward + c.tp_backward == Approx((mode == ActivationRecompute::Full ? 6 : 4) * all_reduce));
  }
}

TEST_CASE("recompute adds a layer's forward (full) or its attention core (selective) to backward") {
  const HardwareProfile hw = round_machine();
  ModelShape model = shape(1, 1, 1, 1, PipeSchedule::OneFOneB);
  const ChunkCost none = chunk_cost(model, hw, ChunkShape{3, false, false});
  model.recompute = ActivationRecompute::Full;
  const ChunkCost full = chunk_cost(model, hw, ChunkShape{3, false, false});
  model.recompute = ActivationRecompute::Selective;
  const ChunkCost selective = chunk_cost(model, hw, ChunkShape{3, false, false});
  CHECK(full.backward - none.backward == Approx(none.forward));
  const double attention = 3 * 2.0 * model.d_model * model.seq_len * model.micro_batch * model.seq_len / 100e12;
  CHECK(selective.backward - none.backward == Approx(attention));
  CHECK(full.forward == none.forward);
}

TEST_CASE("communication hides under compute at most") {
  HardwareProfile hw = round_machine();
  hw.intra_node = hw.inter_node = {0.01, 0};  // so slow that nothing could hide it all
  for (int stage = 0; stage < 4; ++stage) {
    DpShape dp;
    dp.ranks = 8;
    dp.zero_stage = stage;
    dp.overlap_comm = true;
    dp.bucket_elements = 1e6;
    const StepTime t = step_time(shape(1, 1, 1, 4, PipeSchedule::OneFOneB), hw, even_stages(1, 1, 4), dp);
    INFO("ZeRO " << stage);
    CHECK(t.dp_hidden <= t.compute);
    CHECK(t.dp_hidden < t.dp_comm);
  }
}

TEST_CASE("a collective across nodes runs on as many network rails as its group has ranks per node") {
  HardwareProfile hw = round_machine();
  hw.intra_node = {240, 0};
  hw.inter_node = {20, 0};
  DpShape dp;
  dp.ranks = 32;
  const ModelShape model = shape(1, 1, 1, 1, PipeSchedule::OneFOneB);
  const double grad_bytes = 1e9 * dp.comm_bytes;  // even_stages: 1e9 parameters per rank
  const double ring = 2.0 * 31 / 32 * grad_bytes;  // an all-reduce's bytes per rank
  dp.across_nodes = false;
  CHECK(step_time(model, hw, even_stages(1, 1, 1), dp).dp_comm == Approx(ring / 240e9));
  dp.across_nodes = true;
  for (int per_node : {1, 2, 4, 8, 16}) {
    dp.ranks_per_node = per_node;
    INFO(per_node << " ranks per node");
    // k rails of 20 GB/s each, never faster than the links inside the node.
    const double bandwidth = std::min(240.0, per_node * 20.0) * 1e9;
    CHECK(step_time(model, hw, even_stages(1, 1, 1), dp).dp_comm == Approx(ring / bandwidth));
  }
}

TEST_CASE("stored attention scores cost their passes per head, fused attention its FLOPs") {
  HardwareProfile hw = round_machine();
  ModelShape model = shape(2, 1, 1, 1, PipeSchedule::OneFOneB);
  const ChunkShape layer{1, false, false};
  // The same width in more heads: fused attention costs the same, stored scores grow with them.
  ModelShape more_heads = model;
  more_heads.n_head = 2 * model.n_head;
  CHECK(chunk_cost(model, hw, layer).forward == Approx(chunk_cost(more_heads, hw, layer).forward));
  hw.attention_unfused = true;
  const ChunkCost few = chunk_cost(model, hw, layer), many = chunk_cost(more_heads, hw, layer);
  const double s = model.seq_len, e = model.elem_bytes;
  const double scores = model.micro_batch * (model.n_head / 2.0) * s * s;  // per TP rank (tp 2)
  CHECK(many.forward - few.forward == Approx(scores * (6 * e + 1) / 1000e9));
  CHECK(many.backward - few.backward == Approx(scores * (9 * e + 1) / 1000e9));
  // Against fused: the whole s × s products at the GEMM rate replace the causal core's FLOPs.
  hw.attention_unfused = false;
  const ChunkCost fused = chunk_cost(model, hw, layer);
  const double h = model.d_model, N = model.micro_batch * s;
  const double products = 4 * h * s * N / 2 / 100e12, causal = 2 * h * s * N / 2 / 100e12;
  CHECK(few.forward - fused.forward == Approx(products - causal + scores * (6 * e + 1) / 1000e9));
  CHECK(few.backward - fused.backward == Approx(2 * products - 2.5 * causal + scores * (9 * e + 1) / 1000e9));
}

TEST_CASE("a matrix product pays for partly filled edge tiles and a part-empty last wave, unless a weight's gradient splits its tokens") {
  HardwareProfile hw = round_machine();
  const double rate = 100e12, flops = 2.0 * 2000 * 1000 * 512;
  // No multiprocessors in the profile: the FLOPs at the rate.
  CHECK(matrix_product_s(2000, 1000, 512, 1, hw, rate) == Approx(flops / rate));
  hw.multiprocessors = 100;
  // 2000 × 1000 in 256 × 128 tiles (or 128 × 256): 8 × 8 = 64 tiles, 2,000,000 of their 2,097,152
  // values output, all in one wave of 100 tiles: 2,000,000 / (100 × 32768) of it used.
  CHECK(matrix_product_s(2000, 1000, 512, 1, hw, rate) == Approx(flops / rate * 100 * 32768 / 2e6));
  // Split along the inner dimension the 64 tiles fill 64% of a wave, and only the edges are lost.
  CHECK(matrix_product_s(2000, 1000, 512, 1, hw, rate, true) == Approx(flops / rate * 64 * 32768 / 2e6));
  // Three such products: 192 tiles, two waves.
  CHECK(matrix_product_s(2000, 1000, 512, 3, hw, rate) == Approx(3 * flops / rate * 200 * 32768 / 6e6));
  // The better orientation: thirty 384 × 256 products are 120 tiles of 256 × 128 (two waves, 45%
  // used) but 90 of 128 × 256 (one wave, 90%).
  CHECK(matrix_product_s(384, 256, 512, 30, hw, rate) == Approx(30 * 2.0 * 384 * 256 * 512 / rate / 0.9));

  // A layer at d_model 1024 and 2048 tokens (every dimension a whole number of tiles): forward, QKV
  // is 192 tiles (two waves), the projection and fc2 64 (one), fc1 256 (three); backward, the input
  // gradients are 64, 64, 64 and 256 tiles, while the weight gradients split their 2048 tokens and
  // lose nothing. The loss is each product's FLOPs times (waves × 100 / tiles − 1).
  ModelShape model = shape(1, 1, 1, 1, PipeSchedule::OneFOneB);
  const ChunkShape layer{1, false, false};
  hw.multiprocessors = 0;
  const ChunkCost whole = chunk_cost(model, hw, layer);
  hw.multiprocessors = 100;
  const ChunkCost tiled = chunk_cost(model, hw, layer);
  const double per_col = 2.0 * 2048 * 1024 / rate;  // a product's seconds per unit of its third dimension
  const double one = 100.0 / 64 - 1, three = 300.0 / 256 - 1, two = 200.0 / 192 - 1;
  CHECK(tiled.forward - whole.forward == Approx(per_col * (3072 * two + 1024 * one + 4096 * three + 4096 * one)));
  CHECK(tiled.backward - whole.backward == Approx(per_col * (3072 * one + 1024 * one + 4096 * one + 4096 * three)));
}

TEST_CASE("a step of many micro-batches is the simulated one extended at its last p micro-batches' rate") {
  // The schedules' steady phase repeats every p micro-batches: extending from 4p gives what the
  // whole step's tables give, for every schedule and cost ratio.
  for (PipeSchedule kind : {PipeSchedule::GPipe, PipeSchedule::OneFOneB, PipeSchedule::Interleaved}) {
    for (int p : {2, 3, 4, 8}) {
      for (int v : {1, 2, 3}) {
        if ((v > 1) != (kind == PipeSchedule::Interleaved)) continue;
        for (double ratio : {2.0, 2.375, 3.1}) {
          for (int m : {5 * p, 9 * p, 16 * p}) {
            const PipeShape shape{kind, p, v, m};
            INFO(pipe_schedule_name(kind) << " p=" << p << " v=" << v << " m=" << m << " ratio=" << ratio);
            const double whole = pipeline_makespan(shape, ratio, 64);
            CHECK(whole == Approx(simulate_pipeline(shape, 1.0, ratio).makespan).epsilon(1e-9));
            CHECK(pipeline_makespan(shape, ratio, 4) == Approx(whole).epsilon(1e-9));
          }
        }
      }
    }
  }
}
