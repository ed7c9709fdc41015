#include "cpu/rmsnorm.h"

#include <cmath>

namespace runahead {

void rmsnorm(ThreadPool& pool, const float* x, const float* w, float eps, int n, int h, float* y) {
  pool.for_range(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* xt = x + t * h;
      float* yt = y + t * h;
      double sum_sq = 0.0;
      for (int i = 0; i < h; ++i) sum_sq += double(xt[i]) * xt[i];
      const float scale = 1.0f / std::sqrt(float(sum_sq / h) + eps);
      for (int i = 0; i < h; ++i) yt[i] = xt[i] * scale * w[i];
    }
  });
}

}  // namespace runahead
