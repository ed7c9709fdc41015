// The MLP input in one pass over Wgate and Wup: RMSNorm, both projections, SwiGLU.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;

// One warp per intermediate index j (its gate row and its up row), grid-stride.
template <class W, int NT>
__global__ void __launch_bounds__(kThreads) rmsnorm_gate_up_swiglu_kernel(const W* w_gate, const W* w_up,
                                                                         const float* norm, float eps, int H, int I,
                                                                         const float* x, int n, float* act) {
  __shared__ float scratch[NT * kWarps];
  __shared__ float inv[NT];
  const int lane = threadIdx.x % kWarp;
  const int warp = blockIdx.x * kWarps + threadIdx.x / kWarp, warps = gridDim.x * kWarps;
  if (warp < I) {
    prefetch_l2(w_gate + size_t(warp) * H, size_t(H) * sizeof(W), lane);
    prefetch_l2(w_up + size_t(warp) * H, size_t(H) * sizeof(W), lane);
  }
  pdl_wait();
  pdl_trigger();
  block_inv_rms<NT>(x, H, n, eps, scratch, inv);
  for (int j = warp; j < I; j += warps) {
    const W* rows[2] = {w_gate + size_t(j) * H, w_up + size_t(j) * H};
    float acc[2][NT];
    warp_dot_rows<W, 2, NT>(rows, H, x, H, n, norm, acc);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n && lane == t) {
        const float g = acc[0][t] * inv[t], u = acc[1][t] * inv[t];
        act[size_t(t) * I + j] = g / (1.0f + expf(-g)) * u;
      }
    }
  }
}

}  // namespace

void rmsnorm_gate_up_swiglu(const void* w_gate, const void* w_up, DType dtype, const float* norm, float eps, int H,
                            int I, const float* x, int n, float* act, int sms, cudaStream_t stream) {
  with_weight_type(dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    auto kernel = n == 1 ? rmsnorm_gate_up_swiglu_kernel<W, 1> : rmsnorm_gate_up_swiglu_kernel<W, kMaxVecTokens>;
    const int blocks = resident_blocks(kernel, kThreads, 0, I, kWarps, sms);
    launch_pdl(kernel, dim3(blocks), dim3(kThreads), 0, stream, static_cast<const W*>(w_gate),
               static_cast<const W*>(w_up), norm, eps, H, I, x, n, act);
  });
}

}  // namespace runahead::cuda
