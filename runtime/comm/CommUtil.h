//===- CommUtil.h - Bounded waits shared by the communicators ---*- C++ -*-===//
//
// Every wait of the collectives and the rendezvous ends at a Deadline, and their
// timeout errors print the bound the same way ("30 s", "0.5 s").
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>

namespace dlc::rt {

/// A point in time `seconds` from now (a NaN or negative bound has passed already;
/// a huge one is capped at a year so that the clock arithmetic cannot overflow).
class Deadline {
public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(double seconds)
      : end_(Clock::now() +
             std::chrono::duration_cast<Clock::duration>(
                 std::chrono::duration<double>((seconds > 0 ? std::fmin(seconds, 3.2e7) : 0.0)))) {}
  bool passed() const { return Clock::now() >= end_; }
  /// Milliseconds left (rounded up so that a poll() does not wake early), at most `cap`.
  int remainingMs(int cap = INT_MAX) const {
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(end_ - Clock::now()).count();
    if (left <= 0)
      return 0;
    long long ms = (left + 999) / 1000;
    return ms < cap ? static_cast<int>(ms) : cap;
  }

private:
  Clock::time_point end_;
};

/// "30 s", "0.5 s", "1.25 s".
inline std::string secondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

} // namespace dlc::rt
