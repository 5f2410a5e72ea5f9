// Token shards: both llm.c formats round-trip, reads cross shard boundaries, and every kind
// of bad shard is refused at open with a message naming the file and the problem.
#include "catch_compat.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/data.h"
#include "data_test_util.h"

using namespace strata;
using strata::test::TempDir;
using strata::test::user_error_message;
using strata::test::write_raw_shard;

namespace {
std::vector<int32_t> iota_tokens(int64_t n, int32_t first, int32_t modulus) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>((first + i) % modulus);
  return tokens;
}

std::vector<int32_t> read_all(const TokenDataset& dataset) {
  std::vector<int32_t> tokens(static_cast<size_t>(dataset.num_tokens()));
  dataset.read(0, dataset.num_tokens(), tokens.data());
  return tokens;
}

std::vector<int32_t> header_of(const std::string& path) {
  std::vector<int32_t> header(256);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  return header;
}
}  // namespace

TEST_CASE("uint16 shards round-trip with the llm.c header") {
  TempDir dir;
  const auto tokens = iota_tokens(1000, 7, 50257);
  write_token_shard(dir.file("a.bin"), tokens, /*wide=*/false);
  const auto header = header_of(dir.file("a.bin"));
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == 1000);
  CHECK(std::filesystem::file_size(dir.file("a.bin")) == 1024 + 2 * 1000);
  CHECK_FALSE(std::filesystem::exists(dir.file("a.bin.tmp")));

  const TokenDataset dataset = TokenDataset::open(dir.file("*.bin"), 50257, "data.train");
  REQUIRE(dataset.num_tokens() == 1000);
  REQUIRE(dataset.shards().size() == 1);
  CHECK(dataset.shards()[0].token_bytes == 2);
  CHECK(dataset.shards()[0].path == dir.file("a.bin"));
  CHECK(read_all(dataset) == tokens);
}

TEST_CASE("uint32 shards round-trip, chosen by a large token or by request") {
  TempDir dir;
  const std::vector<int32_t> big = {0, 65535, 65536, 100000, 3};
  write_token_shard(dir.file("big.bin"), big, /*wide=*/false);  // 100000 forces uint32
  const auto header = header_of(dir.file("big.bin"));
  CHECK(header[0] == 20240801);
  CHECK(header[1] == 7);
  CHECK(header[2] == 5);
  CHECK(std::filesystem::file_size(dir.file("big.bin")) == 1024 + 4 * 5);
  const TokenDataset dataset = TokenDataset::open(dir.file("big.bin"), 100001, "data.train");
  CHECK(dataset.shards()[0].token_bytes == 4);
  CHECK(read_all(dataset) == big);

  write_token_shard(dir.file("wide.bin"), {1, 2, 3}, /*wide=*/true);
  CHECK(header_of(dir.file("wide.bin"))[0] == 20240801);
  CHECK(read_all(TokenDataset::open(dir.file("wide.bin"), 4, "k")) == std::vector<int32_t>{1, 2, 3});
}

TEST_CASE("reads span shard boundaries, shards in filename order, empty shards included") {
  TempDir dir;
  // Written out of order; a mixed uint16/uint32 set and an empty shard in the middle.
  const auto c = iota_tokens(50, 300, 70000);
  const auto a = iota_tokens(30, 0, 70000);
  const auto b = iota_tokens(20, 100, 70000);
  write_token_shard(dir.file("train_002.bin"), c, /*wide=*/true);
  write_token_shard(dir.file("train_000.bin"), a, false);
  write_token_shard(dir.file("train_001.bin"), {}, false);
  write_token_shard(dir.file("train_001b.bin"), b, false);
  const TokenDataset dataset = TokenDataset::open(dir.file("train_*.bin"), 70000, "data.train");
  REQUIRE(dataset.shards().size() == 4);
  CHECK(dataset.shards()[1].tokens == 0);
  CHECK(dataset.shards()[3].path == dir.file("train_002.bin"));
  std::vector<int32_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  REQUIRE(dataset.num_tokens() == 100);
  CHECK(read_all(dataset) == all);
  // Every window, including ones spanning all three non-empty shards.
  for (int64_t offset = 0; offset < 100; offset += 7) {
    for (int64_t n : {int64_t{1}, int64_t{25}, 100 - offset}) {
      if (offset + n > 100) continue;
      std::vector<int32_t> window(static_cast<size_t>(n));
      dataset.read(offset, n, window.data());
      REQUIRE(window == std::vector<int32_t>(all.begin() + offset, all.begin() + offset + n));
    }
  }
  std::vector<int32_t> sink(2);
  CHECK_THROWS_AS(dataset.read(99, 2, sink.data()), std::out_of_range);
  const TokenDataset copy = dataset;  // copies share the mappings
  CHECK(read_all(copy) == all);
}

TEST_CASE("bad shards are refused with the file name, the problem and the fix") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  auto open = [&] { return TokenDataset::open(path, 50257, "data.train"); };

  SECTION("bad magic") {
    write_raw_shard(path, 1234, 1, 2, {1, 2});
    const std::string message = user_error_message(open);
    CHECK_THAT(message, strata_catch::StartsWith("data.train: " + path + ": bad magic 1234"));
    CHECK_THAT(message, strata_catch::Contains("20240520 for uint16 or 20240801 for uint32"));
  }
  SECTION("bad version") {
    write_raw_shard(path, 20240520, 7, 2, {1, 2});
    const std::string message = user_error_message(open);
    CHECK_THAT(message, strata_catch::StartsWith("data.train: " + path + ": unsupported version 7"));
    CHECK_THAT(message, strata_catch::Contains("expected version 1"));
  }
  SECTION("truncated") {
    write_raw_shard(path, 20240520, 1, 1000, std::vector<uint16_t>(488, 1));
    CHECK_THAT(user_error_message(open),
               strata_catch::StartsWith("data.train: " + path + ": truncated: header says 1000 tokens "
                                 "(3024 bytes) but file has 2000 bytes"));
  }
  SECTION("trailing bytes") {
    write_raw_shard(path, 20240520, 1, 2, {1, 2, 3});
    CHECK_THAT(user_error_message(open), strata_catch::Contains(path + ": size mismatch"));
  }
  SECTION("shorter than a header") {
    std::ofstream(path) << "hello";
    CHECK_THAT(user_error_message(open), strata_catch::Contains(path + ": too small"));
  }
  SECTION("token outside the vocabulary") {
    std::vector<uint16_t> tokens(20, 5);
    tokens[12] = 60000;
    tokens[15] = 65000;
    write_raw_shard(path, 20240520, 1, 20, tokens);
    const std::string message = user_error_message(open);
    CHECK_THAT(message, strata_catch::StartsWith("data.train: " + path +
                                          ": token 60000 at position 12 is \u2265 vocab_size 50257"));
    // The advice names what the whole shard needs (its largest id 65000), not the first offender.
    CHECK_THAT(message, strata_catch::Contains("model.vocab_size to at least 65001, the shard's largest token + 1"));
    // The same shard is valid for a large enough vocabulary.
    CHECK(TokenDataset::open(path, 65001, "data.train").num_tokens() == 20);
  }
  SECTION("uint32 token outside the vocabulary") {
    write_token_shard(path, {1, 2, 70000}, false);
    CHECK_THAT(user_error_message(open), strata_catch::Contains("token 70000 at position 2"));
  }
  SECTION("unreadable file") {
    write_token_shard(path, {1, 2}, false);
    std::filesystem::permissions(path, std::filesystem::perms::none);
    if (::access(path.c_str(), R_OK) != 0) {  // root reads anything; the check is moot there
      CHECK_THAT(user_error_message(open), strata_catch::Contains(path + ": cannot open"));
    }
  }
  SECTION("a later shard is bad: that shard is named") {
    write_token_shard(dir.file("a.bin"), {1, 2}, false);
    write_raw_shard(dir.file("b.bin"), 99, 1, 0, {});
    CHECK_THAT(user_error_message([&] { TokenDataset::open(dir.file("*.bin"), 10, "data.val"); }),
               strata_catch::StartsWith("data.val: " + dir.file("b.bin") + ": bad magic 99"));
  }
}

TEST_CASE("a pattern that matches nothing names the key and the pattern") {
  TempDir dir;
  const std::string pattern = dir.file("*.bin");
  CHECK_THAT(user_error_message([&] { TokenDataset::open(pattern, 256, "data.train"); }),
             strata_catch::StartsWith("data.train: no files match '" + pattern + "'"));
  CHECK_THAT(user_error_message([&] { TokenDataset::open("", 256, "data.val"); }),
             strata_catch::StartsWith("data.val is empty"));
}
