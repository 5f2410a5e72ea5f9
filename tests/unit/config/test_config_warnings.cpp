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
  CHECK(warnings_for({"train.iters=10", "scheduler.type=WarmupLR", "scheduler.params.warmup_num_steps=10"}).empty());
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
  // total == warmup: the decay has no length.
  w = warnings_for({"train.iters=20", "scheduler.type=WarmupDecayLR", "scheduler.params.total_num_steps=20",
                    "scheduler.params.warmup_num_steps=20"});
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "scheduler.params.total_num_steps 20 is not above the warmup length 20: WarmupDecayLR drops from "
                "warmup_max_lr to warmup_min_lr 0 when the warmup ends, with no decay between");
  CHECK(warnings_for({"train.iters=20", "scheduler.type=WarmupDecayLR", "scheduler.params.total_num_steps=21",
                      "scheduler.params.warmup_num_steps=20"})
            .empty());
}

TEST_CASE("a run that ends inside the warmup is said to stay below the peak") {
  auto w = warnings_for({"train.iters=20", "scheduler.type=WarmupLR"});  // warmup_num_steps defaults to 1000
  REQUIRE(w.size() == 1);
  CHECK(w[0] == "scheduler.params.warmup_num_steps 1000 is above train.iters 20: the run ends in the warmup, below "
                "the peak learning rate (warmup_max_lr)");
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
