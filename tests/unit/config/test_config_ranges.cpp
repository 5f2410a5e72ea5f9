// Every range in the field table is enforced: for each bounded key, a value just outside the
// bound is reported under that key and the bound's own edge is accepted. A bound written in the
// table but not checked (or checked against the wrong edge) fails here.
#include <cmath>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "config/config_fields.h"
#include "config_test_util.h"

namespace {

using strata::config_detail::Bound;

struct BoundedKey {
  std::string path;
  Bound bound;
  bool whole = false;  // an integer member: out-of-range values are whole numbers too
};

// Collects the table's bounded keys with their paths.
class BoundCollector {
 public:
  explicit BoundCollector(std::vector<BoundedKey>& out, std::string prefix = "") : out_(out), prefix_(prefix) {}
  template <typename T>
  void value(const char* name, const T& v, Bound bound = {}) {
    add(name, v, bound);
  }
  template <typename T>
  void nullable(const char* name, const T& v, Bound bound = {}) {
    add(name, v, bound);
  }
  template <typename T>
  void count(const char* name, const T& v, Bound bound = {}) {
    add(name, v, bound);
  }
  template <typename E, typename N>
  void choice(const char*, const E&, const N&) {}
  template <typename E, typename N>
  void choice_any_case(const char*, const E&, const N&) {}
  template <typename Fn>
  void section(const char* name, Fn&& fields) {
    BoundCollector sub(out_, prefix_ + name + ".");
    fields(sub);
  }
  void scheduler(const strata::SchedulerConfig&) {}
  void pipeline_partition(const strata::PipelineConfig&) {}

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
    if (bound.kind != Bound::Kind::Any) out_.push_back({prefix_ + name, bound, whole(&v)});
  }
  std::vector<BoundedKey>& out_;
  std::string prefix_;
};

std::string text(double value, bool whole) {
  return whole ? fmt::format("{}", static_cast<int64_t>(value)) : fmt::format("{}", value);
}

bool has_range_problem(const std::vector<std::string>& problems, const std::string& path) {
  for (const auto& p : problems) {
    if (p.rfind(path + ": must be ", 0) == 0 && p.find("fp32's smallest") == std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("config ranges: every bound of the field table is enforced at its edge") {
  std::vector<BoundedKey> keys;
  BoundCollector collector(keys);
  strata::Config defaults;
  strata::config_detail::config_fields(collector, defaults);
  REQUIRE(keys.size() >= 30);
  for (const BoundedKey& key : keys) {
    const double step = key.whole ? 1 : 0.5;
    std::vector<std::pair<double, bool>> cases;  // value, reported
    switch (key.bound.kind) {
      case Bound::Kind::AtLeast:
        cases = {{key.bound.lo - step, true}, {key.bound.lo, false}};
        break;
      case Bound::Kind::Positive:
        cases = {{0, true}, {-step, true}, {0.5, false}};
        break;
      case Bound::Kind::Within:
      case Bound::Kind::Fraction:
        cases = {{key.bound.lo - step, true}, {key.bound.lo, false}, {key.bound.hi, false}, {key.bound.hi + step, true}};
        break;
      case Bound::Kind::Any:
        break;
    }
    for (const auto& [value, reported] : cases) {
      const std::string set = key.path + "=" + text(value, key.whole);
      INFO(set);
      CHECK(has_range_problem(strata_test::problems(strata_test::kTinyConfig, {set}), key.path) == reported);
    }
  }
}
