// Retry loops bounded by time, not by counts (internal). A count bound fails healthy readers when
// a live lock holder is merely descheduled for a while, and says nothing about how long a reader
// really waited; a time bound states it. The clock is read once every 16 failed attempts, so a
// short retry (the common case: one or two re-reads) never reads it at all.
#pragma once

#include <chrono>
#include <cstdint>

namespace rdmahash {

class RetryDeadline {
 public:
  explicit RetryDeadline(std::chrono::nanoseconds budget) : budget_(budget) {}
  // Call after each failed attempt: true once `budget` has passed since the first failed
  // attempt (at most 16 attempts late).
  bool expired() {
    if ((++failed_ & 15) != 1) return false;
    const auto now = std::chrono::steady_clock::now();
    if (failed_ == 1) {
      start_ = now;
      return false;
    }
    return now - start_ >= budget_;
  }
  uint64_t attempts() const { return failed_; }

 private:
  std::chrono::nanoseconds budget_;
  std::chrono::steady_clock::time_point start_{};
  uint64_t failed_ = 0;
};

}  // namespace rdmahash
