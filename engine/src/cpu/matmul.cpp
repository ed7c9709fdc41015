#include "cpu/matmul.h"

#include <algorithm>

namespace runahead {

void matmul(ThreadPool& pool, const Kernels& kernels, std::span<const MatmulJob> jobs,
            const float* x, int n) {
  int64_t total = 0;
  for (const MatmulJob& job : jobs) total += job.w->rows();
  // Multiples of 16 rows keep every thread's range a whole number of row tiles.
  pool.for_range(total, 16, [&](int64_t begin, int64_t end) {
    int64_t offset = 0;
    for (const MatmulJob& job : jobs) {
      const int64_t rows = job.w->rows(), in = job.w->cols();
      const int64_t r0 = std::max<int64_t>(begin - offset, 0);
      const int64_t r1 = std::min<int64_t>(end - offset, rows);
      if (r0 < r1) {
        kernels.matmul(job.w->dtype)(job.w->data, in, r0, r1, in, x, in, n, job.y, rows);
      }
      offset += rows;
    }
  });
}

}  // namespace runahead
