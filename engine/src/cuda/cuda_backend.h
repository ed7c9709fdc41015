#pragma once
// The CUDA backend: every decode op on the GPU, a whole decode step replayed as one CUDA
// graph, and a decode loop whose tokens stay on the device (the host reads each one a
// step late through mapped pinned memory). Only built when CMake finds CUDA
// (RUNAHEAD_CUDA is then defined).
#include <cstdint>
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/backend.h"
#include "runtime/sampling.h"

namespace runahead {

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

  // For the benchmark: the mean ms of one greedy decode step over `steps` graph replays
  // queued back to back (the KV cache grows by `steps`), and the time of each op family
  // of the decode step alone (its launches for every layer captured in a graph of their
  // own, replayed `reps` times).
  virtual double time_decode_steps(int steps) = 0;
  virtual nlohmann::json profile_decode_ops(int reps) = 0;
  // The persistent decode step (decode_step.h) phase by phase, summed over layers: block 0's
  // clock between grid barriers, scaled to the launch's time, averaged over `reps` launches
  // (empty when the model runs a kernel per op).
  virtual nlohmann::json profile_decode_step(int reps) = 0;
  // The time of each op kind of an n-token tensor-core prefill alone (the cache is reset).
  virtual nlohmann::json profile_prefill_ops(int n) = 0;
};

// Throws EngineError{"cuda_error"} when no device is usable, {"unsupported"} for a model
// the kernels cannot run.
std::unique_ptr<CudaBackend> make_cuda_backend(std::shared_ptr<const ModelWeights> weights,
                                               const BackendOptions& options);

// `runahead-engine bench --backend cuda ...`: the arguments after `bench` (see bench.h),
// with --backend cuda among them or not. Prints the report; returns the exit status.
int run_cuda_bench(int argc, char** argv);

}  // namespace runahead
