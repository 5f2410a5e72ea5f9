// The field table's keys as data, for tests that check every key: each field's dotted path, its
// bound and whether it holds a whole number. Sections given under another name by DeepSpeed are
// recorded with that name too.
#pragma once
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "config/config_fields.h"

namespace strata_test {

struct FieldKey {
  std::string path;
  strata::config_detail::Bound bound;
  bool whole = false;  // an integer member
};

class FieldCollector {
 public:
  using Bound = strata::config_detail::Bound;
  explicit FieldCollector(std::vector<FieldKey>& out, std::string prefix = "") : out_(out), prefix_(prefix) {}
  template <typename T>
  void value(const char* name, const T& v, Bound bound = {}) {
    add(name, v, bound);
  }
  template <typename T>
  void count(const char* name, const T& v, Bound bound = {}) {
    add(name, v, bound);
  }
  template <typename E, typename N>
  void choice(const char* name, const E&, const N&) {
    out_.push_back({prefix_ + name, {}, false});
  }
  template <typename E, typename N>
  void choice_any_case(const char* name, const E& v, const N& names) {
    choice(name, v, names);
  }
  template <typename Fn>
  void section(const char* name, Fn&& fields, const char* alias = nullptr) {
    out_.push_back({prefix_ + name, {}, false});
    FieldCollector sub(out_, prefix_ + name + ".");
    fields(sub);
    if (alias != nullptr) {
      out_.push_back({prefix_ + alias, {}, false});
      FieldCollector other(out_, prefix_ + alias + ".");
      fields(other);
    }
  }
  void scheduler(const strata::SchedulerConfig&) { out_.push_back({prefix_ + "scheduler", {}, false}); }
  void pipeline_partition(const strata::PipelineConfig&) { out_.push_back({prefix_ + "partition", {}, false}); }
  void data_sources(const char* name, const std::vector<strata::DataSource>&) {
    out_.push_back({prefix_ + name, {}, false});
  }

 private:
  template <typename T>
  static constexpr bool whole(const std::optional<T>*) {
    return std::is_integral_v<T>;
  }
  template <typename T>
  static constexpr bool whole(const T*) {
    return std::is_integral_v<T>;
  }
  template <typename T>
  void add(const char* name, const T& v, Bound bound) {
    out_.push_back({prefix_ + name, bound, whole(&v)});
  }
  std::vector<FieldKey>& out_;
  std::string prefix_;
};

// Every key of the field table (fields and sections), in the table's order; `deepspeed_only`
// keeps the ds_config part.
inline std::vector<FieldKey> field_keys(bool deepspeed_only = false) {
  std::vector<FieldKey> keys;
  FieldCollector collector(keys);
  strata::Config defaults;
  if (deepspeed_only) {
    strata::config_detail::deepspeed_fields(collector, defaults);
  } else {
    strata::config_detail::config_fields(collector, defaults);
  }
  return keys;
}

}  // namespace strata_test
