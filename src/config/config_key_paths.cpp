// Where a key misplaced or named as another trainer names it belongs: every key path of the
// field table (and its sections), and the common names other trainers give strata's keys. The
// reader's "unknown key" message points there instead of at a look-alike sibling.
#include <algorithm>
#include <string>
#include <vector>

#include "config/config_fields.h"
#include "config/config_internal.h"

namespace strata::config_detail {
namespace {

// Records the dotted path of every field and section the table visits.
class PathLister {
 public:
  PathLister(std::string prefix, std::vector<std::string>& paths) : prefix_(std::move(prefix)), paths_(paths) {}
  template <typename T>
  void value(const char* name, const T&, Bound = {}) {
    paths_.push_back(prefix_ + name);
  }
  template <typename T>
  void count(const char* name, const T&, Bound = {}) {
    paths_.push_back(prefix_ + name);
  }
  template <typename E, typename N>
  void choice(const char* name, const E&, const N&) {
    paths_.push_back(prefix_ + name);
  }
  template <typename E, typename N>
  void choice_any_case(const char* name, const E&, const N&) {
    paths_.push_back(prefix_ + name);
  }
  template <typename Fn>
  void section(const char* name, Fn&& fields, const char* = nullptr) {
    paths_.push_back(prefix_ + name);
    PathLister sub(prefix_ + name + ".", paths_);
    fields(sub);
  }
  void scheduler(const SchedulerConfig&) { paths_.push_back(prefix_ + "scheduler"); }
  void pipeline_partition(const PipelineConfig&) { paths_.push_back(prefix_ + "partition"); }
  void data_sources(const char* name, const std::vector<DataSource>&) { paths_.push_back(prefix_ + name); }

 private:
  std::string prefix_;
  std::vector<std::string>& paths_;
};

const std::vector<std::string>& all_key_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> out;
    PathLister lister("", out);
    const Config defaults;
    config_fields(lister, defaults);
    return out;
  }();
  return paths;
}

// Names other trainers (HuggingFace's Trainer, Megatron-LM, nanoGPT) give to strata's keys.
struct OtherName {
  const char* name;
  const char* path;
};
constexpr OtherName kOtherNames[] = {
    {"eval_every", "train.eval_interval"},       {"eval_steps", "train.eval_interval"},
    {"eval_freq", "train.eval_interval"},
    {"save_every", "checkpoint.save_interval"},  {"save_steps", "checkpoint.save_interval"},
    {"max_steps", "train.iters"},                {"max_iters", "train.iters"},
    {"train_iters", "train.iters"},              {"num_steps", "train.iters"},
    {"sample_every", "logging.sample_interval"}, {"log_interval", "steps_per_print"},
    {"logging_steps", "steps_per_print"},        {"micro_batch_size", "train_micro_batch_size_per_gpu"},
    {"global_batch_size", "train_batch_size"},   {"virtual_pipeline_model_parallel_size", "parallelism.pipeline.virtual_stages"},
};

}  // namespace

std::string key_elsewhere(const std::string& name, const std::string& path) {
  for (const OtherName& other : kOtherNames) {
    if (name == other.name && path != other.path) return other.path;
  }
  // The same name at one or two other places (more, as `enabled` or `type`, says nothing).
  std::vector<std::string> found;
  for (const std::string& candidate : all_key_paths()) {
    const size_t dot = candidate.rfind('.');
    const std::string last = dot == std::string::npos ? candidate : candidate.substr(dot + 1);
    if (last == name && candidate != path) found.push_back(candidate);
  }
  if (found.empty() || found.size() > 2) return "";
  return join(found, " or ");
}

}  // namespace strata::config_detail
