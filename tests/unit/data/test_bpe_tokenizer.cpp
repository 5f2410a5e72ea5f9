// The GPT-2 tokenizer's parts: the pre-tokenizer's splits on cases where GPT-2's pattern is easy
// to get wrong (contractions, the optional space, whitespace before a word, the end of the text),
// the Unicode classes, merges by lowest rank leftmost first (also on long pieces, against a
// plain quadratic loop), any bytes round-tripping, the three file forms and their errors, and
// uint32 shards for a vocabulary over 65536.
#include "catch_compat.h"

#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "data/bpe_internal.h"
#include "data/data.h"
#include "data_test_util.h"

using namespace strata;
using strata::test::TempDir;
using strata::test::user_error_message;

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  bpe_detail::pretokenize(text, [&](size_t offset, size_t length) { out.push_back(text.substr(offset, length)); });
  return out;
}

std::string base64(const std::string& bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += digits[(v >> k) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += std::string{digits[(v >> 18) & 63], digits[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += std::string{digits[(v >> 18) & 63], digits[(v >> 12) & 63], digits[(v >> 6) & 63], '='};
  }
  return out;
}

// A tiktoken rank file: every byte at its own value, then `extra` tokens at ranks 256, 257, ...
// (or at the ranks given).
std::string write_ranks(const TempDir& dir, const std::vector<std::pair<std::string, int>>& extra) {
  const std::string path = dir.file("ranks.tiktoken");
  std::ofstream out(path);
  for (int b = 0; b < 256; ++b) out << base64(std::string(1, static_cast<char>(b))) << " " << b << "\n";
  for (const auto& [bytes, rank] : extra) out << base64(bytes) << " " << rank << "\n";
  return path;
}

// The merges as a plain loop would do them: the lowest-ranked adjacent pair whose join is a
// token, leftmost among equals, until none.
std::vector<int32_t> quadratic_merges(const std::string& piece, const std::map<std::string, int>& ranks) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    int best = -1, best_rank = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && (best < 0 || it->second < best_rank)) best = static_cast<int>(i), best_rank = it->second;
    }
    if (best < 0) break;
    parts[static_cast<size_t>(best)] += parts[static_cast<size_t>(best) + 1];
    parts.erase(parts.begin() + best + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(p.size() == 1 ? static_cast<uint8_t>(p[0]) : ranks.at(p));
  return ids;
}

}  // namespace

TEST_CASE("bpe: the pre-tokenizer splits as GPT-2's pattern does") {
  using V = std::vector<std::string>;
  CHECK(split("Hello world") == V{"Hello", " world"});
  CHECK(split("it's we'll they're I'M don't") == V{"it", "'s", " we", "'ll", " they", "'re", " I", "'", "M", " don", "'t"});
  CHECK(split("  x") == V{" ", " x"});                      // the space next to the word joins it
  CHECK(split("a\n\n b") == V{"a", "\n\n", " b"});          // \s+(?!\S) leaves the last space
  CHECK(split("a \n") == V{"a", " \n"});                    // at the end every space stays together
  CHECK(split("x\ny") == V{"x", "\n", "y"});                // one space before a word: \s+ alone
  CHECK(split("123 4567 3.14") == V{"123", " 4567", " 3", ".", "14"});
  CHECK(split(" !!? ok") == V{" !!?", " ok"});
  CHECK(split("x''s") == V{"x", "''", "s"});                // a contraction only where a piece starts
  CHECK(split("naïve Ελλάδα ٣٤") == V{"naïve", " Ελλάδα", " ٣٤"});
  CHECK(split("a\u3000b") == V{"a", "\u3000", "b"});        // U+3000 is white space
  CHECK(split("e\u0301") == V{"e", "\u0301"});               // a combining mark is neither L nor N
  CHECK(split("\xff\xfe ab\x80") == V{"\xff\xfe", " ab", "\x80"});  // invalid bytes are 'other'
  CHECK(split("").empty());
}

TEST_CASE("bpe: Unicode classes and UTF-8 decoding") {
  using bpe_detail::CharClass;
  CHECK(bpe_detail::char_class(0xE9) == CharClass::Letter);
  CHECK(bpe_detail::char_class(0x4E2D) == CharClass::Letter);   // 中
  CHECK(bpe_detail::char_class(0x0663) == CharClass::Number);   // ٣
  CHECK(bpe_detail::char_class(0x2167) == CharClass::Number);   // Ⅷ (Nl)
  CHECK(bpe_detail::char_class(0x00B2) == CharClass::Number);   // ² (No)
  CHECK(bpe_detail::char_class(0x0085) == CharClass::Space);
  CHECK(bpe_detail::char_class(0x200B) == CharClass::Other);    // zero-width space: not White_Space
  CHECK(bpe_detail::char_class(0x1F600) == CharClass::Other);
  size_t n = 0;
  CHECK(bpe_detail::next_code_point("\xF0\x9F\x98\x80", 0, &n) == 0x1F600);
  CHECK(n == 4);
  for (const char* bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "\x80"}) {
    CHECK(bpe_detail::next_code_point(bad, 0, &n) == bpe_detail::kInvalidCodePoint);
    CHECK(n == 1);
  }
  for (int b = 0; b < 256; ++b) CHECK(bpe_detail::code_point_to_byte(bpe_detail::byte_to_code_point(uint8_t(b))) == b);
  CHECK(bpe_detail::byte_to_code_point(' ') == 0x120);  // GPT-2's 'Ġ'
}

TEST_CASE("bpe: merges by lowest rank, leftmost first, as a plain loop does, on short and long pieces") {
  const TempDir dir;
  const std::vector<std::pair<std::string, int>> extra = {{"aa", 256}, {"aaa", 257}, {"ab", 258}, {"ba", 259},
                                                          {"aab", 260}, {"bab", 261}, {" a", 262}};
  const BpeTokenizer t = BpeTokenizer::load(write_ranks(dir, extra), "test");
  std::map<std::string, int> ranks(extra.begin(), extra.end());
  CHECK(t.encode("aaaa") == std::vector<int32_t>{256, 256});  // (a,a) twice before (aa,a)
  CHECK(t.encode("aab") == std::vector<int32_t>{260});        // a whole-piece token (tiktoken's reading)
  CHECK(t.vocab_size() == 264);
  CHECK(t.end_of_text() == 263);
  std::mt19937 rng(7);
  for (int len : {3, 9, 40, 300, 5000}) {
    std::string piece;
    for (int i = 0; i < len; ++i) piece += "ab"[rng() % 2];
    INFO("length " << len);
    CHECK(t.encode(piece) == quadratic_merges(piece, ranks));
  }
  CHECK(t.encode(std::string(20000, 'a')).size() == 10000);
}

TEST_CASE("bpe: any bytes round-trip, and ids without a token decode to U+FFFD") {
  const TempDir dir;
  const BpeTokenizer t = BpeTokenizer::load(write_ranks(dir, {{"\xE2\x82", 256}, {" t", 257}, {"he", 258}}), "test");
  std::mt19937 rng(11);
  std::vector<std::string> texts = {"the \xE2\x82\xAC sign", "\xC3\x28 \xA0\xA1 \xF0\x28\x8C\xBC", "tabs\t\t\n\r\n  "};
  for (int k = 0; k < 20; ++k) {
    std::string bytes;
    for (int i = 0; i < 2000; ++i) bytes.push_back(static_cast<char>(rng() & 0xFF));
    texts.push_back(bytes);
  }
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = t.encode(text);
    CHECK(t.decode(ids.data(), ids.size()) == text);
  }
  const std::vector<int32_t> unknown = {104, 9999, 105};
  CHECK(t.decode(unknown.data(), unknown.size()) == "h\xEF\xBF\xBDi");
}

TEST_CASE("bpe: vocab.json + merges.txt and tokenizer.json give the merges tokens, and problems name the file") {
  const TempDir dir;
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = bpe_detail::byte_to_code_point(uint8_t(b));
    std::string spelled = cp < 0x80 ? std::string(1, char(cp))
                                    : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    if (spelled == "\"" || spelled == "\\") spelled = "\\" + spelled;
    vocab += "\"" + spelled + "\": " + std::to_string(b) + ", ";
  }
  vocab += "\"ab\": 256, \"abc\": 257, \"bc\": 258, \"<|endoftext|>\": 259}";
  std::ofstream(dir.file("vocab.json")) << vocab;
  std::ofstream(dir.file("merges.txt")) << "#version: 0.2\nb c\na b\nab c\n";
  const BpeTokenizer from_merges = BpeTokenizer::load(dir.path().string(), "data.tokenizer");
  // (b,c) has the lower rank, and (a,bc) is no merge: "abc" stays a + bc although it is a token.
  CHECK(from_merges.encode("abc") == std::vector<int32_t>{'a', 258});
  CHECK(from_merges.encode("abd") == std::vector<int32_t>{256, 'd'});
  CHECK(from_merges.end_of_text() == 259);
  std::ofstream(dir.file("tok.json")) << "{\"added_tokens\": [{\"id\": 259, \"content\": \"<|endoftext|>\"}], "
                                      << "\"model\": {\"type\": \"BPE\", \"vocab\": " << vocab.substr(0, vocab.rfind(", \"<|"))
                                      << "}, \"merges\": [[\"b\", \"c\"], [\"a\", \"b\"], [\"ab\", \"c\"]]}}";
  const BpeTokenizer from_json = BpeTokenizer::load(dir.file("tok.json"), "data.tokenizer");
  CHECK(from_json.encode("abc abd") == from_merges.encode("abc abd"));
  CHECK(from_json.end_of_text() == 259);

  std::ofstream(dir.file("bad.json")) << "{\"model\": {\"type\": \"Unigram\"}}";
  CHECK(user_error_message([&] { BpeTokenizer::load(dir.file("bad.json"), "data.tokenizer"); }) ==
        "data.tokenizer: " + dir.file("bad.json") + ": model type 'Unigram' is not BPE");
  std::ofstream(dir.file("bad.tiktoken")) << "YQ== 0\nnot base64! 1\n";
  CHECK(user_error_message([&] { BpeTokenizer::load(dir.file("bad.tiktoken"), "data.tokenizer"); }) ==
        "data.tokenizer: " + dir.file("bad.tiktoken") + ": line 2 is not 'BASE64 RANK'");
  // A merge at fault is named where it is written: merges.txt's line (counting the #version line),
  // tokenizer.json's model.merges[r].
  std::ofstream(dir.file("merges.txt")) << "#version: 0.2\nb c\na x\n";
  CHECK(user_error_message([&] { BpeTokenizer::load(dir.file("vocab.json"), "data.tokenizer"); }) ==
        "data.tokenizer: " + dir.file("merges.txt") + ": line 3: the merge 'a x' names a token vocab.json lacks");
  std::ofstream(dir.file("tok_bad.json")) << "{\"model\": {\"type\": \"BPE\", \"vocab\": "
                                          << vocab.substr(0, vocab.rfind(", \"<|")) << "}, \"merges\": [\"b c\", \"bc\"]}}";
  CHECK(user_error_message([&] { BpeTokenizer::load(dir.file("tok_bad.json"), "data.tokenizer"); }) ==
        "data.tokenizer: " + dir.file("tok_bad.json") + ": model.merges[1]: 'bc' is not 'a b'");
}

TEST_CASE("bpe: data encode writes uint32 shards for a vocabulary over 65536") {
  const TempDir dir;
  const std::string ranks = write_ranks(dir, {{"hello", 70000}});
  std::ofstream(dir.file("in.txt")) << "hello hello";
  EncodeOptions options;
  options.inputs = {dir.file("in.txt")};
  options.out_dir = dir.file("out");
  options.val_fraction = 0;
  options.tokenizer = ranks;
  const EncodeSummary s = encode_text_files(options);
  CHECK(s.train_tokens == 1 + 1 + 6);  // <|endoftext|>, "hello", " " + "hello" in bytes
  const TokenDataset d = TokenDataset::open(dir.file("out/train_*.bin"), 70002, "data.train");
  CHECK(d.shards()[0].token_bytes == 4);
  std::vector<int32_t> tokens(8);
  d.read(0, 8, tokens.data());
  CHECK(tokens == std::vector<int32_t>{70001, 70000, ' ', 'h', 'e', 'l', 'l', 'o'});
}

TEST_CASE("bpe: a tokenizer never sees another's cached pieces, even at a reused address") {
  const TempDir dir;
  for (int round = 0; round < 4; ++round) {
    {
      const BpeTokenizer merging = BpeTokenizer::load(write_ranks(dir, {{"ab", 256}}), "test");
      CHECK(merging.encode("xab ab") == std::vector<int32_t>{'x', 256, ' ', 256});
    }
    const BpeTokenizer plain = BpeTokenizer::load(write_ranks(dir, {{"zz", 256}}), "test");
    CHECK(plain.encode("xab ab") == std::vector<int32_t>{'x', 'a', 'b', ' ', 'a', 'b'});
  }
}
