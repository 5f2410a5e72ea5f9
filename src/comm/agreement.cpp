// Set-up that every rank does on its own (opening files, choosing a device) ends in one
// agreement over the world, so that a user error seen by some ranks only stops every rank with
// that error instead of leaving the others blocked in their next collective.
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/mpi_progress.h"
#include "core/core.h"

namespace strata {
namespace {

std::string message_of(const UserError& e) {
  const auto* many = dynamic_cast<const UserErrors*>(&e);
  if (!many) return e.what();
  std::string text;
  for (const std::string& line : many->errors()) text += (text.empty() ? "" : "\n  ") + line;
  return text;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace

std::string rank_placement(const MpiRuntime& mpi) {
  constexpr size_t kWords = 8;  // host names travel as 64 bytes (longer ones are cut)
  std::vector<int64_t> mine(kWords, 0);
  std::memcpy(mine.data(), mpi.hostname().data(), std::min(mpi.hostname().size(), kWords * sizeof(int64_t) - 1));
  const std::vector<int64_t> all = mpi.all_gather(mine);
  std::vector<std::string> hosts, host_of_rank;
  std::vector<std::vector<int>> ranks;
  for (int r = 0; r < mpi.world_size(); ++r) {
    const std::string host(reinterpret_cast<const char*>(all.data() + static_cast<size_t>(r) * kWords));
    host_of_rank.push_back(host);
    const size_t at = static_cast<size_t>(std::find(hosts.begin(), hosts.end(), host) - hosts.begin());
    if (at == hosts.size()) {
      hosts.push_back(host);
      ranks.emplace_back();
    }
    ranks[at].push_back(r);
  }
  comm_detail::set_world_hosts(std::move(host_of_rank));
  std::string text;
  for (size_t h = 0; h < hosts.size(); ++h) {
    std::string runs;
    const std::vector<int>& rs = ranks[h];
    for (size_t i = 0; i < rs.size();) {
      size_t j = i;
      while (j + 1 < rs.size() && rs[j + 1] == rs[j] + 1) ++j;
      runs += (runs.empty() ? "" : ",") + (j > i ? fmt::format("{}-{}", rs[i], rs[j]) : std::to_string(rs[i]));
      i = j + 1;
    }
    text += fmt::format("{}{}: rank{} {}", h ? "; " : "", hosts[h], rs.size() == 1 ? "" : "s", runs);
  }
  return text;
}

int first_rank_unlike_rank0(const std::vector<int64_t>& all, size_t width) {
  for (size_t r = 1; r * width < all.size(); ++r) {
    if (!std::equal(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(width),
                    all.begin() + static_cast<std::ptrdiff_t>(r * width)))
      return static_cast<int>(r);
  }
  return -1;
}

void agree_on_user_errors(const MpiRuntime& mpi, const std::string& what, const std::function<void()>& step) {
  std::exception_ptr failure;
  std::string message;
  try {
    step();
  } catch (const UserError& e) {
    failure = std::current_exception();
    message = mpi.hostname() + ": " + message_of(e);
  }
  const int size = mpi.world_size();
  if (size == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  const std::vector<int64_t> flags = mpi.all_gather({failure ? 1 : 0});
  std::vector<int> failed_ranks;
  for (int r = 0; r < size; ++r)
    if (flags[static_cast<size_t>(r)]) failed_ranks.push_back(r);
  if (failed_ranks.empty()) return;
  if (static_cast<int>(failed_ranks.size()) == size) {
    // Every rank failed: the same config and files, as a rule, so each reports its own error.
    try {
      std::rethrow_exception(failure);
    } catch (const UserError& e) {
      rethrow_on_every_rank(e);
    }
  }

  const int first = failed_ranks.front();
  mpi.broadcast(message, first);
  throw UserError(fmt::format(
      "{}: failed on rank{} {} of {} only; rank {} on {}\n"
      "(each rank reads files and finds devices on its own node: paths must name the same files on every node, "
      "e.g. on a shared file system, and the nodes must be set up alike)",
      what, failed_ranks.size() == 1 ? "" : "s", rank_list(failed_ranks), size, first, message),
      RaisedOn::EveryRank);
}

}  // namespace strata
