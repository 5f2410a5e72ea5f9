// DeepSpeed's keys: every key of the table gets its treatment (implemented keys are read by the
// field table, accepted ones load with a note, the others are refused with their reason and
// never as unknown), 'auto' is filled in from the keys it follows from, bfloat16 is bf16's
// other name, and the explanation and README table come from the same entries.
#include <algorithm>
#include <set>

#include "config/deepspeed_keys.h"
#include "config_test_util.h"
#include "field_collector.h"

using namespace strata;
using strata::config_detail::DeepSpeedKey;
using strata::config_detail::DsTreatment;
using strata_test::has_problem;
using strata_test::kTinyConfig;
using strata_test::load;
using strata_test::problems;

namespace {

const DeepSpeedKeyNote* note_of(const Config& c, const std::string& path) {
  for (const auto& note : c.deepspeed_keys) {
    if (note.path == path) return &note;
  }
  return nullptr;
}

// `path: value` as nested YAML flow maps: a.b.c = v → a: {b: {c: v}} (a schedule's parameter
// with the type its section needs).
std::string nested(const std::string& path, const std::string& value) {
  if (path.rfind("scheduler.params.", 0) == 0)
    return "scheduler: {type: WarmupLR, params: {" + path.substr(17) + ": " + value + "}}";
  const size_t dot = path.find('.');
  if (dot == std::string::npos) return path + ": " + value;
  return path.substr(0, dot) + ": {" + nested(path.substr(dot + 1), value) + "}";
}

bool is_section_with_entries(const std::string& path) {
  for (const DeepSpeedKey& key : config_detail::deepspeed_keys()) {
    if (std::string(key.path).rfind(path + ".", 0) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("deepspeed keys: implemented entries are exactly the field table's ds_config keys") {
  std::set<std::string> fields;
  for (const auto& key : strata_test::field_keys(/*deepspeed_only=*/true)) fields.insert(key.path);
  std::set<std::string> implemented;
  for (const DeepSpeedKey& key : config_detail::deepspeed_keys()) {
    if (key.treatment == DsTreatment::Implemented) implemented.insert(key.path);
  }
  // The scheduler's parameters are read by its own parser (their set depends on its type), and
  // data_types is a section of keys each with an entry of its own.
  std::set<std::string> by_hand = {"data_types"};
  for (const auto* name : {"type", "params", "params.warmup_min_lr", "params.warmup_max_lr", "params.warmup_num_steps",
                           "params.warmup_type", "params.total_num_steps", "params.warmup_min_ratio",
                           "params.cos_min_ratio"})
    by_hand.insert(std::string("scheduler.") + name);
  for (const std::string& path : implemented) {
    INFO(path);
    CHECK((fields.count(path) == 1 || by_hand.count(path) == 1));
  }
  for (const std::string& path : fields) {
    INFO(path);
    CHECK(implemented.count(path) == 1);
  }
  // Every path has one entry.
  std::set<std::string> seen;
  for (const DeepSpeedKey& key : config_detail::deepspeed_keys()) {
    INFO(key.path);
    CHECK(seen.insert(key.path).second);
  }
}

TEST_CASE("deepspeed keys: each key not implemented is accepted with a note or refused with its reason") {
  for (const DeepSpeedKey& key : config_detail::deepspeed_keys()) {
    if (key.treatment == DsTreatment::Implemented || is_section_with_entries(key.path)) continue;
    INFO(key.path);
    const std::string base = std::string(kTinyConfig) + "\n";
    switch (key.treatment) {
      case DsTreatment::Accepted: {
        const Config c = load(base + nested(key.path, "1") + "\n");
        const DeepSpeedKeyNote* note = note_of(c, key.path);
        REQUIRE(note != nullptr);
        CHECK(note->treatment == "accepted");
        CHECK(note->detail == key.strata);
        break;
      }
      case DsTreatment::AcceptedAtDefault: {
        std::string spellings = key.neutral;  // each of "a|b|c" is accepted
        for (size_t start = 0, bar = 0; bar != std::string::npos; start = bar + 1) {
          bar = spellings.find('|', start);
          const std::string one = spellings.substr(start, bar == std::string::npos ? bar : bar - start);
          const Config c = load(base + nested(key.path, one) + "\n");
          REQUIRE(note_of(c, key.path) != nullptr);
          CHECK(note_of(c, key.path)->treatment == "accepted");
          CHECK(note_of(c, key.path)->detail == one + " is what strata does");
        }
        const std::string other = std::string(key.neutral) == "true" ? "false" : "true";
        const auto p = problems(base + nested(key.path, other) + "\n");
        REQUIRE(p.size() == 1);
        CHECK(p[0].rfind(key.path + std::string(": ") + key.strata, 0) == 0);
        break;
      }
      case DsTreatment::RefusedWhenEnabled: {
        const Config c = load(base + nested(key.path, "{enabled: false, other: 3}") + "\n");
        REQUIRE(note_of(c, key.path) != nullptr);
        CHECK(note_of(c, key.path)->treatment == "disabled");
        const auto p = problems(base + nested(key.path, "{nested: {enabled: true}}") + "\n");
        CHECK(p == std::vector<std::string>{key.path + std::string(": nested.enabled is true: ") + key.strata});
        break;
      }
      case DsTreatment::Refused: {
        const auto p = problems(base + nested(key.path, "1") + "\n");
        CHECK(p == std::vector<std::string>{key.path + std::string(": ") + key.strata});
        break;
      }
      case DsTreatment::Implemented:
        break;
    }
  }
}

TEST_CASE("deepspeed keys: the file's keys are listed in order with their treatment") {
  const Config c = load(std::string(kTinyConfig) +
                        "zero_allow_untested_optimizer: true\n"
                        "gradient_clipping: 1.0\n"
                        "tensorboard: {enabled: true, output_path: tb}\n"
                        "progressive_layer_drop: {enabled: false}\n"
                        "zero_optimization: {stage: 1, allgather_partitions: true}\n"
                        "checkpoint: {tag_validation: Warn}\n");
  std::vector<std::string> listed;
  for (const auto& note : c.deepspeed_keys) listed.push_back(note.path + " " + note.treatment);
  CHECK(listed == std::vector<std::string>{"train_micro_batch_size_per_gpu implemented",
                                           "zero_allow_untested_optimizer accepted", "gradient_clipping implemented",
                                           "tensorboard accepted", "progressive_layer_drop disabled",
                                           "zero_optimization.stage implemented",
                                           "zero_optimization.allgather_partitions accepted",
                                           "checkpoint.tag_validation accepted"});
  const std::vector<std::string> notes = deepspeed_notes(c);
  REQUIRE(notes.size() == 5);
  CHECK(notes[0] == "zero_allow_untested_optimizer: true accepted, changes nothing: strata's ZeRO works with its own "
                    "Adam and AdamW");
  CHECK(notes[2] == "progressive_layer_drop: accepted, nothing in it is enabled");
  const std::string text = explain_deepspeed(c);
  CHECK(text.find("gradient_clipping = 1.0") != std::string::npos);
  CHECK(text.find("tensorboard = {…}") != std::string::npos);
  // A strata-only config has none.
  CHECK(explain_deepspeed(load("train_micro_batch_size_per_gpu: 4\nmodel: {preset: gpt2-124m}\n")) ==
        "DeepSpeed keys of this config, and what strata does with each:\n"
        "  train_micro_batch_size_per_gpu = 4  implemented As DeepSpeed; 'auto' is filled in from the other batch "
        "keys\n");
}

TEST_CASE("deepspeed keys: auto is filled in from the keys it follows from") {
  const Config c = load(
      "train_batch_size: 32\ntrain_micro_batch_size_per_gpu: auto\ngradient_accumulation_steps: 2\n"
      "model: {n_layer: 2, n_head: 2, d_model: 64, vocab_size: 256, seq_len: 32}\n"
      "train: {iters: 77}\n"
      "optimizer: {params: {lr: auto}}\n"
      "scheduler: {type: WarmupDecayLR, params: {warmup_min_lr: auto, warmup_max_lr: 0.003, warmup_num_steps: 5, "
      "total_num_steps: auto}}\n"
      "zero_optimization: {reduce_bucket_size: auto}\n",
      {}, 4);
  CHECK(*c.train_micro_batch_size_per_gpu == 4);  // 32 / (2 × DP 4)
  CHECK(c.optimizer.params.lr == 0.003);
  CHECK(c.scheduler.params.warmup_min_lr == 0);
  CHECK(*c.scheduler.params.total_num_steps == 77);
  CHECK(c.zero_optimization.reduce_bucket_size == 64 * 64);
  CHECK(note_of(c, "train_micro_batch_size_per_gpu")->detail ==
        "4 (train_batch_size 32 / (gradient_accumulation_steps 2 × data-parallel size 4))");
  CHECK(note_of(c, "scheduler.params.total_num_steps")->detail == "77 (train.iters)");
  CHECK(note_of(c, "zero_optimization.reduce_bucket_size")->treatment == "auto");
  // The peak follows the optimizer's rate, and the batch size from the other two.
  const Config d = load(std::string(kTinyConfig) +
                        "train_batch_size: auto\ngradient_accumulation_steps: 3\noptimizer: {params: {lr: 0.02}}\n"
                        "scheduler: {type: WarmupLR, params: {warmup_max_lr: auto}}\n",
                        {}, 2);
  CHECK(d.scheduler.params.warmup_max_lr == 0.02);
  CHECK(*d.train_batch_size == 4 * 3 * 2);
  const Config e = load(std::string(kTinyConfig) + "zero_optimization: {stage: 3, stage3_param_persistence_threshold: auto, "
                        "stage3_prefetch_bucket_size: auto}\n");
  CHECK(e.zero_optimization.stage3_param_persistence_threshold == 640);  // 10 × 64
  CHECK(*e.zero_optimization.stage3_prefetch_bucket_size == 3686);       // 0.9 × 64², rounded
  // Stage-3 settings at another stage change nothing, and say so.
  const Config f = load(std::string(kTinyConfig) + "zero_optimization: {stage: 2, stage3_max_live_parameters: 1e9}\n");
  CHECK(note_of(f, "zero_optimization.stage3_max_live_parameters")->detail ==
        "a ZeRO stage 3 setting; it changes nothing at stage 2");
}

TEST_CASE("deepspeed keys: bfloat16 is bf16's other name, and giving both is refused") {
  const Config c = load(std::string(kTinyConfig) + "bfloat16: {enabled: true}\n");
  CHECK(c.bf16.enabled);
  CHECK(note_of(c, "bfloat16.enabled") != nullptr);
  CHECK(problems(std::string(kTinyConfig) + "bfloat16: {enabled: true}\nbf16: {enabled: true}\n") ==
        std::vector<std::string>{"bfloat16: DeepSpeed's other name for bf16, which is given too; keep one of them"});
  CHECK(problems(std::string(kTinyConfig) + "bfloat16: {enabled: true, immediate_grad_update: true}\n").empty());
  CHECK(problems(std::string(kTinyConfig) + "bfloat16: {enabled: true, bf16_optimizer_states: true}\n") ==
        std::vector<std::string>{"bfloat16.bf16_optimizer_states: strata keeps Adam's moments in fp32; bf16 ones "
                                 "would train differently (only false is accepted)"});
}

TEST_CASE("deepspeed keys: partition_activations changes nothing at TP 1 and needs sequence parallelism with TP") {
  const Config one = load(std::string(kTinyConfig) + "activation_checkpointing: {partition_activations: true}\n");
  CHECK(note_of(one, "activation_checkpointing.partition_activations")->treatment == "accepted");
  CHECK(note_of(one, "activation_checkpointing.partition_activations")->detail ==
        "at tensor_model_parallel_size 1 there is nothing to partition");
  const std::vector<std::string> tp = {"activation_checkpointing.partition_activations=true",
                                       "parallelism.tensor_model_parallel_size=2"};
  CHECK(has_problem(problems(kTinyConfig, tp, 2),
                    "activation_checkpointing.partition_activations: with tensor parallelism, strata partitions "
                    "activations over the tensor-parallel ranks as sequence parallelism"));
  std::vector<std::string> sp = tp;
  sp.push_back("parallelism.sequence_parallel=true");
  const Config c = load(kTinyConfig, sp, 2);
  CHECK(note_of(c, "activation_checkpointing.partition_activations")->detail ==
        "parallelism.sequence_parallel partitions the activations over the 2 tensor-parallel ranks");
}

TEST_CASE("deepspeed keys: the README table has a row for every entry") {
  const std::string table = deepspeed_keys_markdown();
  size_t rows = 0;
  for (size_t at = table.find("\n| `"); at != std::string::npos; at = table.find("\n| `", at + 1)) ++rows;
  CHECK(rows == config_detail::deepspeed_keys().size());
  CHECK(table.find("| `prescale_gradients` |") != std::string::npos);
}

TEST_CASE("deepspeed keys: prescale_gradients and gradient_predivide_factor change nothing, at every stage") {
  // strata divides by DP before every reduction, through the tokens' loss weights: the keys are noted.
  for (const char* stage : {"zero_optimization.stage=0", "zero_optimization.stage=1", "zero_optimization.stage=3"}) {
    const Config c = load(kTinyConfig, {stage, "prescale_gradients=true", "gradient_predivide_factor=2"}, 4);
    for (const char* key : {"prescale_gradients", "gradient_predivide_factor"}) {
      REQUIRE(note_of(c, key) != nullptr);
      CHECK(note_of(c, key)->treatment == "accepted");
      CHECK(note_of(c, key)->detail.find("through each token's loss weight") != std::string::npos);
    }
  }
}

TEST_CASE("deepspeed keys: communication_data_type takes fp32, fp16 or bf16 in any letter case") {
  CHECK(load(kTinyConfig).communication_data_type == DType::F32);
  CHECK(load(kTinyConfig, {"communication_data_type=BF16"}).communication_data_type == DType::BF16);
  const Config c = load(kTinyConfig, {"communication_data_type=fp16"});
  CHECK(c.communication_data_type == DType::F16);
  CHECK(config_to_yaml(c).find("communication_data_type: fp16\n") != std::string::npos);
  CHECK(problems(kTinyConfig, {"communication_data_type=float16"}) ==
        std::vector<std::string>{"communication_data_type: 'float16' is not supported; supported: fp32, fp16, bf16 "
                                 "(set by --set communication_data_type)"});
}

TEST_CASE("deepspeed keys: a feature's switch is off only when it says so, and the one that is on is named") {
  // DeepSpeed reads 1 or "yes" as on: such a section is refused, not taken as disabled.
  for (const char* on : {"1", "yes", "on", "'1'"}) {
    const std::vector<std::string> found =
        problems(std::string(kTinyConfig) + "curriculum_learning: {enabled: " + on + "}\n");
    INFO(on);
    REQUIRE(found.size() == 1);
    CHECK(found[0].rfind("curriculum_learning: ", 0) == 0);
  }
  for (const char* off : {"false", "0", "no", "off", "null"}) {
    INFO(off);
    CHECK(problems(std::string(kTinyConfig) + "curriculum_learning: {enabled: " + off + "}\n").empty());
  }
  const std::vector<std::string> nested =
      problems(std::string(kTinyConfig) + "data_efficiency: {enabled: false, data_sampling: {enabled: true}}\n");
  REQUIRE(nested.size() == 1);
  CHECK(nested[0].rfind("data_efficiency: data_sampling.enabled is true: changes which tokens", 0) == 0);
  // A misspelled DeepSpeed section gets a suggestion as strata's own keys do.
  CHECK(problems(std::string(kTinyConfig) + "elasticitty: {enabled: false}\n") ==
        std::vector<std::string>{"elasticitty: unknown key; did you mean elasticity?"});
}
