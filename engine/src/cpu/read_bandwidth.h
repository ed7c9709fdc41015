#pragma once
// This machine's memory read bandwidth, the bound of a memory-bound decode step.
#include <cstddef>

#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"

namespace runahead {

// Bytes per second of a read-only sweep by every thread of `pool` over its own
// contiguous slice of a `bytes` buffer (choose it much larger than the caches);
// the best of `passes` sweeps.
double read_bandwidth(ThreadPool& pool, const Kernels& kernels, size_t bytes, int passes);

}  // namespace runahead
