// The MPI backend's progress engine. It is process-wide on purpose: a rank blocked in a
// wait on one communicator may owe the next phase of an operation on another (its peers
// wait on that one first), so every wait advances every operation in flight.
#include "comm/mpi_progress.h"

#include <fmt/core.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <set>

#include "comm/comm.h"
#include "core/core.h"

namespace strata::comm_detail {
namespace {

// Pieces of at most 2^30 elements keep every count inside MPI's int.
constexpr int64_t kMaxPieceElements = int64_t{1} << 30;

std::vector<std::shared_ptr<MpiOperation>>& in_flight() {
  static std::vector<std::shared_ptr<MpiOperation>> operations;
  return operations;
}

}  // namespace

MpiOperation::MpiOperation(std::shared_ptr<const GroupInfo> group, const void* owner, std::string description)
    : group_(std::move(group)), owner_(owner), description_(std::move(description)) {}

void MpiOperation::post_send(const void* data, int64_t count, int elem_bytes, MPI_Datatype type, int peer, int tag,
                             MPI_Comm comm) {
  const char* bytes = static_cast<const char*>(data);
  int64_t begin = 0;
  do {  // an empty message is still one message (barriers are made of them)
    const int piece = static_cast<int>(std::min(kMaxPieceElements, count - begin));
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Isend(bytes + begin * elem_bytes, piece, type, peer, tag, comm, &request));
    requests_.push_back(request);
    request_peers_.push_back(peer);
    request_is_recv_.push_back(false);
    begin += piece;
  } while (begin < count);
}

void MpiOperation::post_recv(void* data, int64_t count, int elem_bytes, MPI_Datatype type, int peer, int tag,
                             MPI_Comm comm) {
  char* bytes = static_cast<char*>(data);
  int64_t begin = 0;
  do {
    const int piece = static_cast<int>(std::min(kMaxPieceElements, count - begin));
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Irecv(bytes + begin * elem_bytes, piece, type, peer, tag, comm, &request));
    requests_.push_back(request);
    request_peers_.push_back(peer);
    request_is_recv_.push_back(true);
    begin += piece;
  } while (begin < count);
}

unsigned char* MpiOperation::allocate_scratch(size_t bytes) {
  scratch_.reset(new unsigned char[std::max<size_t>(bytes, 1)]);
  return scratch_.get();
}

bool MpiOperation::advance() {
  if (done_) return false;
  bool moved = false;
  for (;;) {
    if (!requests_.empty()) {
      completed_indices_.resize(requests_.size());
      int count = 0;
      MPI_CHECK(MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &count, completed_indices_.data(),
                             MPI_STATUSES_IGNORE));
      if (count != MPI_UNDEFINED && count > 0) moved = true;
      // Completed requests become MPI_REQUEST_NULL; the phase is over when all are.
      const bool phase_over =
          std::all_of(requests_.begin(), requests_.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
      if (!phase_over) return moved;
      requests_.clear();
      request_peers_.clear();
      request_is_recv_.clear();
    }
    if (next_step_ < steps_.size()) {
      std::function<void()> step = std::move(steps_[next_step_++]);
      step();
      moved = true;
      continue;
    }
    done_ = true;
    steps_.clear();
    scratch_.reset();
    return true;
  }
}

std::string MpiOperation::describe_pending() const {
  std::set<int> receiving, sending;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    const int world = group_->world_ranks[static_cast<size_t>(request_peers_[i])];
    (request_is_recv_[i] ? receiving : sending).insert(world);
  }
  std::string pending;
  auto list = [](const std::set<int>& ranks) {
    std::string s;
    for (int r : ranks) s += (s.empty() ? "" : ", ") + world_rank_name(r);
    return s;
  };
  if (!receiving.empty()) pending += "no data yet from " + list(receiving);
  if (!sending.empty())
    pending += (pending.empty() ? "" : "; ") + std::string("our data not yet received by ") + list(sending);
  return fmt::format("{}: {}", describe(), pending.empty() ? "finishing local work" : pending);
}

std::string MpiOperation::describe() const {
  std::string members;
  for (int r : group_->world_ranks) members += (members.empty() ? "" : ",") + std::to_string(r);
  return fmt::format("{} on communicator '{}' (world ranks {})", description_, group_->comm_name, members);
}

namespace {
std::vector<std::string>& world_hosts() {
  static std::vector<std::string> hosts;
  return hosts;
}
}  // namespace

void set_world_hosts(std::vector<std::string> hosts) { world_hosts() = std::move(hosts); }

std::string world_rank_name(int world_rank) {
  const std::vector<std::string>& hosts = world_hosts();
  if (world_rank >= 0 && static_cast<size_t>(world_rank) < hosts.size())
    return fmt::format("world rank {} ({})", world_rank, hosts[static_cast<size_t>(world_rank)]);
  return fmt::format("world rank {}", world_rank);
}

void start_operation(const std::shared_ptr<MpiOperation>& op) {
  op->advance();
  if (!op->done()) in_flight().push_back(op);
}

void progress_all() {
  auto& operations = in_flight();
  for (size_t i = 0; i < operations.size(); ++i) operations[i]->advance();
  operations.erase(std::remove_if(operations.begin(), operations.end(),
                                  [](const std::shared_ptr<MpiOperation>& op) { return op->done(); }),
                   operations.end());
}

void wait_operation(MpiOperation& op) {
  if (op.done()) return;
  const double limit = comm_timeout_seconds();
  const Timer waited;
  WaitWatch watch(op, limit);
  // What the watchdog says should MPI stop returning (the first progress pass can already
  // block, connecting to a lost node): taken now, refreshed once a second of waiting.
  if (limit > 0) watch.pending(op.describe_pending());
  double described_at = 0;
  while (!op.done()) {
    progress_all();
    if (op.done()) break;
    watch.alive();
    if (limit > 0 && waited.seconds() - described_at >= 1.0) {
      described_at = waited.seconds();
      watch.pending(op.describe_pending());
    }
    if (limit > 0 && waited.seconds() > limit) {
      log_error(
          "communication timeout: waited {:.0f} s for {}. A rank is dead, stalled, or running a different "
          "operation; aborting the job (limit STRATA_COMM_TIMEOUT_S={:g} s)",
          waited.seconds(), op.describe_pending(), limit);
      watch.aborting();
      abort_job(kExitDeviceFailure);
    }
    // Ranks often outnumber cores (tests, CPU runs): a waiting rank gives its core away.
    sched_yield();
  }
}

void wait_owned_by(const void* owner) {
  std::vector<std::shared_ptr<MpiOperation>> mine;
  for (const auto& op : in_flight())
    if (op->owner() == owner) mine.push_back(op);
  for (const auto& op : mine) wait_operation(*op);
}

}  // namespace strata::comm_detail
