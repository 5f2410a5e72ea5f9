// Byte tokenizer and the text encoder: lossless round trips, newline joins between files,
// the val split taken from the tail, shard size limits, and clear errors for bad input.
#include "catch_compat.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/log.h"
#include "data/data.h"
#include "data_test_util.h"

using namespace strata;
using strata::test::TempDir;
using strata::test::user_error_message;

namespace {
// The encoder reports progress with log_info; keep the test output to failures.
struct QuietLogs {
  LogLevel saved = log_level();
  QuietLogs() { set_log_level(LogLevel::Warn); }
  ~QuietLogs() { set_log_level(saved); }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string decode_dataset(const std::string& pattern) {
  const TokenDataset dataset = TokenDataset::open(pattern, kByteVocabSize, "data.train");
  std::vector<int32_t> tokens(static_cast<size_t>(dataset.num_tokens()));
  dataset.read(0, dataset.num_tokens(), tokens.data());
  return byte_decode(tokens.data(), tokens.size());
}
}  // namespace

TEST_CASE("byte tokenizer round-trips any bytes, including invalid UTF-8") {
  const std::string text = std::string("In the beginning \xC3\xA9 \xFF\xFE\x80 end\n") + '\0' + "x";
  const std::vector<int32_t> tokens = byte_encode(text);
  REQUIRE(tokens.size() == text.size());
  CHECK(tokens[0] == 'I');
  CHECK(tokens[17] == 0xC3);
  CHECK(tokens[20] == 0xFF);
  CHECK(byte_decode(tokens.data(), tokens.size()) == text);
  // Ids beyond the byte range (padded vocab) become U+FFFD instead of garbage bytes.
  const std::vector<int32_t> odd = {'a', 256, -1, 'b'};
  CHECK(byte_decode(odd.data(), odd.size()) == "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");
}

TEST_CASE("encoder output decodes to the newline-joined inputs, val is the tail") {
  QuietLogs quiet;
  TempDir dir;
  std::string first, second;
  for (int i = 0; i < 300; ++i) first += "Verse " + std::to_string(i) + ": and it was so.\n";
  for (int i = 0; i < 200; ++i) second += "caf\xC3\xA9 " + std::to_string(i) + "\n";
  write_text(dir.file("a.txt"), first);
  write_text(dir.file("b.txt"), second);
  const std::string joined = first + "\n" + second;

  EncodeOptions options;
  options.inputs = {dir.file("a.txt"), dir.file("b.txt")};
  options.out_dir = dir.file("out/nested");  // created on demand
  options.val_fraction = 0.1;
  options.shard_tokens = 4000;
  const EncodeSummary summary = encode_text_files(options);

  const auto total = static_cast<int64_t>(joined.size());
  CHECK(summary.input_bytes == total);
  CHECK(summary.val_tokens == std::llround(total * 0.1));
  CHECK(summary.train_tokens + summary.val_tokens == total);
  const int64_t expected_train_shards = (summary.train_tokens + 3999) / 4000;
  REQUIRE(static_cast<int64_t>(summary.train_shards.size()) == expected_train_shards);
  REQUIRE(expected_train_shards >= 2);
  CHECK(summary.train_shards[0] == dir.file("out/nested/train_000000.bin"));
  CHECK(summary.train_shards[1] == dir.file("out/nested/train_000001.bin"));
  REQUIRE(summary.val_shards == std::vector<std::string>{dir.file("out/nested/val_000000.bin")});

  const TokenDataset train = TokenDataset::open(dir.file("out/nested/train_*.bin"), 256, "data.train");
  for (size_t s = 0; s + 1 < train.shards().size(); ++s) CHECK(train.shards()[s].tokens == 4000);
  CHECK(train.shards()[0].token_bytes == 2);

  const std::string train_text = decode_dataset(dir.file("out/nested/train_*.bin"));
  const std::string val_text = decode_dataset(dir.file("out/nested/val_*.bin"));
  CHECK(train_text + val_text == joined);
  CHECK(val_text == joined.substr(static_cast<size_t>(summary.train_tokens)));
  CHECK(val_text.size() == static_cast<size_t>(summary.val_tokens));
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("out/nested"))) {
    CHECK(entry.path().extension() == ".bin");  // no temporary files left behind
  }
}

TEST_CASE("encoder without val, a rerun removes stale shards of a larger earlier run") {
  QuietLogs quiet;
  TempDir dir;
  write_text(dir.file("big.txt"), std::string(5000, 'a'));
  write_text(dir.file("small.txt"), "small corpus");
  EncodeOptions options;
  options.inputs = {dir.file("big.txt")};
  options.out_dir = dir.file("out");
  options.shard_tokens = 1000;
  REQUIRE(encode_text_files(options).train_shards.size() == 5);
  std::ofstream(dir.file("out/notes.txt")) << "kept";
  std::ofstream(dir.file("out/train_000001.bin.bak")) << "kept";

  options.inputs = {dir.file("small.txt")};
  options.val_fraction = 0;
  const EncodeSummary summary = encode_text_files(options);
  CHECK(summary.val_tokens == 0);
  CHECK(summary.val_shards.empty());
  CHECK(summary.train_shards.size() == 1);
  CHECK(decode_dataset(dir.file("out/*.bin")) == "small corpus");  // only this run's shards
  CHECK(std::filesystem::exists(dir.file("out/notes.txt")));       // other files untouched
  CHECK(std::filesystem::exists(dir.file("out/train_000001.bin.bak")));
  CHECK_FALSE(std::filesystem::exists(dir.file("out/train_000001.bin")));

  // A file named like a shard that has no shard header is the user's: kept, and said.
  std::ofstream(dir.file("out/train_000009.bin")) << "hi";
  CHECK_THAT(user_error_message([&] { encode_text_files(options); }),
             strata_catch::Contains("train_000009.bin is named like a token shard but is not one"));
  CHECK(std::filesystem::exists(dir.file("out/train_000009.bin")));
}

TEST_CASE("encoder errors name the problem") {
  QuietLogs quiet;
  TempDir dir;
  write_text(dir.file("ok.txt"), "text");
  EncodeOptions options;
  options.out_dir = dir.file("out");
  options.inputs = {dir.file("ok.txt"), dir.file("missing.txt")};
  CHECK_THAT(user_error_message([&] { encode_text_files(options); }),
             strata_catch::Contains("'" + dir.file("missing.txt") + "' does not exist"));
  CHECK_FALSE(std::filesystem::exists(dir.file("out")));  // nothing written on failure

  options.inputs = {dir.file("ok.txt")};
  options.val_fraction = 0.7;
  CHECK_THAT(user_error_message([&] { encode_text_files(options); }), strata_catch::Contains("val_fraction"));
  options.val_fraction = 0.01;
  options.shard_tokens = 0;
  CHECK_THAT(user_error_message([&] { encode_text_files(options); }), strata_catch::Contains("shard_tokens"));

  write_text(dir.file("empty.txt"), "");
  options.shard_tokens = 10;
  options.inputs = {dir.file("empty.txt")};
  CHECK_THAT(user_error_message([&] { encode_text_files(options); }), strata_catch::Contains("empty"));
}

TEST_CASE("sample text is printed without the control codes a terminal would obey") {
  CHECK(printable_text("plain text\n\tindented") == "plain text\n\tindented");
  // A backslash the model wrote is doubled: "\x10" in the output is always an escape.
  CHECK(printable_text("a\\x10\x10") == "a\\\\x10\\x10");
  CHECK(printable_text("\x1b[2J\a\rend\x7f") == "\\x1b[2J\\x07\\x0dend\\x7f");
  CHECK(printable_text("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
  CHECK(printable_text("\x9b" "1m \xc2\x9b \xff") == "\\x9b1m \\u009b \\xff");  // CSI as a byte and as U+009B
  CHECK(printable_text("\xc0\xaf \xed\xa0\x80 \xe6\x97") == "\\xc0\\xaf \\xed\\xa0\\x80 \\xe6\\x97");
}
