// The config a plan starts from: resolved for the GPUs planned when its own grid and batch split
// fit them, else for what the planner needs of it (the model and the global batch); and the
// values a user gave explicitly (which the resolved config no longer tells from defaults).
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/core.h"
#include "plan/plan_internal.h"

namespace strata {

std::optional<std::string> given_config_value(const PlanOptions& o, const std::string& path) {
  std::optional<std::string> value;
  try {
    YAML::Node node = YAML::LoadFile(o.config_path);
    size_t begin = 0;
    while (node.IsDefined() && node.IsMap()) {
      const size_t dot = path.find('.', begin);
      node = node[path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin)];
      if (dot == std::string::npos) break;
      begin = dot + 1;
    }
    if (node.IsDefined() && node.IsScalar()) value = node.Scalar();
  } catch (const std::exception&) {  // YAML's, or the stream's for a directory
    value.reset();  // the config's loader reports what is wrong with the file
  }
  for (const std::string& kv : o.overrides) {
    if (kv.size() > path.size() && kv.compare(0, path.size(), path) == 0 && kv[path.size()] == '=')
      value = kv.substr(path.size() + 1);
  }
  return value;
}

Config load_plan_config(const PlanOptions& o, int gpus, std::string* refused) {
  if (refused) refused->clear();
  try {
    return load_config_file(o.config_path, o.overrides, gpus);
  } catch (const UserError& e) {
    if (o.explain) throw;
    if (refused) *refused = first_message(e);
  }
  // Its grid or batch split does not fit `gpus`: read it with TP and PP of 1 on them or, when
  // train_batch_size is given, on one rank with micro-batch 1. If that fails too, the config's
  // own problem is the one to report.
  std::vector<std::string> overrides = o.overrides;
  for (const char* key : {"parallelism.tensor_model_parallel_size=1", "parallelism.pipeline_model_parallel_size=1",
                          "parallelism.sequence_parallel=false", "parallelism.pipeline.schedule=1f1b",
                          "parallelism.pipeline.virtual_stages=1", "parallelism.pipeline.partition=uniform"})
    overrides.emplace_back(key);
  const std::optional<std::string> batch = given_config_value(o, "train_batch_size");
  const int global_batch = batch ? std::atoi(batch->c_str()) : 0;
  try {
    if (global_batch <= 0) return load_config_file(o.config_path, overrides, gpus);
    overrides.emplace_back("train_micro_batch_size_per_gpu=1");
    overrides.emplace_back(fmt::format("gradient_accumulation_steps={}", global_batch));
    return load_config_file(o.config_path, overrides, 1);
  } catch (const UserError&) {
    return load_config_file(o.config_path, o.overrides, gpus);  // throws the config's own problem
  }
}

}  // namespace strata
