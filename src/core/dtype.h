// Element types and the scalar conversions between them. bf16 rounds to nearest even;
// fp16 follows IEEE binary16 with round-to-nearest-even, subnormals and infinities.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace strata {

enum class DType : uint8_t { F32, BF16, F16, I32, U16 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);           // "F32", "BF16", ... (safetensors names)
bool dtype_from_name(const std::string& name, DType* out);

inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
inline float bf16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}
uint16_t float_to_fp16(float value);
float fp16_to_float(uint16_t value);

// Converts n elements between any two float types (F32, BF16, F16).
void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace strata
