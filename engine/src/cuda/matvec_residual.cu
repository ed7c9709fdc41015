// The projections that end a sub-layer: x += in W^T (attention output, MLP down).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;

// One warp per pair of output rows, grid-stride; each row of x is owned by one warp,
// so the read-modify-write of the residual needs no atomics.
template <class W, int NT>
__global__ void __launch_bounds__(kThreads) matvec_residual_add_kernel(const W* w, int rows, int K, const float* in,
                                                                      int n, float* x) {
  const int lane = threadIdx.x % kWarp;
  const int warp = blockIdx.x * kWarps + threadIdx.x / kWarp, warps = gridDim.x * kWarps;
  const int units = rows / 2;
  if (warp < units) prefetch_l2(w + size_t(2 * warp) * K, size_t(2) * K * sizeof(W), lane);
  pdl_wait();
  pdl_trigger();
  for (int u = warp; u < units; u += warps) {
    const W* pair[2] = {w + size_t(2 * u) * K, w + size_t(2 * u + 1) * K};
    float acc[2][NT];
    warp_dot_rows<W, 2, NT>(pair, K, in, K, n, nullptr, acc);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n && lane == t) {
        float2* out = reinterpret_cast<float2*>(x + size_t(t) * rows + 2 * u);
        const float2 old = *out;
        *out = make_float2(old.x + acc[0][t], old.y + acc[1][t]);
      }
    }
  }
}

}  // namespace

void matvec_residual_add(const void* w, DType dtype, int rows, int K, const float* in, int n, float* x, int sms,
                         cudaStream_t stream) {
  with_weight_type(dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    auto kernel = n == 1 ? matvec_residual_add_kernel<W, 1> : matvec_residual_add_kernel<W, kMaxVecTokens>;
    const int blocks = resident_blocks(kernel, kThreads, 0, rows / 2, kWarps, sms);
    launch_pdl(kernel, dim3(blocks), dim3(kThreads), 0, stream, static_cast<const W*>(w), rows, K, in, n, x);
  });
}

}  // namespace runahead::cuda
