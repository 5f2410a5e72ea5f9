// Catch2 v2 or v3, whichever the build found (tests/CMakeLists.txt defines STRATA_CATCH2_V3 for
// v3): test files include this header instead of Catch's own and name string matchers through
// strata_catch. The one file per executable that defines main() defines STRATA_CATCH_SESSION
// first and runs a Catch::Session.
#pragma once
#include <string>

#ifdef STRATA_CATCH2_V3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#ifdef STRATA_CATCH_SESSION
#include <catch2/catch_session.hpp>
#endif
using Catch::Approx;  // v2 has it unqualified
namespace strata_catch {
inline Catch::Matchers::StringContainsMatcher Contains(const std::string& text) {
  return Catch::Matchers::ContainsSubstring(text);
}
inline Catch::Matchers::StartsWithMatcher StartsWith(const std::string& text) {
  return Catch::Matchers::StartsWith(text);
}
}  // namespace strata_catch
#else
#ifdef STRATA_CATCH_SESSION
#define CATCH_CONFIG_RUNNER
#endif
#include <catch2/catch.hpp>
namespace strata_catch {
inline Catch::Matchers::StdString::ContainsMatcher Contains(const std::string& text) {
  return Catch::Matchers::Contains(text);
}
inline Catch::Matchers::StdString::StartsWithMatcher StartsWith(const std::string& text) {
  return Catch::Matchers::StartsWith(text);
}
}  // namespace strata_catch
#endif
