#include "ThreadPool.h"

namespace dlc::rt {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto &w : workers_)
    w.join();
}

void ThreadPool::workerLoop(int id) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return stop_ || generation_ != seen; });
    if (stop_)
      return;
    seen = generation_;
    ++active_;
    while (next_ < total_) {
      uint64_t i = next_++;
      l.unlock();
      (*body_)(id, i);
      l.lock();
    }
    if (--active_ == 0)
      doneCv_.notify_all();
  }
}

void ThreadPool::parallelFor(uint64_t n, const std::function<void(int, uint64_t)> &body) {
  if (n == 0)
    return;
  if (workers_.empty() || n == 1) {
    for (uint64_t i = 0; i < n; ++i)
      body(0, i);
    return;
  }
  std::unique_lock<std::mutex> l(mu_);
  body_ = &body;
  next_ = 0;
  total_ = n;
  ++generation_;
  ++active_;
  cv_.notify_all();
  while (next_ < total_) {
    uint64_t i = next_++;
    l.unlock();
    body(0, i);
    l.lock();
  }
  --active_;
  doneCv_.wait(l, [&] { return active_ == 0; });
  body_ = nullptr;
}

} // namespace dlc::rt
