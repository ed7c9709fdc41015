#pragma once
// The parts of a CUDA backend's step, one at a time, for the bench's profiler
// (engine/bench/backends/cuda_bench.cpp): its stream and graphs, and each op of a decode or prefill step
// enqueued alone. Nothing on the engine's own path goes through this interface.
#include <cuda_runtime_api.h>

#include <functional>

#include "cuda/decode_step.h"
#include "cuda/device_memory.h"
#include "cuda/kernels.h"
#include "model/arch.h"
#include "model/weights.h"

namespace runahead::cuda {

// Prompts at least this long take the tensor-core path (bf16 activations); shorter ones and
// every decode/verify step keep f32 activations. A prefill runs in chunks of kPrefillChunk.
constexpr int kTensorCoreMinTokens = 64;
constexpr int kPrefillChunk = 2048;

// The op kinds of a tensor-core prefill, as a mask for enqueue_prefill_layers.
constexpr unsigned kPrefillGemm = 1, kPrefillAttention = 2, kPrefillOther = 4, kAllPrefillOps = 7;

class StepParts {
 public:
  virtual const ModelWeights& weights() const = 0;
  // The element types the device keeps the layers' matrices and lm_head in (F8_E4M3 with a
  // scale per row under the fp8 options; else the weights' dtype).
  virtual DType layer_dtype() const = 0;
  virtual DType head_dtype() const = 0;
  virtual cudaStream_t stream() const = 0;

  // A graph of what `enqueue` puts on the stream; the mean ms of one of `reps` replays.
  virtual GraphExec capture(const std::function<void()>& enqueue) = 0;
  virtual double time_graph(cudaGraphExec_t g, int reps) = 0;
  virtual void launch_graph(cudaGraphExec_t g) = 0;
  // The single-token greedy decode step the backend replays (each replay moves the position on).
  virtual cudaGraphExec_t greedy_step_graph() = 0;
  // The greedy verify step of n tokens (the pending token, n - 1 drafted ones: whatever the
  // token buffer holds): each replay keeps what matches and moves the position on by that.
  virtual cudaGraphExec_t verify_step_graph(int n) = 0;
  // Waits for the stream, then puts the device position and kv_len() at n.
  virtual void set_position(int n) = 0;

  // The step's ops on the matrix-vector path, for n tokens of the token buffer.
  virtual void enqueue_embedding(int n) = 0;
  virtual void enqueue_op(const Op& op, int layer, int n) = 0;
  virtual void enqueue_head(int first, int rows, const StepEnd& end) = 0;
  // The persistent whole-step kernel; its plan's `refused` is empty when the model has one.
  virtual const DecodeStepPlan& persistent_plan() const = 0;
  virtual void enqueue_persistent_step(const StepEnd& end, long long* clock) = 0;
  // The layers of an n-token tensor-core prefill, only the op kinds in `ops`.
  virtual void enqueue_prefill_layers(int n, unsigned ops) = 0;

 protected:
  ~StepParts() = default;
};

}  // namespace runahead::cuda
