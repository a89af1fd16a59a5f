// The reentry guard of a scheme's batched operations (get_batch, find_or_put_batch).
//
// A batched operation walks state its client keeps between calls (the keys in flight, their
// buffers, the round's requests). A `done` callback that called the same method again would clear
// that state under the outer call's feet, so the nested call is refused with std::logic_error
// before it touches anything. The flag is cleared however the outer call ends, so a call after an
// exception runs normally.
#pragma once

#include <stdexcept>
#include <string>

namespace rdmahash {

class BatchReentryGuard {
 public:
  // `what` names the method in the error ("LinearClient::get_batch").
  BatchReentryGuard(bool& running, const char* what) : running_(running) {
    if (running_) throw std::logic_error(std::string(what) + ": called again from its own done callback");
    running_ = true;
  }
  ~BatchReentryGuard() { running_ = false; }
  BatchReentryGuard(const BatchReentryGuard&) = delete;
  BatchReentryGuard& operator=(const BatchReentryGuard&) = delete;

 private:
  bool& running_;
};

}  // namespace rdmahash
