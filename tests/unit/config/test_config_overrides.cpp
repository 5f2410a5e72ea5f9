// `--set key.path=value` overrides: applied to the YAML tree before typed parsing, so
// they create sections, take YAML values (lists, booleans, numbers, strings) and get the
// same type and unknown-key checks as the file.
#include "config_test_util.h"

using namespace strata;
using strata_test::has_problem;
using strata_test::kTinyConfig;
using strata_test::load;
using strata_test::problems;

TEST_CASE("overrides replace values and create missing sections") {
  const Config c = load(kTinyConfig, {"model.n_layer=5", "zero_optimization.offload_optimizer.pin_memory=true",
                                      "optimizer.params.lr=3e-4", "data.train=shards/*.bin", "data.shuffle=true",
                                      "scheduler.type=WarmupLR", "scheduler.params.warmup_num_steps=7"});
  CHECK(*c.model.n_layer == 5);
  CHECK(*c.model.d_model == 64);  // the rest of the section is kept
  CHECK(c.zero_optimization.offload_optimizer.pin_memory);
  CHECK(c.optimizer.params.lr == 3e-4);
  CHECK(c.data.train == strata_test::one_source("shards/*.bin"));
  CHECK(c.data.shuffle);
  CHECK(c.scheduler.type == LrScheduleType::WarmupLR);
  CHECK(c.scheduler.params.warmup_num_steps == 7);
}

TEST_CASE("override values are YAML: flow lists, later overrides win, empty means empty string") {
  const Config c = load(std::string(kTinyConfig) + "data: {val: v/*.bin}\n",
                        {"optimizer.params.betas=[0.9,0.95]", "train.seed=1", "train.seed=2", "data.val=",
                         "logging.sample_prompt=And God said"});
  CHECK(c.optimizer.params.betas == std::array<double, 2>{0.9, 0.95});
  CHECK(c.train.seed == 2);
  CHECK(c.data.val.empty());
  CHECK(c.logging.sample_prompt == "And God said");
}

TEST_CASE("null gives a key its default, as if it were not given, and a misspelt key is still named") {
  const Config c = load(std::string(kTinyConfig) + "gradient_clipping: 0.5\nlogging: {metrics_file: m.jsonl}\n",
                        {"gradient_clipping=null", "logging.metrics_file=null", "optimizer.params.betas=null",
                         "data.shuffle=~"});
  const Config defaults = load(kTinyConfig);
  CHECK(c.gradient_clipping == defaults.gradient_clipping);
  CHECK(c.logging.metrics_file == defaults.logging.metrics_file);
  CHECK(c.optimizer.params.betas == defaults.optimizer.params.betas);
  CHECK(c.data.shuffle == defaults.data.shuffle);
  CHECK(has_problem(problems(kTinyConfig, {"train.itres=null"}), "train.itres: unknown key; did you mean iters?"));
}

TEST_CASE("an override of a whole section with a map replaces it") {
  const Config c = load(kTinyConfig, {"model={preset: gpt2-124m, n_layer: 1}"});
  CHECK(*c.model.n_layer == 1);
  CHECK(*c.model.d_model == 768);
  CHECK(c.model.vocab_size == 50257);
}

TEST_CASE("overrides get the same type and unknown-key errors as the file, marked as overrides") {
  auto p = problems(kTinyConfig, {"optimizer.params.lr=fast"});
  CHECK(p == std::vector<std::string>{
                 "optimizer.params.lr: expected a number, got 'fast' (set by --set optimizer.params.lr)"});
  // A carriage return (a grid file written on Windows) shows in the message.
  p = problems(kTinyConfig, {"optimizer.params.lr=1e-3\r"});
  CHECK(p == std::vector<std::string>{
                 "optimizer.params.lr: expected a number, got '1e-3\\r' (set by --set optimizer.params.lr)"});
  p = problems(kTinyConfig, {"train.iters=\x01"});
  CHECK(p == std::vector<std::string>{"train.iters: expected an integer, got '\\x01' (set by --set train.iters)"});
  p = problems(kTinyConfig, {"zero_optimisation.stage=1"});
  CHECK(p == std::vector<std::string>{
                 "zero_optimisation: unknown key; did you mean zero_optimization? (set by --set "
                 "zero_optimisation.stage)"});
  p = problems(kTinyConfig, {"model.n_layers=3"});
  CHECK(p == std::vector<std::string>{"model.n_layers: unknown key; did you mean n_layer? (set by --set "
                                      "model.n_layers)"});
  p = problems(kTinyConfig, {"train.iters=0"});
  CHECK(p == std::vector<std::string>{"train.iters: must be ≥ 1, got 0 (set by --set train.iters)"});
}

TEST_CASE("malformed overrides are errors naming the override, reported with the rest") {
  const auto p = problems(std::string(kTinyConfig) + "device: auto\n", {"model.n_layer", "=3", "model..n_head=2", "optimizer.params.betas=[0.9,",
                                        "device.kind=cpu", "train.iters=-1"});
  REQUIRE(p.size() == 6);
  CHECK(p[0] == "--set: 'model.n_layer' has no '='; expected key.path=value, e.g. optimizer.params.lr=3e-4");
  CHECK(p[1] == "--set: '=3' has an empty key name in ''; expected key.path=value");
  CHECK(p[2] == "--set: 'model..n_head=2' has an empty key name in 'model..n_head'; expected key.path=value");
  CHECK(has_problem(p, "--set: 'optimizer.params.betas=[0.9,': the value is not valid YAML"));
  CHECK(p[4] == "--set: 'device.kind=cpu': device holds the value 'auto', not a section with keys");
  CHECK(p[5] == "train.iters: must be ≥ 1, got -1 (set by --set train.iters)");
}

TEST_CASE("overrides apply to an empty document and to JSON input") {
  const Config c = load("", {"train_micro_batch_size_per_gpu=2", "model.preset=gpt2-124m"});
  CHECK(*c.train_micro_batch_size_per_gpu == 2);
  CHECK(*c.model.n_layer == 12);
  const Config j = load(R"({"train_batch_size": 8, "model": {"preset": "gpt2-124m"}})",
                        {"train_batch_size=16", "model.seq_len=128"});
  CHECK(*j.train_batch_size == 16);
  CHECK(j.model.seq_len == 128);
}
