// kernels/mma_ptx.cuh on the emulator against the PTX ISA's fragment tables, written out anew
// here: every lane, register and half of ldmatrix and mma.sync, a 64×64×64 tile product, planted
// mistakes that must be caught, and the .sync.aligned rules.
#include "catch_compat.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ptx_probes.h"

using namespace strata;
using emu::HalfType;
namespace probe = emu::ptx_probe;

namespace {

uint16_t to_bits(HalfType type, float v) {
  if (type == HalfType::F16) {
    const _Float16 h = static_cast<_Float16>(v);
    uint16_t bits;
    std::memcpy(&bits, &h, sizeof(bits));
    return bits;
  }
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even (no NaN among the inputs)
  return static_cast<uint16_t>(bits >> 16);
}

float from_bits(HalfType type, uint16_t bits) {
  if (type == HalfType::F16) {
    _Float16 h;
    std::memcpy(&h, &bits, sizeof(h));
    return static_cast<float>(h);
  }
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

std::vector<uint16_t> random_halves(HalfType type, size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> out(count);
  for (uint16_t& v : out) v = to_bits(type, normal(rng));
  return out;
}

std::vector<float> random_floats(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& v : out) v = normal(rng);
  return out;
}

// D = A·B + C (A m×k row-major with leading dimension lda, B k×n with ldb, C/D m×n with ldc):
// `exact` adds the fp32 products to C in ascending k with fp32 adds, as the emulator promises;
// `wide` the same sum in double, for a tolerance check that does not depend on that order.
struct Reference {
  std::vector<float> exact;
  std::vector<double> wide, magnitude;  // magnitude: |C| + Σ|a·b|, the scale of rounding errors
};
Reference reference_product(HalfType type, const uint16_t* a, int lda, const uint16_t* b, int ldb, const float* c,
                            int m, int n, int k) {
  Reference r{std::vector<float>(m * n), std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float sum = c[i * n + j];
      double wide = sum, magnitude = std::fabs(sum);
      for (int kk = 0; kk < k; ++kk) {
        const float product = from_bits(type, a[i * lda + kk]) * from_bits(type, b[kk * ldb + j]);  // exact
        sum += product;
        wide += product;
        magnitude += std::fabs(product);
      }
      r.exact[i * n + j] = sum;
      r.wide[i * n + j] = wide;
      r.magnitude[i * n + j] = magnitude;
    }
  return r;
}

// The ISA's C/D fragment of m16n8k16: register i of lane l is (row, column) of the 16×8 tile.
int d_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
int d_col(int lane, int i) { return 2 * (lane % 4) + (i & 1); }

// Outputs of one mma.sync (one lane's four registers each) that differ from the reference.
int mma_mismatches(HalfType type, probe::Mutation mutation, uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  const std::vector<uint16_t> a = random_halves(type, 16 * 16, rng), b = random_halves(type, 16 * 8, rng);
  const std::vector<float> c = random_floats(16 * 8, rng);
  std::vector<float> d(32 * 4, NAN);
  probe::mma(type, a.data(), b.data(), c.data(), d.data(), mutation);
  const Reference ref = reference_product(type, a.data(), 16, b.data(), 8, c.data(), 16, 8, 16);
  int mismatches = 0;
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int at = d_row(lane, i) * 8 + d_col(lane, i);
      const float got = d[lane * 4 + i];
      const bool exact = std::memcmp(&got, &ref.exact[at], sizeof(float)) == 0;
      const bool close = std::fabs(got - ref.wide[at]) <= 1e-6 * ref.magnitude[at];
      if (mutation == probe::Mutation::None) {
        INFO("lane " << lane << " d[" << i << "] (row " << d_row(lane, i) << ", col " << d_col(lane, i) << "): "
                     << got << ", expected " << ref.exact[at]);
        CHECK(exact);
        CHECK(close);
      }
      mismatches += !exact;
    }
  return mismatches;
}

// The 16-bit element ldmatrix reads at (matrix, row, column): distinct, and never a pattern the
// poisoned gaps (0xFFFF) hold.
uint16_t ldmatrix_element(int matrix, int row, int col) { return static_cast<uint16_t>(0x1000 * (matrix + 1) + row * 16 + col); }

}  // namespace

// Also with each lane zeroing its row right after the load: the warp loads all rows at once.
TEST_CASE("ldmatrix gives every lane the ISA's elements (x1, x2, x4, with and without .trans)") {
  std::vector<uint16_t> elements(4 * 64);
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) elements[m * 64 + r * 8 + c] = ldmatrix_element(m, r, c);
  for (const int matrices : {1, 2, 4})
    for (const bool trans : {false, true})
      for (const bool overwrite_after : {false, true}) {
        std::vector<uint32_t> registers(2 * 32 * 4, 0xDEADBEEFu);
        probe::ldmatrix(matrices, trans, elements.data(), registers.data(), overwrite_after);
        for (int warp = 0; warp < (overwrite_after ? 1 : 2); ++warp)
          for (int lane = 0; lane < 32; ++lane)
            for (int i = 0; i < 4; ++i) {
              const uint32_t got = registers[(warp * 32 + lane) * 4 + i];
              INFO("x" << matrices << (trans ? ".trans" : "") << (overwrite_after ? ", rows zeroed after" : "")
                       << ": warp " << warp << " lane " << lane << " register " << i);
              if (i >= matrices) {
                CHECK(got == 0u);  // the kernel's zero-initialized rest
                continue;
              }
              // Without .trans: row lane/4, columns 2(lane%4) and +1; with it, column lane/4 of
              // rows 2(lane%4) and +1; the lower-indexed element in the low half.
              const int q = lane / 4, p = 2 * (lane % 4);
              const uint16_t lo = trans ? ldmatrix_element(i, p, q) : ldmatrix_element(i, q, p);
              const uint16_t hi = trans ? ldmatrix_element(i, p + 1, q) : ldmatrix_element(i, q, p + 1);
              CHECK((got & 0xFFFFu) == lo);
              CHECK((got >> 16) == hi);
            }
      }
}

TEST_CASE("mma.sync m16n8k16 gives every lane the ISA's elements of A·B + C (bf16 and fp16)") {
  for (const HalfType type : {HalfType::BF16, HalfType::F16})
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      INFO((type == HalfType::BF16 ? "bf16" : "fp16") << " seed " << seed);
      CHECK(mma_mismatches(type, probe::Mutation::None, seed) == 0);
    }
}

TEST_CASE("a wrong lane mapping in mma.sync fragments is caught") {
  for (const HalfType type : {HalfType::BF16, HalfType::F16}) {
    // Lane 13 holds rows 3 and 11 of A: swapping a[1] (row 11) with a[2] (row 3) spoils both.
    CHECK(mma_mismatches(type, probe::Mutation::SwapARegistersInOneLane, 5) > 0);
    CHECK(mma_mismatches(type, probe::Mutation::ARowNotOffsetBy8, 5) > 0);
    CHECK(mma_mismatches(type, probe::Mutation::SwapBHalvesInOneLane, 5) > 0);
  }
}

namespace {

// One 64×64×64 tile through cp.async, ldmatrix(.trans) and mma.sync; returns the outputs that
// differ from the reference (bit-exact), the rows from valid_rows and columns from valid_k of A
// and rows from valid_k of B taken as zero.
int tile_mismatches(HalfType type, int valid_rows, int valid_k, probe::TileBug bug, uint64_t seed) {
  constexpr int n = 64;
  std::mt19937 rng(static_cast<unsigned>(seed));
  const std::vector<uint16_t> a = random_halves(type, n * n, rng), b = random_halves(type, n * n, rng);
  const std::vector<float> c = random_floats(n * n, rng);
  std::vector<uint16_t> a_used = a, b_used = b;  // what the zero-filled loads leave
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < n; ++k) {
      if (r >= valid_rows || k >= valid_k) a_used[r * n + k] = 0;
      if (r >= valid_k) b_used[r * n + k] = 0;
    }
  std::vector<float> d(n * n, NAN);
  probe::gemm_tile(type, a.data(), b.data(), c.data(), d.data(), valid_rows, valid_k, bug);
  const Reference ref = reference_product(type, a_used.data(), n, b_used.data(), n, c.data(), n, n, n);
  int mismatches = 0;
  for (int i = 0; i < n * n; ++i) {
    const bool exact = std::memcmp(&d[i], &ref.exact[i], sizeof(float)) == 0;
    if (bug == probe::TileBug::None) {
      INFO("element (" << i / n << ", " << i % n << "): " << d[i] << ", expected " << ref.exact[i]);
      CHECK(exact);
      CHECK(std::fabs(d[i] - ref.wide[i]) <= 1e-6 * ref.magnitude[i]);
    }
    mismatches += !exact;
  }
  return mismatches;
}

}  // namespace

TEST_CASE("a 64x64x64 tile from cp.async, ldmatrix and mma.sync equals the reference") {
  for (const HalfType type : {HalfType::BF16, HalfType::F16}) {
    INFO((type == HalfType::BF16 ? "bf16" : "fp16"));
    emu::reset_emulator_stats();
    CHECK(tile_mismatches(type, 64, 64, probe::TileBug::None, 11) == 0);
    // Per warp: 4 k-steps × (1 ldmatrix.x4 of A + 4 ldmatrix.x4.trans of B + 8 mma.sync).
    CHECK(emu::emulator_stats().warp_collectives == 4 * 4 * 13);
    // A partial tile: zero-filled rows (src-size 0) and a half-read vector per row (src-size 8).
    CHECK(tile_mismatches(type, 50, 60, probe::TileBug::None, 12) == 0);
  }
}

TEST_CASE("a tile read before its cp.async wait is caught") {
  emu::set_schedule_seed(7);
  // Copies still in flight leave the poison (NaN) of fresh shared memory in the tile.
  CHECK(tile_mismatches(HalfType::BF16, 64, 64, probe::TileBug::WaitAfterUse, 13) > 0);
  // Without any wait the copies are never waited for: the emulator's own rule.
  CHECK_THROWS_AS(tile_mismatches(HalfType::F16, 64, 64, probe::TileBug::NoWait, 14), emu::EmulationError);
}

TEST_CASE("warp-collective instructions need all 32 lanes executing the same one (.sync.aligned)") {
  const auto expect = [](const std::string& report, const std::string& instruction, const std::string& rule) {
    INFO("emulator report: " << report);
    CHECK(report.find(instruction) != std::string::npos);
    CHECK(report.find(rule) != std::string::npos);
  };
  const std::string x4 = "ldmatrix.sync.aligned.m8n8.x4.shared.b16";
  expect(probe::ldmatrix_in_divergent_code(), x4, "reached by 16 of the 32 lanes");
  expect(probe::mma_after_lane_exit(), "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "already exited");
  expect(probe::mixed_ldmatrix_shapes(), "ldmatrix.sync.aligned.m8n8.x2.shared.b16", "different warp-collective");
  expect(probe::ldmatrix_in_partial_warp(), x4, "in a warp of 16 lanes");
}

TEST_CASE("ldmatrix and cp.async check their addresses and sizes") {
  const std::string misaligned = probe::misaligned_ldmatrix_row();
  INFO("emulator report: " << misaligned);
  CHECK(misaligned.find("row address of lane 3 not 16-byte aligned") != std::string::npos);
  const std::string global = probe::ldmatrix_from_global_memory();
  INFO("emulator report: " << global);
  CHECK(global.find("row address of lane 0 not in shared memory") != std::string::npos);
  const std::string zfill = probe::zfill_src_size_too_large();
  INFO("emulator report: " << zfill);
  CHECK(zfill.find("src-size 20 exceeds") != std::string::npos);
}
