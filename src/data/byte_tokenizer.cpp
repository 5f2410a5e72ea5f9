// Byte-level tokenizer (vocab 256): lossless for any input, needs no vocabulary files, and is
// what the quickstart corpus is trained with.
#include <fmt/format.h>

#include <string>

#include "data/bpe_internal.h"
#include "data/data.h"

namespace strata {

std::vector<int32_t> byte_encode(std::string_view text) {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string byte_decode(const int32_t* tokens, size_t n) {
  static constexpr char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
  std::string text;
  text.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] >= 0 && tokens[i] < kByteVocabSize) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(tokens[i])));
    } else {
      text.append(kReplacementChar);
    }
  }
  return text;
}

std::string printable_text(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    const uint32_t code = bpe_detail::next_code_point(text, i, &n);
    const bool control = code < 0x20 ? code != '\n' && code != '\t' : code >= 0x7F && code < 0xA0;
    if (code == bpe_detail::kInvalidCodePoint || (control && code < 0x80)) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i]));
    } else if (control) {
      out += fmt::format("\\u{:04x}", code);  // C1 control: U+0080-U+009F
    } else if (code == '\\') {
      out += "\\\\";  // doubled, so that a backslash the model wrote never reads as an escape
    } else {
      out.append(text, i, n);
    }
    i += n;
  }
  return out;
}

}  // namespace strata
