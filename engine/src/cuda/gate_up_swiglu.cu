// The MLP input in one pass over Wgate and Wup: RMSNorm, both projections, SwiGLU.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

// One intermediate index j (its gate row and its up row) per unit.
template <class W, int NT>
__global__ void __launch_bounds__(kGemvThreads, (kGemvMinBlocks<W, NT>)) rmsnorm_gate_up_swiglu_kernel(RowMatrix<W> w, const float* norm,
                                                                             float eps, int I, const float* x,
                                                                             int n, float* act, int split,
                                                                             Q8Inputs q8) {
  const int H = w.K;
  extern __shared__ float staged[];
  __shared__ float scratch[NT * kGemvWarps];
  __shared__ float inv[NT];
  __shared__ float red[kGemvWarps * 2 * NT];
  auto rows_of = [&](int j, int (&rows)[2]) {
    rows[0] = j;
    rows[1] = I + j;
  };
  prefetch_units<W, 2>(w, I, split, rows_of);
  pdl_wait();
  pdl_trigger();
  constexpr bool kStaged = kStagesNormed<W, NT>;
  const NormInputs in = norm_inputs<W, NT>(x, n, eps, norm, H, staged, scratch, inv, q8);
  block_gemv<W, 2, NT>(w, I, split, kStaged ? staged : x, H, n, NT == 1 ? nullptr : norm, red, rows_of,
                       [&](int j, float (&acc)[2][NT]) {
                         const int lane = threadIdx.x % kWarp;
#pragma unroll
                         for (int t = 0; t < NT; ++t) {
                           if (t < n && lane == t) {
                             const float scale = kStaged ? 1.0f : t == 0 ? in.inv0 : inv[t];
                             const float g = acc[0][t] * scale, u = acc[1][t] * scale;
                             act[size_t(t) * I + j] = g / (1.0f + expf(-g)) * u;
                           }
                         }
                       },
                       in.q8);
}

}  // namespace

void rmsnorm_gate_up_swiglu(const void* w_gate_up, DType dtype, const void* scale, const float* norm, float eps,
                            int H, int I, const float* x, int n, float* act, const Q8Scratch& q8, int sms,
                            cudaStream_t stream) {
  with_matrix_type(dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    const size_t smem = prepare_norm_inputs<W>(x, norm, n, H, q8, stream);
    auto kernel = for_vec_tokens(n, [](auto nt) { return rmsnorm_gate_up_swiglu_kernel<W, decltype(nt)::value>; });
    const int split = gemv_split(I, H, sms, blocks_per_sm(kernel, kGemvThreads, smem));
    const int blocks = resident_blocks(kernel, kGemvThreads, smem, I, kGemvWarps / split, sms);
    launch_pdl(kernel, dim3(blocks), dim3(kGemvThreads), smem, stream,
               RowMatrix<W>{static_cast<const W*>(w_gate_up), scale, H, kq_q6_from(w_gate_up, scale, 2 * I, 2 * I)}, norm, eps, I, x, n, act, split,
               Q8Inputs{q8.q, q8.d, H});
  });
}

}  // namespace runahead::cuda
