// Config parsing: defaults, every section's keys, JSON ds_config input, presets, the batch
// derivation cases, derived values, and the config_to_yaml round trip.
#include <yaml-cpp/yaml.h>

#include "config_test_util.h"

using namespace strata;
using strata_test::kTinyConfig;
using strata_test::load;

TEST_CASE("a minimal config gets the documented defaults") {
  const Config c = load(kTinyConfig);
  CHECK(c.optimizer.type == OptimizerType::AdamW);
  CHECK(c.optimizer.params.lr == 1e-3);
  CHECK(c.optimizer.params.betas == std::array<double, 2>{0.9, 0.999});
  CHECK(c.optimizer.params.eps == 1e-8);
  CHECK(c.optimizer.params.weight_decay == 0.01);
  CHECK(c.optimizer.params.adam_w_mode);
  CHECK(c.scheduler.type == LrScheduleType::Constant);
  CHECK_FALSE(c.fp16.enabled);
  CHECK(c.fp16.initial_scale_power == 16);
  CHECK(c.fp16.loss_scale_window == 1000);
  CHECK(c.fp16.hysteresis == 2);
  CHECK(c.fp16.min_loss_scale == 1.0);
  CHECK_FALSE(c.bf16.enabled);
  CHECK(c.model.attention_probabilities == AttentionProbabilities::Rounded);
  CHECK(c.zero_optimization.stage == 0);
  CHECK(c.zero_optimization.overlap_comm == false);  // resolved: stage 0 → false
  CHECK(c.zero_optimization.reduce_bucket_size == 500000000);
  CHECK(c.zero_optimization.allgather_bucket_size == 500000000);  // resolved: the reduce bucket size
  CHECK_FALSE(c.zero_optimization.stage3_prefetch_bucket_size.has_value());
  CHECK(c.zero_optimization.stage3_param_persistence_threshold == 0);
  CHECK(c.zero_optimization.offload_optimizer.device == OffloadDevice::None);
  CHECK(c.gradient_clipping == 0.0);
  CHECK(c.steps_per_print == 10);
  CHECK_FALSE(c.activation_checkpointing.partition_activations);
  CHECK(c.parallelism.pipeline.schedule == PipeSchedule::OneFOneB);
  CHECK(c.train.iters == 1000);
  CHECK(c.train.eval_iters == 20);
  CHECK(c.train.seed == 1234);
  CHECK(c.checkpoint.resume == "auto");
  CHECK(c.logging.sample_tokens == 200);
  CHECK(c.device == DeviceKind::Auto);
  CHECK(c.comm.backend == CommBackend::Auto);
}

TEST_CASE("every section's keys are parsed into the typed config") {
  const Config c = load(R"(
train_batch_size: 32
gradient_accumulation_steps: 2
optimizer: {type: adam, params: {lr: 3e-4, betas: [0.8, 0.95], eps: 1.0e-6, weight_decay: 0.05, adam_w_mode: false}}
scheduler:
  type: WarmupCosineLR
  params: {total_num_steps: 500, warmup_min_ratio: 0.1, warmup_num_steps: 20, cos_min_ratio: 0.01, warmup_type: linear}
fp16: {enabled: false, loss_scale: 128, initial_scale_power: 12, loss_scale_window: 500, hysteresis: 3,
       consecutive_hysteresis: true, min_loss_scale: 0.5}
bf16: {enabled: false}
zero_optimization:
  stage: 0
  overlap_comm: true
  contiguous_gradients: true
  reduce_scatter: true
  reduce_bucket_size: 2e8
  allgather_bucket_size: 200000000
  stage3_param_persistence_threshold: 0
  offload_optimizer: {device: none, pin_memory: true}
  offload_param: {device: none}
gradient_clipping: 0.5
steps_per_print: 0
wall_clock_breakdown: true
activation_checkpointing: {partition_activations: false, cpu_checkpointing: false}
model: {n_layer: 3, n_head: 4, d_model: 32, vocab_size: 300, seq_len: 16, recompute: full, attention_probabilities: split}
parallelism:
  tensor_model_parallel_size: 1
  pipeline_model_parallel_size: 1
  sequence_parallel: false
  pipeline: {schedule: 1f1b, virtual_stages: 1, partition: uniform}
data: {train: "shards/train_*.bin", val: "shards/val_*.bin", shuffle: true, tokenizer: tok/tokenizer.json}
train: {iters: 50, eval_interval: 10, eval_iters: 3, seed: 7}
checkpoint: {dir: ck, save_interval: 25, save_initial: true, keep_last: 2, resume: none}
logging: {metrics_file: m.jsonl, sample_interval: 5, sample_tokens: 40, sample_prompt: "In the"}
device: cpu
comm: {backend: mpi}
)",
                        {}, 2);
  CHECK(*c.train_batch_size == 32);
  CHECK(*c.train_micro_batch_size_per_gpu == 8);  // 32 / (2 × DP 2)
  CHECK(c.optimizer.type == OptimizerType::Adam);
  CHECK(c.optimizer.params.lr == 3e-4);
  CHECK(c.optimizer.params.betas == std::array<double, 2>{0.8, 0.95});
  CHECK(c.optimizer.params.eps == 1e-6);
  CHECK(c.optimizer.params.weight_decay == 0.05);
  CHECK_FALSE(c.optimizer.params.adam_w_mode);
  CHECK(c.scheduler.type == LrScheduleType::WarmupCosineLR);
  CHECK(*c.scheduler.params.total_num_steps == 500);
  CHECK(c.scheduler.params.warmup_min_ratio == 0.1);
  CHECK(c.scheduler.params.warmup_num_steps == 20);
  CHECK(c.scheduler.params.cos_min_ratio == 0.01);
  CHECK(c.scheduler.params.warmup_type == WarmupType::Linear);
  CHECK(c.fp16.loss_scale == 128);
  CHECK(c.fp16.initial_scale_power == 12);
  CHECK(c.fp16.loss_scale_window == 500);
  CHECK(c.fp16.hysteresis == 3);
  CHECK(c.fp16.consecutive_hysteresis);
  CHECK(c.fp16.min_loss_scale == 0.5);
  CHECK(c.zero_optimization.overlap_comm == true);
  CHECK(c.zero_optimization.contiguous_gradients);
  CHECK(c.zero_optimization.reduce_scatter);
  CHECK(c.zero_optimization.reduce_bucket_size == 200000000);
  CHECK(c.zero_optimization.allgather_bucket_size == 200000000);
  CHECK(c.zero_optimization.stage3_param_persistence_threshold == 0);
  CHECK(c.zero_optimization.offload_optimizer.pin_memory);
  CHECK(c.gradient_clipping == 0.5);
  CHECK(c.steps_per_print == 0);
  CHECK(c.wall_clock_breakdown);
  CHECK(*c.model.n_layer == 3);
  CHECK(*c.model.n_head == 4);
  CHECK(*c.model.d_model == 32);
  CHECK(c.model.vocab_size == 300);
  CHECK(c.model.seq_len == 16);
  CHECK(c.model.recompute == ActivationRecompute::Full);
  CHECK(c.model.attention_probabilities == AttentionProbabilities::Split);
  CHECK(c.data.train == strata_test::one_source("shards/train_*.bin"));
  CHECK(c.data.val == "shards/val_*.bin");
  CHECK(c.data.shuffle);
  CHECK(c.train.iters == 50);
  CHECK(c.train.eval_interval == 10);
  CHECK(c.train.eval_iters == 3);
  CHECK(c.train.seed == 7);
  CHECK(c.checkpoint.dir == "ck");
  CHECK(c.checkpoint.save_interval == 25);
  CHECK(c.checkpoint.save_initial);
  CHECK(c.checkpoint.keep_last == 2);
  CHECK(c.checkpoint.resume == "none");
  CHECK(c.logging.metrics_file == "m.jsonl");
  CHECK(c.logging.sample_interval == 5);
  CHECK(c.logging.sample_tokens == 40);
  CHECK(c.logging.sample_prompt == "In the");
  CHECK(c.device == DeviceKind::Cpu);
  CHECK(c.comm.backend == CommBackend::Mpi);
}

TEST_CASE("WarmupLR and WarmupDecayLR take their own parameters") {
  Config c = load(std::string(kTinyConfig) + R"(
scheduler: {type: WarmupLR, params: {warmup_min_lr: 1e-5, warmup_max_lr: 2e-3, warmup_num_steps: 30}}
)");
  CHECK(c.scheduler.type == LrScheduleType::WarmupLR);
  CHECK(c.scheduler.params.warmup_min_lr == 1e-5);
  CHECK(c.scheduler.params.warmup_max_lr == 2e-3);
  CHECK(c.scheduler.params.warmup_num_steps == 30);
  CHECK(c.scheduler.params.warmup_type == WarmupType::Log);
  c = load(std::string(kTinyConfig) + R"(
scheduler: {type: WarmupDecayLR, params: {warmup_max_lr: 5e-4, warmup_num_steps: 10, total_num_steps: 90}}
)");
  CHECK(c.scheduler.type == LrScheduleType::WarmupDecayLR);
  CHECK(*c.scheduler.params.total_num_steps == 90);
  CHECK(c.scheduler.params.warmup_max_lr == 5e-4);
}

TEST_CASE("optimizer type is case-insensitive, resolve fills overlap_comm below stage 3 with false") {
  CHECK(load(std::string(kTinyConfig) + "optimizer: {type: ADAMW}\n").optimizer.type == OptimizerType::AdamW);
  CHECK(load(std::string(kTinyConfig) + "optimizer: {type: adam}\n").optimizer.type == OptimizerType::Adam);
  // A config built in code (not parsed) resolves the same way.
  Config c;
  c.train_micro_batch_size_per_gpu = 1;
  c.model.preset = "gpt2-124m";
  CHECK_FALSE(c.zero_optimization.overlap_comm.has_value());
  resolve_config(c, 1);
  CHECK(c.zero_optimization.overlap_comm == false);
  CHECK(*c.model.n_layer == 12);
  CHECK(*c.train_batch_size == 1);
}

TEST_CASE("a DeepSpeed ds_config JSON file is accepted as-is") {
  const Config c = load(R"({
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 6e-4, "warmup_num_steps": 100, "total_num_steps": 1000}},
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 0, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8},
  "steps_per_print": 10,
  "wall_clock_breakdown": false,
	"model": {"preset": "gpt2-124m"}
})",
                        {}, 8);
  CHECK(*c.gradient_accumulation_steps == 2);  // 64 / (4 × 8)
  CHECK(c.optimizer.params.lr == 6e-4);
  CHECK(c.scheduler.type == LrScheduleType::WarmupDecayLR);
  CHECK(c.gradient_clipping == 1.0);
  CHECK(c.zero_optimization.reduce_bucket_size == 500000000);
  CHECK(c.derived.dp_size == 8);
}

TEST_CASE("presets expand, and explicit dimensions override them") {
  Config c = load("train_micro_batch_size_per_gpu: 1\nmodel: {preset: gpt2-350m}\n");
  CHECK(*c.model.n_layer == 24);
  CHECK(*c.model.n_head == 16);
  CHECK(*c.model.d_model == 1024);
  CHECK(c.model.vocab_size == 50257);
  CHECK(c.model.seq_len == 1024);
  c = load("train_micro_batch_size_per_gpu: 1\nmodel: {preset: gpt2-1558m, n_layer: 2, seq_len: 256}\n");
  CHECK(*c.model.n_layer == 2);
  CHECK(*c.model.n_head == 25);
  CHECK(*c.model.d_model == 1600);
  CHECK(c.model.seq_len == 256);
}

TEST_CASE("derived values of gpt2-124m: parameter counts, padding, FLOPs, batch") {
  const Config c = load("train_batch_size: 64\ntrain_micro_batch_size_per_gpu: 4\nmodel: {preset: gpt2-124m}\n",
                        {}, 8);
  const Derived& d = c.derived;
  CHECK(d.n_params_unpadded == 124439808);
  CHECK(d.padded_vocab == 50304);
  CHECK(d.n_params == 124439808 + int64_t{50304 - 50257} * 768);
  CHECK(d.flops_per_token == 6 * d.n_params + int64_t{6} * 12 * 768 * 1024);
  CHECK(d.world_size == 8);
  CHECK(d.dp_size == 8);
  CHECK(d.tp_size == 1);
  CHECK(d.pp_size == 1);
  CHECK(d.micro_batch == 4);
  CHECK(d.grad_accum == 2);
  CHECK(d.global_batch == 64);
  CHECK(d.tokens_per_step == 64 * 1024);
  CHECK(gpt_param_count({12, 12, 768, 50257, 50257, 1024}) == 124439808);

  const std::string text = derived_to_yaml(c);
  const YAML::Node node = YAML::Load(text)["derived"];
  CHECK(node["n_params_unpadded"].as<int64_t>() == 124439808);
  CHECK(node["grad_accum"].as<int>() == 2);
  CHECK(node["flops_per_token"].as<int64_t>() == d.flops_per_token);
}

TEST_CASE("vocabulary is padded up to a multiple of 128") {
  CHECK(load(kTinyConfig).derived.padded_vocab == 256);
  CHECK(load(kTinyConfig, {"model.vocab_size=300"}).derived.padded_vocab == 384);
  CHECK(load(kTinyConfig, {"model.vocab_size=1"}).derived.padded_vocab == 128);
}

TEST_CASE("batch keys: any two determine the third, one alone follows DeepSpeed") {
  const std::string model = "model: {n_layer: 2, n_head: 2, d_model: 64, vocab_size: 256, seq_len: 32}\n";
  struct Case {
    const char* keys;
    int train, micro, accum;
  };
  const Case cases[] = {
      {"train_batch_size: 48\ntrain_micro_batch_size_per_gpu: 3\ngradient_accumulation_steps: 4\n", 48, 3, 4},
      {"train_batch_size: 48\ntrain_micro_batch_size_per_gpu: 3\n", 48, 3, 4},
      {"train_batch_size: 48\ngradient_accumulation_steps: 2\n", 48, 6, 2},
      {"train_micro_batch_size_per_gpu: 3\ngradient_accumulation_steps: 5\n", 60, 3, 5},
      {"train_batch_size: 48\n", 48, 12, 1},
      {"train_micro_batch_size_per_gpu: 5\n", 20, 5, 1},
  };
  for (const auto& k : cases) {
    INFO(k.keys);
    const Config c = load(std::string(k.keys) + model, {}, 4);
    CHECK(*c.train_batch_size == k.train);
    CHECK(*c.train_micro_batch_size_per_gpu == k.micro);
    CHECK(*c.gradient_accumulation_steps == k.accum);
    CHECK(c.derived.global_batch == k.train);
    CHECK(c.derived.micro_batch == k.micro);
    CHECK(c.derived.grad_accum == k.accum);
  }
}

TEST_CASE("config_to_yaml re-parses into the same config") {
  const Config original = load(R"(
train_batch_size: 24
train_micro_batch_size_per_gpu: 3
optimizer: {type: Adam, params: {lr: 0.0003, betas: [0.85, 0.975], eps: 1e-7, weight_decay: 0.3, adam_w_mode: false}}
scheduler: {type: WarmupDecayLR, params: {warmup_min_lr: 1.5e-6, warmup_max_lr: 0.1, warmup_num_steps: 7,
            warmup_type: linear, total_num_steps: 70}}
fp16: {loss_scale: 0.1, min_loss_scale: 0.25}
zero_optimization: {reduce_bucket_size: 123456789}
gradient_clipping: 0.3333333333333333
model: {preset: gpt2-124m, n_layer: 2, seq_len: 64, recompute: full, attention_probabilities: split}
data: {train: "a: b/*.bin", val: "'quoted' \"both\"", shuffle: true}
train: {iters: 70, eval_interval: 7, seed: 99}
checkpoint: {dir: "runs/x y", save_interval: 7, keep_last: 1, resume: none}
logging: {metrics_file: "m.jsonl", sample_prompt: "In the beginning:\n\t\"God\" — ünïcode \\ end"}
device: cpu
comm: {backend: mpi}
)",
                               {}, 2);
  const std::string text = config_to_yaml(original);
  const Config again = load(text, {}, 2);
  CHECK(config_to_yaml(again) == text);
  // Spot checks on values whose text form is easy to get wrong.
  CHECK(again.logging.sample_prompt == original.logging.sample_prompt);
  CHECK(again.logging.sample_prompt == "In the beginning:\n\t\"God\" — ünïcode \\ end");
  CHECK(again.data.train == strata_test::one_source("a: b/*.bin"));
  CHECK(again.data.val == "'quoted' \"both\"");
  CHECK(again.gradient_clipping == original.gradient_clipping);
  CHECK(again.optimizer.params.betas == original.optimizer.params.betas);
  CHECK(again.scheduler.params.warmup_min_lr == 1.5e-6);
  CHECK(again.optimizer.type == OptimizerType::Adam);
  CHECK(*again.model.n_layer == 2);
  CHECK(*again.model.d_model == 768);
  CHECK(again.model.preset == "gpt2-124m");
  CHECK(*again.gradient_accumulation_steps == 4);
  CHECK(again.zero_optimization.overlap_comm == false);
  CHECK(again.derived.n_params == original.derived.n_params);
  // Every key is written out, including defaults the input never mentioned.
  CHECK(text.find("stage3_param_persistence_threshold: 0") != std::string::npos);
  CHECK(text.find("cpu_checkpointing: false") != std::string::npos);
  CHECK(text.find("derived") == std::string::npos);
}

TEST_CASE("config_to_yaml of a constant-lr config round-trips without a scheduler section") {
  const Config original = load(kTinyConfig);
  const std::string text = config_to_yaml(original);
  CHECK(text.find("\nscheduler:") == std::string::npos);
  const Config again = load(text);
  CHECK(again.scheduler.type == LrScheduleType::Constant);
  CHECK(config_to_yaml(again) == text);
}

TEST_CASE("data.train takes a blend of sources, each {path, weight}, and writes it back as it read it") {
  const Config c = load(std::string(kTinyConfig) + R"(
data:
  train:
    - {path: "web/train_*.bin", weight: 0.7}
    - path: books/train_*.bin
      weight: 3e-1
)");
  REQUIRE(c.data.train.size() == 2);
  CHECK(c.data.train[0] == DataSource{"web/train_*.bin", 0.7});
  CHECK(c.data.train[1] == DataSource{"books/train_*.bin", 0.3});
  const std::string text = config_to_yaml(c);
  CHECK(text.find(R"(train: [{path: "web/train_*.bin", weight: 0.7}, {path: "books/train_*.bin", weight: 0.3}])") !=
        std::string::npos);
  CHECK(load(text).data.train == c.data.train);
  // One source of weight 1 is the plain glob; an override replaces a blend with one glob.
  CHECK(config_to_yaml(load(std::string(kTinyConfig) + "data: {train: [{path: a.bin, weight: 1}]}\n"))
            .find("train: \"a.bin\"") != std::string::npos);
  CHECK(load(text, {"data.train=x_*.bin"}).data.train == strata_test::one_source("x_*.bin"));
  CHECK(load(text, {"data.train="}).data.train.empty());
}

TEST_CASE("a blend's sources are checked: a map each, path and weight required, weights positive") {
  using strata_test::problems;
  const std::string tiny = kTinyConfig;
  CHECK(problems(tiny + "data: {train: [{path: a}, b, {path: c, weight: 1, wieght: 2}]}\n") ==
        std::vector<std::string>{"data.train[0].weight: required in each source of a blend",
                                 "data.train[1]: expected a map {path: GLOB, weight: W}, got 'b'",
                                 "data.train[2].wieght: unknown key; did you mean weight?"});
  CHECK(problems(tiny + "data: {train: []}\n") ==
        std::vector<std::string>{"data.train: expected a glob of token shards or a list of {path: GLOB, weight: W} "
                                 "to blend, got an empty list"});
  CHECK(problems(tiny + "data: {train: [{path: a, weight: 0}, {path: '', weight: -2}]}\n") ==
        std::vector<std::string>{"data.train[0].weight: must be a positive number, got 0",
                                 "data.train[1].path: empty; give a glob of token shards, e.g. data/web/train_*.bin",
                                 "data.train[1].weight: must be a positive number, got -2"});
  CHECK(problems(tiny + "data: {train: [{path: a, weight: 1e7}, {path: b, weight: 1}]}\n") ==
        std::vector<std::string>{"data.train[1].weight: 1 is a share of 1e-07 of the blend, below the smallest strata "
                                 "blends (1e-06); raise it or leave the source out"});
}
