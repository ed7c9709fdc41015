#include "runtime/cpus.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace runahead {

namespace {

// The CPUs this process may run on (taskset, cgroup cpusets), or all of them when unknown.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  if (cpus.empty())
    for (int cpu = 0; cpu < int(std::max(1u, std::thread::hardware_concurrency())); ++cpu) cpus.push_back(cpu);
  return cpus;
}

}  // namespace

int usable_cpus() { return int(allowed_cpus().size()); }

int default_threads() {
  std::set<std::string> cores;
  for (int cpu : allowed_cpus()) {
    const std::string topology = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::string siblings;
    for (const char* file : {"core_cpus_list", "thread_siblings_list"}) {
      std::ifstream in(topology + file);
      if (in && std::getline(in, siblings) && !siblings.empty()) break;
      siblings.clear();
    }
    // SMT siblings name the same list, so each physical core is counted once.
    cores.insert(siblings.empty() ? "cpu" + std::to_string(cpu) : siblings);
  }
  return std::max(1, int(cores.size()));
}

int default_threads(size_t weight_bytes) {
  return int(std::clamp<size_t>(weight_bytes / kBytesPerThread, 1, size_t(default_threads())));
}

}  // namespace runahead
