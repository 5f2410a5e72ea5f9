// The flops profiler's report: its module FLOPs add up to the model's forward, a third of
// flops_per_token per token (the count the MFU uses), and its keys shape the report.
#include "catch_compat.h"

#include <string>

#include "config/config.h"
#include "train/flops_profile.h"

namespace {

strata::Config config(const std::string& profiler) {
  return strata::load_config_text("train_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2\n"
                                  "model: {n_layer: 3, n_head: 2, d_model: 32, vocab_size: 300, seq_len: 16}\n"
                                  "flops_profiler: " + profiler + "\n",
                                  {}, 2, "test.yaml");
}

strata::GptDims dims_of(const strata::Config& c) {
  return {*c.model.n_layer, *c.model.n_head, *c.model.d_model, c.model.vocab_size, c.derived.padded_vocab,
          c.model.seq_len};
}

strata::StepMetrics timed_step() {
  strata::StepMetrics m;
  m.step = 1;
  m.forward_seconds = 0.01, m.backward_seconds = 0.02, m.optimizer_seconds = 0.005, m.step_seconds = 0.04;
  return m;
}

}  // namespace

TEST_CASE("flops profile: the modules' forward FLOPs sum to a third of flops_per_token per token") {
  const strata::Config c = config("{enabled: true}");
  const strata::GptDims d = dims_of(c);
  const double tokens = static_cast<double>(c.derived.tokens_per_step);
  CHECK(strata::profiled_fwd_flops(d, tokens) == static_cast<double>(c.derived.flops_per_token) * tokens / 3);
  const strata::StepMetrics m = timed_step();
  const std::string report = strata::flops_profile({&c, &d, &m});
  // 3 blocks of 12·32² + 13·32 = 12704 parameters; their line and their parts are listed.
  CHECK(report.find("  h.2: 12.70 K, ") != std::string::npos);
  CHECK(report.find("    h.2.mlp: 8.35 K, ") != std::string::npos);
  CHECK(report.find("fwd+bwd FLOPS per GPU = 3 × fwd flops per GPU / (fwd+bwd latency)") != std::string::npos);
  CHECK(report.find("data parallel size:") != std::string::npos);
  CHECK(report.find("fwd latency (rank 0):") != std::string::npos);
}

TEST_CASE("flops profile: recompute_fwd_factor, module_depth and detailed shape the report") {
  const strata::Config c = config("{enabled: true, recompute_fwd_factor: 1.0, module_depth: 1, detailed: true}");
  const strata::GptDims d = dims_of(c);
  const strata::StepMetrics m = timed_step();
  const std::string report = strata::flops_profile({&c, &d, &m});
  CHECK(report.find("bwd FLOPS per GPU = 3 × fwd flops per GPU / bwd latency") != std::string::npos);
  CHECK(report.find("FLOPS per GPU = 4 × fwd flops per GPU / iter latency") != std::string::npos);
  CHECK(report.find("  h.0: ") != std::string::npos);
  CHECK(report.find("h.0.mlp") == std::string::npos);  // depth 2 is beyond module_depth
  const strata::Config brief = config("{enabled: true, detailed: false}");
  CHECK(strata::flops_profile({&brief, &d, &m}).find("Detailed Profile") == std::string::npos);
}
