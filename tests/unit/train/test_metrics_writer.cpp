// The JSONL metrics writer: one valid JSON object per line, even for sample text that is not
// valid UTF-8 (a byte-level model emits arbitrary bytes).
#include "catch_compat.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "train/metrics.h"

namespace strata {
namespace {

TEST_CASE("metrics records with invalid UTF-8 are written with replacement characters") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("strata-metrics-" + std::to_string(::getpid()) + ".jsonl")).string();
  {
    MetricsWriter writer(path);
    writer.write({{"type", "sample"}, {"text", std::string("ok \x95\xff end")}});
    writer.write({{"type", "train"}, {"step", 1}});
  }
  std::ifstream in(path);
  std::string first, second;
  REQUIRE(std::getline(in, first));
  REQUIRE(std::getline(in, second));
  const nlohmann::json record = nlohmann::json::parse(first);
  CHECK(record.at("text").get<std::string>() == "ok \xEF\xBF\xBD\xEF\xBF\xBD end");
  CHECK(nlohmann::json::parse(second).at("step") == 1);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace strata
