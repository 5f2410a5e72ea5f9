// Scalar and bulk conversions between strata's element types.
#include "core/dtype.h"

#include <stdexcept>

namespace strata {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::U16: return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::U16: return "U16";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out) {
  static const DType all[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::U16};
  for (DType d : all) {
    if (name == dtype_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

uint16_t float_to_fp16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow → inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // below half the smallest
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp) ... aligns to 2^-24 units
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 113;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

void convert_elements(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  auto load = [&](size_t i) -> float {
    switch (src_type) {
      case DType::F32: return static_cast<const float*>(src)[i];
      case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(src)[i]);
      case DType::F16: return fp16_to_float(static_cast<const uint16_t*>(src)[i]);
      default: throw std::logic_error("convert_elements: source is not a float type");
    }
  };
  if (src_type == dst_type) {
    std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float v = load(i);
    switch (dst_type) {
      case DType::F32: static_cast<float*>(dst)[i] = v; break;
      case DType::BF16: static_cast<uint16_t*>(dst)[i] = float_to_bf16(v); break;
      case DType::F16: static_cast<uint16_t*>(dst)[i] = float_to_fp16(v); break;
      default: throw std::logic_error("convert_elements: destination is not a float type");
    }
  }
}

}  // namespace strata
