// The MPI communicator: host tensors, every operation non-blocking. Reductions are built
// from point-to-point messages so that each block is summed by its owner in rank order
// (bit-identical everywhere, independent of MPI's algorithm choice) and so that a timeout
// can name the exact peer that never answered.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/comm.h"
#include "comm/comm_internal.h"
#include "comm/mpi_progress.h"
#include "core/core.h"

namespace strata::comm_detail {
namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::I32:
      return MPI_INT32_T;
    case DType::BF16:
    case DType::F16:
    case DType::U16:
      return MPI_UINT16_T;  // moved as raw 2-byte elements; reductions widen to fp32 locally
  }
  return MPI_BYTE;
}

float load_float(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::F32:
      return static_cast<const float*>(base)[i];
    case DType::BF16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    default:
      return fp16_to_float(static_cast<const uint16_t*>(base)[i]);
  }
}

float combine(float acc, float x, ReduceOp op) {
  if (op == ReduceOp::Sum) return acc + x;
  return (x > acc || std::isnan(x)) ? x : acc;  // NaN wins, so overflow checks see it
}

// out[i] = rows[0][i] (op) rows[1][i] (op) ... in row order; rows are `stride` elements
// apart. 16-bit types accumulate in fp32 and round once.
void reduce_rows(const unsigned char* rows, int64_t stride, int nrows, int64_t count, DType dtype, ReduceOp op,
                 void* out) {
  const size_t esize = dtype_size(dtype);
  auto row = [&](int r) { return rows + static_cast<size_t>(r) * static_cast<size_t>(stride) * esize; };
  if (dtype == DType::I32) {
    auto* o = static_cast<int32_t*>(out);
    std::memcpy(o, row(0), static_cast<size_t>(count) * esize);
    for (int r = 1; r < nrows; ++r) {
      const auto* x = reinterpret_cast<const int32_t*>(row(r));
      for (int64_t i = 0; i < count; ++i)  // unsigned arithmetic: wraps instead of overflowing
        o[i] = op == ReduceOp::Sum ? static_cast<int32_t>(static_cast<uint32_t>(o[i]) + static_cast<uint32_t>(x[i]))
                                   : std::max(o[i], x[i]);
    }
    return;
  }
  if (dtype == DType::F32) {
    auto* o = static_cast<float*>(out);
    std::memcpy(o, row(0), static_cast<size_t>(count) * esize);
    for (int r = 1; r < nrows; ++r) {
      const auto* x = reinterpret_cast<const float*>(row(r));
      for (int64_t i = 0; i < count; ++i) o[i] = combine(o[i], x[i], op);
    }
    return;
  }
  constexpr int64_t kChunk = 2048;
  float acc[kChunk];
  for (int64_t begin = 0; begin < count; begin += kChunk) {
    const int64_t n = std::min(kChunk, count - begin);
    for (int64_t i = 0; i < n; ++i) acc[i] = load_float(row(0), dtype, begin + i);
    for (int r = 1; r < nrows; ++r)
      for (int64_t i = 0; i < n; ++i) acc[i] = combine(acc[i], load_float(row(r), dtype, begin + i), op);
    auto* o = static_cast<uint16_t*>(out) + begin;
    for (int64_t i = 0; i < n; ++i) o[i] = dtype == DType::BF16 ? float_to_bf16(acc[i]) : float_to_fp16(acc[i]);
  }
}

class MpiHandle final : public CommRequest {
 public:
  explicit MpiHandle(std::shared_ptr<MpiOperation> op) : op_(std::move(op)) {}
  ~MpiHandle() override { wait(); }
  void wait() override { wait_operation(*op_); }
  bool test() override {
    if (!op_->done()) progress_all();
    return op_->done();
  }

 private:
  std::shared_ptr<MpiOperation> op_;
};

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm parent, const std::string& name) : Comm(name, world_ranks_of(parent)) {
    comm_timeout_seconds();  // an invalid STRATA_COMM_TIMEOUT_S surfaces now, as a UserError
    // Two private duplicates: internal collective traffic and user point-to-point tags
    // live in separate matching spaces, so neither can take the other's messages.
    MPI_CHECK(MPI_Comm_dup(parent, &collective_comm_));
    MPI_CHECK(MPI_Comm_dup(parent, &p2p_comm_));
    MPI_CHECK(MPI_Comm_set_errhandler(collective_comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(p2p_comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(collective_comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(collective_comm_, &size_));
    group_ = std::make_shared<GroupInfo>(GroupInfo{name, world_ranks()});
  }

  ~MpiComm() override {
    if (!mpi_is_initialized()) return;
    wait_owned_by(this);
    MPI_Comm_free(&collective_comm_);
    MPI_Comm_free(&p2p_comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }

  CommHandle all_reduce_async(Tensor data, ReduceOp op) override {
    check_tensor(name(), "all_reduce", data, Device::CPU);
    check_reducible(name(), "all_reduce", data);
    record("all_reduce", static_cast<int64_t>(data.bytes()));
    auto operation = new_operation("all_reduce", data.bytes());
    const int64_t n = data.numel();
    if (size_ == 1 || n == 0) return finish(operation);
    const int tag = next_tag();
    const int esize = static_cast<int>(dtype_size(data.dtype));
    const MPI_Datatype type = mpi_type(data.dtype);
    // Blocks of ceil(n / p) elements; the last ones may be shorter or empty.
    const int64_t block = (n + size_ - 1) / size_;
    auto offset = [=](int j) { return std::min<int64_t>(static_cast<int64_t>(j) * block, n); };
    auto length = [=](int j) { return std::min<int64_t>(block, n - offset(j)); };
    char* base = static_cast<char*>(data.data);
    const int64_t mine = length(rank_);
    MpiOperation& o = *operation;
    unsigned char* scratch = o.allocate_scratch(static_cast<size_t>(mine * size_ * esize));
    if (mine > 0) std::memcpy(scratch + rank_ * mine * esize, base + offset(rank_) * esize, mine * esize);
    // Phase 1 (reduce-scatter): block j goes to its owner j; our block's contributions arrive.
    for (int k = 1; k < size_; ++k) {
      const int from = peer_before(k);
      if (mine > 0) o.post_recv(scratch + from * mine * esize, mine, esize, type, from, tag, collective_comm_);
    }
    for (int k = 1; k < size_; ++k) {
      const int to = peer_after(k);
      if (length(to) > 0) o.post_send(base + offset(to) * esize, length(to), esize, type, to, tag, collective_comm_);
    }
    // Phase 2 (all-gather): our reduced block goes to everyone, theirs come back.
    const DType dtype = data.dtype;
    const int rank = rank_, size = size_;
    MPI_Comm comm = collective_comm_;
    o.then([&o, base, mine, esize, type, tag, dtype, op, rank, size, comm, offset, length] {
      if (mine > 0) reduce_rows(o.scratch(), mine, size, mine, dtype, op, base + offset(rank) * esize);
      for (int k = 1; k < size; ++k) {
        const int from = (rank - k + size) % size;
        if (length(from) > 0) o.post_recv(base + offset(from) * esize, length(from), esize, type, from, tag + 1, comm);
      }
      for (int k = 1; k < size; ++k)
        if (mine > 0) o.post_send(base + offset(rank) * esize, mine, esize, type, (rank + k) % size, tag + 1, comm);
    });
    return finish(operation);
  }

  CommHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) override {
    check_tensor(name(), "reduce_scatter", input, Device::CPU);
    check_tensor(name(), "reduce_scatter", output, Device::CPU);
    check_reducible(name(), "reduce_scatter", input);
    check_same_dtype(name(), "reduce_scatter", input, output);
    check_blocked(name(), "reduce_scatter", input, output, size_, rank_);
    record("reduce_scatter", static_cast<int64_t>(input.bytes()));
    auto operation = new_operation("reduce_scatter", input.bytes());
    const int64_t n = output.numel();
    const int esize = static_cast<int>(dtype_size(input.dtype));
    const char* in = static_cast<const char*>(input.data);
    if (n == 0) return finish(operation);
    if (size_ == 1) {
      std::memmove(output.data, in, output.bytes());
      return finish(operation);
    }
    const int tag = next_tag();
    const MPI_Datatype type = mpi_type(input.dtype);
    MpiOperation& o = *operation;
    // Our own block is copied first, so output may be that block (in place).
    unsigned char* scratch = o.allocate_scratch(static_cast<size_t>(n * size_ * esize));
    std::memcpy(scratch + rank_ * n * esize, in + rank_ * n * esize, n * esize);
    for (int k = 1; k < size_; ++k)
      o.post_recv(scratch + peer_before(k) * n * esize, n, esize, type, peer_before(k), tag, collective_comm_);
    for (int k = 1; k < size_; ++k)
      o.post_send(in + peer_after(k) * n * esize, n, esize, type, peer_after(k), tag, collective_comm_);
    const DType dtype = input.dtype;
    const int size = size_;
    void* out = output.data;
    o.then([&o, n, size, dtype, op, out] { reduce_rows(o.scratch(), n, size, n, dtype, op, out); });
    return finish(operation);
  }

  CommHandle all_gather_async(Tensor input, Tensor output) override {
    check_tensor(name(), "all_gather", input, Device::CPU);
    check_tensor(name(), "all_gather", output, Device::CPU);
    check_same_dtype(name(), "all_gather", input, output);
    check_blocked(name(), "all_gather", output, input, size_, rank_);
    record("all_gather", static_cast<int64_t>(output.bytes()));
    auto operation = new_operation("all_gather", output.bytes());
    const int64_t n = input.numel();
    if (n == 0) return finish(operation);
    const int esize = static_cast<int>(dtype_size(input.dtype));
    char* out = static_cast<char*>(output.data);
    if (input.data != out + rank_ * n * esize) std::memcpy(out + rank_ * n * esize, input.data, input.bytes());
    if (size_ == 1) return finish(operation);
    const int tag = next_tag();
    const MPI_Datatype type = mpi_type(input.dtype);
    for (int k = 1; k < size_; ++k)
      operation->post_recv(out + peer_before(k) * n * esize, n, esize, type, peer_before(k), tag, collective_comm_);
    for (int k = 1; k < size_; ++k)
      operation->post_send(input.data, n, esize, type, peer_after(k), tag, collective_comm_);
    return finish(operation);
  }

  CommHandle broadcast_async(Tensor data, int root) override {
    check_tensor(name(), "broadcast", data, Device::CPU);
    check_peer(name(), "broadcast", root, size_, rank_, true);
    record("broadcast", static_cast<int64_t>(data.bytes()));
    auto operation = new_operation("broadcast", data.bytes());
    if (size_ == 1 || data.numel() == 0) return finish(operation);
    const int tag = next_tag();
    const int esize = static_cast<int>(dtype_size(data.dtype));
    const MPI_Datatype type = mpi_type(data.dtype);
    const int64_t n = data.numel();
    // Binomial tree over ranks renumbered so the root is 0: receive from the parent, then
    // forward to the children (log2(p) rounds, every message from a known peer).
    const int relative = (rank_ - root + size_) % size_;
    int mask = 1;
    while (mask < size_ && !(relative & mask)) mask <<= 1;
    if (relative != 0)
      operation->post_recv(data.data, n, esize, type, (relative - mask + root) % size_, tag, collective_comm_);
    const int size = size_;
    MPI_Comm comm = collective_comm_;
    MpiOperation& o = *operation;
    void* buffer = data.data;
    o.then([&o, buffer, n, esize, type, tag, relative, mask, root, size, comm] {
      for (int child = mask >> 1; child > 0; child >>= 1)
        if (relative + child < size) o.post_send(buffer, n, esize, type, (relative + child + root) % size, tag, comm);
    });
    return finish(operation);
  }

  CommHandle send_async(Tensor data, int peer, int tag) override {
    check_tensor(name(), "send", data, Device::CPU);
    check_peer(name(), "send", peer, size_, rank_, false);
    check_tag(name(), "send", tag);
    record("send", static_cast<int64_t>(data.bytes()));
    auto operation = new_operation("send", data.bytes());
    operation->post_send(data.data, data.numel(), static_cast<int>(dtype_size(data.dtype)), mpi_type(data.dtype), peer,
                         tag, p2p_comm_);
    return finish(operation);
  }

  CommHandle recv_async(Tensor data, int peer, int tag) override {
    check_tensor(name(), "recv", data, Device::CPU);
    check_peer(name(), "recv", peer, size_, rank_, false);
    check_tag(name(), "recv", tag);
    record("recv", static_cast<int64_t>(data.bytes()));
    auto operation = new_operation("recv", data.bytes());
    operation->post_recv(data.data, data.numel(), static_cast<int>(dtype_size(data.dtype)), mpi_type(data.dtype), peer,
                         tag, p2p_comm_);
    return finish(operation);
  }

  // Every rank tells every other one it has arrived: O(p) empty messages per rank, and a
  // rank that never arrives is named by everyone waiting for it.
  void barrier() override {
    record("barrier", 0);
    auto operation = new_operation("barrier", 0);
    if (size_ > 1) {
      const int tag = next_tag();
      for (int k = 1; k < size_; ++k)
        operation->post_recv(nullptr, 0, 1, MPI_BYTE, peer_before(k), tag, collective_comm_);
      for (int k = 1; k < size_; ++k)
        operation->post_send(nullptr, 0, 1, MPI_BYTE, peer_after(k), tag, collective_comm_);
    }
    finish(operation)->wait();
  }

 private:
  // Peers in a staggered order (rank+1, rank+2, ...), so that no rank is everyone's first
  // destination; receives are posted before sends so data rarely arrives unexpected.
  int peer_after(int k) const { return (rank_ + k) % size_; }
  int peer_before(int k) const { return (rank_ - k + size_) % size_; }

  std::shared_ptr<MpiOperation> new_operation(const char* op, size_t bytes) {
    ++operations_issued_;
    return std::make_shared<MpiOperation>(group_, this,
                                          fmt::format("{} #{} ({} bytes)", op, operations_issued_, bytes));
  }
  CommHandle finish(const std::shared_ptr<MpiOperation>& operation) {
    start_operation(operation);
    return std::make_unique<MpiHandle>(operation);
  }
  // Every rank issues a communicator's collectives in the same order, so this sequence
  // number is the same everywhere and gives each operation its own pair of tags.
  int next_tag() {
    const int tag = static_cast<int>(collective_sequence_ % ((kMaxUserTag + 1) / 2)) * 2;
    ++collective_sequence_;
    return tag;
  }

  MPI_Comm collective_comm_ = MPI_COMM_NULL;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<const GroupInfo> group_;
  int64_t collective_sequence_ = 0;
  int64_t operations_issued_ = 0;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_backend(MPI_Comm comm, const std::string& name) {
  return std::make_unique<MpiComm>(comm, name);
}

}  // namespace strata::comm_detail
