// Kernels of ptx_probes.h, written as CUDA against the mock headers and calling the emulated
// kernels/mma_ptx.cuh (namespace strata::cuda_emulated_ptx), so the tests exercise exactly the
// wrappers a real kernel uses.
#include "ptx_probes.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "mma_ptx.cuh"  // the transformed copy

namespace strata::emu::ptx_probe {
namespace {

namespace ptx = ::strata::cuda_emulated_ptx::detail::ptx;

constexpr int kSlotElements = 16;  // a 32-byte slot per ldmatrix row, the data in its second half
constexpr int kTile = 64, kTileLd = 72;  // the tile product's shared rows, padded by 16 bytes

// Row j of matrix i: slots interleave the matrices' rows, and each first half stays poisoned.
__device__ int ldmatrix_row_offset(int matrix, int row) { return (row * 4 + matrix) * kSlotElements + 8; }

uint32_t pack(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16; }

__global__ void ldmatrix_kernel(int matrices, bool trans, const uint16_t* elements, uint32_t* registers,
                                bool overwrite_after) {
  uint16_t* smem = reinterpret_cast<uint16_t*>(dynamic_shared_memory(16));
  for (unsigned idx = threadIdx.x; idx < 4 * 64; idx += blockDim.x)
    smem[ldmatrix_row_offset(static_cast<int>(idx / 64), static_cast<int>(idx / 8 % 8)) + idx % 8] = elements[idx];
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const uint16_t* row = lane < 8 * matrices ? smem + ldmatrix_row_offset(lane / 8, lane % 8) : nullptr;
  uint32_t r[4] = {0, 0, 0, 0};
  if (matrices == 1) {
    uint32_t x[1];
    if (trans) ptx::ldmatrix_x1_trans(x, row);
    else ptx::ldmatrix_x1(x, row);
    r[0] = x[0];
  } else if (matrices == 2) {
    uint32_t x[2];
    if (trans) ptx::ldmatrix_x2_trans(x, row);
    else ptx::ldmatrix_x2(x, row);
    std::copy(x, x + 2, r);
  } else {
    if (trans) ptx::ldmatrix_x4_trans(r, row);
    else ptx::ldmatrix_x4(r, row);
  }
  if (overwrite_after && row) std::fill(smem + (row - smem), smem + (row - smem) + 8, uint16_t{0});
  std::copy(r, r + 4, registers + threadIdx.x * 4);
}

template <typename T>
__global__ void mma_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D, Mutation mutation) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const int a1_row = mutation == Mutation::ARowNotOffsetBy8 ? g : g + 8;
  uint32_t a[4] = {pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                   pack(A[a1_row * 16 + 2 * t], A[a1_row * 16 + 2 * t + 1]),
                   pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                   pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
  uint32_t b[2] = {pack(B[2 * t * 8 + g], B[(2 * t + 1) * 8 + g]),
                   pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g])};
  const float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
  if (mutation == Mutation::SwapARegistersInOneLane && lane == 13) std::swap(a[1], a[2]);
  if (mutation == Mutation::SwapBHalvesInOneLane && lane == 7) b[0] = b[0] >> 16 | b[0] << 16;
  float d[4];
  ptx::mma_m16n8k16<T>(d, a, b, c);
  std::copy(d, d + 4, D + lane * 4);
}

// The loads of one 64×64 tile pair: 16 bytes per cp.async, zero-filled past the valid region.
__device__ void load_tiles(uint16_t* As, uint16_t* Bs, const uint16_t* A, const uint16_t* B, int valid_rows,
                           int valid_k) {
  for (int idx = static_cast<int>(threadIdx.x); idx < kTile * 8; idx += static_cast<int>(blockDim.x)) {
    const int r = idx / 8, c = idx % 8 * 8;
    const int a_bytes = r < valid_rows ? std::clamp((valid_k - c) * 2, 0, 16) : 0;
    ptx::cp_async_16_zfill(As + r * kTileLd + c, A + r * kTile + c, a_bytes);
    ptx::cp_async_16_zfill(Bs + r * kTileLd + c, B + r * kTile + c, r < valid_k ? 16 : 0);
  }
  ptx::cp_async_commit();
}

template <typename T>
__global__ void gemm_tile_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D, int valid_rows,
                                 int valid_k, TileBug bug) {
  uint16_t* As = reinterpret_cast<uint16_t*>(dynamic_shared_memory(128));
  uint16_t* Bs = As + kTile * kTileLd;
  load_tiles(As, Bs, A, B, valid_rows, valid_k);
  if (bug == TileBug::None) ptx::cp_async_wait<0>();
  __syncthreads();
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4, row0 = 16 * warp + g;
  float acc[8][4];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = C[(row0 + 8 * (i / 2)) * kTile + 8 * j + 2 * t + (i & 1)];
  // ldmatrix.x4 row addresses: lane l gives row l % 8 of matrix l / 8; matrices 0–3 are the
  // 8×8 quarters (rows +0, +8) × (columns +0, +8) in the order a[0..3] / b-pairs need them.
  const int quarter_row = lane % 8 + (lane / 8 % 2) * 8, quarter_col = lane / 16 * 8;
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t a[4];
    ptx::ldmatrix_x4(a, As + (16 * warp + quarter_row) * kTileLd + 16 * kk + quarter_col);
    for (int jj = 0; jj < 4; ++jj) {  // two 8-column n-tiles per ldmatrix.x4.trans of B
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, Bs + (16 * kk + quarter_row) * kTileLd + 16 * jj + quarter_col);
      const uint32_t b_left[2] = {b[0], b[1]}, b_right[2] = {b[2], b[3]};
      ptx::mma_m16n8k16<T>(acc[2 * jj], a, b_left, acc[2 * jj]);
      ptx::mma_m16n8k16<T>(acc[2 * jj + 1], a, b_right, acc[2 * jj + 1]);
    }
  }
  if (bug == TileBug::WaitAfterUse) ptx::cp_async_wait<0>();
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i) D[(row0 + 8 * (i / 2)) * kTile + 8 * j + 2 * t + (i & 1)] = acc[j][i];
}

// ---- kernels that break a rule ----
__global__ void divergent_ldmatrix_kernel() {
  uint16_t* smem = reinterpret_cast<uint16_t*>(dynamic_shared_memory(16));
  const unsigned lane = threadIdx.x % 32;
  uint32_t r[4];
  if (lane < 16) ptx::ldmatrix_x4(r, smem + lane * 8);
  __syncthreads();
}

__global__ void mma_after_exit_kernel() {
  if (threadIdx.x % 32 == 5) return;
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  const float c[4] = {0, 0, 0, 0};
  float d[4];
  ptx::mma_m16n8k16_bf16(d, a, b, c);
}

__global__ void mixed_shapes_kernel() {
  uint16_t* smem = reinterpret_cast<uint16_t*>(dynamic_shared_memory(16));
  const unsigned lane = threadIdx.x % 32;
  uint32_t r4[4], r2[2];
  if (lane < 16) ptx::ldmatrix_x4(r4, smem + lane * 8);
  else ptx::ldmatrix_x2(r2, smem + lane * 8);
}

// Lane `odd_lane` gives `odd_row` (null: its own row 8 bytes on) instead of its own row of a
// shared 256-element tile.
__global__ void odd_row_kernel(int odd_lane, const void* odd_row) {
  uint16_t* smem = reinterpret_cast<uint16_t*>(dynamic_shared_memory(16));
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) smem[i] = 0;
  __syncthreads();
  uint32_t r[4];
  const void* own = smem + lane * 8;
  ptx::ldmatrix_x4(r, lane != odd_lane ? own : odd_row ? odd_row : smem + lane * 8 + 4);
}

__global__ void zfill_overrun_kernel(const uint16_t* src) {
  uint16_t* smem = reinterpret_cast<uint16_t*>(dynamic_shared_memory(16));
  ptx::cp_async_16_zfill(smem + threadIdx.x * 8, src, 20);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
}

// 16-byte aligned copies of the host arrays: cp.async needs aligned global sources.
struct alignas(16) Vector16 {
  uint16_t v[8];
};
std::vector<Vector16> aligned_copy(const uint16_t* values, size_t count) {
  std::vector<Vector16> out((count + 7) / 8);
  std::memcpy(out.data(), values, count * sizeof(uint16_t));
  return out;
}

}  // namespace

void ldmatrix(int matrices, bool trans, const uint16_t* elements, uint32_t* registers, bool overwrite_after) {
  const size_t shared = 8 * 4 * kSlotElements * sizeof(uint16_t);
  const unsigned threads = overwrite_after ? 32 : 64;  // two warps would race on the rows
  launch(ldmatrix_kernel, dim3(1), dim3(threads), shared)(matrices, trans, elements, registers, overwrite_after);
}

void mma(HalfType type, const uint16_t* a, const uint16_t* b, const float* c, float* d, Mutation mutation) {
  if (type == HalfType::BF16) launch(mma_kernel<__nv_bfloat16>, dim3(1), dim3(32))(a, b, c, d, mutation);
  else launch(mma_kernel<__half>, dim3(1), dim3(32))(a, b, c, d, mutation);
}

void gemm_tile(HalfType type, const uint16_t* a, const uint16_t* b, const float* c, float* d, int valid_rows,
               int valid_k, TileBug bug) {
  const std::vector<Vector16> a16 = aligned_copy(a, kTile * kTile), b16 = aligned_copy(b, kTile * kTile);
  const uint16_t* A = a16.front().v;
  const uint16_t* B = b16.front().v;
  const size_t shared = 2 * kTile * kTileLd * sizeof(uint16_t);
  if (type == HalfType::BF16)
    launch(gemm_tile_kernel<__nv_bfloat16>, dim3(1), dim3(128), shared)(A, B, c, d, valid_rows, valid_k, bug);
  else launch(gemm_tile_kernel<__half>, dim3(1), dim3(128), shared)(A, B, c, d, valid_rows, valid_k, bug);
}

std::string ldmatrix_in_divergent_code() {
  return error_message_of([] { launch(divergent_ldmatrix_kernel, dim3(1), dim3(64), 1024)(); });
}

std::string mma_after_lane_exit() {
  return error_message_of([] { launch(mma_after_exit_kernel, dim3(1), dim3(32))(); });
}

std::string mixed_ldmatrix_shapes() {
  return error_message_of([] { launch(mixed_shapes_kernel, dim3(1), dim3(32), 1024)(); });
}

std::string ldmatrix_in_partial_warp() {
  return error_message_of([] { launch(odd_row_kernel, dim3(1), dim3(48), 1024)(-1, nullptr); });
}

std::string misaligned_ldmatrix_row() {
  return error_message_of([] { launch(odd_row_kernel, dim3(1), dim3(32), 1024)(3, nullptr); });
}

std::string ldmatrix_from_global_memory() {
  static const Vector16 global_row{};
  return error_message_of([] { launch(odd_row_kernel, dim3(1), dim3(32), 1024)(0, global_row.v); });
}

std::string zfill_src_size_too_large() {
  static const Vector16 source{};
  return error_message_of([] { launch(zfill_overrun_kernel, dim3(1), dim3(32), 1024)(source.v); });
}

}  // namespace strata::emu::ptx_probe
