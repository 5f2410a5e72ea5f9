// Start-up warnings: a schedule that ends before the run (the cosine climbs back, the linear
// decay holds its floor), a linear decay shorter than its warmup, and a run that ends inside the
// warmup are each said once, naming the keys; a schedule that fits the run says nothing. So are
// pipelines fed fewer micro-batches than stages, gpipe at PP 1 and ZeRO at DP 1 without offload.
#include "config_test_util.h"

using namespace strata;
using strata_test::joined;
using strata_test::kTinyConfig;
using strata_test::load;

namespace {
std::vector<std::string> warnings_for(const std::vector<std::string>& overrides) {
  return config_warnings(load(kTinyConfig, overrides));
}
}  // namespace

TEST_CASE("a schedule that ends with the run, or a constant rate, warns of nothing") {
  CHECK(warnings_for({"train.iters=100"}).empty());
  CHECK(warnings_for({"train.iters=100", "scheduler.type=WarmupCosineLR", "scheduler.params.total_num_steps=100",
                      "scheduler.params.warmup_num_steps=10"})
            .empty());
  // A run shorter than its schedule is a run cut short on purpose, not a mistake.
  CHECK(warnings_for({"train.iters=50", "scheduler.type=WarmupDecayLR", "scheduler.params.total_num_steps=100",
                      "scheduler.params.warmup_num_steps=10"})
            .empty());
  // The log warmup of 10 steps peaks at step 11 (iteration 9).
  CHECK(warnings_for({"train.iters=11", "scheduler.type=WarmupLR", "scheduler.params.warmup_num_steps=10"}).empty());
}

TEST_CASE("WarmupCosineLR past total_num_steps is said to climb back") {
  const auto w = warnings_for({"train.iters=300", "scheduler.type=WarmupCosineLR",
                               "scheduler.params.total_num_steps=200", "scheduler.params.warmup_num_steps=10"});
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "scheduler.params.total_num_steps 200 is below train.iters 300: WarmupCosineLR reaches its lowest "
                "learning rate after 200 updates and then climbs back toward optimizer.params.lr (DeepSpeed's "
                "cosine, which is periodic); set total_num_steps to train.iters or 'auto'");
}

TEST_CASE("WarmupDecayLR past total_num_steps, or not longer than its warmup, is said to hold its floor") {
  auto w = warnings_for({"train.iters=300", "scheduler.type=WarmupDecayLR", "scheduler.params.total_num_steps=200",
                         "scheduler.params.warmup_num_steps=10"});
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "scheduler.params.total_num_steps 200 is below train.iters 300: WarmupDecayLR holds warmup_min_lr "
                "0 after 200 updates (a learning rate of 0: the steps after it change nothing); set "
                "total_num_steps to train.iters or 'auto'");
  w = warnings_for({"train.iters=300", "scheduler.type=WarmupDecayLR", "scheduler.params.total_num_steps=200",
                    "scheduler.params.warmup_num_steps=10", "scheduler.params.warmup_min_lr=1e-5"});
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("holds warmup_min_lr 1e-05 after 200 updates; set") != std::string::npos);
  // total == warmup: the decay has no length (and a run of 20 steps ends in that warmup: step 20
  // takes iteration 18).
  w = warnings_for({"train.iters=20", "scheduler.type=WarmupDecayLR", "scheduler.params.total_num_steps=20",
                    "scheduler.params.warmup_num_steps=20"});
  REQUIRE(w.size() == 2);
  CHECK(w[1] == "scheduler.params.total_num_steps 20 is not above the warmup length 20: WarmupDecayLR drops from "
                "warmup_max_lr to warmup_min_lr 0 when the warmup ends, with no decay between");
  CHECK(warnings_for({"train.iters=21", "scheduler.type=WarmupDecayLR", "scheduler.params.total_num_steps=21",
                      "scheduler.params.warmup_num_steps=20"})
            .empty());
}

TEST_CASE("a run that ends inside the warmup is said to stay below the peak") {
  auto w = warnings_for({"train.iters=20", "scheduler.type=WarmupLR"});  // warmup_num_steps defaults to 1000
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "scheduler.params.warmup_num_steps 1000: the log warmup reaches the peak learning rate "
                "(warmup_max_lr) at step 1001 (step k takes the schedule's value at iteration k - 2, as DeepSpeed "
                "does), after train.iters 20: the run ends in the warmup, below the peak");
  // At the edge: the linear warmup of W steps peaks at step W + 2 (iteration W), the log one at
  // step W + 1 (iteration W - 1, log(W) / log(W)).
  const std::vector<std::string> linear = {"scheduler.type=WarmupLR", "scheduler.params.warmup_num_steps=12",
                                           "scheduler.params.warmup_type=linear"};
  const auto with = [](std::vector<std::string> overrides, const std::string& extra) {
    overrides.push_back(extra);
    return warnings_for(overrides);
  };
  CHECK(with(linear, "train.iters=13").size() == 1);
  CHECK(with(linear, "train.iters=14").empty());
  const std::vector<std::string> log_curve = {"scheduler.type=WarmupLR", "scheduler.params.warmup_num_steps=12"};
  CHECK(with(log_curve, "train.iters=12").size() == 1);
  CHECK(with(log_curve, "train.iters=13").empty());
  w = warnings_for({"train.iters=20", "scheduler.type=WarmupCosineLR", "scheduler.params.total_num_steps=100",
                    "scheduler.params.warmup_num_steps=50"});
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("(optimizer.params.lr)") != std::string::npos);
  // Both at once: each is said.
  w = warnings_for({"train.iters=300", "scheduler.type=WarmupDecayLR", "scheduler.params.total_num_steps=200",
                    "scheduler.params.warmup_num_steps=400"});
  CHECK(w.size() == 3);
  INFO(joined(w));
}

TEST_CASE("layouts that idle their pipeline or set what the layout leaves idle are said") {
  const auto at = [](int world, const std::vector<std::string>& overrides) {
    return config_warnings(load(kTinyConfig, overrides, world));
  };
  // One micro-batch through 2 stages: each idles (p−1)/(m+p−1) = 50%.
  auto w = at(2, {"parallelism.pipeline_model_parallel_size=2"});
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "parallelism: 1 micro-batch per step through 2 pipeline stages keeps each stage idle 50% of the step "
                "(the bubble (p−1)/(m+p−1)); more micro-batches (gradient_accumulation_steps, at least 2) shrink it");
  CHECK(at(2, {"parallelism.pipeline_model_parallel_size=2", "gradient_accumulation_steps=2"}).empty());
  CHECK(at(1, {"parallelism.pipeline.schedule=gpipe"}) ==
        std::vector<std::string>{"parallelism.pipeline.schedule gpipe changes nothing at pipeline_model_parallel_size 1"});
  CHECK(at(2, {"parallelism.pipeline_model_parallel_size=2", "parallelism.pipeline.schedule=gpipe",
               "gradient_accumulation_steps=4"})
            .empty());
  // ZeRO over one data-parallel rank partitions nothing; with offload it is how the state moves.
  w = at(2, {"zero_optimization.stage=2", "parallelism.tensor_model_parallel_size=2"});
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "zero_optimization.stage 2 partitions over a data-parallel size of 1: it saves no memory and adds its "
                "collectives over one rank (stage 0 trains the same model without them)");
  CHECK(at(2, {"zero_optimization.stage=2"}).empty());
  CHECK(at(1, {"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu"}).empty());
}

TEST_CASE("settings whose switch is off are said to change nothing") {
  auto w = warnings_for({"checkpoint.keep_last=3", "checkpoint.overwrite=true"});
  REQUIRE(w.size() == 2);
  CHECK(w[0] == "checkpoint.keep_last 3 changes nothing while checkpoint.dir is empty (no saves)");
  CHECK(w[1] == "checkpoint.overwrite true changes nothing while checkpoint.dir is empty (no saves)");
  CHECK(warnings_for({"checkpoint.keep_last=3", "checkpoint.overwrite=true", "checkpoint.dir=ck"}).empty());
  w = warnings_for({"logging.sample_prompt=Once", "logging.sample_tokens=50", "train.eval_iters=5"});
  REQUIRE(w.size() == 3);
  CHECK(w[0] == "logging.sample_prompt changes nothing while logging.sample_interval is 0 (no samples)");
  CHECK(w[1] == "logging.sample_tokens 50 changes nothing while logging.sample_interval is 0 (no samples)");
  CHECK(w[2] == "train.eval_iters 5 changes nothing while train.eval_interval is 0 (no evaluation)");
  CHECK(warnings_for({"logging.sample_prompt=Once", "logging.sample_tokens=50", "logging.sample_interval=10",
                      "train.eval_iters=5", "train.eval_interval=10", "data.val=x_*.bin"})
            .empty());
  w = warnings_for({"parallelism.pipeline.partition=parameters"});
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "parallelism.pipeline.partition changes nothing at pipeline_model_parallel_size 1 (one stage holds "
                "every layer)");
}
