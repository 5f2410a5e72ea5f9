// A fixed pool of worker threads that runs one parallel loop at a time: the host optimizer of
// offloaded state spreads its pass over a rank's share of the node's cores with it.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

class ThreadPool {
 public:
  // `threads` workers in all, the calling thread counted as one (1: everything runs inline).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls task(i) for every i in [0, tasks), spread over the workers and the caller; returns
  // when all have returned. The first exception a task throws is rethrown here.
  void run(int64_t tasks, const std::function<void(int64_t)>& task);

 private:
  void work();
  void drain();
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t tasks_ = 0, next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

// Threads for the rank's host work: the node's cores shared evenly by the ranks on it, at
// least one (`requested` > 0 overrides).
int host_threads_per_rank(int requested, int ranks_on_node);

}  // namespace strata
