#include "cpu/rmsnorm.h"

#include "model/numerics.h"

namespace runahead {

void rmsnorm(ThreadPool& pool, const float* x, const float* w, float eps, int n, int h, float* y) {
  pool.for_range(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) rmsnorm_row(x + t * h, w, eps, h, y + t * h);
  });
}

}  // namespace runahead
