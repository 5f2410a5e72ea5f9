// strata plan's step-time model: its bubble is the schedule tables' own, its ZeRO and TP
// collectives carry the volumes the traffic tests hold the communicators to, recompute adds what
// it recomputes, and hidden communication never exceeds the compute it hides under.
#include "catch_compat.h"

#include "plan/plan_internal.h"

using namespace strata;

namespace {

// A machine with round numbers: 100 TFLOP/s, 1000 GB/s, links of 100 GB/s and no latency.
HardwareProfile round_machine() {
  HardwareProfile hw;
  hw.name = "round";
  hw.memory_gib = 80;
  hw.memory_bandwidth_gbs = 1000;
  hw.peak_tflops_16bit = hw.peak_tflops_fp32 = 100;
  hw.gemm_efficiency = hw.attention_efficiency = hw.memory_efficiency = 1;
  hw.op_overhead_us = 0;
  hw.gpus_per_node = 8;
  hw.intra_node = hw.inter_node = {100, 0};
  hw.host_link_gbs = 50;
  hw.host_memory_gib = 1024;
  hw.host_memory_bandwidth_gbs = 400;
  return hw;
}

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
