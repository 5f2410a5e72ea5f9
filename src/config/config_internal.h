// Private to src/config: the error log that collects every problem, a reader that walks
// one YAML map with typed getters and reports unknown keys, and helpers shared by the
// parse, validate, resolve and emit steps.
#pragma once
#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"

namespace strata {
enum class PipeSetting;  // pipeline/pipeline.h
namespace config_detail {

// One problem: the dotted key path it belongs to and what is wrong there.
struct ConfigError {
  std::string path;
  std::string message;
};

// Collects problems in the order found and remembers which key paths already have one, so
// validation does not add a second, derived complaint about a value that failed to parse.
class ErrorLog {
 public:
  void add(const std::string& path, const std::string& message);
  // True when `path` or one of its ancestors already has a problem.
  bool covers(const std::string& path) const;
  // Paths set by `--set`; problems at or around them say so.
  void mark_overridden(const std::string& path) { overridden_.push_back(path); }
  bool empty() const { return errors_.empty(); }
  size_t count() const { return errors_.size(); }
  std::vector<std::string> messages() const;
  // A key given as 'auto' that strata fills in (resolve_auto).
  void add_auto(const std::string& path) { autos_.push_back(path); }
  const std::vector<std::string>& autos() const { return autos_; }

 private:
  std::vector<ConfigError> errors_;
  std::vector<std::string> overridden_;
  std::vector<std::string> autos_;
};

// The spellings an enum accepts.
template <typename E>
using EnumNames = std::vector<std::pair<std::string, E>>;

// Closest candidate to `word` by edit distance when close enough to be a likely typo, else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);
std::string join(const std::vector<std::string>& items, const char* separator = ", ");
std::string lower(std::string text);
// A value as a message quotes it: '…', with control characters escaped (\r, \t, \xNN), so that
// a stray carriage return from a file written on Windows shows.
std::string quoted(const std::string& text);
// A config's number: decimal or exponent text, finite, the whole text (no hex, inf or nan).
bool parse_double(const std::string& text, double& value);

// The three batch keys, in DeepSpeed's order.
inline const char* const kBatchKeyNames[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                             "gradient_accumulation_steps"};

// Reads one YAML map. Every getter marks its key as known; a missing key leaves the output
// untouched (its default). finish() reports keys no getter asked for.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path, ErrorLog& log);

  bool present() const { return present_; }
  bool has(const std::string& key) const;
  std::string key_path(const std::string& key) const;
  // Logs a problem with `key` of this map.
  void error(const std::string& key, const std::string& message) { log_->add(key_path(key), message); }

  void read(const std::string& key, bool& out);
  void read(const std::string& key, int& out);
  void read(const std::string& key, int64_t& out);
  void read(const std::string& key, double& out);
  void read(const std::string& key, std::string& out);
  void read(const std::string& key, std::optional<std::string>& out);  // null: unset
  void read(const std::string& key, std::optional<bool>& out);
  void read(const std::string& key, std::optional<int>& out);
  void read(const std::string& key, std::optional<int64_t>& out);
  void read(const std::string& key, std::array<double, 2>& out);
  void read(const std::string& key, std::vector<int>& out);  // a list of whole numbers
  // One glob (a string; empty: none) or a list of {path, weight} maps, each key required.
  void read(const std::string& key, std::vector<DataSource>& out);
  bool is_sequence(const std::string& key);
  // An element count written as 5e8 or 500000000: any number with a whole value.
  void read_count(const std::string& key, int64_t& out);
  void read_count(const std::string& key, std::optional<int64_t>& out);  // null or absent: unset
  // Returns false when the key is present but not one of `names`.
  template <typename E>
  bool read_enum(const std::string& key, E& out, const EnumNames<E>& names, bool ignore_case = false) {
    std::vector<std::string> spellings;
    for (const auto& n : names) spellings.push_back(n.first);
    int index = -1;
    if (!read_choice(key, spellings, ignore_case, index)) return false;
    if (index >= 0) out = names[static_cast<size_t>(index)].second;
    return true;
  }
  // A nested map; absent or empty gives a reader with no keys.
  MapReader section(const std::string& key);
  // Reports unknown keys; `hints` gives a specific message for particular unknown keys.
  void finish(const std::map<std::string, std::string>& hints = {});

 private:
  const YAML::Node* find(const std::string& key);
  // find(), with a null value (`key: ~`, `--set key=null`) as no value: the key keeps its default.
  const YAML::Node* given(const std::string& key);
  // The node of `key` when it is a usable scalar; logs and returns nullptr otherwise.
  const YAML::Node* scalar(const std::string& key, const char* expected);
  bool read_choice(const std::string& key, const std::vector<std::string>& spellings, bool ignore_case,
                   int& index);
  // True when the value is 'auto': logged as one to fill in, or as an error where strata cannot.
  bool take_auto(const std::string& key, const YAML::Node& node, const char* expected);
  template <typename T>
  void read_nullable(const std::string& key, std::optional<T>& out, const char* expected);

  std::string path_;
  ErrorLog* log_;
  bool present_ = false;
  std::vector<std::pair<std::string, YAML::Node>> entries_;
  std::vector<std::string> known_;
};

// The parameters a scheduler type takes, in DeepSpeed's order.
std::vector<std::string> scheduler_param_names(LrScheduleType type);

// Parses a YAML tree into cfg; problems go to log.
void parse_config_tree(const YAML::Node& root, Config& cfg, ErrorLog& log);
// The tree's DeepSpeed keys, each with what strata does with it (cfg.deepspeed_keys).
// with_refused: the refused keys too, each with its reason (for a config that does not load).
void list_deepspeed_keys(const YAML::Node& root, Config& cfg, bool with_refused = false);

// 'auto' (config_auto.cpp): nullopt when strata fills this key's 'auto' in, else the error.
std::optional<std::string> auto_refusal(const std::string& path, const char* expected);
// Fills in the keys given as 'auto' from the keys they follow from; those it cannot go to log.
void resolve_auto(Config& cfg, const std::vector<std::string>& autos, const YAML::Node& root, ErrorLog& log);
// After resolve_config: the values the batch keys given as 'auto' took, and what the switches
// whose effect depends on the layout did.
void describe_resolved_keys(Config& cfg);
bool batch_key_is_auto(const Config& cfg, const std::string& path);
// Applies "a.b.c=value" overrides to the tree; malformed ones go to log.
void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides, ErrorLog& log);
// Every problem of a typed config, in a fixed order.
std::vector<ConfigError> check_config(const Config& cfg, int world_size);

// The fix beside a problem (config_advice.cpp): "; <what would do>", from the rest of the config.
std::string heads_advice(int n_head, int world_size);
std::string world_size_advice(int world_size, int64_t model_parallel);
// A batch that is no multiple of `unit`: the multiples either side.
std::string batch_advice(int64_t batch, int64_t unit);

// Where an unknown key `name` at `path` belongs: another trainer's name for a strata key, or the
// same name at one or two other places of the config ("a.b or c.d"); "" when neither.
std::string key_elsewhere(const std::string& name, const std::string& path);

// The model shape after applying the preset; nullopt fields stay unset when neither the
// preset nor the file gives them (validation reports that).
ModelConfig expand_preset(const ModelConfig& model);
// Why model.init_from's folder cannot give the model's dimensions ("" when it is a folder with a
// config.json object, whose missing keys are then named one by one).
std::string huggingface_folder_problem(const std::string& dir);
const ModelPreset* find_preset(const std::string& name);

// The three batch sizes, from whichever of them are given and the data-parallel size.
struct BatchSizes {
  int train = 0;
  int micro = 0;
  int accum = 0;
};
// A pipeline shape problem's fix (config_advice.cpp), from the batch sizes it was checked with.
std::string pipeline_advice(const Config& c, PipeSetting setting, const BatchSizes& sizes, int dp_size, int n_layer);
// Returns an error (path + message) when the given values do not determine a consistent triple.
std::optional<ConfigError> derive_batch_sizes(const Config& cfg, int dp_size, BatchSizes& out);

extern const EnumNames<OptimizerType> kOptimizerTypes;
extern const EnumNames<LrScheduleType> kSchedulerTypes;  // excludes Constant (no section)
extern const EnumNames<WarmupType> kWarmupTypes;
extern const EnumNames<OffloadDevice> kOffloadDevices;
extern const EnumNames<ActivationRecompute> kRecomputeModes;
extern const EnumNames<AttentionProbabilities> kAttentionProbabilities;
extern const EnumNames<PipeSchedule> kPipelineSchedules;
extern const EnumNames<PipelinePartition> kPipelinePartitions;
extern const EnumNames<DeviceKind> kDeviceKinds;
extern const EnumNames<CommBackend> kCommBackends;
extern const EnumNames<DType> kCommDataTypes;

}  // namespace config_detail
}  // namespace strata
