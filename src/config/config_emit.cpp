// Writes a Config back in file format by walking the field table (config_fields.h). Numbers use
// the shortest text that parses back to the same double and strings are always double-quoted,
// so load_config_text(config_to_yaml(c)) reproduces c exactly; checkpoints rely on that to store
// the run's config.
#include <fmt/format.h>

#include <sstream>
#include <stdexcept>

#include "config/config_fields.h"

namespace strata {
namespace {

using config_detail::Bound;
using config_detail::EnumNames;

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// fmt's "{}" prints the shortest representation that round-trips (e.g. 0.0006, 1e-08). YAML 1.1
// readers (PyYAML) take "1e-08" for a string, so exponent forms get a mantissa dot: 1.0e-08.
std::string number(double value) {
  std::string text = fmt::format("{}", value);
  const size_t e = text.find('e');
  if (e != std::string::npos && text.find('.') == std::string::npos) text.insert(e, ".0");
  return text;
}
std::string number(int64_t value) { return fmt::format("{}", value); }
std::string number(int value) { return fmt::format("{}", value); }
std::string boolean(bool value) { return value ? "true" : "false"; }

class YamlWriter {
 public:
  void key(const std::string& name, const std::string& value) { line(name + ": " + value); }
  void open(const std::string& name) {
    line(name + ":");
    depth_ += 1;
  }
  void close() { depth_ -= 1; }
  void comment(const std::string& text) { line("# " + text); }
  std::string text() const { return text_; }

 private:
  void line(const std::string& content) {
    text_ += std::string(static_cast<size_t>(depth_) * 2, ' ') + content + "\n";
  }
  std::string text_;
  int depth_ = 0;
};

void write_scheduler(const SchedulerConfig& s, YamlWriter& w) {
  if (s.type == LrScheduleType::Constant) {
    w.comment("no scheduler section: constant learning rate");
    return;
  }
  w.open("scheduler");
  w.key("type", to_string(s.type));
  w.open("params");
  const SchedulerParams& q = s.params;
  for (const auto& name : config_detail::scheduler_param_names(s.type)) {
    if (name == "warmup_min_lr") w.key(name, number(q.warmup_min_lr));
    if (name == "warmup_max_lr") w.key(name, number(q.warmup_max_lr));
    if (name == "warmup_num_steps") w.key(name, number(q.warmup_num_steps));
    if (name == "warmup_type") w.key(name, to_string(q.warmup_type));
    if (name == "total_num_steps" && q.total_num_steps) w.key(name, number(*q.total_num_steps));
    if (name == "warmup_min_ratio") w.key(name, number(q.warmup_min_ratio));
    if (name == "cos_min_ratio") w.key(name, number(q.cos_min_ratio));
  }
  w.close();
  w.close();
}

// The field table's writer: each field a `key: value` line, each section an indented map.
class FieldWriter {
 public:
  explicit FieldWriter(YamlWriter& w) : w_(w) {}
  void value(const char* name, bool v) { w_.key(name, boolean(v)); }
  void value(const char* name, int v) { w_.key(name, number(v)); }
  void value(const char* name, int64_t v) { w_.key(name, number(v)); }
  void value(const char* name, double v) { w_.key(name, number(v)); }
  void value(const char* name, const std::string& v) { w_.key(name, quoted(v)); }
  void value(const char* name, const std::array<double, 2>& v) {
    w_.key(name, "[" + number(v[0]) + ", " + number(v[1]) + "]");
  }
  template <typename T>
  void value(const char* name, const std::optional<T>& v) {  // unset: no line (the default applies)
    if (v) value(name, *v);
  }
  template <typename T>
  void value(const char* name, const T& v, Bound) {  // ranges are validation's
    value(name, v);
  }
  void count(const char* name, int64_t v, Bound = {}) { w_.key(name, number(v)); }
  void count(const char* name, const std::optional<int64_t>& v, Bound = {}) {
    if (v) count(name, *v);
  }
  template <typename E>
  void choice(const char* name, E v, const EnumNames<E>& names) {
    for (const auto& n : names) {
      if (n.second == v) return w_.key(name, n.first);
    }
    throw std::logic_error(std::string("config_to_yaml: no spelling for the value of ") + name);
  }
  template <typename E>
  void choice_any_case(const char* name, E v, const EnumNames<E>& names) {
    choice(name, v, names);
  }
  template <typename Fn>
  void section(const char* name, Fn&& fields, const char* = nullptr) {  // written under its own name
    w_.open(name);
    fields(*this);
    w_.close();
  }
  void scheduler(const SchedulerConfig& s) { write_scheduler(s, w_); }
  void pipeline_partition(const PipelineConfig& p) {
    if (p.partition != PipelinePartition::Explicit) {
      w_.key("partition", to_string(p.partition));
      return;
    }
    std::string list;
    for (int n : p.partition_layers) list += (list.empty() ? "" : ", ") + number(n);
    w_.key("partition", "[" + list + "]");
  }
  // One glob with weight 1 as the plain string it was given as; a blend as a flow list of maps.
  void data_sources(const char* name, const std::vector<DataSource>& sources) {
    if (sources.size() == 1 && sources[0].weight == 1) return w_.key(name, quoted(sources[0].path));
    std::string list;
    for (const DataSource& s : sources)
      list += fmt::format("{}{{path: {}, weight: {}}}", list.empty() ? "" : ", ", quoted(s.path), number(s.weight));
    w_.key(name, sources.empty() ? quoted("") : "[" + list + "]");
  }

 private:
  YamlWriter& w_;
};

}  // namespace

std::string config_to_yaml(const Config& cfg) {
  YamlWriter w;
  w.comment("strata config: every key that has a value, defaults filled in");
  FieldWriter fields(w);
  config_detail::config_fields(fields, cfg);
  return w.text();
}

std::string derived_to_yaml(const Config& cfg) {
  const Derived& d = cfg.derived;
  YamlWriter w;
  w.open("derived");
  w.key("world_size", number(d.world_size));
  w.key("dp_size", number(d.dp_size));
  w.key("tp_size", number(d.tp_size));
  w.key("pp_size", number(d.pp_size));
  w.key("micro_batch", number(d.micro_batch));
  w.key("grad_accum", number(d.grad_accum));
  w.key("global_batch", number(d.global_batch));
  w.key("tokens_per_step", number(d.tokens_per_step));
  w.key("padded_vocab", number(d.padded_vocab));
  w.key("n_params", number(d.n_params));
  w.key("n_params_unpadded", number(d.n_params_unpadded));
  w.key("flops_per_token", number(d.flops_per_token));
  w.close();
  return w.text();
}

std::string derived_as_comments(const Config& cfg) {
  std::istringstream derived(derived_to_yaml(cfg));
  std::string text;
  for (std::string line; std::getline(derived, line);) text += "# " + line + "\n";
  return text;
}

}  // namespace strata
