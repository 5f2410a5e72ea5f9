// Private to src/data: the pieces of the GPT-2 byte-level BPE tokenizer — UTF-8 decoding that
// never fails, the Unicode classes of the pre-tokenizer pattern, the pre-tokenizer itself, and
// the byte-to-character map of GPT-2's vocabulary files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::bpe_detail {

struct CodePointRange {
  uint32_t lo, hi;
};
extern const CodePointRange kLetterRanges[];  // \p{L}, sorted (unicode_classes.cpp, generated)
extern const size_t kLetterRangeCount;
extern const CodePointRange kNumberRanges[];  // \p{N}
extern const size_t kNumberRangeCount;

// The classes GPT-2's pattern tells apart. A byte that is not part of valid UTF-8 is Other, as a
// character outside \s, \p{L} and \p{N} would be.
enum class CharClass : uint8_t { Letter, Number, Space, Other };
CharClass char_class(uint32_t code_point);

// The code point at text[i] and its length in bytes (1 to 4). Invalid UTF-8 (a stray
// continuation byte, an overlong or truncated sequence, a surrogate, > U+10FFFF) is one byte
// long and yields kInvalidCodePoint, so every byte string splits into pieces that join back to it.
constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFF;
uint32_t next_code_point(std::string_view text, size_t i, size_t* length);

// Splits text as GPT-2's pattern does, alternatives tried in order at each position:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// calling piece(offset, length) for each match, left to right; the pieces cover the text.
template <typename Fn>
void pretokenize(std::string_view text, Fn&& piece);

// GPT-2's vocabulary files spell each byte as one printable character: bytes 0x21-0x7E,
// 0xA1-0xAC and 0xAE-0xFF as themselves, the other 68 as U+0100 + their order among them.
uint32_t byte_to_code_point(uint8_t byte);
// The byte a vocabulary character stands for, or -1 when it stands for none.
int code_point_to_byte(uint32_t code_point);

// ---- pretokenize ----------------------------------------------------------------------------

struct Scanner {
  std::string_view text;
  // Class and length of the character at i (i < text.size()).
  CharClass at(size_t i, size_t* length) const {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      *length = 1;
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::Letter;
      if (c >= '0' && c <= '9') return CharClass::Number;
      if (c == ' ' || (c >= 9 && c <= 13)) return CharClass::Space;
      return CharClass::Other;
    }
    const uint32_t cp = next_code_point(text, i, length);
    return cp == kInvalidCodePoint ? CharClass::Other : char_class(cp);
  }
  // End of the run of characters of class k starting at i.
  size_t run(size_t i, CharClass k) const {
    size_t n = 0;
    while (i < text.size() && at(i, &n) == k) i += n;
    return i;
  }
  // End of the run of characters that are none of letter, number, space.
  size_t other_run(size_t i) const { return run(i, CharClass::Other); }
  // Length of the contraction at i ('s 't 're 've 'm 'll 'd, lower case as in GPT-2), or 0.
  size_t contraction(size_t i) const {
    if (text[i] != '\'' || i + 1 >= text.size()) return 0;
    const char a = text[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= text.size()) return 0;
    const char b = text[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }
  // Length of the piece that starts at i.
  size_t piece(size_t i) const {
    if (const size_t n = contraction(i)) return n;
    size_t n = 0;
    CharClass k = at(i, &n);
    size_t body = i;
    if (text[i] == ' ' && i + 1 < text.size()) {  // ' ?' before a letter, number or other run
      size_t m = 0;
      const CharClass next = at(i + 1, &m);
      if (next != CharClass::Space) {
        k = next;
        body = i + 1;
      }
    }
    if (k != CharClass::Space) return run(body, k) - i;
    // \s+(?!\S): the whitespace run, less its last character when a non-space follows it, unless
    // that leaves nothing (then \s+ takes the single character).
    const size_t end = run(i, CharClass::Space);
    if (end == text.size()) return end - i;
    size_t last = i, step = 0;
    for (size_t j = i; j < end; j += step) {
      at(j, &step);
      last = j;
    }
    return last > i ? last - i : end - i;
  }
};

template <typename Fn>
void pretokenize(std::string_view text, Fn&& piece) {
  const Scanner s{text};
  for (size_t i = 0; i < text.size();) {
    const size_t n = s.piece(i);
    piece(i, n);
    i += n;
  }
}

}  // namespace strata::bpe_detail
