#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <string>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define RUNAHEAD_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define RUNAHEAD_PAUSE() asm volatile("yield")
#else
#define RUNAHEAD_PAUSE() ((void)0)
#endif

namespace runahead {

namespace {
// Longer than the gap between two ops of a decode step, far shorter than the gap
// between two requests. Timed, because a pause lasts 10 to 140 cycles by CPU model.
constexpr auto kSpin = std::chrono::microseconds(50);

// Spins until ready() or kSpin has passed; returns ready().
template <class Ready>
bool spin(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      RUNAHEAD_PAUSE();
    }
    if (std::chrono::steady_clock::now() > until) return ready();
    // The thread we wait for may share this core (the scheduler puts a woken thread beside
    // its waker): without yielding, it ran only when our time slice ended.
    std::this_thread::yield();
  }
}

// Spins, then sleeps until `value` differs from `old`.
template <class T>
void await_change(const std::atomic<T>& value, T old) {
  if (spin([&] { return value.load(std::memory_order_acquire) != old; })) return;
  while (value.load(std::memory_order_acquire) == old) value.wait(old, std::memory_order_acquire);
}
}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  for (int t = 1; t < threads_; ++t) workers_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

std::pair<int64_t, int64_t> ThreadPool::split(int64_t n, int64_t align, int thread) const {
  int64_t blocks = (n + align - 1) / align;
  int64_t begin = blocks * thread / threads_ * align;
  int64_t end = blocks * (thread + 1) / threads_ * align;
  return {std::min(begin, n), std::min(end, n)};
}

void ThreadPool::dispatch(Trampoline call, void* fn) {
  if (threads_ == 1) {
    call(fn, 0);
    return;
  }
  call_ = call;
  fn_ = fn;
  pending_.store(threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  call(fn, 0);
  if (spin([&] { return pending_.load(std::memory_order_acquire) == 0; })) return;
  for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) {
    pending_.wait(p, std::memory_order_acquire);
  }
}

void ThreadPool::worker(int thread) {
  uint64_t seen = 0;
  for (;;) {
    await_change(generation_, seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    call_(fn_, thread);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace runahead
