#pragma once
// A timeline of the kernels of a decode step, block by block, for the bench (`bench --backend cuda
// --trace-out FILE`): only in a build with -DRUNAHEAD_CUDA_TRACE=ON (CMake option), where thread 0
// of every block of every traced kernel writes one record as it leaves: its kernel, block,
// multiprocessor, and the global timer (ns) when it started, when its pdl_wait returned and when
// it left, and up to kTraceMarks moments a kernel marks on the way (trace_mark: which point of
// its code each is, the kernel's comment says). In every other build the kernels carry nothing
// of it (trace.cuh).
#include <cstdint>
#include <vector>

namespace runahead::cuda {

// The traced kernels, by name (the CSV writes these).
#define RUNAHEAD_TRACE_TAGS(X)                                                                        \
  X(none) X(embedding) X(qkv_ring) X(qkv_warps) X(bias_rope) X(bias_qk_norm_rope) X(attention)          \
  X(residual_ring) X(residual_warps) X(gate_up_ring) X(gate_up_warps) X(quantize_inputs) X(lm_head)     \
  X(advance_position) X(persistent_step)
#define RUNAHEAD_TRACE_TAG_ENUM(name) name,
enum class TraceTag : uint32_t { RUNAHEAD_TRACE_TAGS(RUNAHEAD_TRACE_TAG_ENUM) };
#undef RUNAHEAD_TRACE_TAG_ENUM
const char* trace_tag_name(TraceTag tag);

constexpr int kTraceMarks = 10;

struct TraceRecord {
  uint32_t tag;    // a TraceTag
  uint32_t block;  // linear block index
  uint32_t sm;     // %smid
  uint32_t pad;
  uint64_t start, waited, end;  // %globaltimer, ns; waited 0 where thread 0 did not call pdl_wait
  uint64_t mark[kTraceMarks];   // when thread 0 (or the one named) passed trace_mark(i); 0 where it did not
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
