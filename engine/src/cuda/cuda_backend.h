#pragma once
// The CUDA backend: every decode op on the GPU, a whole decode step replayed as one CUDA
// graph, and a decode loop whose tokens stay on the device (the host reads each one a
// step late through mapped pinned memory). Only built when CMake finds CUDA
// (RUNAHEAD_CUDA is then defined).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/sampling.h"

namespace runahead {

namespace cuda {
class StepParts;
}

// A CUDA device is present and usable (false on machines without a GPU or driver).
bool cuda_available();

class CudaBackend : public Backend {
 public:
  // Decodes from `first` (the last token emitted, not yet in the KV cache): each step picks
  // its token on the device (argmax when sampling.greedy(), else temperature/top-k/top-p)
  // and feeds it to the next step without a round trip. on_token receives the tokens in
  // order, one step late; returning false stops. Returns the number of tokens passed to
  // on_token; the cache then holds `first` and all of them but the last.
  virtual int decode(int32_t first, int max_tokens, const SamplingParams& sampling,
                     const std::function<bool(int32_t)>& on_token) = 0;

  // Its step part by part, for the bench's profiler (engine/bench/backends/cuda_bench.cpp) and nothing else.
  virtual cuda::StepParts& step_parts() = 0;

  // The timeline of the step loop, for the bench (off by default: it records two timing events
  // around every step). step_gaps_us() gives, for each step after the first since the last call,
  // the µs the device sat idle between the step before and it: from the end of the one to the
  // moment the host had queued the other (0 when it was queued in time); then forgets them.
  virtual void record_timeline(bool on) = 0;
  virtual std::vector<double> step_gaps_us() = 0;
};

// Throws EngineError{"cuda_error"} when no device is usable, {"unsupported"} for a model
// the kernels cannot run.
std::unique_ptr<CudaBackend> make_cuda_backend(std::shared_ptr<const ModelWeights> weights,
                                               const BackendOptions& options);

// `runahead-engine bench --backend cuda ...`: the arguments after `bench` (see bench.h),
// with --backend cuda among them or not. Prints the report; returns the exit status.
int run_cuda_bench(int argc, char** argv);

}  // namespace runahead
