#pragma once
// Linear layers on the thread pool: y = x W^T with W read in place in its own dtype.
#include <cstdint>
#include <span>

#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"
#include "model/tensor.h"

namespace runahead {

struct MatmulJob {
  const Tensor* w;  // [out, in]
  float* y;         // [n, out] row-major
};

// y_j[t, :] = W_j x[t, :]   for every job j and t in [0, n); x: [n, in] row-major.
// The jobs share x and one dispatch: the rows of all jobs together are split into one
// contiguous range per thread, so q/k/v (or gate/up) cost one wake-up, not three.
void matmul(ThreadPool& pool, const Kernels& kernels, std::span<const MatmulJob> jobs,
            const float* x, int n);

}  // namespace runahead
