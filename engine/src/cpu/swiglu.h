#pragma once
#include <cstdint>

#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"

namespace runahead {

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i]   for i in [0, n).
void swiglu(ThreadPool& pool, const Kernels& kernels, float* gate, const float* up, int64_t n);

}  // namespace runahead
