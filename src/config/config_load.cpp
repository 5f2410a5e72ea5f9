// Loading: YAML text → tree, `--set` overrides spliced into the tree (so an override is
// type-checked exactly like the file), typed parse, validation, resolution. Problems from
// all stages are reported together; only a YAML syntax error stops early.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "config/config_internal.h"
#include "core/error.h"

namespace strata {
namespace config_detail {
namespace {

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::string kind_of(const YAML::Node& node) {
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "the value " + quoted(node.Scalar());
}

}  // namespace

void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides, ErrorLog& log) {
  for (const auto& text : overrides) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos) {
      log.add("--set", fmt::format("'{}' has no '='; expected key.path=value, e.g. optimizer.params.lr=3e-4", text));
      continue;
    }
    const std::string key = text.substr(0, eq);
    const std::string value_text = text.substr(eq + 1);
    const std::vector<std::string> parts = split_key(key);
    bool empty_part = false;
    for (const auto& part : parts) empty_part = empty_part || part.empty();
    if (empty_part) {
      log.add("--set", fmt::format("'{}' has an empty key name in '{}'; expected key.path=value", text, key));
      continue;
    }
    YAML::Node value;
    if (value_text.empty()) {
      value = YAML::Node(std::string());  // "key=" sets an empty string, e.g. data.val=
    } else {
      try {
        value = YAML::Load(value_text);
      } catch (const YAML::Exception& e) {
        log.add("--set", fmt::format("'{}': the value is not valid YAML ({})", text, e.msg));
        continue;
      }
    }
    if (!root.IsMap()) root.reset(YAML::Node(YAML::NodeType::Map));
    // yaml-cpp nodes are handles: `node = other` would overwrite the tree, reset() rebinds.
    YAML::Node cursor;
    cursor.reset(root);
    bool blocked = false;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node next = cursor[parts[i]];
      if (!next.IsDefined() || next.IsNull()) {
        cursor[parts[i]] = YAML::Node(YAML::NodeType::Map);
        next.reset(cursor[parts[i]]);
      } else if (!next.IsMap()) {
        const std::string prefix = join(std::vector<std::string>(parts.begin(), parts.begin() + i + 1), ".");
        log.add("--set", fmt::format("'{}': {} holds {}, not a section with keys", text, prefix, kind_of(next)));
        blocked = true;
        break;
      }
      cursor.reset(next);
    }
    if (blocked) continue;
    cursor[parts.back()] = value;
    log.mark_overridden(key);
  }
}

}  // namespace config_detail

Config load_config_text(const std::string& yaml_text, const std::vector<std::string>& overrides, int world_size,
                        const std::string& source_name) {
  using namespace config_detail;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw UserErrors({fmt::format("{}:{}:{}: YAML syntax error: {}", source_name, e.mark.line + 1, e.mark.column + 1,
                                  e.msg)});
  }
  if (root.IsDefined() && !root.IsNull() && !root.IsMap()) {
    throw UserErrors({fmt::format("{}: the top level must be a map of config keys (key: value lines), got {}",
                                  source_name, root.IsSequence() ? "a list" : "'" + root.Scalar() + "'")});
  }
  ErrorLog log;
  apply_overrides(root, overrides, log);
  Config cfg;
  parse_config_tree(root, cfg, log);
  list_deepspeed_keys(root, cfg);
  resolve_auto(cfg, log.autos(), root, log);

  // A value that failed to parse kept its default; rules about it would only add noise, and so
  // would rules comparing another key with it (the cosine phase's length with the warmup's).
  bool batch_key_failed = false;
  for (const char* k : kBatchKeyNames) batch_key_failed = batch_key_failed || log.covers(k);
  const bool warmup_failed = log.covers("scheduler.params.warmup_num_steps");
  const bool val_failed = log.covers("data.val");  // given, but not as a glob: not "missing"
  std::vector<ConfigError> rule_errors;
  for (auto& e : check_config(cfg, world_size)) {
    bool is_batch_key = false;
    for (const char* k : kBatchKeyNames) is_batch_key = is_batch_key || e.path == k;
    if (log.covers(e.path) || (batch_key_failed && is_batch_key)) continue;
    if (warmup_failed && e.path == "scheduler.params.total_num_steps") continue;
    if (val_failed && e.path == "train.eval_interval") continue;
    rule_errors.push_back(std::move(e));
  }
  for (const auto& e : rule_errors) log.add(e.path, e.message);
  if (!log.empty()) throw UserErrors(log.messages());

  resolve_config(cfg, world_size);
  describe_resolved_keys(cfg);
  return cfg;
}

namespace {

std::string read_config_file(const std::string& path) {
  // Only a regular file of a config's size: a directory would read as an empty config, and a
  // device such as /dev/zero would be read without end.
  constexpr uintmax_t kMaxConfigBytes = uintmax_t{16} << 20;
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status))
    throw UserError(fmt::format("config file '{}': is a directory, not a YAML or JSON file", path));
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    throw UserError(fmt::format("config file '{}': is not a regular file (a device, pipe or socket); give a YAML or "
                                "JSON file",
                                path));
  if (std::filesystem::is_regular_file(status)) {
    const uintmax_t bytes = std::filesystem::file_size(path, ec);
    if (!ec && bytes > kMaxConfigBytes)
      throw UserError(fmt::format("config file '{}': {} bytes is too large for a config (at most {} MiB)", path,
                                  bytes, kMaxConfigBytes >> 20));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(fmt::format("config file '{}': cannot open it (check the path)", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UserError(fmt::format("config file '{}': read failed", path));
  return text.str();
}

}  // namespace

Config load_config_file(const std::string& path, const std::vector<std::string>& overrides, int world_size) {
  return load_config_text(read_config_file(path), overrides, world_size, path);
}

DeepSpeedExplanation explain_deepspeed_file(const std::string& path, const std::vector<std::string>& overrides,
                                            int world_size) {
  const std::string text = read_config_file(path);
  try {
    return {explain_deepspeed(load_config_text(text, overrides, world_size, path)), {}};
  } catch (const UserErrors& e) {
    // What the file's keys are does not depend on the rest loading: list them as written.
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception&) {
    }
    if (!root.IsMap()) throw;  // a syntax error, or no map of keys: nothing to list
    config_detail::ErrorLog ignored;
    config_detail::apply_overrides(root, overrides, ignored);
    Config listed;
    config_detail::list_deepspeed_keys(root, listed, /*with_refused=*/true);
    for (DeepSpeedKeyNote& note : listed.deepspeed_keys) {
      if (note.treatment == "auto") note.detail = "filled in where strata's other keys determine it, else refused";
      // A key strata implements may still refuse this value (optimizer.type Lamb): say so here too.
      for (const std::string& error : e.errors()) {
        if (note.treatment == "implemented" && error.rfind(note.path + ": ", 0) == 0) {
          note.treatment = "refused";
          note.detail = error.substr(note.path.size() + 2);
        }
      }
    }
    return {explain_deepspeed(listed) + "The config does not load as it is; its problems follow.\n", e.errors()};
  }
}

}  // namespace strata
