// The small all-gathers of host values (doubles, floats) in rank order that gradient norms,
// losses and reports use: gathers never combine values, so every rank sees the same bits.
#include <cstring>

#include "comm/comm.h"

namespace strata {

std::vector<double> all_gather_doubles(Comm& comm, const std::vector<double>& values) {
  // Two I32 words per double: gathers never combine values, so the bits arrive untouched.
  const int64_t words = static_cast<int64_t>(values.size()) * 2;
  std::vector<int32_t> mine(static_cast<size_t>(words));
  std::memcpy(mine.data(), values.data(), values.size() * sizeof(double));
  std::vector<int32_t> all(static_cast<size_t>(words * comm.size()));
  comm.all_gather(Tensor(mine.data(), DType::I32, {words}), Tensor(all.data(), DType::I32, {words * comm.size()}));
  std::vector<double> out(values.size() * static_cast<size_t>(comm.size()));
  std::memcpy(out.data(), all.data(), out.size() * sizeof(double));
  return out;
}

std::vector<float> all_gather_floats(Comm& comm, const std::vector<float>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<float> mine = values;
  std::vector<float> all(static_cast<size_t>(n * comm.size()));
  comm.all_gather(Tensor(mine.data(), DType::F32, {n}), Tensor(all.data(), DType::F32, {n * comm.size()}));
  return all;
}

}  // namespace strata
