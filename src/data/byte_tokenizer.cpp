// Byte-level tokenizer (vocab 256): lossless for any input, needs no vocabulary files, and is
// what the quickstart corpus is trained with.
#include <string>

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

}  // namespace strata
