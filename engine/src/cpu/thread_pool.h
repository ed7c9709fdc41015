#pragma once
// A small persistent thread pool for batch-1 inference: one job at a time, run by
// every thread (the caller is thread 0). Workers spin briefly before sleeping so
// that the ~170 dispatches of a decode step do not each pay a futex wake-up.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace runahead {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Calls fn(thread) for thread in [0, size()) concurrently; returns when all are done.
  template <class F>
  void run(F&& fn) {
    dispatch([](void* f, int thread) { (*static_cast<F*>(f))(thread); }, &fn);
  }

  // Splits [0, n) into size() contiguous ranges whose bounds are multiples of `align`
  // (except n) and calls fn(begin, end) for each non-empty one. Work of a single block
  // (a decode step's norm or rope) runs on the caller: waking a thread costs more.
  template <class F>
  void for_range(int64_t n, int64_t align, F&& fn) {
    if (n <= align) {
      if (n > 0) fn(int64_t(0), n);
      return;
    }
    run([&](int thread) {
      auto [begin, end] = split(n, align, thread);
      if (begin < end) fn(begin, end);
    });
  }

  std::pair<int64_t, int64_t> split(int64_t n, int64_t align, int thread) const;

 private:
  using Trampoline = void (*)(void*, int);
  void dispatch(Trampoline call, void* fn);
  void worker(int thread);

  int threads_;
  std::vector<std::thread> workers_;
  Trampoline call_ = nullptr;
  void* fn_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace runahead
