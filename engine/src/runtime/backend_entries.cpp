#include "runtime/backend.h"
#include "runtime/bench.h"

namespace runahead {

#ifdef RUNAHEAD_CUDA
extern const BackendEntry cuda_backend_entry;  // cuda/cuda_backend.cpp
#endif

const std::vector<BackendEntry>& backend_entries() {
  static const std::vector<BackendEntry> entries = {
      {"cpu", [] { return true; }, make_cpu_backend, run_cpu_bench},
#ifdef RUNAHEAD_CUDA
      cuda_backend_entry,
#endif
  };
  return entries;
}

const BackendEntry* find_backend(std::string_view name) {
  for (const BackendEntry& e : backend_entries())
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace runahead
