#pragma once
// The CPUs this process may run on: what sizes the CPU backend's threads and what the
// session warns about when asked for more.

#include <cstddef>

namespace runahead {

// The CPUs in this process's affinity mask (sched_getaffinity): more threads than these
// only take turns on them.
int usable_cpus();
// One thread per physical core among those CPUs (SMT siblings counted once, from sysfs
// topology): under `taskset -c 0` that is 1, whatever the machine has.
int default_threads();
// default_threads(), but no more than one per kBytesPerThread of the weights a decode step
// reads: every op of a step splits its rows over the threads, and below that a thread costs
// more to wake and wait for than its share saves (the embedded 23 MB model, 2-core VM: 0.85
// ms/token on one thread, 1.25-1.8 on two; the 525 MB 0.5B shape: two threads twice as fast).
constexpr size_t kBytesPerThread = size_t(64) << 20;
int default_threads(size_t weight_bytes);

}  // namespace runahead
