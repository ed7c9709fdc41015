#include "cpu/read_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

namespace runahead {

double read_bandwidth(ThreadPool& pool, size_t bytes, int passes) {
  const int64_t n = int64_t(bytes / sizeof(float));
  std::unique_ptr<float[]> buffer(new float[size_t(n)]);
  // Each thread first touches its own slice, so pages sit where that thread reads them.
  pool.run([&](int thread) {
    auto [begin, end] = pool.split(n, 1024, thread);
    std::fill(buffer.get() + begin, buffer.get() + end, 1.0f);
  });
  std::vector<float> sums(size_t(pool.size()));
  double best = 0.0;
  for (const Kernels* kernels : available_kernels())
    for (int pass = 0; pass < passes; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      pool.run([&](int thread) {
        auto [begin, end] = pool.split(n, 1024, thread);
        sums[size_t(thread)] += kernels->sum(buffer.get() + begin, end - begin);
      });
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, double(n) * sizeof(float) / seconds);
    }
  // The sums are read so the sweep cannot be optimised away.
  volatile float sink = 0.0f;
  for (float s : sums) sink = sink + s;
  return best;
}

}  // namespace runahead
