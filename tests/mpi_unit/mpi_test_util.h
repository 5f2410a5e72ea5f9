// Helpers for the MPI Catch2 tests: the process's MpiRuntime, reproducible per-rank
// inputs, and cross-rank comparisons done with plain MPI (independent of strata's Comm).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/comm.h"
#include "core/core.h"

namespace strata_test {

const strata::MpiRuntime& mpi();  // set up by main.cpp

// A value of rank `rank` at `index` whose magnitude swings over six decades, so a sum in
// another order would round differently.
inline float rank_value(int rank, int64_t index, uint64_t seed = 1) {
  const float scale[7] = {1e-3f, 1e-2f, 1e-1f, 1.0f, 10.0f, 100.0f, 1000.0f};
  return strata::rng_normal(seed, static_cast<uint64_t>(rank), static_cast<uint64_t>(index)) *
         scale[static_cast<size_t>((index + rank) % 7)];
}

// True when `bytes` bytes at `data` are the same on every rank of `comm`.
inline bool same_on_all_ranks(const void* data, size_t bytes, MPI_Comm comm = MPI_COMM_WORLD) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<unsigned char> all(bytes * static_cast<size_t>(size) + 1);
  MPI_Allgather(data, static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes), MPI_BYTE, comm);
  for (int r = 1; r < size; ++r)
    if (std::memcmp(all.data(), all.data() + bytes * static_cast<size_t>(r), bytes) != 0) return false;
  return true;
}

// Element-wise bit comparison; reports the first differing index (-1 when equal).
template <typename T>
int64_t first_difference(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace strata_test
