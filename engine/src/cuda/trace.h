#pragma once
// A timeline of the kernels of a decode step, block by block, for the bench (`bench --backend cuda
// --trace-out FILE`): only in a build with -DRUNAHEAD_CUDA_TRACE=ON (CMake option), where every
// traced kernel's block 0 thread writes one record as it leaves: its kernel, block,
// multiprocessor, and the global timer (ns) when it started, when its pdl_wait returned and when
// it left. In every other build the kernels carry nothing of it (trace.cuh).
#include <cstdint>
#include <string>
#include <vector>

namespace runahead::cuda {

enum class TraceTag : uint32_t {
  none,
  embedding,
  qkv_ring,
  qkv_warps,
  bias_rope,
  bias_qk_norm_rope,
  attention,
  residual_ring,
  residual_warps,
  gate_up_ring,
  gate_up_warps,
  quantize_inputs,
  lm_head,
  advance_position,
  persistent_step,
};
const char* trace_tag_name(TraceTag tag);

struct TraceRecord {
  uint32_t tag;    // a TraceTag
  uint32_t block;  // linear block index
  uint32_t sm;     // %smid
  uint32_t pad;
  uint64_t start, waited, end;  // %globaltimer, ns; waited 0 where thread 0 did not call pdl_wait
};

// Where the traced kernels write: the device's records and a counter of those taken.
struct TraceBuffer {
  TraceRecord* records = nullptr;
  unsigned* count = nullptr;
  unsigned capacity = 0;
};

// Whether this build traces (RUNAHEAD_CUDA_TRACE).
bool trace_built();
// From now until trace_end(), the traced kernels that run record into a buffer of `capacity`
// records (later ones are dropped; trace_end says how many). Throws where the build has no trace.
void trace_begin(unsigned capacity);
// Waits for the device, stops recording and returns the records in the order taken; `dropped`
// what did not fit.
std::vector<TraceRecord> trace_end(unsigned& dropped);

// Each translation unit with traced kernels registers how to point its copy of the device
// variable at a buffer (trace.cuh); trace_begin/trace_end call them all.
using TraceSetter = int (*)(const TraceBuffer&);
inline std::vector<TraceSetter>& trace_setters() {
  static std::vector<TraceSetter> setters;
  return setters;
}

}  // namespace runahead::cuda
