// The step-time model: each pipeline stage's forward and backward per micro-batch from its
// layers' FLOPs and bytes at the profile's rates; tensor-parallel collectives (Megatron's four
// all-reduces of a layer's activations, six with full recompute), pipeline sends, and the bubble
// the schedule tables give for those costs; ZeRO's collectives (the volumes the traffic tests
// check) with the share backward hides; the optimizer and the offload transfers.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "plan/plan_internal.h"
#include "train/train.h"

namespace strata {

// Tiles as the header says: the better of the two orientations of cuBLAS's largest tile.
double matrix_product_s(double rows, double cols, double inner, double count, const HardwareProfile& hw, double rate,
                        bool split_inner) {
  const double flops = 2 * rows * cols * inner * count;
  if (hw.multiprocessors <= 0) return flops / rate;
  const double sms = hw.multiprocessors;
  double filled = 0;  // the share of the launched waves' tile area that is output
  for (const auto& [tile_rows, tile_cols] : {std::pair{256.0, 128.0}, std::pair{128.0, 256.0}}) {
    const double tiles = count * std::ceil(rows / tile_rows) * std::ceil(cols / tile_cols);
    const double waves = split_inner ? tiles / sms : std::ceil(tiles / sms);
    filled = std::max(filled, count * rows * cols / (waves * sms * tile_rows * tile_cols));
  }
  return flops / (rate * filled);
}

namespace {

// Ring collectives over `ranks` ranks on `link`: all-reduce moves 2(p−1)/p of the buffer,
// reduce-scatter and all-gather (p−1)/p, in p−1 (twice p−1) latency-bound steps.
double all_reduce_s(double bytes, int ranks, const LinkProfile& link) {
  if (ranks <= 1) return 0;
  const double p = ranks;
  return 2 * (p - 1) / p * bytes / (link.bandwidth_gbs * 1e9) + 2 * (p - 1) * link.latency_us * 1e-6;
}
double reduce_scatter_s(double bytes, int ranks, const LinkProfile& link) {
  if (ranks <= 1) return 0;
  const double p = ranks;
  return (p - 1) / p * bytes / (link.bandwidth_gbs * 1e9) + (p - 1) * link.latency_us * 1e-6;
}

// The link a ring collective runs at. Within a node, the intra-node link. Across nodes, each
// channel of the ring leaves a node once, on its own network interface: a group with k ranks on
// each node runs k channels side by side on k interfaces (k × the per-GPU network bandwidth, as
// NCCL's rings over rail-connected nodes do), but no faster than the links inside the node.
LinkProfile ring_link(const HardwareProfile& hw, bool across_nodes, int ranks_per_node) {
  if (!across_nodes) return hw.intra_node;
  const double rails = std::max(1, ranks_per_node);
  return {std::min(hw.intra_node.bandwidth_gbs, rails * hw.inter_node.bandwidth_gbs), hw.inter_node.latency_us};
}

}  // namespace

double pipeline_makespan(const PipeShape& shape, double backward_over_forward, int simulated_rounds) {
  // Past the warm-up a pipeline's makespan grows by the same amount for every p more micro-batches
  // (the in-flight counts settle by 2p): a longer step is simulated at simulated_rounds × p
  // micro-batches and extended at the rate of their last p.
  const int p = shape.stages, simulated = std::max(4, simulated_rounds) * p;
  if (shape.micro_batches > simulated) {
    PipeShape last = shape, before = shape;
    last.micro_batches = simulated;
    before.micro_batches = simulated - p;
    const double at_last = pipeline_makespan(last, backward_over_forward, simulated_rounds);
    const double at_before = pipeline_makespan(before, backward_over_forward, simulated_rounds);
    if (at_last < 0 || at_before < 0) return -1;
    return at_last + (at_last - at_before) * (shape.micro_batches - simulated) / p;
  }
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, long>, double> memo;
  const long ratio = std::lround(backward_over_forward * 1000);
  const auto key = std::make_tuple(static_cast<int>(shape.schedule), shape.stages, shape.virtual_stages,
                                   shape.micro_batches, ratio);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  // The tables are the same for every cost ratio: build them once per shape, keeping the last few
  // (the planner tries a shape's layouts one after another; a 64-stage shape's tables are ~10 MB).
  static std::vector<std::pair<std::tuple<int, int, int, int>, std::vector<std::vector<PipeAction>>>> tables;
  const auto shape_key = std::make_tuple(static_cast<int>(shape.schedule), shape.stages, shape.virtual_stages,
                                         shape.micro_batches);
  auto found = std::find_if(tables.begin(), tables.end(), [&](const auto& t) { return t.first == shape_key; });
  if (found == tables.end()) {
    if (tables.size() >= 4) tables.erase(tables.begin());
    tables.emplace_back(shape_key, pipe_schedules(shape));
    found = std::prev(tables.end());
  }
  const PipeSimulation sim = simulate_tables(shape, found->second, 1.0, static_cast<double>(ratio) / 1000);
  const double makespan = sim.completed ? sim.makespan : -1;
  memo.emplace(key, makespan);
  return makespan;
}

namespace {

// ZeRO's collectives over the slowest stage's `psi` parameters, the share backward hides, and the
// optimizer step (on the device or, offloaded, on the host with its PCIe transfers).
void add_data_parallel(const ModelShape& m, const HardwareProfile& hw, const DpShape& dp, double psi,
                       double last_backward, StepTime& t) {
  const double micro = m.grad_accum;
  const LinkProfile link = ring_link(hw, dp.across_nodes, dp.ranks_per_node);
  const double grad_bytes = psi * dp.comm_bytes, param_bytes = psi * m.elem_bytes;
  const double buckets = std::max(1.0, std::ceil(psi / std::max<double>(1, dp.bucket_elements)));
  const double overlappable = 1 - 1 / buckets;  // the last bucket is reduced after backward
  double reduce = 0, gather = 0;
  switch (dp.zero_stage) {
    case 0: reduce = all_reduce_s(grad_bytes, dp.ranks, link); break;
    case 1: reduce = reduce_scatter_s(grad_bytes, dp.ranks, link); break;
    default: reduce = micro * reduce_scatter_s(grad_bytes, dp.ranks, link); break;  // every micro-batch
  }
  if (dp.zero_stage == 1 || dp.zero_stage == 2) gather = reduce_scatter_s(param_bytes, dp.ranks, link);
  // What runs under compute: ZeRO 3's gathers (each layer group for its forward and again for its
  // backward, all but a pass's first prefetched) under forward and backward; with overlap_comm the
  // reductions but the last bucket under backward (every micro-batch's at ZeRO 2-3, the last
  // one's at 0-1). One link carries them all, so together they hide under that compute at most.
  double hideable = 0, window = 0;
  if (dp.zero_stage == 3) {
    gather = micro * 2 * reduce_scatter_s(param_bytes, dp.ranks, link);
    hideable += gather * (1 - 1.0 / std::max(1, m.layer_groups));
    window = t.compute;
  }
  if (dp.overlap_comm) {
    hideable += reduce * overlappable;
    window = std::max(window, dp.zero_stage >= 2 ? t.compute * 2 / 3 : last_backward);
  }
  t.dp_comm = reduce + gather;
  t.dp_hidden = std::min(hideable, window);
  // AdamW over the shard this rank owns: fp32 master, m, v and gradient read, the first three
  // written, the working copy written (28 + e bytes per parameter).
  const double owned = dp.zero_stage >= 1 ? psi / dp.ranks : psi;
  const double dev_rate = m.memory_bandwidth_gbs * 1e9;  // a streaming pass, as the bandwidth is measured
  if (dp.offload_optimizer && hw.gpu) {
    const double host_rate = hw.host_memory_bandwidth_gbs * 1e9 / hw.gpus_per_node;
    const double host = owned * 28 / host_rate;
    const double pcie = owned * (4 + m.elem_bytes) / (hw.host_link_gbs * 1e9);
    t.offload = std::max(host, pcie);
  } else {
    t.optimizer = owned * (28 + m.elem_bytes) / dev_rate;
  }
  if (dp.offload_param && hw.gpu) {
    t.offload += micro * 2 * (psi / dp.ranks) * m.elem_bytes / (hw.host_link_gbs * 1e9);
  }
}

// A layer's four matrix products on one TP rank for `tokens` rows: forward (QKV, the attention's
// output projection, the MLP's two) and backward (each one's input gradient, rows × inner over
// cols, and weight gradient, inner × cols over the rows).
std::pair<double, double> layer_products_s(double tokens, double h, double t, const HardwareProfile& hw, double rate) {
  const double shapes[4][3] = {{tokens, 3 * h / t, h}, {tokens, h, h / t}, {tokens, 4 * h / t, h}, {tokens, h, 4 * h / t}};
  double forward = 0, backward = 0;
  for (const auto& [rows, cols, inner] : shapes) {
    forward += matrix_product_s(rows, cols, inner, 1, hw, rate);
    backward += matrix_product_s(rows, inner, cols, 1, hw, rate) + matrix_product_s(inner, cols, rows, 1, hw, rate, true);
  }
  return {forward, backward};
}

}  // namespace

ChunkCost chunk_cost(const ModelShape& m, const HardwareProfile& hw, const ChunkShape& c) {
  const double h = m.d_model, s = m.seq_len, t = m.tp, e = m.elem_bytes;
  const double N = m.micro_batch * s;  // tokens per micro-batch
  const double flop_rate = m.peak_tflops * 1e12;
  const double gemm_rate = flop_rate * hw.gemm_efficiency, attn_rate = flop_rate * hw.attention_efficiency;
  const double byte_rate = m.memory_bandwidth_gbs * 1e9 * hw.memory_efficiency;
  const double op = hw.op_overhead_us * 1e-6;
  const double rows = m.sp ? N / t : N;  // token rows of the residual stream on this rank
  // One layer's forward: the four matrix products (24h² per token), the attention core, and the
  // elementwise passes (layernorms and residuals on the rows this rank holds, GELU on its slice).
  // Backward: twice the products and the passes.
  const auto [gemm, gemm_backward] = layer_products_s(N, h, t, hw, gemm_rate);
  const double elem = (10 * h * e * rows + 8 * h * e * N / t) / byte_rate;
  double attn = 0, attn_backward = 0, attn_ops = 0;
  if (hw.attention_unfused) {
    // The scores stored: QKᵀ and PV as batched products over the whole s × s (2 × 2s²·d per head),
    // and per score element (e bytes, a 1-byte dropout mask) forward: QKᵀ writes it, the fused
    // scale-mask-softmax reads and writes it, dropout reads it and writes it and the mask, PV reads
    // it (6e + 1); backward: the probabilities' gradient written, dropout's backward (reads it and
    // the mask, writes), softmax's (reads it and the probabilities, writes), read by the products
    // for dQ and dK, the dropped probabilities read for dV (9e + 1); the products twice forward's.
    const double heads = m.micro_batch * (static_cast<double>(m.n_head) / t), d = h / m.n_head;
    const double scores = heads * s * s;
    const double s_by_d = matrix_product_s(s, d, s, heads, hw, gemm_rate);  // PV, and dV, dQ, dK backward
    const double s_by_s = matrix_product_s(s, s, d, heads, hw, gemm_rate);  // QKᵀ, and the probabilities' gradient
    attn = s_by_s + s_by_d + scores * (6 * e + 1) / byte_rate;
    attn_backward = s_by_s + 3 * s_by_d + scores * (9 * e + 1) / byte_rate;
    attn_ops = 4;
  } else {
    // Fused: the causal half of 4hs per token at its efficiency (its reads and writes in it);
    // backward 2.5 times forward (FlashAttention's count).
    attn = 2 * h * s * N / t / attn_rate;
    attn_backward = 2.5 * attn;
  }
  const double fwd = gemm + attn + elem + (14 + attn_ops) * op;
  const double bwd = gemm_backward + attn_backward + 2 * elem + (24 + attn_ops) * op;
  const LinkProfile tp_link = ring_link(hw, m.tp_across_nodes, m.tp_ranks_per_node);
  // Two all-reduces (or reduce-scatter + all-gather under SP: the same bytes) per layer each way.
  const double tp_one = all_reduce_s(N * h * e, m.tp, tp_link);
  double recompute = 0, recompute_tp = 0;
  if (m.recompute == ActivationRecompute::Full) {
    recompute = fwd;
    recompute_tp = 2 * tp_one;
  } else if (m.recompute == ActivationRecompute::Selective) {
    recompute = attn;
  }
  ChunkCost cost;
  cost.forward = c.layers * fwd;
  cost.backward = c.layers * (bwd + recompute);
  cost.tp_forward = c.layers * 2 * tp_one;
  cost.tp_backward = c.layers * (2 * tp_one + recompute_tp);
  if (c.embedding) {  // gather of two tables, and the vocabulary-parallel sum over TP
    cost.forward += 3 * N * h * e / byte_rate + 2 * op;
    cost.backward += 3 * N * h * 4 / byte_rate + 2 * op;
    cost.tp_forward += tp_one;
  }
  if (c.head) {  // final layernorm, logits (2hV per token), the fused softmax cross-entropy
    const double V = m.padded_vocab;
    const double logits = matrix_product_s(N, V / t, h, 1, hw, gemm_rate);
    const double logits_backward =
        matrix_product_s(N, h, V / t, 1, hw, gemm_rate) + matrix_product_s(h, V / t, N, 1, hw, gemm_rate, true);
    cost.forward += 4 * h * e * rows / byte_rate + logits + 8 * N * V / t / byte_rate + 4 * op;
    cost.backward += 8 * h * e * rows / byte_rate + logits_backward + 8 * N * V / t / byte_rate + 6 * op;
    if (m.sp) cost.tp_forward += tp_one / 2, cost.tp_backward += tp_one / 2;  // gather/scatter of the rows
  }
  return cost;
}

StepTime step_time(const ModelShape& m, const HardwareProfile& hw, const std::vector<StageShape>& stages,
                   const DpShape& dp) {
  StepTime t;
  const double micro = m.grad_accum;
  // The slowest stage sets the pace; its per-chunk costs drive the schedule's simulation.
  double worst = -1, f_chunk = 0, b_chunk = 0, stage_params = 0, last_backward = 0;
  for (const StageShape& st : stages) {
    double compute = 0, tp = 0, f = 0, b = 0;
    for (const ChunkShape& c : st.chunks) {
      const ChunkCost cc = chunk_cost(m, hw, c);
      compute += cc.forward + cc.backward;
      tp += cc.tp_forward + cc.tp_backward;
      f += cc.forward + cc.tp_forward;
      b += cc.backward + cc.tp_backward;
    }
    if (compute + tp > worst) {
      worst = compute + tp;
      t.compute = micro * compute;
      t.tp_comm = micro * tp;
      f_chunk = f / st.chunks.size();
      b_chunk = b / st.chunks.size();
      last_backward = b;
      stage_params = st.params;
    }
  }
  if (m.pp > 1) {
    // One activation (or its gradient) per chunk boundary and micro-batch each way.
    const double bytes = static_cast<double>(m.micro_batch) * m.seq_len * m.d_model * m.elem_bytes / (m.sp ? m.tp : 1);
    const LinkProfile& link = m.pp_across_nodes ? hw.inter_node : hw.intra_node;
    const double p2p = bytes / (link.bandwidth_gbs * 1e9) + link.latency_us * 1e-6;
    const int v = m.virtual_stages;
    t.pp_comm = micro * v * 2 * p2p;
    f_chunk += p2p;
    b_chunk += p2p;
    const PipeShape shape{m.schedule, m.pp, v, m.grad_accum};
    // The tables' idle share at the (memoised, rounded) cost ratio, applied to the exact busy time.
    const double ratio = std::round(b_chunk / f_chunk * 1000) / 1000;
    const double makespan = pipeline_makespan(shape, ratio);
    const double busy = micro * (1 + ratio);  // per stage, in units of a stage's forward
    if (makespan > 0) t.bubble = std::max(0.0, makespan / busy - 1) * micro * v * (f_chunk + b_chunk);
  }
  add_data_parallel(m, hw, dp, stage_params, last_backward, t);
  return t;
}

}  // namespace strata
