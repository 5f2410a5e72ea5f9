// The shipped configs: every file under configs/ (but configs/hardware/, the planner's machine
// profiles) loads and validates today, at the fewest ranks its layout needs and at eight, and the
// headline ones have the shapes their comments promise.
#include <algorithm>
#include <filesystem>

#include "config_test_util.h"

using namespace strata;

namespace {
std::vector<std::string> shipped_configs() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(STRATA_SOURCE_DIR) + "/configs")) {
    const std::string ext = entry.path().extension().string();
    if (entry.path().parent_path().filename() == "hardware") continue;  // `strata plan` profiles
    if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml" || ext == ".json"))
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string source_path(const std::string& relative) { return std::string(STRATA_SOURCE_DIR) + "/" + relative; }
}  // namespace

TEST_CASE("every file in configs/ validates at its smallest world size (TP × PP) and at 8") {
  const auto files = shipped_configs();
  CHECK(files.size() >= 7);
  for (const auto& file : files) {
    const ParallelismConfig layout = load_config_file(file, {}, 8).parallelism;
    for (const int world_size : {layout.tensor_model_parallel_size * layout.pipeline_model_parallel_size, 8}) {
      INFO(file << " at world size " << world_size);
      try {
        const Config c = load_config_file(file, {}, world_size);
        CHECK(c.derived.world_size == world_size);
      } catch (const UserError& e) {
        FAIL(e.what());
      }
    }
  }
}

TEST_CASE("the GPT-2 configs use their preset and a 0.5M-token batch at world size 8") {
  const std::pair<const char*, int64_t> expected[] = {{"gpt2-124m", 124439808},
                                                      {"gpt2-350m", gpt_param_count({24, 16, 1024, 50257, 50257, 1024})},
                                                      {"gpt2-774m", gpt_param_count({36, 20, 1280, 50257, 50257, 1024})},
                                                      {"gpt2-1558m", gpt_param_count({48, 25, 1600, 50257, 50257, 1024})}};
  for (const auto& e : expected) {
    INFO(e.first);
    const Config c = load_config_file(source_path(std::string("configs/") + e.first + ".yaml"), {}, 8);
    CHECK(c.model.preset == e.first);
    CHECK(c.derived.n_params_unpadded == e.second);
    CHECK(c.derived.tokens_per_step == 524288);
    CHECK(c.optimizer.params.betas == std::array<double, 2>{0.9, 0.95});
    CHECK(c.optimizer.params.weight_decay == 0.1);
    CHECK(c.gradient_clipping == 1.0);
    CHECK(c.scheduler.type == LrScheduleType::WarmupCosineLR);
    CHECK(c.data.train == strata_test::one_source("data/fineweb10B/fineweb_train_*.bin"));
  }
  // Rough sizes in the preset names, as a check on the presets table itself.
  CHECK(gpt_param_count({24, 16, 1024, 50257, 50257, 1024}) / 1000000 == 354);
  CHECK(gpt_param_count({36, 20, 1280, 50257, 50257, 1024}) / 1000000 == 774);
  CHECK(gpt_param_count({48, 25, 1600, 50257, 50257, 1024}) / 1000000 == 1557);
}

TEST_CASE("quickstart is a byte-level model on the KJV shards") {
  const Config c = load_config_file(source_path("configs/quickstart.yaml"), {}, 1);
  CHECK(c.model.vocab_size == 256);
  CHECK(c.derived.padded_vocab == 256);
  CHECK(c.data.train == strata_test::one_source("data/kjv/train_*.bin"));
  CHECK(c.data.val == "data/kjv/val_*.bin");
  CHECK(c.derived.micro_batch == 16);
  CHECK(c.derived.grad_accum == 1);
  CHECK(*c.scheduler.params.total_num_steps == c.train.iters);
  CHECK(c.checkpoint.dir == "runs/quickstart/checkpoints");
  CHECK(c.logging.metrics_file == "runs/quickstart/metrics.jsonl");
}

TEST_CASE("the ds_config example derives gradient accumulation from the world size") {
  const std::string file = source_path("configs/examples/ds_config.json");
  CHECK(load_config_file(file, {}, 8).derived.grad_accum == 2);
  CHECK(load_config_file(file, {}, 1).derived.grad_accum == 16);
  CHECK(load_config_file(file, {}, 8).scheduler.type == LrScheduleType::WarmupDecayLR);
}
