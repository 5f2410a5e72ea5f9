// MPI communicator data movement and bookkeeping: all_gather, broadcast, send/recv and
// exchange rings, traffic counters exactly as comm.h defines them, overlapping async
// operations waited in any order, and misuse rejected before anything is sent.
#include <algorithm>
#include "catch_compat.h"
#include <stdexcept>

#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "mpi_test_util.h"

using namespace strata;
using strata_test::first_difference;
using strata_test::rank_value;

TEST_CASE("all_gather concatenates every rank's input in rank order, in place or not") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size(), r = comm->rank();
  const int64_t part = 17, n = part * p;
  std::vector<float> input(static_cast<size_t>(part)), want(static_cast<size_t>(n));
  for (int64_t i = 0; i < part; ++i) input[static_cast<size_t>(i)] = rank_value(r, i);
  for (int q = 0; q < p; ++q)
    for (int64_t i = 0; i < part; ++i) want[static_cast<size_t>(q * part + i)] = rank_value(q, i);

  std::vector<float> output(static_cast<size_t>(n), 0.0f);
  comm->all_gather(Tensor(input.data(), DType::F32, {part}), Tensor(output.data(), DType::F32, {n}));
  CHECK(first_difference(output, want) == -1);

  std::vector<float> in_place(static_cast<size_t>(n), 0.0f);
  std::copy(input.begin(), input.end(), in_place.begin() + r * part);
  comm->all_gather(Tensor(in_place.data() + r * part, DType::F32, {part}), Tensor(in_place.data(), DType::F32, {n}));
  CHECK(first_difference(in_place, want) == -1);
}

TEST_CASE("all_gather moves 16-bit elements as raw bits, NaN payloads included") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size(), r = comm->rank();
  const int64_t part = 4;
  // 0x7fc1 and 0xffff are NaNs with payloads a float round trip would not keep.
  std::vector<uint16_t> input = {0x7fc1, 0xffff, static_cast<uint16_t>(0x3f80 + r), 0x0001};
  std::vector<uint16_t> output(static_cast<size_t>(part * p));
  comm->all_gather(Tensor(input.data(), DType::BF16, {part}), Tensor(output.data(), DType::BF16, {part * p}));
  for (int q = 0; q < p; ++q) {
    CHECK(output[static_cast<size_t>(q * part)] == 0x7fc1);
    CHECK(output[static_cast<size_t>(q * part + 1)] == 0xffff);
    CHECK(output[static_cast<size_t>(q * part + 2)] == 0x3f80 + q);
    CHECK(output[static_cast<size_t>(q * part + 3)] == 0x0001);
  }
}

TEST_CASE("broadcast delivers the root's buffer from every root") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size(), r = comm->rank();
  for (int root = 0; root < p; ++root) {
    for (const int64_t n : {int64_t{1}, int64_t{1000}}) {
      INFO("root " << root << ", n " << n);
      std::vector<float> data(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        data[static_cast<size_t>(i)] = rank_value(r, i, 77);
        want[static_cast<size_t>(i)] = rank_value(root, i, 77);
      }
      comm->broadcast(Tensor(data.data(), DType::F32, {n}), root);
      CHECK(first_difference(data, want) == -1);
    }
  }
  std::vector<uint16_t> bits = {static_cast<uint16_t>(r == p - 1 ? 0x7fc3 : 0)};
  comm->broadcast(Tensor(bits.data(), DType::F16, {1}), p - 1);
  CHECK(bits[0] == 0x7fc3);
}

TEST_CASE("send and recv pass a ring, tags keep two messages apart") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size(), r = comm->rank();
  if (p == 1) return;  // no peer to talk to (every rank sees the same p)
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  std::vector<float> out_a(50), out_b(3), in_a(50), in_b(3);
  for (size_t i = 0; i < out_a.size(); ++i) out_a[i] = rank_value(r, static_cast<int64_t>(i));
  for (size_t i = 0; i < out_b.size(); ++i) out_b[i] = -rank_value(r, static_cast<int64_t>(i));
  // Receives posted in the opposite order of the sends: the tags must route them.
  CommHandle recv_b = comm->recv_async(Tensor(in_b.data(), DType::F32, {3}), left, 9);
  CommHandle recv_a = comm->recv_async(Tensor(in_a.data(), DType::F32, {50}), left, 4);
  CommHandle send_a = comm->send_async(Tensor(out_a.data(), DType::F32, {50}), right, 4);
  CommHandle send_b = comm->send_async(Tensor(out_b.data(), DType::F32, {3}), right, 9);
  recv_a->wait();
  recv_b->wait();
  send_a->wait();
  send_b->wait();
  for (size_t i = 0; i < in_a.size(); ++i) CHECK(in_a[i] == rank_value(left, static_cast<int64_t>(i)));
  for (size_t i = 0; i < in_b.size(); ++i) CHECK(in_b[i] == -rank_value(left, static_cast<int64_t>(i)));

  // A group of one send and one receive: everyone sends right and receives from the left.
  std::vector<int32_t> mine = {r, 10 * r}, theirs = {-1, -1};
  comm->p2p_group_async({{Tensor(mine.data(), DType::I32, {2}), right, 1}},
                        {{Tensor(theirs.data(), DType::I32, {2}), left, 1}})
      ->wait();
  CHECK(theirs == std::vector<int32_t>{left, 10 * left});
}

TEST_CASE("counters record calls and payload bytes exactly as defined") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "counted");
  const int p = comm->size(), r = comm->rank();
  std::vector<float> a(100, 1.0f), whole(static_cast<size_t>(6 * p)), part(6);
  std::vector<uint16_t> half(10, 0);
  comm->all_reduce(Tensor(a.data(), DType::F32, {100}));
  comm->all_reduce(Tensor(half.data(), DType::BF16, {10}));
  comm->reduce_scatter(Tensor(whole.data(), DType::F32, {6 * p}), Tensor(part.data(), DType::F32, {6}));
  comm->all_gather(Tensor(part.data(), DType::F32, {6}), Tensor(whole.data(), DType::F32, {6 * p}));
  comm->broadcast(Tensor(a.data(), DType::F32, {25}), 0);
  comm->barrier();
  if (p > 1) {
    comm->p2p_group_async({{Tensor(a.data(), DType::F32, {7}), (r + 1) % p, 0}},
                          {{Tensor(a.data() + 50, DType::F32, {7}), (r + p - 1) % p, 0}})
        ->wait();
    CommHandle in = comm->recv_async(Tensor(a.data() + 60, DType::F32, {3}), (r + p - 1) % p, 2);
    comm->send(Tensor(a.data(), DType::F32, {3}), (r + 1) % p, 2);
    in->wait();
  }
  const auto& by_op = comm->counters().by_op;
  CHECK(by_op.at("all_reduce").calls == 2);
  CHECK(by_op.at("all_reduce").payload_bytes == 100 * 4 + 10 * 2);
  CHECK(by_op.at("reduce_scatter").calls == 1);
  CHECK(by_op.at("reduce_scatter").payload_bytes == 6 * p * 4);  // the whole input
  CHECK(by_op.at("all_gather").calls == 1);
  CHECK(by_op.at("all_gather").payload_bytes == 6 * p * 4);  // the whole output
  CHECK(by_op.at("broadcast").payload_bytes == 25 * 4);
  CHECK(by_op.at("barrier").calls == 1);
  CHECK(by_op.at("barrier").payload_bytes == 0);
  if (p > 1) {
    CHECK(by_op.at("send").calls == 2);
    CHECK(by_op.at("send").payload_bytes == 7 * 4 + 3 * 4);
    CHECK(by_op.at("recv").calls == 2);
    CHECK(by_op.at("recv").payload_bytes == 7 * 4 + 3 * 4);
  }
  CHECK(comm->counters().total_payload_bytes() == 420 + 2 * 6 * p * 4 + 100 + (p > 1 ? 80 : 0));
  comm->counters().reset();
  CHECK(comm->counters().by_op.empty());
}

TEST_CASE("async operations overlap and may be waited in any order") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  auto other = make_mpi_comm(MPI_COMM_WORLD, "other");
  const int p = comm->size(), r = comm->rank();
  const int64_t n = 301;
  std::vector<float> first(static_cast<size_t>(n)), second(static_cast<size_t>(n)),
      gathered(static_cast<size_t>(3 * p));
  std::vector<float> want_first(static_cast<size_t>(n)), want_second(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    first[static_cast<size_t>(i)] = rank_value(r, i, 1);
    second[static_cast<size_t>(i)] = rank_value(r, i, 2);
    float a = rank_value(0, i, 1), b = rank_value(0, i, 2);
    for (int q = 1; q < p; ++q) {
      a += rank_value(q, i, 1);
      b += rank_value(q, i, 2);
    }
    want_first[static_cast<size_t>(i)] = a;
    want_second[static_cast<size_t>(i)] = b;
  }
  std::vector<float> mine = {float(r), float(2 * r), float(3 * r)};
  CommHandle h1 = comm->all_reduce_async(Tensor(first.data(), DType::F32, {n}), ReduceOp::Sum);
  CommHandle h2 = comm->all_reduce_async(Tensor(second.data(), DType::F32, {n}), ReduceOp::Sum);
  CommHandle h3 =
      other->all_gather_async(Tensor(mine.data(), DType::F32, {3}), Tensor(gathered.data(), DType::F32, {3 * p}));
  // Reverse order, across two communicators; rank 0 polls one of them first.
  if (r == 0)
    while (!h3->test()) {
    }
  h3->wait();
  h2->wait();
  h1->wait();
  CHECK(h1->test());
  CHECK(first_difference(first, want_first) == -1);
  CHECK(first_difference(second, want_second) == -1);
  for (int q = 0; q < p; ++q) CHECK(gathered[static_cast<size_t>(3 * q + 2)] == float(3 * q));

  // Many in flight, ranks waiting in different orders; handles dropped unwaited still finish.
  std::vector<std::vector<float>> buffers(24, std::vector<float>(5));
  std::vector<CommHandle> handles;
  for (size_t k = 0; k < buffers.size(); ++k) {
    std::fill(buffers[k].begin(), buffers[k].end(), float(r + static_cast<int>(k)));
    handles.push_back(comm->all_reduce_async(Tensor(buffers[k].data(), DType::F32, {5}), ReduceOp::Sum));
  }
  if (r % 2 == 1) std::reverse(handles.begin(), handles.end());
  handles.clear();  // destruction waits
  for (size_t k = 0; k < buffers.size(); ++k) CHECK(buffers[k][4] == float(p * (p - 1) / 2 + p * static_cast<int>(k)));
}

TEST_CASE("misuse is a logic_error before anything is sent") {
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size();
  std::vector<float> a(8 * p);
  CHECK_THROWS_WITH(comm->reduce_scatter(Tensor(a.data(), DType::F32, {8 * p}), Tensor(a.data(), DType::F32, {3})),
                    strata_catch::Contains("reduce_scatter"));
  CHECK_THROWS_AS(comm->all_gather(Tensor(a.data(), DType::F32, {2}), Tensor(a.data(), DType::F32, {2 * p + 1})),
                  std::logic_error);
  std::vector<uint16_t> u(4);
  CHECK_THROWS_WITH(comm->all_reduce(Tensor(u.data(), DType::U16, {4})), strata_catch::Contains("cannot reduce"));
  CHECK_THROWS_AS(comm->send(Tensor(a.data(), DType::F32, {1}), p), std::logic_error);
  CHECK_THROWS_AS(comm->send(Tensor(a.data(), DType::F32, {1}), comm->rank()), std::logic_error);
  CHECK_THROWS_AS(comm->broadcast(Tensor(a.data(), DType::F32, {1}), -1), std::logic_error);
  if (p > 1)
    CHECK_THROWS_AS(comm->send(Tensor(a.data(), DType::F32, {1}), (comm->rank() + 1) % p, 40000), std::logic_error);
  CHECK(comm->counters().by_op.empty());  // nothing rejected was counted
}

TEST_CASE("the MPI communicator stages CUDA tensors through host memory") {
#ifdef STRATA_HAVE_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  cudaGetLastError();
  if (devices == 0) return;  // needs a GPU; the host path is covered above
  auto comm = make_mpi_comm(MPI_COMM_WORLD, "world");
  const int p = comm->size(), r = comm->rank();
  std::vector<float> host = {1.0f + r, 2.0f * r, -0.5f};
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, host.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  comm->all_reduce(Tensor(device, DType::F32, {3}, Device::CUDA));
  std::vector<float> back(3);
  REQUIRE(cudaMemcpy(back.data(), device, back.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  std::vector<float> gathered(3 * static_cast<size_t>(p));
  void* device_out = nullptr;
  REQUIRE(cudaMalloc(&device_out, gathered.size() * sizeof(float)) == cudaSuccess);
  comm->all_gather(Tensor(device, DType::F32, {3}, Device::CUDA), Tensor(device_out, DType::F32, {3 * p}, Device::CUDA));
  REQUIRE(cudaMemcpy(gathered.data(), device_out, gathered.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  cudaFree(device);
  cudaFree(device_out);
  CHECK(back[0] == static_cast<float>(p + p * (p - 1) / 2));
  CHECK(back[1] == static_cast<float>(p * (p - 1)));
  CHECK(back[2] == -0.5f * static_cast<float>(p));
  for (int k = 0; k < p; ++k) CHECK(gathered[static_cast<size_t>(3 * k)] == back[0]);
  CHECK(comm->counters().by_op.at("all_reduce").payload_bytes == 12);
#endif
}

TEST_CASE("NCCL communicators: refused with a UserError where they cannot work, else they reduce") {
  if (!nccl_built()) {
    CHECK_THROWS_WITH(make_comm(CommBackendKind::Nccl, MPI_COMM_WORLD, "nccl"),
                      strata_catch::Contains("built without NCCL"));
    return;
  }
#ifdef STRATA_HAVE_CUDA
  const int p = strata_test::mpi().world_size();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  cudaGetLastError();
  if (devices == 0) {  // every rank must refuse, none may hang
    CHECK_THROWS_WITH(make_comm(CommBackendKind::Nccl, MPI_COMM_WORLD, "nccl"),
                      strata_catch::Contains("no usable CUDA device"));
    return;
  }
  if (p > 1) {  // nobody selected a device, so the ranks share GPU 0
    CHECK_THROWS_WITH(make_comm(CommBackendKind::Nccl, MPI_COMM_WORLD, "nccl"), strata_catch::Contains("share GPU"));
    return;
  }
  auto comm = make_comm(CommBackendKind::Nccl, MPI_COMM_WORLD, "nccl");
  CHECK(comm->backend_name() == "nccl");
  std::vector<float> host = {1.5f, -2.0f, 3.25f};
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, host.size() * sizeof(float)) == cudaSuccess);
  cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  comm->all_reduce(Tensor(device, DType::F32, {3}, Device::CUDA));
  std::vector<float> back(3);
  cudaMemcpy(back.data(), device, back.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  CHECK(back == host);  // one rank: the sum is the input
  CHECK(comm->counters().by_op.at("all_reduce").payload_bytes == 12);
  CHECK_THROWS_WITH(comm->all_reduce(Tensor(host.data(), DType::F32, {3})), strata_catch::Contains("host memory"));
#endif
}
