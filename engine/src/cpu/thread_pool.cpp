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

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)), shares_(size_t(threads_)) {
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

bool ThreadPool::take(int thread, int64_t chunk, int64_t& b0, int64_t& b1) {
  std::atomic<uint64_t>& own = shares_[size_t(thread)].blocks;
  for (uint64_t s = own.load(std::memory_order_acquire);;) {
    const int64_t front = int64_t(s >> 32), back = int64_t(s & 0xFFFFFFFFu);
    if (front >= back) break;
    const int64_t end = std::min(front + chunk, back);
    if (own.compare_exchange_weak(s, pack(end, back), std::memory_order_acq_rel, std::memory_order_acquire)) {
      b0 = front, b1 = end;
      return true;
    }
  }
  for (;;) {
    int victim = -1;
    int64_t most = 0;
    for (int t = 0; t < threads_; ++t) {
      const uint64_t s = shares_[size_t(t)].blocks.load(std::memory_order_acquire);
      const int64_t left = int64_t(s & 0xFFFFFFFFu) - int64_t(s >> 32);
      if (left > most) most = left, victim = t;
    }
    if (victim < 0) return false;
    std::atomic<uint64_t>& share = shares_[size_t(victim)].blocks;
    uint64_t s = share.load(std::memory_order_acquire);
    const int64_t front = int64_t(s >> 32), back = int64_t(s & 0xFFFFFFFFu);
    if (front >= back) continue;
    // At most half of what is left, so the owner, already streaming its front, keeps the rest.
    const int64_t start = back - std::max<int64_t>(1, std::min(chunk, (back - front) / 2));
    if (share.compare_exchange_strong(s, pack(front, start), std::memory_order_acq_rel, std::memory_order_acquire)) {
      b0 = start, b1 = back;
      return true;
    }
  }
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
