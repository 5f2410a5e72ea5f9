// Checksum64, the per-file checksum of checkpoints, and checksum_file. Each lane absorbs one
// 8-byte word per 32-byte stripe with an invertible step (multiply by an odd constant, add,
// rotate, multiply), so a change in one word always survives to the digest.
#include <algorithm>
#include <cstring>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"

namespace strata {
namespace {

constexpr uint64_t kMulWord = 0x9e3779b97f4a7c15ull;  // odd: multiplication is invertible
constexpr uint64_t kMulLane = 0xbf58476d1ce4e5b9ull;
constexpr uint64_t kMulFinal = 0x94d049bb133111ebull;
constexpr uint64_t kMulByte = 0x00000100000001b3ull;  // per-byte multiplier for the tail

inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
// Checkpoints are written and read on little-endian hosts only (safetensors data is too).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "strata assumes a little-endian host");
inline uint64_t load_le64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t avalanche(uint64_t x) {  // bijective finaliser
  x ^= x >> 30;
  x *= kMulLane;
  x ^= x >> 27;
  x *= kMulFinal;
  x ^= x >> 31;
  return x;
}
inline void absorb_stripe(uint64_t* lanes, const unsigned char* p) {
  for (int l = 0; l < 4; ++l) lanes[l] = rotl64(lanes[l] + load_le64(p + 8 * l) * kMulWord, 31) * kMulLane;
}

}  // namespace

Checksum64::Checksum64() {
  for (int l = 0; l < 4; ++l) lanes_[l] = kMulFinal * static_cast<uint64_t>(2 * l + 1);
}

void Checksum64::update(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (pending_size_ > 0) {
    const size_t take = std::min(n, sizeof(pending_) - pending_size_);
    std::memcpy(pending_ + pending_size_, p, take);
    pending_size_ += take;
    p += take;
    n -= take;
    if (pending_size_ < sizeof(pending_)) return;
    absorb_stripe(lanes_, pending_);
    pending_size_ = 0;
  }
  while (n >= 32) {
    absorb_stripe(lanes_, p);
    p += 32;
    n -= 32;
  }
  std::memcpy(pending_, p, n);
  pending_size_ = n;
}

uint64_t Checksum64::digest() const {
  uint64_t h = total_ * kMulWord;
  for (int l = 0; l < 4; ++l) h = (h ^ avalanche(lanes_[l])) * kMulLane + static_cast<uint64_t>(l);
  for (size_t i = 0; i < pending_size_; ++i) h = (h ^ pending_[i]) * kMulByte;
  return avalanche(h);
}

uint64_t checksum_file(const std::string& path) {
  ckpt::FileHandle file = ckpt::FileHandle::open_read(path);
  const uint64_t size = file.size();
  std::vector<unsigned char> buffer(std::min<uint64_t>(size, 8u << 20));
  Checksum64 sum;
  for (uint64_t at = 0; at < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - at));
    file.pread_all(buffer.data(), n, at);
    sum.update(buffer.data(), n);
    at += n;
  }
  return sum.digest();
}

}  // namespace strata
