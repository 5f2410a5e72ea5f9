// GPT-2 byte-level BPE: the vocabulary and merges read from HuggingFace's or tiktoken's files,
// and encoding as the reference does — the text split by GPT-2's pattern, each piece's bytes
// merged pair by pair, always the adjacent pair of lowest rank, leftmost first.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <queue>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "data/bpe_internal.h"
#include "data/data.h"

namespace strata {

using bpe_detail::code_point_to_byte;
using bpe_detail::next_code_point;

struct BpeTokenizer::Tables {
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  std::string source;
  // Tells the tables apart in the per-thread piece caches (an address can be reused).
  uint64_t serial = next_serial();
  std::vector<std::string> bytes_of;              // id -> its bytes ("" for an unused id)
  std::unordered_map<std::string, int32_t> id_of;  // the bytes of every mergeable token -> id
  std::array<int32_t, 256> byte_id{};
  std::unordered_map<uint64_t, Merge> merges;  // (left id, right id) -> the merge
  int32_t end_of_text = -1;
  // A piece that is a token encodes as that token without merging: tiktoken's reading of a rank
  // file, and HuggingFace's with ignore_merges. Merges alone can end elsewhere.
  bool whole_piece_first = false;

  static uint64_t next_serial() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
  }
  const Merge* merge(int32_t a, int32_t b) const {
    const auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  }
  void add_merge(int32_t a, int32_t b, int32_t rank, int32_t id) {
    merges.emplace((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b), Merge{rank, id});
  }
};

namespace {

namespace fs = std::filesystem;
using Tables = BpeTokenizer::Tables;

[[noreturn]] void refuse(const std::string& key, const std::string& path, const std::string& why) {
  throw UserError(key + ": " + path + ": " + why);
}

std::string read_file(const std::string& key, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    refuse(key, path, fs::exists(path, ec) ? std::string("cannot be read: ") + std::strerror(errno) : "does not exist");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A vocabulary token as GPT-2's files spell it (one character per byte) -> its bytes.
bool spelled_bytes(const std::string& token, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    size_t n = 0;
    const int b = code_point_to_byte(next_code_point(token, i, &n));
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
    i += n;
  }
  return !bytes.empty();
}

void set_token(Tables& t, int32_t id, std::string bytes, bool mergeable) {
  if (id < 0 || id > (1 << 30)) throw std::out_of_range("token id " + std::to_string(id));
  if (static_cast<size_t>(id) >= t.bytes_of.size()) t.bytes_of.resize(static_cast<size_t>(id) + 1);
  if (bytes == "<|endoftext|>") t.end_of_text = id;
  if (mergeable) t.id_of.emplace(bytes, id);
  t.bytes_of[static_cast<size_t>(id)] = std::move(bytes);
}

// Every single byte must be a token: byte-level BPE starts from them.
void find_byte_ids(Tables& t, const std::string& key, const std::string& path) {
  for (int b = 0; b < 256; ++b) {
    const auto it = t.id_of.find(std::string(1, static_cast<char>(b)));
    if (it == t.id_of.end())
      refuse(key, path, "not a byte-level BPE vocabulary: byte " + std::to_string(b) + " has no token");
    t.byte_id[static_cast<size_t>(b)] = it->second;
  }
}

// Where merge r is written: a line of merges.txt (its number in merge_lines), or model.merges[r]
// of tokenizer.json (merge_lines empty).
struct MergeSource {
  std::string path;
  std::vector<size_t> merge_lines;
  std::string where(size_t r) const {
    return merge_lines.empty() ? "model.merges[" + std::to_string(r) + "]" : "line " + std::to_string(merge_lines[r]);
  }
};

// HuggingFace's form: vocab {spelled token: id} and merges "left right" (or [left, right]) by rank.
void read_hf_model(Tables& t, const nlohmann::json& vocab, const nlohmann::json& merges, const std::string& key,
                   const std::string& path, const MergeSource& source) {
  if (!vocab.is_object() || !merges.is_array()) refuse(key, path, "no vocab map and merges list");
  std::string bytes;
  for (const auto& [token, id] : vocab.items()) {
    if (!spelled_bytes(token, bytes)) refuse(key, path, "token '" + token + "' is not in GPT-2's byte-level spelling");
    set_token(t, id.get<int32_t>(), bytes, true);
  }
  find_byte_ids(t, key, path);
  std::string left, right;
  for (size_t r = 0; r < merges.size(); ++r) {
    const nlohmann::json& m = merges[r];
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos) refuse(key, source.path, source.where(r) + ": '" + line + "' is not 'a b'");
      left = line.substr(0, space), right = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      refuse(key, source.path, source.where(r) + ": neither 'a b' nor [a, b]");
    }
    std::string a, b;
    const auto id = [&](const std::string& bytes_of_token) {
      const auto it = t.id_of.find(bytes_of_token);
      if (it == t.id_of.end())
        refuse(key, source.path, source.where(r) + ": the merge '" + left + " " + right + "' names a token " +
                                     fs::path(path).filename().string() + " lacks");
      return it->second;
    };
    if (!spelled_bytes(left, a) || !spelled_bytes(right, b))
      refuse(key, source.path, source.where(r) + ": not in GPT-2's byte-level spelling");
    t.add_merge(id(a), id(b), static_cast<int32_t>(r), id(a + b));
  }
}

void read_tokenizer_json(Tables& t, const std::string& key, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(key, path));
    const nlohmann::json& model = j.at("model");
    if (model.value("type", std::string("BPE")) != "BPE")
      refuse(key, path, "model type '" + model.value("type", std::string()) + "' is not BPE");
    read_hf_model(t, model.at("vocab"), model.at("merges"), key, path, MergeSource{path, {}});
    t.whole_piece_first = model.value("ignore_merges", false);
    for (const auto& added : j.value("added_tokens", nlohmann::json::array()))
      set_token(t, added.at("id").get<int32_t>(), added.at("content").get<std::string>(), false);
  } catch (const nlohmann::json::exception& e) {
    refuse(key, path, std::string("not a HuggingFace tokenizer.json: ") + e.what());
  }
}

void read_vocab_and_merges(Tables& t, const std::string& key, const std::string& vocab_path) {
  const std::string merges_path = (fs::path(vocab_path).parent_path() / "merges.txt").string();
  nlohmann::json merges = nlohmann::json::array();
  MergeSource source{merges_path, {}};
  std::istringstream lines(read_file(key, merges_path));
  size_t number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    merges.push_back(line);
    source.merge_lines.push_back(number);
  }
  try {
    read_hf_model(t, nlohmann::json::parse(read_file(key, vocab_path)), merges, key, vocab_path, source);
  } catch (const nlohmann::json::exception& e) {
    refuse(key, vocab_path, std::string("not a vocab.json: ") + e.what());
  }
}

bool base64_decode(const std::string& text, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    int v = -1;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    if (c >= '0' && c <= '9') v = c - '0' + 52;
    if (c == '+') v = 62;
    if (c == '/') v = 63;
    if (c == '=') break;
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return !out.empty();
}

// tiktoken's form: "BASE64 RANK" per line, the rank being the id; a pair merges when the join of
// its bytes is a token, at that token's rank. <|endoftext|> takes the id after the last rank.
void read_tiktoken(Tables& t, const std::string& key, const std::string& path) {
  std::istringstream lines(read_file(key, path));
  std::string line, bytes;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string encoded;
    int64_t rank = -1;
    if (!(fields >> encoded >> rank) || rank < 0 || rank > (1 << 30) || !base64_decode(encoded, bytes))
      refuse(key, path, "line " + std::to_string(n) + " is not 'BASE64 RANK'");
    set_token(t, static_cast<int32_t>(rank), bytes, true);
  }
  find_byte_ids(t, key, path);
  t.whole_piece_first = true;
  for (const auto& [whole, id] : t.id_of) {
    for (size_t cut = 1; cut < whole.size(); ++cut) {
      const auto a = t.id_of.find(whole.substr(0, cut)), b = t.id_of.find(whole.substr(cut));
      if (a != t.id_of.end() && b != t.id_of.end()) t.add_merge(a->second, b->second, id, id);
    }
  }
  if (t.end_of_text < 0) set_token(t, static_cast<int32_t>(t.bytes_of.size()), "<|endoftext|>", false);
}

// The merges of one piece: the adjacent pair of lowest rank, leftmost among equals, until none is
// left. A heap keeps long pieces (a long run of one character) at n log n.
void merge_piece(const Tables& t, std::string_view piece, std::vector<int32_t>& out) {
  struct Part {
    int32_t id;
    int prev, next;
  };
  const int n = static_cast<int>(piece.size());
  std::vector<Part> parts(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    parts[static_cast<size_t>(i)] = {t.byte_id[static_cast<unsigned char>(piece[static_cast<size_t>(i)])], i - 1,
                                     i + 1 < n ? i + 1 : -1};
  using Candidate = std::tuple<int32_t, int, int32_t, int32_t>;  // rank, left part, left id, right id
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto offer = [&](int left) {
    if (left < 0) return;
    const int right = parts[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int32_t a = parts[static_cast<size_t>(left)].id, b = parts[static_cast<size_t>(right)].id;
    if (const Tables::Merge* m = t.merge(a, b)) heap.emplace(m->rank, left, a, b);
  };
  for (int i = 0; i + 1 < n; ++i) offer(i);
  while (!heap.empty()) {
    const auto [rank, left, a, b] = heap.top();
    heap.pop();
    Part& l = parts[static_cast<size_t>(left)];
    // Stale: the left part was merged away or changed, or its right neighbour changed.
    if (l.id != a || l.next < 0 || parts[static_cast<size_t>(l.next)].id != b) continue;
    if (l.prev == -2) continue;
    Part& r = parts[static_cast<size_t>(l.next)];
    l.id = t.merge(a, b)->id;
    l.next = r.next;
    if (r.next >= 0) parts[static_cast<size_t>(r.next)].prev = left;
    r.prev = -2;  // merged away
    r.id = -1;
    offer(l.prev);
    offer(left);
  }
  for (int i = 0; i >= 0 && n > 0; i = parts[static_cast<size_t>(i)].next) out.push_back(parts[static_cast<size_t>(i)].id);
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const std::string& path, const std::string& key) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    for (const char* name : {"tokenizer.json", "vocab.json"}) {
      if (fs::exists(fs::path(path) / name, ec)) {
        file = (fs::path(path) / name).string();
        break;
      }
    }
    if (file == path) refuse(key, path, "a folder without tokenizer.json or vocab.json (with merges.txt)");
  } else if (!fs::exists(path, ec)) {
    refuse(key, path, "does not exist (give a tokenizer.json, a vocab.json with merges.txt beside it, a folder "
                      "holding them, or a tiktoken rank file such as gpt2.tiktoken)");
  }
  auto t = std::make_shared<Tables>();
  const std::string name = fs::path(file).filename().string();
  if (name == "vocab.json") {
    read_vocab_and_merges(*t, key, file);
    t->source = "vocab.json + merges.txt in " + fs::path(file).parent_path().string();
  } else if (fs::path(file).extension() == ".json") {
    read_tokenizer_json(*t, key, file);
    t->source = file;
  } else {
    read_tiktoken(*t, key, file);
    t->source = file + " (tiktoken ranks)";
  }
  BpeTokenizer tokenizer;
  tokenizer.tables_ = std::move(t);
  return tokenizer;
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const Tables& t = *tables_;
  // Pieces repeat (words); each thread remembers the recent ones of this vocabulary.
  thread_local uint64_t cache_owner = 0;
  thread_local std::unordered_map<std::string, std::vector<int32_t>> cache;
  if (cache_owner != t.serial || cache.size() > (1u << 16)) {
    cache.clear();
    cache_owner = t.serial;
  }
  std::string key;
  bpe_detail::pretokenize(text, [&](size_t offset, size_t length) {
    const std::string_view piece = text.substr(offset, length);
    key.assign(piece.data(), piece.size());
    if (t.whole_piece_first) {
      if (const auto whole = t.id_of.find(key); whole != t.id_of.end()) {
        out.push_back(whole->second);
        return;
      }
    }
    const auto hit = cache.find(key);
    if (hit != cache.end()) {
      out.insert(out.end(), hit->second.begin(), hit->second.end());
      return;
    }
    std::vector<int32_t> ids;
    merge_piece(t, piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    cache.emplace(key, std::move(ids));
  });
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode(text, out);
  return out;
}

std::string BpeTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id >= 0 && static_cast<size_t>(id) < tables_->bytes_of.size() && !tables_->bytes_of[static_cast<size_t>(id)].empty()) {
      out += tables_->bytes_of[static_cast<size_t>(id)];
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD: an id with no token (a padded vocabulary's)
    }
  }
  return out;
}

int BpeTokenizer::vocab_size() const { return static_cast<int>(tables_->bytes_of.size()); }
int32_t BpeTokenizer::end_of_text() const { return tables_->end_of_text; }
const std::string& BpeTokenizer::source() const { return tables_->source; }

}  // namespace strata
