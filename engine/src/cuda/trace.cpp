// The host side of trace.h.
#include "cuda/trace.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "cuda/check.h"

namespace runahead::cuda {

const char* trace_tag_name(TraceTag tag) {
  switch (tag) {
#define RUNAHEAD_TRACE_TAG_NAME(name) \
  case TraceTag::name: return #name;
    RUNAHEAD_TRACE_TAGS(RUNAHEAD_TRACE_TAG_NAME)
#undef RUNAHEAD_TRACE_TAG_NAME
  }
  return "unknown";
}

#ifdef RUNAHEAD_CUDA_TRACE
namespace {
TraceBuffer active;
void point_all_at(const TraceBuffer& b) {
  for (TraceSetter set : trace_setters()) check_cuda(cudaError_t(set(b)), "cudaMemcpyToSymbol(trace_buffer)");
}
}  // namespace

bool trace_built() { return true; }

void trace_begin(unsigned capacity) {
  if (active.records) throw EngineError("cuda_error", "a trace is already recording");
  check_cuda(cudaDeviceSynchronize(), "trace_begin");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&active.records), sizeof(TraceRecord) * capacity), "cudaMalloc(trace)");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&active.count), sizeof(unsigned)), "cudaMalloc(trace)");
  check_cuda(cudaMemset(active.count, 0, sizeof(unsigned)), "cudaMemset(trace)");
  active.capacity = capacity;
  point_all_at(active);
}

std::vector<TraceRecord> trace_end(unsigned& dropped) {
  check_cuda(cudaDeviceSynchronize(), "trace_end");
  point_all_at(TraceBuffer{});
  unsigned count = 0;
  check_cuda(cudaMemcpy(&count, active.count, sizeof count, cudaMemcpyDeviceToHost), "cudaMemcpy(trace)");
  std::vector<TraceRecord> records(std::min(count, active.capacity));
  check_cuda(cudaMemcpy(records.data(), active.records, sizeof(TraceRecord) * records.size(), cudaMemcpyDeviceToHost),
             "cudaMemcpy(trace)");
  dropped = count - unsigned(records.size());
  cudaFree(active.records);
  cudaFree(active.count);
  active = TraceBuffer{};
  return records;
}
#else
bool trace_built() { return false; }
void trace_begin(unsigned) {
  throw EngineError("usage", "this engine was built without the kernel trace (cmake -DRUNAHEAD_CUDA_TRACE=ON)");
}
std::vector<TraceRecord> trace_end(unsigned& dropped) {
  dropped = 0;
  return {};
}
#endif

}  // namespace runahead::cuda
