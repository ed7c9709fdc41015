#pragma once
// Shared-memory barriers and bulk copies (sm_90): a producer thread copies weights from global
// memory into a ring of stages in shared memory with one instruction per contiguous run
// (cp.async.bulk), the copy's completion counted in bytes on the stage's "full" barrier;
// consumers wait on it, and free the stage by arriving on its "empty" barrier. Used by the
// persistent step (decode_step.cu) and the K-quant ring (kquant_ring.cuh).
// The instructions exist from compute capability 9.0 on; the build also carries PTX for 8.x
// (CMakeLists.txt), which must still assemble there, so below 9.0 each of these traps: the host
// never launches their kernels on such a device (bulk_copies_on, plan_decode_step).
#include <cstdint>
#include <cuda_runtime.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define RUNAHEAD_SM90(...) __trap()
#else
#define RUNAHEAD_SM90(...) __VA_ARGS__
#endif

namespace runahead::cuda {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
  RUNAHEAD_SM90(asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory"));
}
// After a thread's mbarrier_init calls, before the block barrier that publishes them.
__device__ __forceinline__ void mbarrier_init_fence() {
  RUNAHEAD_SM90(asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"));
}
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, unsigned bytes) {
  RUNAHEAD_SM90(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory"));
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  RUNAHEAD_SM90(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory"));
}
// Whether the phase of that parity has completed, without waiting (the trace's mark 10).
__device__ __forceinline__ bool mbarrier_ready(uint64_t* bar, unsigned parity) {
  unsigned done = 1;
  RUNAHEAD_SM90(asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_address(bar)), "r"(parity)
      : "memory"));
  return done != 0;
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    RUNAHEAD_SM90(asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory"));
  } while (!done);
}
// bytes from global src to shared dst; completion is counted on `bar`; `policy`:
// evict_first_policy().
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar,
                                          uint64_t policy) {
  RUNAHEAD_SM90(asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
      "%4;" ::"r"(smem_address(dst)),
      "l"(src), "r"(bytes), "r"(smem_address(bar)), "l"(policy)
      : "memory"));
}

// bytes (a multiple of 16) from global src, 16-byte aligned, into L2 (no completion to wait for).
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, unsigned bytes) {
  RUNAHEAD_SM90(asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory"));
}

// The L2 policy of the weights' bulk copies: read once per step, so first to leave.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy = 0;
  RUNAHEAD_SM90(asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy)));
  return policy;
}

// Whether this device runs the bulk copies (compute capability 9.0 or more).
inline bool bulk_copies_on() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 9;
}

}  // namespace runahead::cuda
