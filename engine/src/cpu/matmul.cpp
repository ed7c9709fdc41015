#include "cpu/matmul.h"

#include <algorithm>

#include "cpu/quant_matvec.h"

namespace runahead {

void matmul(const CpuContext& cx, std::span<const MatmulJob> jobs, const float* x, int n) {
  int64_t total = 0;
  unsigned blocks = 0;  // the activation blocks the quantized jobs read
  for (const MatmulJob& job : jobs) {
    total += job.w->rows();
    if (const auto q = quant_type_of(job.w->dtype)) blocks |= activation_blocks(*q);
  }
  if (blocks) {
    const int64_t in = jobs.front().w->cols();
    cx.xq.resize(size_t(std::max(n, 1)));
    for (int t = 0; t < n; ++t) cx.quant.quantize(cx.xq[size_t(t)], x + int64_t(t) * in, in, blocks);
  }
  // Multiples of 16 rows keep every thread's range a whole number of row tiles.
  cx.pool.for_range(total, 16, [&](int64_t begin, int64_t end) {
    int64_t offset = 0;
    for (const MatmulJob& job : jobs) {
      const int64_t rows = job.w->rows(), in = job.w->cols();
      const int64_t r0 = std::max<int64_t>(begin - offset, 0);
      const int64_t r1 = std::min<int64_t>(end - offset, rows);
      if (r0 < r1) {
        if (const auto q = quant_type_of(job.w->dtype))
          matmul_quant_rows(cx.quant, {*q, static_cast<const uint8_t*>(job.w->data), rows, in}, r0, r1, cx.xq.data(),
                            n, job.y);
        else
          cx.kernels.matmul(job.w->dtype)(job.w->data, in, r0, r1, in, x, in, n, job.y, rows);
      }
      offset += rows;
    }
  });
}

}  // namespace runahead
