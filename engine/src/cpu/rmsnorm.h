#pragma once
#include "cpu/thread_pool.h"

namespace runahead {

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w   for x, y: [n, h], w: [h].
void rmsnorm(ThreadPool& pool, const float* x, const float* w, float eps, int n, int h, float* y);

}  // namespace runahead
