// Typed, error-collecting access to YAML maps: scalars are converted strictly (no silent
// truncation of 64.5 to 64), and every problem is logged with its key path instead of
// thrown, so one run reports all of a config's mistakes.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "config/config_internal.h"
#include "config/deepspeed_keys.h"

namespace strata {
namespace config_detail {
namespace {

bool has_prefix(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

// True when `a` and `b` name the same key or one lies inside the other.
bool related_paths(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty() || a == b) return true;
  return has_prefix(a, b + ".") || has_prefix(b, a + ".");
}

// Optimal-string-alignment distance: a swapped pair of letters is one typo, not two.
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::string describe(const YAML::Node& node) {
  if (node.IsNull()) return "an empty value";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return quoted(node.Scalar());
}

bool parse_int64(const std::string& text, int64_t& value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || end != text.c_str() + text.size()) return false;
  value = v;
  return true;
}

}  // namespace

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  return out + "'";
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool parse_double(const std::string& text, double& value) {
  // strtod would also take hex floats and "inf"/"nan", none of which belong in a config.
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  if (text.find_first_of("xX") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return false;
  value = v;
  return true;
}


namespace {
// `key` appears in `text` as a whole key ("model.n_head = 3", not "model.n_head_x").
bool names_key(const std::string& text, const std::string& key) {
  const auto part_of_key = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const size_t end = at + key.size();
    if ((at == 0 || !part_of_key(text[at - 1])) && (end == text.size() || !part_of_key(text[end]))) return true;
  }
  return false;
}
}  // namespace

void ErrorLog::add(const std::string& path, const std::string& message) {
  std::string text = message;
  // The key the error is filed under, or another one it names (model.d_model's divisibility by
  // model.n_head is filed under d_model): either may be the one --set changed.
  const auto marked = [&](const std::string& o) { return (!path.empty() && related_paths(path, o)); };
  auto it = std::find_if(overridden_.begin(), overridden_.end(), marked);
  if (it == overridden_.end())
    it = std::find_if(overridden_.begin(), overridden_.end(), [&](const std::string& o) { return names_key(message, o); });
  if (it != overridden_.end()) text += " (set by --set " + *it + ")";
  errors_.push_back({path, text});
}

bool ErrorLog::covers(const std::string& path) const {
  for (const auto& e : errors_) {
    if (e.path.empty() || e.path == path || has_prefix(path, e.path + ".")) return true;
  }
  return false;
}

std::vector<std::string> ErrorLog::messages() const {
  std::vector<std::string> out;
  for (const auto& e : errors_) out.push_back(e.path.empty() ? e.message : e.path + ": " + e.message);
  return out;
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string w = lower(word);
  // Short words tolerate fewer edits, or every two-letter key would "match" every other.
  const size_t limit = w.size() <= 4 ? 1 : w.size() <= 8 ? 2 : 3;
  std::string best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(w, lower(c));
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

MapReader::MapReader(const YAML::Node& node, std::string path, ErrorLog& log)
    : path_(std::move(path)), log_(&log) {
  if (!node.IsDefined() || node.IsNull()) return;
  if (!node.IsMap()) {
    std::string message = "expected a map of keys, got " + describe(node);
    // DeepSpeed's old form of the section: a boolean for stage 1 or 0.
    if (path_ == "zero_optimization" && node.IsScalar() && (node.Scalar() == "true" || node.Scalar() == "false")) {
      message += fmt::format(" (DeepSpeed's legacy boolean form, which strata does not read: write zero_optimization: "
                             "{{stage: {}}})",
                             node.Scalar() == "true" ? 1 : 0);
    }
    log.add(path_, message);
    return;
  }
  present_ = true;
  for (const auto& item : node) {
    if (!item.first.IsScalar()) {
      log.add(path_, "keys must be plain names, got " + describe(item.first));
      continue;
    }
    const std::string key = item.first.Scalar();
    const bool duplicate = std::any_of(entries_.begin(), entries_.end(),
                                       [&](const auto& e) { return e.first == key; });
    if (duplicate) {
      log.add(key_path(key), "appears more than once in the same section; keep one");
      continue;
    }
    entries_.emplace_back(key, item.second);
  }
}

bool MapReader::has(const std::string& key) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == key; });
}

std::string MapReader::key_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

const YAML::Node* MapReader::find(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  for (const auto& e : entries_) {
    if (e.first == key) return &e.second;
  }
  return nullptr;
}

const YAML::Node* MapReader::given(const std::string& key) {
  const YAML::Node* node = find(key);
  return node != nullptr && !node->IsNull() ? node : nullptr;
}

const YAML::Node* MapReader::scalar(const std::string& key, const char* expected) {
  const YAML::Node* node = given(key);
  if (node == nullptr) return nullptr;
  if (!node->IsScalar()) {
    log_->add(key_path(key), fmt::format("expected {}, got {}", expected, describe(*node)));
    return nullptr;
  }
  if (take_auto(key, *node, expected)) return nullptr;
  return node;
}

bool MapReader::take_auto(const std::string& key, const YAML::Node& node, const char* expected) {
  if (!node.IsScalar() || node.Scalar() != "auto") return false;
  if (const std::optional<std::string> refusal = auto_refusal(key_path(key), expected)) {
    log_->add(key_path(key), *refusal);
  } else {
    log_->add_auto(key_path(key));
  }
  return true;
}

void MapReader::read(const std::string& key, bool& out) {
  const YAML::Node* node = scalar(key, "true or false");
  if (node == nullptr) return;
  const std::string& s = node->Scalar();
  if (s == "true" || s == "True" || s == "TRUE") {
    out = true;
  } else if (s == "false" || s == "False" || s == "FALSE") {
    out = false;
  } else {
    log_->add(key_path(key), "expected true or false, got '" + s + "'");
  }
}

namespace {
// The message for a value parse_int64 refused: a run of digits is an integer too large to hold.
std::string not_an_int64(const std::string& text) {
  const size_t digits = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  const bool integer = digits < text.size() && text.find_first_not_of("0123456789", digits) == std::string::npos;
  if (integer) return "got " + text + ", beyond a 64-bit integer (at most 9223372036854775807)";
  return "expected an integer, got " + quoted(text);
}
}  // namespace

void MapReader::read(const std::string& key, int64_t& out) {
  const YAML::Node* node = scalar(key, "an integer");
  if (node == nullptr) return;
  int64_t v = 0;
  if (!parse_int64(node->Scalar(), v)) {
    log_->add(key_path(key), not_an_int64(node->Scalar()));
    return;
  }
  out = v;
}

void MapReader::read(const std::string& key, int& out) {
  int64_t v = 0;
  const YAML::Node* node = scalar(key, "an integer");
  if (node == nullptr) return;
  if (!parse_int64(node->Scalar(), v)) {
    log_->add(key_path(key), not_an_int64(node->Scalar()));
    return;
  }
  // The field's own bound (≥ 1 for most) is checked later; here only what an int holds, said
  // from the side that was passed, and not as the key's range (which may be narrower).
  if (v > INT_MAX || v < INT_MIN) {
    log_->add(key_path(key), fmt::format("got {}, beyond what this key can hold ({} to {}; its own range may be "
                                         "narrower)",
                                         v, INT_MIN, INT_MAX));
    return;
  }
  out = static_cast<int>(v);
}

void MapReader::read(const std::string& key, double& out) {
  const YAML::Node* node = scalar(key, "a number");
  if (node == nullptr) return;
  double v = 0;
  if (!parse_double(node->Scalar(), v)) {
    log_->add(key_path(key), "expected a number, got " + quoted(node->Scalar()));
    return;
  }
  out = v;
}

void MapReader::read(const std::string& key, std::string& out) {
  const YAML::Node* node = given(key);
  if (node == nullptr) return;
  if (!node->IsScalar()) {
    log_->add(key_path(key), "expected a string, got " + describe(*node));
    return;
  }
  out = node->Scalar();
}

// An optional value: absent leaves `out` as it is, null unsets it, 'auto' goes to take_auto
// (`expected` names the type for its message; empty: no 'auto' here), anything else is read as T.
template <typename T>
void MapReader::read_nullable(const std::string& key, std::optional<T>& out, const char* expected) {
  const YAML::Node* node = find(key);
  if (node == nullptr || (*expected && take_auto(key, *node, expected))) return;
  if (node->IsNull()) {
    out.reset();
    return;
  }
  T v{};
  const size_t errors_before = log_->count();
  read(key, v);
  if (log_->count() == errors_before) out = v;
}

void MapReader::read(const std::string& key, std::optional<std::string>& out) { read_nullable(key, out, ""); }
void MapReader::read(const std::string& key, std::optional<bool>& out) { read_nullable(key, out, "true or false"); }
void MapReader::read(const std::string& key, std::optional<int>& out) { read_nullable(key, out, "an integer"); }
void MapReader::read(const std::string& key, std::optional<int64_t>& out) { read_nullable(key, out, "an integer"); }

void MapReader::read(const std::string& key, std::array<double, 2>& out) {
  const YAML::Node* node = given(key);
  if (node == nullptr) return;
  const char* expected = "a list of two numbers like [0.9, 0.999]";
  if (take_auto(key, *node, expected)) return;
  if (!node->IsSequence() || node->size() != 2) {
    const std::string got = node->IsSequence() ? fmt::format("a list of {}", node->size()) : describe(*node);
    log_->add(key_path(key), fmt::format("expected {}, got {}", expected, got));
    return;
  }
  std::array<double, 2> v{};
  for (size_t i = 0; i < 2; ++i) {
    const YAML::Node item = (*node)[i];
    if (!item.IsScalar() || !parse_double(item.Scalar(), v[i])) {
      log_->add(key_path(key), fmt::format("expected {}, got {} as item {}", expected, describe(item), i));
      return;
    }
  }
  out = v;
}

bool MapReader::is_sequence(const std::string& key) {
  const YAML::Node* node = find(key);
  return node != nullptr && node->IsSequence();
}

void MapReader::read(const std::string& key, std::vector<int>& out) {
  const YAML::Node* node = given(key);
  if (node == nullptr) return;
  if (!node->IsSequence()) {
    log_->add(key_path(key), fmt::format("expected a list of whole numbers, got {}", describe(*node)));
    return;
  }
  std::vector<int> v;
  for (size_t i = 0; i < node->size(); ++i) {
    const YAML::Node item = (*node)[i];
    // Written as integers, as a single integer key must be (2.0 or 2e0 is refused there too).
    int64_t n = 0;
    if (!item.IsScalar() || !parse_int64(item.Scalar(), n) || n < INT_MIN || n > INT_MAX) {
      log_->add(key_path(key), fmt::format("expected a list of whole numbers, got {} as item {}", describe(item), i));
      return;
    }
    v.push_back(static_cast<int>(n));
  }
  out = v;
}

void MapReader::read(const std::string& key, std::vector<DataSource>& out) {
  const YAML::Node* node = given(key);
  if (node == nullptr) return;
  if (node->IsScalar()) {
    out.clear();
    if (!node->Scalar().empty()) out.push_back({node->Scalar(), 1});
    return;
  }
  if (!node->IsSequence() || node->size() == 0) {
    log_->add(key_path(key), fmt::format("expected a glob of token shards or a list of {{path: GLOB, weight: W}} "
                                         "to blend, got {}", node->IsSequence() ? "an empty list" : describe(*node)));
    return;
  }
  std::vector<DataSource> sources;
  for (size_t i = 0; i < node->size(); ++i) {
    const std::string path = fmt::format("{}[{}]", key_path(key), i);
    const YAML::Node item = (*node)[i];
    if (!item.IsMap()) {
      log_->add(path, fmt::format("expected a map {{path: GLOB, weight: W}}, got {}", describe(item)));
      continue;
    }
    MapReader source(item, path, *log_);
    for (const char* name : {"path", "weight"}) {
      if (!source.has(name)) source.error(name, "required in each source of a blend");
    }
    DataSource s;
    source.read("path", s.path);
    source.read("weight", s.weight);
    source.finish();
    sources.push_back(s);
  }
  out = sources;
}

void MapReader::read_count(const std::string& key, int64_t& out) {
  const YAML::Node* node = scalar(key, "a number");
  if (node == nullptr) return;
  double v = 0;
  // 9.2e18 keeps the conversion to int64 exact and defined.
  if (!parse_double(node->Scalar(), v) || std::floor(v) != v || std::fabs(v) > 9.2e18) {
    log_->add(key_path(key),
              "expected a whole number of elements (e.g. 5e8 or 500000000), got " + quoted(node->Scalar()));
    return;
  }
  out = static_cast<int64_t>(v);
}

void MapReader::read_count(const std::string& key, std::optional<int64_t>& out) {
  const YAML::Node* node = find(key);
  if (node == nullptr || node->IsNull() || take_auto(key, *node, "a number")) return;
  int64_t value = 0;
  const size_t errors_before = log_->count();
  read_count(key, value);
  if (log_->count() == errors_before) out = value;
}

bool MapReader::read_choice(const std::string& key, const std::vector<std::string>& spellings, bool ignore_case,
                            int& index) {
  index = -1;
  const YAML::Node* node = given(key);
  if (node == nullptr) return true;
  const std::string supported = join(spellings);
  if (!node->IsScalar()) {
    log_->add(key_path(key), fmt::format("expected one of {}, got {}", supported, describe(*node)));
    return false;
  }
  const std::string& value = node->Scalar();
  for (size_t i = 0; i < spellings.size(); ++i) {
    if (value == spellings[i] || (ignore_case && lower(value) == lower(spellings[i]))) {
      index = static_cast<int>(i);
      return true;
    }
  }
  std::string message = fmt::format("'{}' is not supported; supported: {}", value, supported);
  // A guess for a word of three letters is more often wrong than helpful ("gpu" is not "cpu").
  const std::string guess = value.size() > 3 ? closest_match(value, spellings) : "";
  if (!guess.empty()) message += "; did you mean " + guess + "?";
  log_->add(key_path(key), message);
  return false;
}

MapReader MapReader::section(const std::string& key) {
  const YAML::Node* node = find(key);
  return MapReader(node != nullptr ? *node : YAML::Node(), key_path(key), *log_);
}

void MapReader::finish(const std::map<std::string, std::string>& hints) {
  for (const auto& e : entries_) {
    if (std::find(known_.begin(), known_.end(), e.first) != known_.end()) continue;
    // A DeepSpeed key strata does not read: accepted or refused by its entry, never a typo. A
    // section listed as implemented that no reader asked for (data_types) holds keys with entries
    // of their own; a leaf listed as implemented always has a reader (were it missed, it falls
    // through as unknown).
    if (const DeepSpeedKey* ds = find_deepspeed_key(key_path(e.first))) {
      if (ds->treatment != DsTreatment::Implemented) {
        const DsDecision decision = decide_deepspeed_key(*ds, e.second);
        if (decision.kind == DsDecision::Refused) log_->add(key_path(e.first), decision.message);
        continue;
      }
      if (e.second.IsMap()) {
        MapReader(e.second, key_path(e.first), *log_).finish();
        continue;
      }
    }
    const auto hint = hints.find(e.first);
    if (hint != hints.end()) {
      log_->add(key_path(e.first), hint->second);
      continue;
    }
    if (const std::string elsewhere = key_elsewhere(e.first, key_path(e.first)); !elsewhere.empty()) {
      log_->add(key_path(e.first), "unknown key here; did you mean " + elsewhere + "?");
      continue;
    }
    // A misspelled DeepSpeed section or key here (elasticitty) is as likely as one of strata's.
    std::vector<std::string> candidates = known_;
    for (const DeepSpeedKey& ds : deepspeed_keys()) {
      const std::string path = ds.path;
      const size_t dot = path.rfind('.');
      const std::string name = dot == std::string::npos ? path : path.substr(dot + 1);
      if (key_path(name) == path && std::find(candidates.begin(), candidates.end(), name) == candidates.end())
        candidates.push_back(name);
    }
    const std::string guess = closest_match(e.first, candidates);
    if (!guess.empty()) {
      log_->add(key_path(e.first), "unknown key; did you mean " + guess + "?");
    } else {
      log_->add(key_path(e.first), "unknown key; valid keys here: " + join(known_));
    }
  }
}

}  // namespace config_detail
}  // namespace strata
