#pragma once
// Linear layers on the thread pool: y = x W^T with W read in place in its own storage format
// (bf16/f16/f32, or Q8_0/Q4_0/Q5_0/Q4_K/Q5_K/Q6_K blocks with int8 activations as llama.cpp does).
#include <cstdint>
#include <span>
#include <vector>

#include "cpu/quant_kernels.h"
#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"
#include "model/tensor.h"

namespace runahead {

// What the CPU ops run on: the pool, the kernel tables of this CPU, and the scratch that
// holds the int8 activations of the current matmul (reused between calls).
struct CpuContext {
  ThreadPool& pool;
  const Kernels& kernels;
  const QuantKernels& quant;
  std::vector<Q8Activations>& xq;
};

struct MatmulJob {
  const Tensor* w;  // [out, in]
  float* y;         // [n, out] row-major
};

// y_j[t, :] = W_j x[t, :]   for every job j and t in [0, n); x: [n, in] row-major.
// The jobs share x and one dispatch: the rows of all jobs together are split into one
// contiguous range per thread, so q/k/v (or gate/up) cost one wake-up, not three. x is
// quantized to int8 once when any job's weights are block-quantized.
void matmul(const CpuContext& cx, std::span<const MatmulJob> jobs, const float* x, int n);

}  // namespace runahead
