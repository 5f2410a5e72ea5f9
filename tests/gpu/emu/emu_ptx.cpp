// The PTX instructions of the mma.sync kernels on the CPU emulator (emulator.h): ldmatrix and
// mma.sync m16n8k16, each a warp_gather of the lanes' operands followed by the per-lane layouts the PTX
// ISA tables give, so a kernel's lane mapping is checked exactly rather than assumed; and ex2.approx.
#include <cmath>
#include <cstring>
#include <string>

#include "emulator.h"

namespace strata::emu {
namespace {

constexpr unsigned kLanes = 32;
constexpr int kRowBytes = 16;  // one ldmatrix row: 8 elements of 16 bits

const char* ldmatrix_name(int matrices, bool trans) {
  static const char* const names[2][3] = {
      {"ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
       "ldmatrix.sync.aligned.m8n8.x4.shared.b16"},
      {"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
       "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"}};
  return names[trans ? 1 : 0][matrices == 1 ? 0 : matrices == 2 ? 1 : 2];
}

uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

float f16_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof(h));
  return static_cast<float>(h);
}

// Element `half` (0: the low 16 bits, the lower-indexed element) of a packed register.
uint16_t half_of(uint32_t reg, int half) { return static_cast<uint16_t>(reg >> (16 * half)); }

struct MmaOperands {
  uint32_t a[4];
  uint32_t b[2];
};

}  // namespace

void ldmatrix(int matrices, bool trans, const void* row, uint32_t* registers) {
  if (matrices != 1 && matrices != 2 && matrices != 4) fail("ldmatrix of " + std::to_string(matrices) + " matrices");
  const char* name = ldmatrix_name(matrices, trans);
  const unsigned lane = lane_index();
  // Only lanes below 8 · matrices supply row addresses (sm_80+); they are checked by the lane
  // that gives them, so the report names it.
  if (lane < 8u * static_cast<unsigned>(matrices)) {
    if (reinterpret_cast<uintptr_t>(row) % kRowBytes != 0)
      fail(std::string(name) + ": row address of lane " + std::to_string(lane) + " not 16-byte aligned");
    if (!in_shared_memory(row, kRowBytes))
      fail(std::string(name) + ": row address of lane " + std::to_string(lane) + " not in shared memory");
  }
  warp_gather(name, &row, sizeof(row), nullptr);
  // The rows as the warp loads them at once (32 rows of 16 bytes), read by the first lane to resume.
  bool capture = false;
  unsigned char* loaded = warp_snapshot(&capture);
  if (capture) {
    const unsigned char* rows[kLanes];
    warp_postings(rows, sizeof(rows[0]));
    for (int r = 0; r < 8 * matrices; ++r) std::memcpy(loaded + r * kRowBytes, rows[r], kRowBytes);
  }
  const unsigned quad = lane / 4, pair = 2 * (lane % 4);
  for (int i = 0; i < matrices; ++i) {
    const unsigned char* m = loaded + 8 * i * kRowBytes;  // the 8 rows of matrix i
    if (!trans) {
      // Row l / 4, columns 2(l % 4) and 2(l % 4) + 1: one 32-bit word of that row.
      std::memcpy(&registers[i], m + quad * kRowBytes + 2 * pair, sizeof(uint32_t));
    } else {
      // Column l / 4 of rows 2(l % 4) (low half) and 2(l % 4) + 1 (high half).
      const uint32_t lo = load_u16(m + pair * kRowBytes + 2 * quad);
      const uint32_t hi = load_u16(m + (pair + 1) * kRowBytes + 2 * quad);
      registers[i] = lo | hi << 16;
    }
  }
}

void mma_m16n8k16(MmaInput input, float* d, const uint32_t* a, const uint32_t* b, const float* c) {
  const bool bf16 = input == MmaInput::BF16;
  const char* name = bf16 ? "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
                          : "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
  MmaOperands mine;
  std::memcpy(mine.a, a, sizeof(mine.a));
  std::memcpy(mine.b, b, sizeof(mine.b));
  const float accumulator[4] = {c[0], c[1], c[2], c[3]};  // d may alias c
  warp_gather(name, &mine, sizeof(mine), nullptr);

  // The whole of A (16×16) and B (16×8) from the lanes' fragments, per the ISA's tables:
  // groupID g = lane / 4, t = lane % 4; a register packs two elements, the lower-indexed low.
  // The first lane to resume decodes them into the warp's snapshot; the others read it there.
  bool capture = false;
  unsigned char* decoded = warp_snapshot(&capture);
  static_assert(sizeof(float) * (16 * 16 + 16 * 8) <= kWarpSnapshotBytes, "A and B fit the warp's snapshot");
  float(&A)[16][16] = *reinterpret_cast<float(*)[16][16]>(decoded);
  float(&B)[16][8] = *reinterpret_cast<float(*)[16][8]>(decoded + sizeof(A));
  MmaOperands lanes[kLanes];
  if (capture) warp_postings(lanes, sizeof(MmaOperands));
  for (unsigned l = 0; capture && l < kLanes; ++l) {
    const int g = static_cast<int>(l / 4), t = static_cast<int>(l % 4);
    for (int i = 0; i < 8; ++i) {  // a_i: rows g (a0, a1, a4, a5) or g + 8; columns 2t + (i & 1) (+ 8 for i ≥ 4)
      const uint16_t bits = half_of(lanes[l].a[i / 2], i & 1);
      const int row = g + 8 * ((i / 2) & 1), col = 2 * t + (i & 1) + 8 * (i / 4);
      A[row][col] = bf16 ? bf16_to_float(bits) : f16_to_float(bits);
    }
    for (int i = 0; i < 4; ++i) {  // b_i: rows 2t + (i & 1) (+ 8 for i ≥ 2), column g
      const uint16_t bits = half_of(lanes[l].b[i / 2], i & 1);
      B[2 * t + (i & 1) + 8 * (i / 2)][g] = bf16 ? bf16_to_float(bits) : f16_to_float(bits);
    }
  }
  // c_i / d_i: row g (i < 2) or g + 8, column 2t + (i & 1). Products of 16-bit values are exact in
  // fp32; they are added to C in ascending k with fp32 adds (a fixed order: the hardware's own
  // is undocumented, so results may differ from a GPU's in the last bits, never in layout).
  const unsigned lane = lane_index();
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + (i & 1);
    float sum = accumulator[i];
    for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
    d[i] = sum;
  }
}

float exp2_approx(float x) {
  if (std::fpclassify(x) == FP_SUBNORMAL) x = std::copysign(0.0f, x);
  const float y = std::exp2(x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
}

}  // namespace strata::emu
