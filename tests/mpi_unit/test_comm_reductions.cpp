// MPI communicator reductions at the job's world size: all_reduce and reduce_scatter on
// F32, BF16, F16 and I32 against the rank-order reduction computed locally, bit for bit,
// and identical on every rank. Assertions are CHECKs so that every rank issues the same
// collectives even when one of them fails.
#include <algorithm>
#include "catch_compat.h"
#include <cmath>

#include "mpi_test_util.h"

using namespace strata;
using strata_test::first_difference;
using strata_test::rank_value;
using strata_test::same_on_all_ranks;

namespace {

std::vector<float> expected_f32(int p, int64_t n, ReduceOp op, uint64_t seed, int64_t first = 0) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float acc = rank_value(0, first + i, seed);
    for (int q = 1; q < p; ++q) {
      const float x = rank_value(q, first + i, seed);
      acc = op == ReduceOp::Sum ? acc + x : std::max(acc, x);
    }
    out[static_cast<size_t>(i)] = acc;
  }
  return out;
}

std::vector<float> my_values(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = rank_value(strata_test::mpi().world_rank(), i, seed);
  return v;
}

}  // namespace

TEST_CASE("all_reduce F32 equals the rank-order reduction, bit-identical on every rank") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size();
  for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    // Sizes below, at and above the world size, and one that leaves the last blocks short.
    for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{7}, int64_t{64}, int64_t{1001}}) {
      INFO("n = " << n << ", op = " << (op == ReduceOp::Sum ? "sum" : "max"));
      std::vector<float> data = my_values(n, 11);
      comm->all_reduce(Tensor(data.data(), DType::F32, {n}), op);
      CHECK(first_difference(data, expected_f32(p, n, op, 11)) == -1);
      CHECK(same_on_all_ranks(data.data(), data.size() * sizeof(float)));
    }
  }
}

TEST_CASE("all_reduce of 16-bit floats sums in fp32 in rank order and rounds once") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size();
  const int64_t n = 333;
  for (const DType dtype : {DType::BF16, DType::F16}) {
    INFO(dtype_name(dtype));
    auto to16 = [dtype](float x) { return dtype == DType::BF16 ? float_to_bf16(x) : float_to_fp16(x); };
    auto from16 = [dtype](uint16_t x) { return dtype == DType::BF16 ? bf16_to_float(x) : fp16_to_float(x); };
    std::vector<uint16_t> data(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) data[static_cast<size_t>(i)] = to16(rank_value(comm->rank(), i, 5) * 0.01f);
    for (int64_t i = 0; i < n; ++i) {
      float acc = from16(to16(rank_value(0, i, 5) * 0.01f));
      for (int q = 1; q < p; ++q) acc += from16(to16(rank_value(q, i, 5) * 0.01f));
      want[static_cast<size_t>(i)] = to16(acc);
    }
    comm->all_reduce(Tensor(data.data(), dtype, {n}));
    CHECK(first_difference(data, want) == -1);
    CHECK(same_on_all_ranks(data.data(), data.size() * 2));
  }
}

TEST_CASE("all_reduce Max propagates NaN and inf, so overflow checks see them") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  std::vector<float> data = {1.0f, 2.0f, 3.0f};
  if (comm->rank() == comm->size() - 1) {
    data[0] = std::nanf("");
    data[1] = INFINITY;
  }
  comm->all_reduce(Tensor(data.data(), DType::F32, {3}), ReduceOp::Max);
  CHECK(std::isnan(data[0]));
  CHECK(std::isinf(data[1]));
  CHECK(data[2] == 3.0f);
}

TEST_CASE("all_reduce I32 sums and maxes exactly") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size(), r = comm->rank();
  std::vector<int32_t> sum = {r + 1, -r, 1000 * r}, max = {r, -r, 7};
  comm->all_reduce(Tensor(sum.data(), DType::I32, {3}));
  comm->all_reduce(Tensor(max.data(), DType::I32, {3}), ReduceOp::Max);
  CHECK(sum == std::vector<int32_t>{p * (p + 1) / 2, -p * (p - 1) / 2, 1000 * p * (p - 1) / 2});
  CHECK(max == std::vector<int32_t>{p - 1, 0, 7});
}

TEST_CASE("reduce_scatter F32 gives each rank its block of the rank-order sum, in place or not") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size(), r = comm->rank();
  for (const int64_t part : {int64_t{1}, int64_t{13}, int64_t{250}}) {
    INFO("part = " << part);
    const int64_t n = part * p;
    const std::vector<float> whole_want = expected_f32(p, n, ReduceOp::Sum, 21);
    const std::vector<float> want(whole_want.begin() + r * part, whole_want.begin() + (r + 1) * part);

    std::vector<float> input = my_values(n, 21), output(static_cast<size_t>(part), -1.0f);
    comm->reduce_scatter(Tensor(input.data(), DType::F32, {n}), Tensor(output.data(), DType::F32, {part}));
    CHECK(first_difference(output, want) == -1);
    CHECK(first_difference(input, my_values(n, 21)) == -1);  // the input is left alone

    // In place: the output is this rank's own block of the input.
    std::vector<float> buffer = my_values(n, 21);
    comm->reduce_scatter(Tensor(buffer.data(), DType::F32, {n}), Tensor(buffer.data() + r * part, DType::F32, {part}));
    CHECK(first_difference(std::vector<float>(buffer.begin() + r * part, buffer.begin() + (r + 1) * part), want) == -1);
  }
  // Max over blocks.
  const int64_t part = 9, n = part * p;
  std::vector<float> input = my_values(n, 23), output(static_cast<size_t>(part));
  comm->reduce_scatter(Tensor(input.data(), DType::F32, {n}), Tensor(output.data(), DType::F32, {part}), ReduceOp::Max);
  const std::vector<float> whole_max = expected_f32(p, n, ReduceOp::Max, 23);
  CHECK(first_difference(output,
                         std::vector<float>(whole_max.begin() + r * part, whole_max.begin() + (r + 1) * part)) == -1);
}

TEST_CASE("reduce_scatter BF16 accumulates in fp32 in rank order") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size(), r = comm->rank();
  const int64_t part = 40, n = part * p;
  std::vector<uint16_t> input(static_cast<size_t>(n)), output(static_cast<size_t>(part)),
      want(static_cast<size_t>(part));
  for (int64_t i = 0; i < n; ++i) input[static_cast<size_t>(i)] = float_to_bf16(rank_value(r, i, 31));
  for (int64_t i = 0; i < part; ++i) {
    const int64_t g = r * part + i;
    float acc = bf16_to_float(float_to_bf16(rank_value(0, g, 31)));
    for (int q = 1; q < p; ++q) acc += bf16_to_float(float_to_bf16(rank_value(q, g, 31)));
    want[static_cast<size_t>(i)] = float_to_bf16(acc);
  }
  comm->reduce_scatter(Tensor(input.data(), DType::BF16, {n}), Tensor(output.data(), DType::BF16, {part}));
  CHECK(first_difference(output, want) == -1);
}
