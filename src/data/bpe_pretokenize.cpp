// The character level of the GPT-2 tokenizer: UTF-8 decoding that accepts any bytes, the classes
// of GPT-2's pre-tokenizer pattern (from the generated tables of unicode_classes.cpp), and the
// byte-to-character map of GPT-2's vocabulary files.
#include <algorithm>
#include <array>

#include "data/bpe_internal.h"

namespace strata::bpe_detail {
namespace {

bool in_ranges(const CodePointRange* ranges, size_t count, uint32_t cp) {
  const CodePointRange* end = ranges + count;
  const CodePointRange* r = std::upper_bound(ranges, end, cp, [](uint32_t v, const CodePointRange& x) { return v < x.lo; });
  return r != ranges && cp <= (r - 1)->hi;
}

// Unicode's White_Space property, as \s of the reference's regex engine.
bool is_white_space(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

CharClass char_class(uint32_t cp) {
  if (is_white_space(cp)) return CharClass::Space;
  if (in_ranges(kLetterRanges, kLetterRangeCount, cp)) return CharClass::Letter;
  if (in_ranges(kNumberRanges, kNumberRangeCount, cp)) return CharClass::Number;
  return CharClass::Other;
}

uint32_t next_code_point(std::string_view text, size_t i, size_t* length) {
  *length = 1;
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = byte(0);
  if (c < 0x80) return c;
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return kInvalidCodePoint;  // a continuation byte, C0/C1 (overlong) or F5-FF
  }
  if (i + n > text.size()) return kInvalidCodePoint;
  for (size_t k = 1; k < n; ++k) {
    if (!continuation(byte(k))) return kInvalidCodePoint;
    cp = (cp << 6) | (byte(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kInvalidCodePoint;
  *length = n;
  return cp;
}

uint32_t byte_to_code_point(uint8_t byte) {
  const auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
  if (printable(byte)) return byte;
  uint32_t order = 0;
  for (int b = 0; b < byte; ++b) order += printable(b) ? 0 : 1;
  return 0x100 + order;
}

int code_point_to_byte(uint32_t code_point) {
  static const auto table = [] {
    std::array<int16_t, 0x144> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_code_point(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return t;
  }();
  return code_point < table.size() ? table[code_point] : -1;
}

}  // namespace strata::bpe_detail
