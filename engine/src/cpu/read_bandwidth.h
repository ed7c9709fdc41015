#pragma once
// This machine's memory read bandwidth, the bound of a memory-bound decode step.
#include <cstddef>

#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"

namespace runahead {

// Bytes per second of a read-only sweep by every thread of `pool` over its own
// contiguous slice of a `bytes` buffer (choose it much larger than the caches);
// the best of `passes` sweeps by each instruction set this CPU has: the widest loads
// are not always the fastest (on a 2-core Zen 5, 256-bit sweeps read 57-60 GB/s where
// 512-bit ones read 46-48), and a bound must be the fastest the machine reads.
double read_bandwidth(ThreadPool& pool, size_t bytes, int passes);

}  // namespace runahead
