// rdmahash/task.h — a lazy C++20 coroutine task with symmetric transfer.
//
// `Task<T>` starts when awaited (or when handed to an Engine) and resumes its awaiter when it
// finishes, without growing the stack (symmetric transfer). Exceptions propagate to the awaiter.
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <new>
#include <optional>
#include <utility>

namespace rdmahash {

template <class T>
class Task;

namespace detail {

// Coroutine frames are allocated for every operation, so they come from a per-thread free list
// of 64-byte size classes (up to 2 KiB) instead of malloc. A frame freed on another thread just
// joins that thread's list. Lists are released when their thread exits.
class FramePool {
 public:
  static constexpr std::size_t kClass = 64, kClasses = 32;
  static void* allocate(std::size_t n) {
    const std::size_t c = (n + kClass - 1) / kClass;
    if (c < kClasses) {
      auto& head = local().free_[c];
      if (head) {
        Node* node = head;
        head = node->next;
        return node;
      }
      return ::operator new(c * kClass);
    }
    return ::operator new(n);
  }
  static void deallocate(void* p, std::size_t n) noexcept {
    const std::size_t c = (n + kClass - 1) / kClass;
    if (c < kClasses) {
      auto& head = local().free_[c];
      head = ::new (p) Node{head};
      return;
    }
    ::operator delete(p);
  }

 private:
  struct Node { Node* next; };
  ~FramePool() {
    for (Node* head : free_)
      while (head) {
        Node* next = head->next;
        ::operator delete(head);
        head = next;
      }
  }
  static FramePool& local() {
    thread_local FramePool pool;
    return pool;
  }
  Node* free_[kClasses] = {};
};

struct FinalAwaiter {
  bool await_ready() const noexcept { return false; }
  template <class P>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) const noexcept {
    auto c = h.promise().continuation;
    return c ? c : std::noop_coroutine();
  }
  void await_resume() const noexcept {}
};

struct PromiseBase {
  static void* operator new(std::size_t n) { return FramePool::allocate(n); }
  static void operator delete(void* p, std::size_t n) noexcept { FramePool::deallocate(p, n); }
  std::coroutine_handle<> continuation;
  std::exception_ptr error;
  std::suspend_always initial_suspend() const noexcept { return {}; }
  FinalAwaiter final_suspend() const noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

}  // namespace detail

template <class T>
class [[nodiscard]] Task {
 public:
  struct promise_type : detail::PromiseBase {
    std::optional<T> value;
    Task get_return_object() { return Task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    template <class U>
    void return_value(U&& v) { value.emplace(std::forward<U>(v)); }
  };

  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) { reset(); h_ = std::exchange(o.h_, {}); }
    return *this;
  }
  ~Task() { reset(); }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
    h_.promise().continuation = awaiter;
    return h_;
  }
  T await_resume() {
    auto& p = h_.promise();
    if (p.error) std::rethrow_exception(p.error);
    return std::move(*p.value);
  }

 private:
  explicit Task(std::coroutine_handle<promise_type> h) : h_(h) {}
  void reset() { if (h_) h_.destroy(); h_ = {}; }
  std::coroutine_handle<promise_type> h_;
};

template <>
class [[nodiscard]] Task<void> {
 public:
  struct promise_type : detail::PromiseBase {
    Task get_return_object() { return Task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    void return_void() noexcept {}
  };

  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) { reset(); h_ = std::exchange(o.h_, {}); }
    return *this;
  }
  ~Task() { reset(); }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
    h_.promise().continuation = awaiter;
    return h_;
  }
  void await_resume() {
    if (h_.promise().error) std::rethrow_exception(h_.promise().error);
  }

 private:
  explicit Task(std::coroutine_handle<promise_type> h) : h_(h) {}
  void reset() { if (h_) h_.destroy(); h_ = {}; }
  std::coroutine_handle<promise_type> h_;
};

}  // namespace rdmahash
