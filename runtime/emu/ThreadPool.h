//===- ThreadPool.h - A fixed pool for parallel loops (emu backend) --------===//
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dlc::rt {

/// Runs parallelFor bodies on a fixed set of workers; the calling thread works too.
class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return static_cast<int>(workers_.size()) + 1; }
  /// Calls body(worker, i) for i in [0, n); returns when all calls are done.
  void parallelFor(uint64_t n, const std::function<void(int, uint64_t)> &body);

private:
  void workerLoop(int id);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, doneCv_;
  const std::function<void(int, uint64_t)> *body_ = nullptr;
  uint64_t next_ = 0, total_ = 0, generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

} // namespace dlc::rt
