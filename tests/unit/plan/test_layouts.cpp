// A layout the planner predicts is the config `strata train` runs: config_for_layout (what the
// planner resolves and --write writes) equals the config file loaded with layout_overrides (what
// `sweep.sh --from-plan` passes as --set), for layouts that change every axis, from a base with an
// explicit pipeline partition, with overlap_comm given and not.
#include "catch_compat.h"

#include <algorithm>
#include <vector>

#include "plan/plan.h"
#include "round_machine.h"

using namespace strata;

namespace {

const char* kBase = R"(
train_batch_size: 32
train_micro_batch_size_per_gpu: 4
bf16: {enabled: true}
zero_optimization: {stage: 1}
model: {n_layer: 8, n_head: 4, d_model: 64, vocab_size: 256, seq_len: 32}
parallelism:
  pipeline_model_parallel_size: 2
  pipeline: {partition: [3, 5]}
data: {train: /nonexistent/*.bin}
)";

}  // namespace

TEST_CASE("a planned layout is the same config whether resolved by the planner or given as --set overrides") {
  const Config base = load_config_text(kBase, {}, 4, "base");
  using R = ActivationRecompute;
  const std::vector<Layout> layouts = {
      {4, 1, 2, false, PipeSchedule::OneFOneB, 1, 2, 4, 1, R::None, OffloadDevice::None, OffloadDevice::None},
      {2, 2, 2, true, PipeSchedule::Interleaved, 2, 4, 4, 3, R::Selective, OffloadDevice::None, OffloadDevice::None},
      {1, 4, 2, false, PipeSchedule::GPipe, 1, 8, 4, 2, R::Full, OffloadDevice::None, OffloadDevice::None},
      {8, 1, 1, false, PipeSchedule::OneFOneB, 1, 4, 1, 3, R::Full, OffloadDevice::Cpu, OffloadDevice::Cpu},
      {2, 1, 4, false, PipeSchedule::Interleaved, 2, 1, 16, 0, R::None, OffloadDevice::None, OffloadDevice::None},
  };
  for (const std::optional<bool> overlap : {std::optional<bool>(), std::optional<bool>(false), std::optional<bool>(true)}) {
    for (const Layout& l : layouts) {
      INFO(describe_layout(l) << " overlap_comm " << (overlap ? (*overlap ? "true" : "false") : "unset"));
      const Config planned = config_for_layout(base, l, overlap);
      const Config given = load_config_text(kBase, layout_overrides(base, l, overlap), l.dp * l.tp * l.pp, "base");
      CHECK(config_to_yaml(planned) == config_to_yaml(given));
      const Layout back = layout_of(planned);
      CHECK(describe_layout(back) == describe_layout(l));
      CHECK(planned.zero_optimization.overlap_comm == overlap.value_or(l.zero_stage == 3));
    }
  }
}

TEST_CASE("the base's explicit partition stays only with its own pipeline shape") {
  const Config base = load_config_text(kBase, {}, 4, "base");
  Layout same = layout_of(base);
  same.micro_batch = 2;
  same.grad_accum = 8;
  CHECK(config_for_layout(base, same).parallelism.pipeline.partition == PipelinePartition::Explicit);
  Layout other = same;
  other.pp = 4;
  other.dp = 1;
  other.grad_accum = 16;
  CHECK(config_for_layout(base, other).parallelism.pipeline.partition == PipelinePartition::Uniform);
}

namespace {

// Fast links in a node, slow ones between nodes, no latency: a collective's time shows its rails.
HardwareProfile railed_machine() {
  HardwareProfile hw = round_machine();
  hw.intra_node = {1000, 0};
  hw.inter_node = {10, 0};
  return hw;
}

const char* kRailsBase = R"(
train_batch_size: 48
train_micro_batch_size_per_gpu: 2
model: {n_layer: 4, n_head: 4, d_model: 64, vocab_size: 256, seq_len: 32}
data: {train: /nonexistent/*.bin}
)";

}  // namespace

TEST_CASE("a DP group spanning nodes has the node's ranks over TP on each: that many network rails") {
  const HardwareProfile hw = railed_machine();
  const Config dp8 = load_config_text(kRailsBase, {}, 8, "dp8");
  const Config tp2 = load_config_text(kRailsBase, {"parallelism.tensor_model_parallel_size=2"}, 8, "tp2");
  // DP 8 on nodes of 4: 4 rails; on nodes of 2: 2 rails, half the bandwidth.
  const double dp8_four = predict_layout(dp8, hw, 4).time.dp_comm, dp8_two = predict_layout(dp8, hw, 2).time.dp_comm;
  CHECK(dp8_two == Approx(2 * dp8_four));
  // TP 2 × DP 4 on nodes of 4: a node holds 2 ranks of each DP group (ranks are TP fastest).
  const double tp2_four = predict_layout(tp2, hw, 4).time.dp_comm;
  const double tp2_two = predict_layout(tp2, hw, 2).time.dp_comm;  // one per node: one rail
  CHECK(tp2_two == Approx(2 * tp2_four));
  // On one node of 8 the intra-node link carries it: 100 times the one rail.
  CHECK(predict_layout(tp2, hw, 8).time.dp_comm == Approx(tp2_two / 100));
}

TEST_CASE("a DP group straddling nodes is charged by the node holding the fewest of its ranks") {
  const HardwareProfile hw = railed_machine();
  // 24 ranks, PP 2 × DP 12 on nodes of 8: stage 1 is ranks 12-23, 4 on node 1 and 8 on node 2, so
  // 4 rails, as on nodes of 4 (not 8, as when the groups line up with the nodes).
  const Config pp2 = load_config_text(kRailsBase, {"parallelism.pipeline_model_parallel_size=2"}, 24, "pp2");
  CHECK(predict_layout(pp2, hw, 8).time.dp_comm == Approx(predict_layout(pp2, hw, 4).time.dp_comm));
  // PP 4 × DP 6 on nodes of 8: stage 1 (ranks 6-11) spans nodes 0 and 1 with 2 ranks on node 0,
  // as every group does on nodes of 2; not the intra-node link.
  const Config pp4 = load_config_text(kRailsBase, {"parallelism.pipeline_model_parallel_size=4"}, 24, "pp4");
  const double pp4_eight = predict_layout(pp4, hw, 8).time.dp_comm;
  CHECK(pp4_eight == Approx(predict_layout(pp4, hw, 2).time.dp_comm));
  CHECK(pp4_eight == Approx(50 * predict_layout(pp4, hw, 24).time.dp_comm));  // 2 rails of 10 vs 1000
}

TEST_CASE("the planner ranks ties within half a percent of the fastest by simplicity, and never lists GPipe") {
  // A 2-core CPU node (rates as configs/hardware/cpu-2core.yaml measured them), where the
  // quickstart model's micro-batches differ by a hair: a tie, settled by fewer per step.
  HardwareProfile hw = round_machine();
  hw.gpu = false;
  hw.memory_gib = 23.5;
  hw.reserved_gib = 1;
  hw.memory_bandwidth_gbs = hw.host_memory_bandwidth_gbs = hw.host_link_gbs = 24.2;
  hw.peak_tflops_16bit = hw.peak_tflops_fp32 = 0.37;
  hw.gemm_efficiency = 0.87;
  hw.attention_efficiency = 0.094;
  hw.memory_efficiency = 0.12;
  hw.op_overhead_us = 0.15;
  hw.gpus_per_node = 2;
  hw.intra_node = hw.inter_node = {3.05, 0.82};
  const Config base = load_config_text(R"(
train_micro_batch_size_per_gpu: 16
model: {n_layer: 4, n_head: 4, d_model: 128, vocab_size: 256, seq_len: 128}
data: {train: /nonexistent/*.bin}
)",
                                       {}, 2, "quickstart");
  PlanRequest req;
  req.gpus = 2;
  const std::vector<Prediction> all = plan_layouts(base, hw, req);
  REQUIRE(all.size() > 20);
  size_t fitting = 0;
  for (const Prediction& p : all) {
    CHECK(p.layout.schedule != PipeSchedule::GPipe);  // 1F1B's bubble with more memory: never better
    if (p.fits) ++fitting;
  }
  REQUIRE(fitting > 20);
  // Groups from the fastest down: each layout is within 0.5% of every one ranked before it, or
  // slower than all of them, and ties go to the simpler layout.
  for (size_t i = 0; i < fitting; ++i) {
    for (size_t j = i + 1; j < fitting; ++j) {
      INFO(describe_layout(all[i].layout) << " before " << describe_layout(all[j].layout));
      CHECK(all[j].tokens_per_s <= all[i].tokens_per_s * 1.005);
    }
  }
  // Within the fastest group, layouts that differ only in the micro-batch come with the fewest
  // micro-batches per step first; and there are such ties to settle.
  double fastest = 0;
  for (size_t i = 0; i < fitting; ++i) fastest = std::max(fastest, all[i].tokens_per_s);
  const double floor = fastest / 1.005;
  const auto same_but_micro_batch = [](const Layout& a, const Layout& b) {
    return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp && a.sp == b.sp && a.schedule == b.schedule &&
           a.virtual_stages == b.virtual_stages && a.zero_stage == b.zero_stage && a.recompute == b.recompute;
  };
  int settled = 0;
  for (size_t i = 0; i < fitting && all[i].tokens_per_s >= floor; ++i) {
    for (size_t j = i + 1; j < fitting && all[j].tokens_per_s >= floor; ++j) {
      if (!same_but_micro_batch(all[i].layout, all[j].layout)) continue;
      CHECK(all[i].layout.grad_accum < all[j].layout.grad_accum);
      ++settled;
    }
  }
  CHECK(settled > 0);
}
