// The end of a decode step: final RMSNorm, the lm_head, and the argmax of each row,
// so greedy decoding needs no logits on the host.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

// (value, index) ordered by value, then by the lower index (torch.argmax keeps the first).
__device__ __forceinline__ bool better(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

// One pair of vocabulary rows per unit. Each block leaves its best (value, index) per
// token in `partial`; the last block to finish reduces them, every thread a share of the
// blocks, and ends the step.
template <class W, int NT>
__global__ void __launch_bounds__(kGemvThreads, (kGemvMinBlocks<W, NT>)) rmsnorm_lm_head_argmax_kernel(LmHead a, const float* x, int n,
                                                                             float* logits, StepEnd end,
                                                                             int split) {
  RUNAHEAD_TRACE_BLOCK(lm_head);
  extern __shared__ float staged[];
  __shared__ float scratch[NT * kGemvWarps];
  __shared__ float inv[NT];
  __shared__ float red[kGemvWarps * 2 * NT];
  __shared__ float best_v[kGemvWarps][NT];
  __shared__ int best_i[kGemvWarps][NT];
  __shared__ int32_t tokens[NT];
  __shared__ bool last;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int H = a.hidden, units = a.vocab / 2;
  const RowMatrix<W> w{static_cast<const W*>(a.w), a.scale, H, kq_q6_from(a.w, a.scale, a.vocab, a.vocab)};
  auto rows_of = [&](int u, int (&rows)[2]) {
    rows[0] = 2 * u;
    rows[1] = 2 * u + 1;
  };
  prefetch_units<W, 2>(w, units, split, rows_of);
  pdl_wait();
  pdl_trigger();
  constexpr bool kStaged = kStagesNormed<W, NT>;
  const NormInputs in = norm_inputs<W, NT>(x, n, a.eps, a.norm, H, staged, scratch, inv, Q8Inputs{a.q8.q, a.q8.d, H});
  float my_v = -INFINITY;  // lane t keeps token t's best
  int my_i = 0x7fffffff;
  block_gemv<W, 2, NT>(w, units, split, kStaged ? staged : x, H, n, NT == 1 ? nullptr : a.norm, red, rows_of,
                       [&](int u, float (&acc)[2][NT], const float (&)[kPreloads]) {
#pragma unroll
                         for (int t = 0; t < NT; ++t) {
                           if (t < n && lane == t) {
                             const float scale = kStaged ? 1.0f : t == 0 ? in.inv0 : inv[t];
                             const float v0 = acc[0][t] * scale, v1 = acc[1][t] * scale;
                             *reinterpret_cast<float2*>(logits + size_t(t) * a.vocab + 2 * u) = make_float2(v0, v1);
                             if (better(v0, 2 * u, my_v, my_i)) my_v = v0, my_i = 2 * u;
                             if (better(v1, 2 * u + 1, my_v, my_i)) my_v = v1, my_i = 2 * u + 1;
                           }
                         }
                       },
                       in.q8, NoPreload{}, a.cursor);
  if (lane < NT) {
    best_v[warp][lane] = my_v;
    best_i[warp][lane] = my_i;
  }
  // Token t's best of the warps' in best_v and best_i.
  const auto warps_best = [&](int t, float& v, int& i) {
    v = best_v[0][t], i = best_i[0][t];
    for (int k = 1; k < kGemvWarps; ++k)
      if (better(best_v[k][t], best_i[k][t], v, i)) v = best_v[k][t], i = best_i[k][t];
  };
  __syncthreads();
  if (threadIdx.x < n) {
    const int t = threadIdx.x;
    float v;
    int i;
    warps_best(t, v, i);
    a.partial[(size_t(blockIdx.x) * n + t) * 2] = v;
    a.partial[(size_t(blockIdx.x) * n + t) * 2 + 1] = __int_as_float(i);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.counter, 1) == int(gridDim.x) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int t = 0; t < n; ++t) {  // token t's best of every block's: a share of them a thread, then warps, then the block
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int b = threadIdx.x; b < int(gridDim.x); b += blockDim.x) {
      const float bv = __ldcg(a.partial + (size_t(b) * n + t) * 2);
      const int bi = __float_as_int(__ldcg(a.partial + (size_t(b) * n + t) * 2 + 1));
      if (better(bv, bi, v, i)) v = bv, i = bi;
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (better(ov, oi, v, i)) v = ov, i = oi;
    }
    if (lane == 0) best_v[warp][t] = v, best_i[warp][t] = i;
  }
  __syncthreads();
  if (threadIdx.x < n) {
    float v;
    int i;
    warps_best(threadIdx.x, v, i);
    tokens[threadIdx.x] = i == 0x7fffffff ? 0 : i;  // all NaN: token 0 rather than out of range
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    finish_step(end, tokens, n);
    *a.counter = 0;
    if (a.cursor) *a.cursor = 0;
  }
}

__global__ void advance_position_kernel(int* pos, int advance) {
  RUNAHEAD_TRACE_BLOCK(advance_position);
  pdl_wait();
  pdl_trigger();
  *pos += advance;
}

}  // namespace

// The grid never exceeds the resident blocks, at most 32 per multiprocessor.
int lm_head_blocks(int vocab, int sms) { return std::min(vocab / 2, 32 * sms); }

void rmsnorm_lm_head_argmax(const LmHead& a, const float* x, int n, float* logits, const StepEnd& end, int sms,
                            cudaStream_t stream) {
  with_matrix_type(a.dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    const size_t smem = prepare_norm_inputs<W>(x, a.norm, n, a.hidden, a.q8, stream);
    auto kernel = for_vec_tokens(n, [](auto nt) { return rmsnorm_lm_head_argmax_kernel<W, decltype(nt)::value>; });
    const int units = a.vocab / 2, split = gemv_split(units, a.hidden, sms, blocks_per_sm(kernel, kGemvThreads, smem));
    const int blocks = resident_blocks(kernel, kGemvThreads, smem, units, kGemvWarps / split, sms);
    launch_pdl(kernel, dim3(blocks), dim3(kGemvThreads), smem, stream, a, x, n, logits, end, split);
  });
}

void advance_position(int* pos, int advance, cudaStream_t stream) {
  launch_pdl(advance_position_kernel, dim3(1), dim3(1), 0, stream, pos, advance);
}

}  // namespace runahead::cuda
