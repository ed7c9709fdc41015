#pragma once
// The device side of trace.h: RUNAHEAD_TRACE_BLOCK(tag) at the top of a kernel makes its block's
// thread 0 write one record as it leaves the kernel; pdl_wait() (common.cuh) notes when it
// returned, and trace_mark(i) when thread 0 passed it. Without RUNAHEAD_CUDA_TRACE all are
// nothing.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/trace.h"

namespace runahead::cuda {

#ifdef RUNAHEAD_CUDA_TRACE
namespace {
// This translation unit's pointer to the records (no relocatable device code: a copy a unit,
// each set through the setter it registers).
__device__ TraceBuffer trace_buffer;
struct TraceRegistration {
  TraceRegistration() {
    trace_setters().push_back(
        [](const TraceBuffer& b) { return int(cudaMemcpyToSymbol(trace_buffer, &b, sizeof b)); });
  }
};
const TraceRegistration trace_registration;
}  // namespace

// (A memory clobber: the memory operations before a mark in the code are issued before it is
// read, and the stores among them have their values, so a mark after a store of loaded values
// comes after those loads returned.)
__device__ __forceinline__ uint64_t trace_time() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
__device__ __forceinline__ uint64_t& trace_waited() {
  __shared__ uint64_t waited;
  return waited;
}
__device__ __forceinline__ void trace_note_wait() {
  if (threadIdx.x == 0) trace_waited() = trace_time();
}
__device__ __forceinline__ uint64_t* trace_marks() {
  __shared__ uint64_t marks[kTraceMarks];
  return marks;
}
__device__ __forceinline__ void trace_mark(int i) {
  if (threadIdx.x == 0) trace_marks()[i] = trace_time();
}
// Mark i when thread `thread` of the block passes it.
__device__ __forceinline__ void trace_mark_thread(int i, unsigned thread) {
  if (threadIdx.x == thread) trace_marks()[i] = trace_time();
}
// Mark i when lane 0 of the block's last warp passes it.
__device__ __forceinline__ void trace_mark_last_warp(int i) { trace_mark_thread(i, blockDim.x - 32); }
struct TraceBlock {
  uint64_t start = 0;
  uint32_t tag;
  __device__ explicit TraceBlock(TraceTag t) : tag(uint32_t(t)) {
    if (threadIdx.x == 0) {
      start = trace_time();
      trace_waited() = 0;
      for (int i = 0; i < kTraceMarks; ++i) trace_marks()[i] = 0;
    }
  }
  __device__ ~TraceBlock() {
    if (threadIdx.x != 0 || !trace_buffer.records) return;
    const unsigned i = atomicAdd(trace_buffer.count, 1u);
    if (i >= trace_buffer.capacity) return;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    TraceRecord& r = trace_buffer.records[i];
    r = TraceRecord{tag, block, sm, 0, start, trace_waited(), trace_time(), {}};
    for (int m = 0; m < kTraceMarks; ++m) r.mark[m] = trace_marks()[m];
  }
};
#define RUNAHEAD_TRACE_BLOCK(tag) const ::runahead::cuda::TraceBlock trace_block_(::runahead::cuda::TraceTag::tag)
#else
__device__ __forceinline__ void trace_note_wait() {}
__device__ __forceinline__ void trace_mark(int) {}
__device__ __forceinline__ void trace_mark_thread(int, unsigned) {}
__device__ __forceinline__ void trace_mark_last_warp(int) {}
#define RUNAHEAD_TRACE_BLOCK(tag) static_assert(true)
#endif

}  // namespace runahead::cuda
