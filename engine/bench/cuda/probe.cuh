// What the standalone probes (pdl_probe.cu, code_probe.cu) share: a CUDA call's check, which
// names the probe and exits on an error, and the device's nanosecond timer.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace probe {

inline const char* name = "probe";  // set by each probe's main

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", name, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ unsigned smem_u32(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

}  // namespace probe
