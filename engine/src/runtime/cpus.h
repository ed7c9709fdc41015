#pragma once
// The CPUs this process may run on: what sizes the CPU backend's threads and what the
// session warns about when asked for more.

namespace runahead {

// The CPUs in this process's affinity mask (sched_getaffinity): more threads than these
// only take turns on them.
int usable_cpus();
// One thread per physical core among those CPUs (SMT siblings counted once, from sysfs
// topology): under `taskset -c 0` that is 1, whatever the machine has.
int default_threads();

}  // namespace runahead
