// What each DeepSpeed key of a file gets (deepspeed_key_table.cpp lists the keys): the decision
// for one value, the listing of a file's keys for `strata config --explain-deepspeed` and the
// start-up notes, and the README's table.
#include "config/deepspeed_keys.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/config_internal.h"

namespace strata {
namespace config_detail {
namespace {

// An `enabled` switch is off only when it says so (false, 0, no, off, null): DeepSpeed reads 1
// or "yes" as on, and a run that quietly left such a feature out would not be the one asked for.
bool switched_off(const YAML::Node& node) {
  if (node.IsNull()) return true;
  if (!node.IsScalar()) return false;
  const std::string word = lower(node.Scalar());
  return word.empty() || word == "false" || word == "0" || word == "no" || word == "off" || word == "null" ||
         word == "~";
}

// The first `enabled` switch in the section that is on: its path ("data_sampling.enabled";
// "enabled" at the top) and value; an empty path when none is.
struct Switch {
  std::string path, value;
};
Switch enabled_inside(const YAML::Node& node, const std::string& at = "") {
  if (node.IsMap()) {
    for (const auto& item : node) {
      const std::string key = item.first.IsScalar() ? item.first.Scalar() : "";
      const std::string path = at.empty() ? key : at + "." + key;
      if (key == "enabled" && !switched_off(item.second)) return {path, short_value(item.second)};
      if (Switch inner = enabled_inside(item.second, path); !inner.path.empty()) return inner;
    }
  } else if (node.IsSequence()) {
    int index = 0;
    for (const auto& item : node) {
      if (Switch inner = enabled_inside(item, fmt::format("{}[{}]", at, index++)); !inner.path.empty()) return inner;
    }
  }
  return {};
}

// The value equals `neutral` or one of its '|'-separated spellings: booleans and words in any
// letter case, numbers by value (1e5 is 100000), null or an empty value for "null".
bool same_value(const YAML::Node& value, const std::string& neutral) {
  const size_t bar = neutral.find('|');
  if (bar != std::string::npos)
    return same_value(value, neutral.substr(0, bar)) || same_value(value, neutral.substr(bar + 1));
  if (value.IsNull()) return neutral == "null";
  if (!value.IsScalar()) return false;
  double a = 0, b = 0;
  if (parse_double(value.Scalar(), a) && parse_double(neutral, b)) return a == b;
  return lower(value.Scalar()) == lower(neutral);
}

// "a|b|c" as "a, b or c".
std::string spellings(const std::string& neutral) {
  std::string out = neutral;
  const size_t last = out.rfind('|');
  if (last != std::string::npos) out.replace(last, 1, " or ");
  for (size_t bar = out.find('|'); bar != std::string::npos; bar = out.find('|')) out.replace(bar, 1, ", ");
  return out;
}

const char* treatment_name(DsTreatment t) {
  switch (t) {
    case DsTreatment::Implemented: return "implemented";
    case DsTreatment::Accepted: return "accepted, changes nothing";
    case DsTreatment::AcceptedAtDefault: return "accepted at its default";
    case DsTreatment::RefusedWhenEnabled: return "accepted while disabled";
    case DsTreatment::Refused: return "refused";
  }
  return "?";
}

// `section` is the entry of the map's own path (nullptr for the top level and strata's sections).
void list_keys(const YAML::Node& map, const std::string& prefix, const DeepSpeedKey* section, Config& cfg,
               bool with_refused) {
  for (const auto& item : map) {
    if (!item.first.IsScalar()) continue;
    const std::string path = prefix + item.first.Scalar();
    const YAML::Node& value = item.second;
    const DeepSpeedKey* key = find_deepspeed_key(path);
    if (key == nullptr && section != nullptr && section->treatment == DsTreatment::Implemented)
      key = section;  // a key of an implemented section without an entry of its own (a schedule's parameters)
    if (key == nullptr) {
      // A strata key, or a section of strata's that may hold DeepSpeed keys (checkpoint).
      if (value.IsMap()) list_keys(value, path + ".", nullptr, cfg, with_refused);
      continue;
    }
    if (key->treatment == DsTreatment::Implemented && value.IsMap()) {
      list_keys(value, path + ".", key, cfg, with_refused);
      continue;
    }
    const DsDecision decision = decide_deepspeed_key(*key, value);
    DeepSpeedKeyNote note{path, short_value(value), "implemented", key->strata};
    if (value.IsScalar() && value.Scalar() == "auto") {
      note.treatment = "auto";
      note.detail = "";  // filled in by resolve_auto
    } else if (decision.kind == DsDecision::Accepted) {
      note.treatment = "accepted";
      note.detail = decision.message;
    } else if (decision.kind == DsDecision::Disabled) {
      note.treatment = "disabled";
      note.detail = decision.message;
    } else if (decision.kind == DsDecision::Refused) {
      if (!with_refused) continue;  // the parser reported it
      note.treatment = "refused";
      note.detail = decision.message;
    }
    cfg.deepspeed_keys.push_back(note);
  }
}

// Markdown table cells hold no raw pipes or newlines.
std::string cell(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

}  // namespace

const DeepSpeedKey* find_deepspeed_key(const std::string& path) {
  const std::vector<DeepSpeedKey>& keys = deepspeed_keys();
  const auto it = std::find_if(keys.begin(), keys.end(), [&](const DeepSpeedKey& k) { return path == k.path; });
  return it == keys.end() ? nullptr : &*it;
}

DsDecision decide_deepspeed_key(const DeepSpeedKey& key, const YAML::Node& value) {
  switch (key.treatment) {
    case DsTreatment::Implemented: return {DsDecision::Implemented, ""};
    case DsTreatment::Accepted: return {DsDecision::Accepted, key.strata};
    case DsTreatment::AcceptedAtDefault:
      if (same_value(value, key.neutral))
        return {DsDecision::Accepted, fmt::format("{} is what strata does", short_value(value))};
      return {DsDecision::Refused, fmt::format("{} (only {} is accepted)", key.strata, spellings(key.neutral))};
    case DsTreatment::RefusedWhenEnabled:
      if (const Switch on = enabled_inside(value); !on.path.empty()) {
        // Which switch is on, when it is not the section's own (that may already say false).
        if (on.path == "enabled") return {DsDecision::Refused, key.strata};
        return {DsDecision::Refused, fmt::format("{} is {}: {}", on.path, on.value, key.strata)};
      }
      return {DsDecision::Disabled, "nothing in it is enabled"};
    case DsTreatment::Refused: return {DsDecision::Refused, key.strata};
  }
  return {DsDecision::Refused, key.strata};
}

std::string short_value(const YAML::Node& value) {
  if (value.IsNull()) return "null";
  if (value.IsScalar()) return value.Scalar();
  if (value.IsSequence()) {
    std::string out;
    for (const auto& item : value) out += (out.empty() ? "" : ", ") + short_value(item);
    return "[" + out + "]";
  }
  return "{…}";
}

void list_deepspeed_keys(const YAML::Node& root, Config& cfg, bool with_refused) {
  cfg.deepspeed_keys.clear();
  if (root.IsMap()) list_keys(root, "", nullptr, cfg, with_refused);
}

}  // namespace config_detail

std::vector<std::string> deepspeed_notes(const Config& cfg) {
  std::vector<std::string> lines;
  for (const DeepSpeedKeyNote& note : cfg.deepspeed_keys) {
    if (note.treatment == "auto") lines.push_back(fmt::format("{}: auto → {}", note.path, note.detail));
    if (note.treatment == "accepted")
      lines.push_back(fmt::format("{}: {} accepted, changes nothing: {}", note.path, note.value, note.detail));
    if (note.treatment == "disabled") lines.push_back(fmt::format("{}: accepted, {}", note.path, note.detail));
  }
  return lines;
}

std::string explain_deepspeed(const Config& cfg) {
  if (cfg.deepspeed_keys.empty()) return "no DeepSpeed keys in this config\n";
  size_t width = 0;
  for (const DeepSpeedKeyNote& note : cfg.deepspeed_keys) width = std::max(width, note.path.size() + note.value.size());
  std::string out = "DeepSpeed keys of this config, and what strata does with each:\n";
  for (const DeepSpeedKeyNote& note : cfg.deepspeed_keys) {
    const std::string key = note.path + " = " + note.value;
    out += fmt::format("  {:<{}}  {:<11} {}\n", key, width + 3, note.treatment, note.detail);
  }
  return out;
}

std::string deepspeed_keys_markdown() {
  std::string out = "| Key | In DeepSpeed | In strata |\n|---|---|---|\n";
  for (const config_detail::DeepSpeedKey& key : config_detail::deepspeed_keys()) {
    std::string what = key.strata;
    if (key.treatment == config_detail::DsTreatment::AcceptedAtDefault)
      what = fmt::format("{} is accepted; any other value is refused: {}", config_detail::spellings(key.neutral), what);
    out += fmt::format("| `{}` | {} | **{}**: {} |\n", key.path, config_detail::cell(key.meaning),
                       config_detail::treatment_name(key.treatment), config_detail::cell(what));
  }
  return out;
}

}  // namespace strata
