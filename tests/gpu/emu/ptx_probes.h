// Small emulated kernels built on kernels/mma_ptx.cuh (transformed for the emulator), behind plain
// C++ entry points for test_emu_ptx.cpp: ldmatrix and mma.sync lane layouts, a 64×64×64 tile
// product, planted lane-mapping and cp.async bugs, and kernels that break .sync.aligned.
#pragma once
#include <cstdint>
#include <string>

#include "emu_attention.h"

namespace strata::emu::ptx_probe {

// ldmatrix.x{matrices}{.trans} by two warps from four 8×8 matrices of 16-bit `elements` (4 × 64,
// matrix-major, row-major within), stored in shared memory with interleaved rows between
// poisoned gaps. Lanes past 8 · matrices pass a null row address (unused since sm_80).
// registers: [warp 0..1][lane 0..31][4], entries past `matrices` left 0. With
// `overwrite_after`, one warp loads and each lane at once zeroes the row it addressed (legal: the
// warp's load is complete), which must not reach the registers of a lane resuming later.
void ldmatrix(int matrices, bool trans, const uint16_t* elements, uint32_t* registers, bool overwrite_after = false);

// Planted mistakes in the fragments one warp builds for a single mma.sync.
enum class Mutation {
  None,
  SwapARegistersInOneLane,  // lane 13 swaps a[1] and a[2]
  ARowNotOffsetBy8,         // every lane builds a[1] from row g instead of g + 8
  SwapBHalvesInOneLane,     // lane 7 swaps the two halves of b[0]
};
// One m16n8k16 product: lane l builds its registers from A (16×16 row-major), B (16×8, B[k][n])
// and C (16×8 row-major) by the ISA's fragment tables and writes its four outputs to
// d[4 · l + i]. A and B are 16-bit patterns of `type`.
void mma(HalfType type, const uint16_t* a, const uint16_t* b, const float* c, float* d,
         Mutation mutation = Mutation::None);

// The cp.async wait of the tile load, correct or misplaced.
enum class TileBug { None, WaitAfterUse, NoWait };
// D = A·B + C for one 64×64 tile by 4 warps (16 rows each): A (64×64 row-major, the rows from
// valid_rows and columns from valid_k on read as zero) and B (64×64 row-major K×N, rows from
// valid_k on zero) reach shared memory by cp.async (zero-fill form), A's fragments by ldmatrix.x4
// and B's by ldmatrix.x4.trans, then mma.sync. C, D 64×64 row-major f32.
void gemm_tile(HalfType type, const uint16_t* a, const uint16_t* b, const float* c, float* d, int valid_rows,
               int valid_k, TileBug bug = TileBug::None);

// Kernels that break one rule of warp-collective instructions each; they return the
// EmulationError message, or "" when the emulator raised none.
std::string ldmatrix_in_divergent_code();  // lanes 16–31 skip the ldmatrix, wait at __syncthreads()
std::string mma_after_lane_exit();         // lane 5 returns before the mma.sync
std::string mixed_ldmatrix_shapes();       // lanes 0–15 issue .x4, lanes 16–31 .x2
std::string ldmatrix_in_partial_warp();    // a block of 48 threads: warp 1 has 16 lanes
std::string misaligned_ldmatrix_row();     // lane 3's row address 8 bytes off
std::string ldmatrix_from_global_memory(); // lane 0's row address in global memory
std::string zfill_src_size_too_large();    // cp.async with src-size 20 of 16 bytes

}  // namespace strata::emu::ptx_probe
