// Config problems: every error class has its message and key path, all problems of a
// config come back together, and features that are not implemented yet are refused.
#include <algorithm>
#include "config_test_util.h"

using namespace strata;
using strata_test::has_problem;
using strata_test::joined;
using strata_test::kTinyConfig;
using strata_test::problems;

namespace {
std::vector<std::string> tiny_problems(const std::string& extra, const std::vector<std::string>& overrides = {},
                                       int world_size = 1) {
  return problems(std::string(kTinyConfig) + extra, overrides, world_size);
}
// A problem anywhere in whose text `part` appears.
bool mentions(const std::vector<std::string>& list, const std::string& part) {
  return std::any_of(list.begin(), list.end(), [&](const std::string& p) { return p.find(part) != std::string::npos; });
}
}  // namespace

TEST_CASE("unknown keys name the path and suggest the closest valid key") {
  auto p = tiny_problems("zero_optimisation: {stage: 0}\n");
  REQUIRE(p.size() == 1);
  CHECK(p[0] == "zero_optimisation: unknown key; did you mean zero_optimization?");

  p = tiny_problems("optimizer: {params: {lrr: 0.1}}\n");
  REQUIRE(p.size() == 1);
  CHECK(p[0] == "optimizer.params.lrr: unknown key; did you mean lr?");

  // Nothing close: the valid keys of that level are listed instead.
  p = tiny_problems("optimizer: {params: {learning_rate: 0.1}}\n");
  REQUIRE(p.size() == 1);
  CHECK(p[0] == "optimizer.params.learning_rate: unknown key; valid keys here: lr, betas, eps, weight_decay, "
                "adam_w_mode");

  p = tiny_problems("parallelism: {pipeline: {schedul: gpipe}}\n");
  CHECK(has_problem(p, "parallelism.pipeline.schedul: unknown key; did you mean schedule?"));

  // A key at the wrong level, or under another trainer's name, is pointed to where it belongs
  // (not to a look-alike sibling: eval_every is no eval_iters).
  CHECK(tiny_problems("train: {eval_every: 5}\n") ==
        std::vector<std::string>{"train.eval_every: unknown key here; did you mean train.eval_interval?"});
  CHECK(tiny_problems("tensor_model_parallel_size: 2\n") ==
        std::vector<std::string>{
            "tensor_model_parallel_size: unknown key here; did you mean parallelism.tensor_model_parallel_size?"});
  CHECK(tiny_problems("parallelism: {virtual_stages: 2}\n") ==
        std::vector<std::string>{
            "parallelism.virtual_stages: unknown key here; did you mean parallelism.pipeline.virtual_stages?"});
  CHECK(tiny_problems("train: {sample_interval: 5}\n") ==
        std::vector<std::string>{"train.sample_interval: unknown key here; did you mean logging.sample_interval?"});
  // A name found at many places (enabled, type) says nothing about where it belongs.
  CHECK(has_problem(tiny_problems("train: {enabled: true}\n"), "train.enabled: unknown key; "));

  // A DeepSpeed key strata refuses says why, never "unknown key".
  p = tiny_problems("sparse_attention: {mode: fixed}\n");
  REQUIRE(p.size() == 1);
  CHECK(p[0] == "sparse_attention: strata's attention is dense; sparse attention would train another model. "
                "Remove the section");
}

TEST_CASE("wrong types are reported with the expected type and the value found") {
  CHECK(tiny_problems("optimizer: {params: {lr: fast}}\n") ==
        std::vector<std::string>{"optimizer.params.lr: expected a number, got 'fast'"});
  CHECK(tiny_problems("train: {iters: 10.5}\n") ==
        std::vector<std::string>{"train.iters: expected an integer, got '10.5'"});
  CHECK(tiny_problems("data: {shuffle: maybe}\n") ==
        std::vector<std::string>{"data.shuffle: expected true or false, got 'maybe'"});
  CHECK(tiny_problems("optimizer: {params: {betas: [0.9]}}\n") ==
        std::vector<std::string>{
            "optimizer.params.betas: expected a list of two numbers like [0.9, 0.999], got a list of 1"});
  CHECK(tiny_problems("fp16: true\n") == std::vector<std::string>{"fp16: expected a map of keys, got 'true'"});
  CHECK(tiny_problems("data: {train: {path: a}}\n") ==
        std::vector<std::string>{"data.train: expected a glob of token shards or a list of {path: GLOB, weight: W} "
                                 "to blend, got a map"});
  CHECK(tiny_problems("zero_optimization: {reduce_bucket_size: 1.5}\n") ==
        std::vector<std::string>{"zero_optimization.reduce_bucket_size: expected a whole number of elements "
                                 "(e.g. 5e8 or 500000000), got '1.5'"});
  // Values of three letters or fewer get no guess: "gpu" is not a typo of "cpu".
  CHECK(tiny_problems("device: gpu\n") ==
        std::vector<std::string>{"device: 'gpu' is not supported; supported: auto, cpu, cuda"});
  CHECK(tiny_problems("comm: {backend: ncll}\n") ==
        std::vector<std::string>{"comm.backend: 'ncll' is not supported; supported: auto, nccl, mpi; did you mean "
                                 "nccl?"});
  CHECK(tiny_problems("optimizer: {type: Lamb}\n") ==
        std::vector<std::string>{"optimizer.type: 'Lamb' is not supported; supported: AdamW, Adam"});
  CHECK(tiny_problems("", {"model.n_layer=99999999999"}) ==
        std::vector<std::string>{"model.n_layer: got 99999999999, beyond what this key can hold (-2147483648 to "
                                 "2147483647; its own range may be narrower) (set by --set model.n_layer)"});
  // An integer too large for 64 bits is said to be that, not "not an integer".
  CHECK(tiny_problems("", {"train.iters=99999999999999999999"}) ==
        std::vector<std::string>{"train.iters: got 99999999999999999999, beyond a 64-bit integer (at most "
                                 "9223372036854775807) (set by --set train.iters)"});
  CHECK(tiny_problems("gradient_clipping: .inf\n") ==
        std::vector<std::string>{"gradient_clipping: expected a number, got '.inf'"});
}

TEST_CASE("'auto' that no strata key determines is refused with what would determine it") {
  const auto p = tiny_problems("optimizer: {params: {lr: auto, betas: auto}}\n");
  REQUIRE(p.size() == 2);
  CHECK(p[0] == "optimizer.params.betas: 'auto' is filled in by the HuggingFace Trainer from its argument "
                "adam_beta1 and adam_beta2, and no strata key determines it; strata needs a list of two numbers "
                "like [0.9, 0.999]");
  CHECK(p[1] == "optimizer.params.lr: 'auto' follows from scheduler.params.warmup_max_lr (with scheduler.type "
                "WarmupLR or WarmupDecayLR), which this config does not give; strata needs a number");
  // A batch key is 'auto' where the others determine it; here nothing does.
  const auto batch = problems("train_micro_batch_size_per_gpu: auto\nmodel: {n_layer: 2, n_head: 2, d_model: 64}\n");
  REQUIRE(batch.size() == 1);
  CHECK(batch[0] == "train_batch_size: set train_batch_size or train_micro_batch_size_per_gpu "
                    "(train_micro_batch_size_per_gpu is 'auto', which strata fills in from the other batch keys and "
                    "the data-parallel size only where they determine it)");
  // A scheduler of the wrong shape is reported as such, not tripped over.
  CHECK(has_problem(tiny_problems("scheduler: 5\noptimizer: {params: {lr: auto}}\n"),
                    "scheduler: expected a map of keys, got '5'"));
  CHECK(tiny_problems("fp16: {enabled: auto}\n") ==
        std::vector<std::string>{"fp16.enabled: 'auto' is filled in by the HuggingFace Trainer from its argument fp16 "
                                 "(or fp16_full_eval), and no strata key determines it; strata needs true or false"});
  CHECK(tiny_problems("train: {iters: auto}\n") ==
        std::vector<std::string>{"train.iters: 'auto' is not a value strata can fill in for this key; strata needs "
                                 "an integer"});
}

TEST_CASE("out-of-range values name the allowed range") {
  CHECK(tiny_problems("zero_optimization: {stage: 4}\n") ==
        std::vector<std::string>{"zero_optimization.stage: must be in 0..3, got 4"});
  CHECK(tiny_problems("optimizer: {params: {lr: -0.1}}\n") ==
        std::vector<std::string>{"optimizer.params.lr: must be > 0, got -0.1"});
  CHECK(tiny_problems("optimizer: {params: {betas: [0.9, 1.5]}}\n") ==
        std::vector<std::string>{"optimizer.params.betas: each beta must be in [0, 1), got [0.9, 1.5]"});
  CHECK(tiny_problems("train: {iters: 0}\n") == std::vector<std::string>{"train.iters: must be ≥ 1, got 0"});
  CHECK(tiny_problems("gradient_clipping: -1\n") ==
        std::vector<std::string>{"gradient_clipping: must be ≥ 0, got -1"});
  CHECK(tiny_problems("gradient_accumulation_steps: 0\n") ==
        std::vector<std::string>{"gradient_accumulation_steps: must be ≥ 1, got 0"});
  CHECK(tiny_problems("scheduler: {type: WarmupCosineLR, params: {total_num_steps: 10, cos_min_ratio: 2}}\n") ==
        std::vector<std::string>{"scheduler.params.cos_min_ratio: must be in [0, 1], got 2",
                                 "scheduler.params.total_num_steps: must exceed the warmup length 1000 for "
                                 "WarmupCosineLR, got 10"});
}

TEST_CASE("numeric edges of the optimizer and the loss scaler") {
  // eps: below fp32's smallest normal it flushes to zero in Adam's fp32 state; 1 or more swamps
  // every update; zero and negative values are caught as before.
  for (const char* eps : {"1e-300", "1e-39", "1", "5"}) {
    INFO(eps);
    const auto p = tiny_problems(std::string("optimizer: {params: {eps: ") + eps + "}}\n");
    REQUIRE(p.size() == 1);
    CHECK(p[0].rfind("optimizer.params.eps: must be at least fp32's smallest normal number 1.17549e-38 and below 1, "
                     "got ",
                     0) == 0);
  }
  CHECK(tiny_problems("optimizer: {params: {eps: 0}}\n") ==
        std::vector<std::string>{"optimizer.params.eps: must be > 0, got 0"});
  CHECK(tiny_problems("optimizer: {params: {eps: 1.0e-38}}\n").empty() == false);
  CHECK(tiny_problems("optimizer: {params: {eps: 1.2e-38}}\n").empty());
  CHECK(tiny_problems("optimizer: {params: {eps: 0.5, weight_decay: 0, lr: 1e-9}}\n").empty());
  CHECK(tiny_problems("optimizer: {params: {weight_decay: -0.1}}\n") ==
        std::vector<std::string>{"optimizer.params.weight_decay: must be ≥ 0, got -0.1"});
  CHECK(tiny_problems("optimizer: {params: {betas: [-0.1, 0.999]}}\n") ==
        std::vector<std::string>{"optimizer.params.betas: each beta must be in [0, 1), got [-0.1, 0.999]"});
  // A dynamic scale halves down to min_loss_scale: a minimum above the start is refused; a static
  // scale (loss_scale > 0) never uses it.
  CHECK(tiny_problems("fp16: {enabled: true, initial_scale_power: 4, min_loss_scale: 32}\n") ==
        std::vector<std::string>{"fp16.min_loss_scale: 32 is above the initial scale 2^initial_scale_power = 16"});
  CHECK(tiny_problems("fp16: {enabled: true, initial_scale_power: 5, min_loss_scale: 32}\n").empty());
  CHECK(tiny_problems("fp16: {enabled: true, loss_scale: 8, min_loss_scale: 32}\n").empty());
}

TEST_CASE("cross-key rules: precision, optimizer mode, model shape, rank grid") {
  auto p = tiny_problems("fp16: {enabled: true}\nbf16: {enabled: true}\n");
  CHECK(has_problem(p, "bf16.enabled: fp16 and bf16 are both enabled; enable at most one of them"));
  // Either one alone is a supported mode, with every ZeRO stage.
  for (const char* stage : {"0", "1", "2", "3"}) {
    INFO("stage " << stage);
    CHECK(tiny_problems("fp16: {enabled: true, initial_scale_power: 40}\n",
                        {std::string("zero_optimization.stage=") + stage})
              .empty());
    CHECK(tiny_problems("bf16: {enabled: true}\n", {std::string("zero_optimization.stage=") + stage}).empty());
  }

  CHECK(has_problem(tiny_problems("optimizer: {type: AdamW, params: {adam_w_mode: false}}\n"),
                    "optimizer.params.adam_w_mode: false asks for L2 regularisation"));
  CHECK(tiny_problems("optimizer: {type: Adam, params: {adam_w_mode: false}}\n").empty());

  CHECK(tiny_problems("", {"model.d_model=66", "model.n_head=4"}) ==
        std::vector<std::string>{"model.d_model: 66 is not divisible by model.n_head = 4 (set by --set model.d_model)"});

  // Each grid problem comes with values that would do.
  p = tiny_problems("parallelism: {tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2}\n", {}, 6);
  CHECK(has_problem(p, "parallelism: world size 6 is not divisible by TP×PP = 4 (tensor_model_parallel_size 2 × "
                       "pipeline_model_parallel_size 2); run on a multiple of 4 ranks (mpirun -np 8), or choose TP×PP "
                       "among the divisors of 6: 1, 2, 3, 6"));

  p = tiny_problems("parallelism: {tensor_model_parallel_size: 2}\n", {"model.n_head=3", "model.d_model=48"}, 2);
  CHECK(has_problem(p, "parallelism.tensor_model_parallel_size: model.n_head = 3 is not divisible by "
                       "tensor_model_parallel_size 2; a tensor_model_parallel_size dividing both n_head and the world "
                       "size 2 would do: 1"));
  p = tiny_problems("parallelism: {tensor_model_parallel_size: 8}\n", {"model.n_head=12", "model.d_model=48"}, 8);
  CHECK(mentions(p, "would do: 1, 2, 4"));

  p = tiny_problems("parallelism: {pipeline_model_parallel_size: 4}\n", {}, 4);
  CHECK(has_problem(p, "parallelism.pipeline_model_parallel_size: 4 pipeline stages need at least as many layers, "
                       "but the model has 2; at most 2 stages"));

  // The interleaved schedule's micro-batch rule, told with the key to change and its value: the
  // one given, else the batch that derives the count.
  const std::string interleaved =
      "parallelism: {pipeline_model_parallel_size: 2, pipeline: {schedule: interleaved, virtual_stages: 2}}\n";
  p = tiny_problems(interleaved, {"model.n_layer=4", "train_batch_size=null", "gradient_accumulation_steps=3"}, 2);
  CHECK(mentions(p, "the interleaved schedule needs a multiple of the 2 pipeline stages; "
                       "gradient_accumulation_steps 4 would do"));
  p = tiny_problems(interleaved, {"model.n_layer=4", "train_batch_size=6", "train_micro_batch_size_per_gpu=2",
                                  "gradient_accumulation_steps=null"}, 2);
  CHECK(mentions(p, "(gradient_accumulation_steps derived as train_batch_size / (micro-batch × data-parallel "
                       "size)); train_batch_size 8 would do"));
  p = tiny_problems(interleaved, {"model.n_layer=4", "train_batch_size=8", "train_micro_batch_size_per_gpu=null",
                                  "gradient_accumulation_steps=null"}, 2);
  CHECK(mentions(p, "train_micro_batch_size_per_gpu 4 would give 2 micro-batches"));
  p = tiny_problems(interleaved, {"model.n_layer=4", "parallelism.pipeline.virtual_stages=3"}, 2);
  CHECK(mentions(p, "6 model chunks need at least as many layers, but the model has 4; at most 2 virtual stages"));

  CHECK(tiny_problems("", {}, 0) == std::vector<std::string>{"--world-size: must be ≥ 1, got 0"});
}

TEST_CASE("batch rule: each derivation case reports what does not divide") {
  const std::string model = "model: {n_layer: 2, n_head: 2, d_model: 64, vocab_size: 256, seq_len: 32}\n";
  auto p = problems("train_batch_size: 64\ntrain_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 4\n" +
                        model,
                    {}, 2);
  CHECK(p == std::vector<std::string>{"train_batch_size: 64 ≠ train_micro_batch_size_per_gpu × "
                                      "gradient_accumulation_steps × data-parallel size = 4 × 4 × 2 = 32"});
  p = problems("train_batch_size: 64\ntrain_micro_batch_size_per_gpu: 3\n" + model, {}, 2);
  CHECK(p == std::vector<std::string>{"train_batch_size: 64 is not divisible by train_micro_batch_size_per_gpu × "
                                      "data-parallel size = 3 × 2 = 6, so gradient_accumulation_steps cannot be "
                                      "derived; a multiple of 6 would do, e.g. 60 or 66"});
  p = problems("train_batch_size: 64\ngradient_accumulation_steps: 3\n" + model, {}, 2);
  CHECK(p == std::vector<std::string>{"train_batch_size: 64 is not divisible by gradient_accumulation_steps × "
                                      "data-parallel size = 3 × 2 = 6, so train_micro_batch_size_per_gpu cannot be "
                                      "derived; a multiple of 6 would do, e.g. 60 or 66"});
  p = problems("train_batch_size: 63\n" + model, {}, 2);
  CHECK(p == std::vector<std::string>{"train_batch_size: 63 is not divisible by the data-parallel size 2, so "
                                      "train_micro_batch_size_per_gpu cannot be derived; a multiple of 2 would do, e.g. 62 or 64"});
  p = problems(model, {}, 2);
  CHECK(p == std::vector<std::string>{"train_batch_size: set train_batch_size or train_micro_batch_size_per_gpu"});
  p = problems("gradient_accumulation_steps: 2\n" + model, {}, 2);
  CHECK(has_problem(p, "train_batch_size: set train_batch_size or train_micro_batch_size_per_gpu"));
}

TEST_CASE("scheduler problems: missing type, unknown type, foreign and missing parameters") {
  CHECK(has_problem(tiny_problems("scheduler: {params: {warmup_num_steps: 5}}\n"),
                    "scheduler.type: required when a scheduler section is given"));
  CHECK(tiny_problems("scheduler: {type: WarmupLr}\n") ==
        std::vector<std::string>{"scheduler.type: 'WarmupLr' is not supported; supported: WarmupLR, WarmupDecayLR, "
                                 "WarmupCosineLR; did you mean WarmupLR?"});
  CHECK(tiny_problems("scheduler: {type: WarmupLR, params: {cos_min_ratio: 0.1}}\n") ==
        std::vector<std::string>{"scheduler.params.cos_min_ratio: not a parameter of WarmupLR (its parameters: "
                                 "warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type)"});
  CHECK(tiny_problems("scheduler: {type: WarmupDecayLR}\n") ==
        std::vector<std::string>{"scheduler.params.total_num_steps: required for WarmupDecayLR (the step where the "
                                 "decay ends, usually train.iters)"});
  CHECK(tiny_problems("scheduler: {type: WarmupLR, params: {warmup_type: cosine}}\n") ==
        std::vector<std::string>{"scheduler.params.warmup_type: 'cosine' is not supported; supported: log, linear"});
  // A warmup that failed to parse is not compared with the total (its default would stand in).
  const auto bad_warmup = tiny_problems("scheduler: {type: WarmupCosineLR, params: {total_num_steps: 6, "
                                        "warmup_num_steps: auto}}\n");
  REQUIRE(bad_warmup.size() == 1);
  CHECK(bad_warmup[0].rfind("scheduler.params.warmup_num_steps: 'auto'", 0) == 0);
}

TEST_CASE("model, loop and checkpoint consistency problems") {
  auto p = problems("train_micro_batch_size_per_gpu: 1\nmodel: {n_head: 2}\n");
  CHECK(p.size() == 2);
  CHECK(has_problem(p, "model.n_layer: required without a preset (or set model.preset: one of gpt2-124m, "));
  CHECK(has_problem(p, "model.d_model: required without a preset"));
  CHECK(problems("train_micro_batch_size_per_gpu: 1\nmodel: {preset: gpt2-125m}\n") ==
        std::vector<std::string>{"model.preset: unknown preset 'gpt2-125m'; did you mean gpt2-124m? (presets: "
                                 "gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m)"});
  CHECK(tiny_problems("train: {eval_interval: 10}\n") ==
        std::vector<std::string>{"train.eval_interval: evaluation needs validation data: set data.val, or set "
                                 "eval_interval to 0"});
  // data.val given in a form it cannot take is that one problem, not also "missing".
  CHECK(tiny_problems("train: {eval_interval: 10}\ndata: {train: a.bin, val: [b.bin]}\n") ==
        std::vector<std::string>{"data.val: expected a string, got a list"});
  CHECK(tiny_problems("checkpoint: {save_interval: 10}\n") ==
        std::vector<std::string>{"checkpoint.dir: checkpoint.save_interval needs a directory to save into; set "
                                 "checkpoint.dir"});
  // An error filed under one key that names another the --set changed is marked with it too.
  CHECK(tiny_problems("", {"checkpoint.save_interval=10"}) ==
        std::vector<std::string>{"checkpoint.dir: checkpoint.save_interval needs a directory to save into; set "
                                 "checkpoint.dir (set by --set checkpoint.save_interval)"});
  CHECK(tiny_problems("", {"model.n_head=3"}) ==
        std::vector<std::string>{"model.d_model: 64 is not divisible by model.n_head = 3 (set by --set model.n_head)"});
  CHECK(tiny_problems("train: {iters: 5}\ntrain: {iters: 6}\n") ==
        std::vector<std::string>{"train: appears more than once in the same section; keep one"});
}

TEST_CASE("features that parse but are not implemented yet are refused with their key") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"zero_optimization.contiguous_gradients=false", "zero_optimization.contiguous_gradients: false is not "
                                                       "supported yet"},
      {"zero_optimization.reduce_scatter=false", "zero_optimization.reduce_scatter: false (all-reduce at stages "
                                                 "1-2) is not supported yet"},
      {"zero_optimization.allgather_bucket_size=1e6", "zero_optimization.allgather_bucket_size: 1000000 differs "
                                                      "from reduce_bucket_size 500000000"},
      {"activation_checkpointing.cpu_checkpointing=true", "activation_checkpointing.cpu_checkpointing: true "
                                                          "(checkpointed activations in host memory) is not "
                                                          "supported yet"},
  };
  for (const auto& c : cases) {
    INFO(c.first);
    // World size 4 keeps TP=2 and PP=2 on a valid grid, so only the refusal remains.
    const auto p = problems(kTinyConfig, {c.first}, 4);
    REQUIRE(p.size() == 1);
    CHECK(p[0].rfind(c.second, 0) == 0);
  }
  // Offloading the optimizer state to host memory: each rank's shard of it, so ZeRO 1-3.
  CHECK(problems(kTinyConfig, {"zero_optimization.offload_optimizer.device=cpu"}, 2) ==
        std::vector<std::string>{"zero_optimization.offload_optimizer.device: cpu needs ZeRO stage 1, 2 or 3 (the "
                                 "optimizer state offloaded is each rank's shard of it); set zero_optimization.stage (set by --set "
                                 "zero_optimization.offload_optimizer.device)"});
  for (const char* stage : {"1", "2", "3"}) {
    for (const char* device : {"cpu", "nvme"}) {
      CHECK(problems(kTinyConfig,
                     {std::string("zero_optimization.stage=") + stage,
                      std::string("zero_optimization.offload_optimizer.device=") + device,
                      "zero_optimization.offload_optimizer.pin_memory=true",
                      "zero_optimization.offload_optimizer.cpuadam_cores_perc=0.5",
                      "zero_optimization.offload_optimizer.nvme_path=/tmp", "zero_optimization.offload_optimizer.buffer_count=2"},
                     2)
                .empty());
    }
  }
  // buffer_count binds only with nvme: DeepSpeed's schema takes any count >= 0, so cpu does too.
  CHECK(problems(kTinyConfig, {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu",
                               "zero_optimization.offload_optimizer.buffer_count=0",
                               "zero_optimization.offload_param.device=cpu",
                               "zero_optimization.offload_param.buffer_count=1"},
                 2)
            .empty());
  CHECK(problems(kTinyConfig, {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=nvme",
                               "zero_optimization.offload_optimizer.nvme_path=/tmp",
                               "zero_optimization.offload_optimizer.buffer_count=1",
                               "zero_optimization.offload_param.device=nvme",
                               "zero_optimization.offload_param.nvme_path=/tmp",
                               "zero_optimization.offload_param.buffer_count=2"},
                 2) ==
        std::vector<std::string>{
            "zero_optimization.offload_optimizer.buffer_count: must be at least 2 with device nvme (a piece of state "
            "read ahead while another is updated), got 1 (set by --set zero_optimization.offload_optimizer.buffer_count)",
            "zero_optimization.offload_param.buffer_count: must be at least 3 with device nvme (a layer group "
            "gathered, the next prefetched, one read ahead), got 2 (set by --set "
            "zero_optimization.offload_param.buffer_count)"});
  CHECK(problems(kTinyConfig, {"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu",
                               "zero_optimization.offload_optimizer.buffer_count=-1"},
                 2)
            .size() == 1);
  // The defaults of the same keys, and world sizes above 1, are accepted; so are tensor, sequence
  // and pipeline parallelism with every schedule and partition, and every recompute mode.
  CHECK(problems(kTinyConfig, {"zero_optimization.stage=0", "model.recompute=full", "device=cpu",
                               "comm.backend=mpi", "activation_checkpointing.number_checkpoints=null"},
                 8)
            .empty());
  CHECK(problems(kTinyConfig, {"parallelism.tensor_model_parallel_size=2", "parallelism.sequence_parallel=true",
                               "model.recompute=selective"},
                 8)
            .empty());
}

TEST_CASE("pipeline layouts are checked against the model's layers and the micro-batches") {
  auto pp2 = [](std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"parallelism.pipeline_model_parallel_size=2", "gradient_accumulation_steps=4"});
    return problems(kTinyConfig, extra, 2);
  };
  // Exactly one problem, with this message (a "(set by --set ...)" may follow).
  auto only = [](const std::vector<std::string>& p, const std::string& message) {
    INFO(joined(p));
    return p.size() == 1 && has_problem(p, message);
  };
  CHECK(pp2({"parallelism.pipeline.schedule=1f1b"}).empty());
  CHECK(pp2({"parallelism.pipeline.schedule=gpipe"}).empty());
  CHECK(pp2({"parallelism.pipeline.partition=parameters"}).empty());
  CHECK(pp2({"parallelism.pipeline.partition=[1, 1]"}).empty());
  CHECK(pp2({"model.n_layer=4", "parallelism.pipeline.schedule=interleaved", "parallelism.pipeline.virtual_stages=2",
             "parallelism.pipeline.partition=[1, 1, 1, 1]"})
            .empty());
  CHECK(only(pp2({"model.n_layer=4", "parallelism.pipeline.schedule=interleaved",
                  "parallelism.pipeline.virtual_stages=2", "parallelism.pipeline.partition=[1, 2, 0, 1]"}),
             "parallelism.pipeline.partition: every chunk needs at least one layer, got 0"));
  CHECK(only(pp2({"model.n_layer=4", "parallelism.pipeline.partition=[1, 2]"}),
             "parallelism.pipeline.partition: sums to 3 layers, but model.n_layer is 4"));
  // Layer counts are integers, as virtual_stages is; "explicit" is no name to give (the list is).
  CHECK(has_problem(pp2({"parallelism.pipeline.partition=[1.0, 1e0]"}),
                    "parallelism.pipeline.partition: expected a list of whole numbers, got '1.0' as item 0"));
  CHECK(has_problem(pp2({"parallelism.pipeline.virtual_stages=2.0"}), "parallelism.pipeline.virtual_stages: expected"));
  CHECK(only(pp2({"parallelism.pipeline.partition=explicit"}),
             "parallelism.pipeline.partition: give the layers of each model chunk as a list, e.g. [3, 5]; the names "
             "are uniform and parameters"));
  CHECK(has_problem(pp2({"parallelism.pipeline.partition=[1, 1, 1]"}),
                    "parallelism.pipeline.partition: lists 3 chunks, but the pipeline has 2"));
  CHECK(only(pp2({"parallelism.pipeline.virtual_stages=2"}),
             "parallelism.pipeline.virtual_stages: 2 model chunks per stage need the interleaved schedule (the "
             "schedule is 1f1b)"));
  CHECK(only(pp2({"parallelism.pipeline.schedule=interleaved"}),
             "parallelism.pipeline.schedule: the interleaved schedule needs 2 or more virtual stages (with 1 it is "
             "1f1b)"));
  CHECK(only(pp2({"parallelism.pipeline.schedule=interleaved", "parallelism.pipeline.virtual_stages=2"}),
             "parallelism.pipeline.virtual_stages: 2 stages × 2 virtual stages = 4 model chunks need at least as "
             "many layers, but the model has 2"));
  CHECK(only(pp2({"gradient_accumulation_steps=3", "model.n_layer=4", "parallelism.pipeline.schedule=interleaved",
                  "parallelism.pipeline.virtual_stages=2"}),
             "gradient_accumulation_steps: 3 micro-batches per step: the interleaved schedule needs a multiple of "
             "the 2 pipeline stages"));
  CHECK(only(problems(kTinyConfig, {"parallelism.pipeline_model_parallel_size=4"}, 4),
             "parallelism.pipeline_model_parallel_size: 4 pipeline stages need at least as many layers, but the "
             "model has 2"));
}

TEST_CASE("sequence parallelism needs TP to divide the micro-batch's token rows") {
  const auto p = problems(kTinyConfig,
                          {"parallelism.tensor_model_parallel_size=2", "parallelism.sequence_parallel=true",
                           "model.seq_len=33", "train_micro_batch_size_per_gpu=3"},
                          2);
  REQUIRE(p.size() == 1);
  CHECK(p[0].rfind("parallelism.sequence_parallel: splits a micro-batch's train_micro_batch_size_per_gpu × "
                   "model.seq_len = 3 × 33 = 99 token rows over tensor_model_parallel_size 2, which does not divide "
                   "them",
                   0) == 0);
  // Without SP, or at TP = 1 where it does nothing, the same shapes are fine.
  CHECK(problems(kTinyConfig, {"parallelism.tensor_model_parallel_size=2", "model.seq_len=33",
                               "train_micro_batch_size_per_gpu=3"},
                 2)
            .empty());
  CHECK(problems(kTinyConfig, {"parallelism.sequence_parallel=true", "model.seq_len=33"}, 2).empty());
}

TEST_CASE("device cuda and the NCCL communicator are accepted, NCCL on the CPU is not") {
  CHECK(problems(kTinyConfig, {"device=cuda", "comm.backend=nccl"}, 2).empty());
  CHECK(problems(kTinyConfig, {"device=auto", "comm.backend=nccl"}, 2).empty());
  const auto p = problems(kTinyConfig, {"device=cpu", "comm.backend=nccl"}, 2);
  REQUIRE(p.size() == 1);
  CHECK(p[0].rfind("comm.backend: nccl needs device: cuda or auto", 0) == 0);
}

TEST_CASE("five different mistakes are reported together") {
  const auto p = problems(R"(
train_batch_size: 30
train_micro_batch_size_per_gpu: 4
zero_optimisation: {stage: 0}
optimizer: {params: {lr: fast}}
train: {iters: -5}
fp16: {enabled: true}
bf16: {enabled: true}
model: {preset: gpt2-124m}
)");
  INFO(joined(p));
  // Type and key problems first (in schema order, unknown keys after their section's known
  // ones), then rule problems, then refusals: the same order on every run.
  CHECK(p == std::vector<std::string>{
                 "optimizer.params.lr: expected a number, got 'fast'",
                 "zero_optimisation: unknown key; did you mean zero_optimization?",
                 "train_batch_size: 30 is not divisible by train_micro_batch_size_per_gpu × data-parallel size = 4 × "
                 "1 = 4, so gradient_accumulation_steps cannot be derived; a multiple of 4 would do, e.g. 28 or 32",
                 "bf16.enabled: fp16 and bf16 are both enabled; enable at most one of them",
                 "train.iters: must be ≥ 1, got -5",
             });
}

TEST_CASE("validate_config checks a config built in code") {
  Config c;
  c.train_batch_size = 10;
  c.model.n_layer = 2;
  c.model.n_head = 3;
  c.model.d_model = 64;
  c.optimizer.params.eps = 0;
  const auto p = validate_config(c, 4);
  CHECK(p == std::vector<std::string>{
                 "train_batch_size: 10 is not divisible by the data-parallel size 4, so "
                 "train_micro_batch_size_per_gpu cannot be derived; a multiple of 4 would do, e.g. 8 or 12",
                 "optimizer.params.eps: must be > 0, got 0", "model.d_model: 64 is not divisible by model.n_head = 3"});
  CHECK_THROWS_AS(resolve_config(c, 4), UserErrors);
  c.train_batch_size = 8;
  c.model.n_head = 4;
  c.optimizer.params.eps = 1e-8;
  CHECK(validate_config(c, 4).empty());
}

TEST_CASE("YAML syntax errors and non-map documents are reported with their source") {
  try {
    strata_test::load("model:\n  n_layer: [1, 2\n");
    FAIL("expected a syntax error");
  } catch (const UserErrors& e) {
    REQUIRE(e.errors().size() == 1);
    CHECK(e.errors()[0].rfind("test.yaml:", 0) == 0);
    CHECK(e.errors()[0].find("YAML syntax error") != std::string::npos);
  }
  CHECK(problems("- 1\n- 2\n") == std::vector<std::string>{"test.yaml: the top level must be a map of config keys "
                                                          "(key: value lines), got a list"});
  CHECK_THROWS_WITH(load_config_file("/nonexistent/strata.yaml", {}, 1),
                    strata_catch::Contains("config file '/nonexistent/strata.yaml': cannot open it"));
}
