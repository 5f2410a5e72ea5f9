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

TEST_CASE("sample text is printed without the control codes a terminal would obey") {
  CHECK(printable_sample("plain text\n\tindented") == "plain text\n\tindented");
  CHECK(printable_sample("\x1b[2J\a\rend\x7f") == "\\x1b[2J\\x07\\x0dend\\x7f");
  CHECK(printable_sample("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
  CHECK(printable_sample("\x9b" "1m \xc2\x9b \xff") == "\\x9b1m \\u009b \\xff");  // CSI as a byte and as U+009B
  CHECK(printable_sample("\xc0\xaf \xed\xa0\x80 \xe6\x97") == "\\xc0\\xaf \\xed\\xa0\\x80 \\xe6\\x97");
}

}  // namespace
}  // namespace strata
