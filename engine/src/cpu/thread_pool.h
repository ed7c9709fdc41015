#pragma once
// A small persistent thread pool for batch-1 inference: one job at a time, run by
// every thread (the caller is thread 0). Workers spin briefly before sleeping so
// that the ~170 dispatches of a decode step do not each pay a futex wake-up.
#include <algorithm>
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

  // Calls fn(begin, end) on disjoint ranges covering [0, n), bounds multiples of `align`
  // (except n), until all of [0, n) is done. Each thread starts on its own contiguous share
  // (split's) and takes it front to back in chunks, one stream for the prefetcher; a thread
  // whose share is done takes chunks from the back of the share with the most left, so a
  // thread slowed by the machine (a vCPU whose core is busy elsewhere) holds up no one.
  // Static halves made the caller wait 8-14 % of a 1.5B decode step on the worker.
  // Work of a single block (a decode step's norm or rope) runs on the caller: waking a
  // thread costs more.
  template <class F>
  void for_range(int64_t n, int64_t align, F&& fn) {
    if (n <= align || threads_ == 1) {
      if (n > 0) fn(int64_t(0), n);
      return;
    }
    // A share is two 32-bit block indices: a range of more blocks takes bigger ones.
    while ((n + align - 1) / align > int64_t(UINT32_MAX)) align *= 2;
    const int64_t blocks = (n + align - 1) / align;
    const int64_t chunk = std::max<int64_t>(1, blocks / (int64_t(threads_) * kChunksPerShare));
    for (int t = 0; t < threads_; ++t) {
      const int64_t first = blocks * t / threads_, last = blocks * (t + 1) / threads_;
      shares_[size_t(t)].blocks.store(pack(first, last), std::memory_order_relaxed);
    }
    run([&](int thread) {
      for (int64_t b0, b1; take(thread, chunk, b0, b1);) fn(b0 * align, std::min(b1 * align, n));
    });
  }
  std::pair<int64_t, int64_t> split(int64_t n, int64_t align, int thread) const;

 private:
  using Trampoline = void (*)(void*, int);
  void dispatch(Trampoline call, void* fn);
  void worker(int thread);

  // A thread's share of a for_range, in blocks of `align`: [front, back) packed in one word so
  // that its owner (from the front) and a thief (from the back) claim chunks by one CAS.
  static constexpr int kChunksPerShare = 16;
  struct alignas(64) Share {
    std::atomic<uint64_t> blocks{0};
  };
  static uint64_t pack(int64_t front, int64_t back) { return uint64_t(front) << 32 | uint64_t(back); }
  // The next chunk for `thread`: from the front of its own share, else from the back of the
  // share with the most left. False once every share is empty.
  bool take(int thread, int64_t chunk, int64_t& b0, int64_t& b1);

  int threads_;
  std::vector<std::thread> workers_;
  Trampoline call_ = nullptr;
  void* fn_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::vector<Share> shares_;
};

}  // namespace runahead
