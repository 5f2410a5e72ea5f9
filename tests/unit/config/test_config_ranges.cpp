// Every range in the field table is enforced: for each bounded key, a value just outside the
// bound is reported under that key and the bound's own edge is accepted. A bound written in the
// table but not checked (or checked against the wrong edge) fails here.
#include <string>

#include <fmt/format.h>

#include "config_test_util.h"
#include "field_collector.h"

namespace {

using strata::config_detail::Bound;

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
  std::vector<strata_test::FieldKey> keys;
  for (const auto& key : strata_test::field_keys()) {
    if (key.bound.kind != Bound::Kind::Any) keys.push_back(key);
  }
  REQUIRE(keys.size() >= 30);
  for (const strata_test::FieldKey& key : keys) {
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
