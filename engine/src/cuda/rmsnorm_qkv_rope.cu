// The attention input of a layer in one pass over Wqkv: RMSNorm, the q/k/v projection
// with its bias, RoPE on q and k, and the append of k and v to the KV cache.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

// Rows are visited in pairs that RoPE rotates together: (i, i + head_dim/2) of a q or k
// head, or two neighbouring v rows.
struct RowPair {
  int first, second;
};
__device__ __forceinline__ RowPair row_pair(int unit, int q_dim, int kv_dim, int head_dim) {
  const int half = head_dim / 2, rotated = (q_dim + kv_dim) / 2;
  if (unit < rotated) {
    const int first = (unit / half) * head_dim + unit % half;
    return {first, first + half};
  }
  const int first = q_dim + kv_dim + 2 * (unit - rotated);
  return {first, first + 1};
}

// Adds the bias to rows (first, second) of token t at position p, rotates them when they
// are q or k, and stores them in q_out or the cache.
__device__ __forceinline__ void rope_and_store(const QkvRope& a, RowPair r, float v0, float v1, int t, int p,
                                               float* q_out) {
  const int q_dim = a.heads * a.head_dim, kv_dim = a.kv_heads * a.head_dim, half = a.head_dim / 2;
  if (a.bias) {
    v0 += a.bias[r.first];
    v1 += a.bias[r.second];
  }
  if (r.first >= q_dim + kv_dim) {
    a.v_cache[size_t(p) * kv_dim + r.first - q_dim - kv_dim] = v0;
    a.v_cache[size_t(p) * kv_dim + r.second - q_dim - kv_dim] = v1;
    return;
  }
  const int i = r.first % a.head_dim;
  const float c = a.rope_cos[size_t(p) * half + i], s = a.rope_sin[size_t(p) * half + i];
  const float o0 = v0 * c - v1 * s, o1 = v1 * c + v0 * s;
  if (r.first < q_dim) {
    q_out[size_t(t) * q_dim + r.first] = o0;
    q_out[size_t(t) * q_dim + r.second] = o1;
  } else {
    a.k_cache[size_t(p) * kv_dim + r.first - q_dim] = o0;
    a.k_cache[size_t(p) * kv_dim + r.second - q_dim] = o1;
  }
}

// One row pair per unit; NT >= n tokens share each pass over the weights. For one token
// the normalised input is staged in shared memory.
template <class W, int NT>
__global__ void __launch_bounds__(kGemvThreads) rmsnorm_qkv_rope_append_kernel(QkvRope a, const float* x, int n,
                                                                              const int* pos, float* q_out,
                                                                              int split) {
  extern __shared__ float staged[];
  __shared__ float scratch[NT * kGemvWarps];
  __shared__ float inv[NT];
  __shared__ float red[kGemvWarps * 2 * NT];
  const int q_dim = a.heads * a.head_dim, kv_dim = a.kv_heads * a.head_dim, H = a.hidden;
  const int units = (q_dim + 2 * kv_dim) / 2;
  const W* w = static_cast<const W*>(a.w);
  auto rows_of = [&](int u, const W* (&rows)[2]) {
    const RowPair r = row_pair(u, q_dim, kv_dim, a.head_dim);
    rows[0] = w + size_t(r.first) * H;
    rows[1] = w + size_t(r.second) * H;
  };
  prefetch_units<W, 2>(units, H, split, rows_of);
  pdl_wait();
  pdl_trigger();
  block_inv_rms<NT>(x, H, n, a.eps, scratch, inv);
  if (NT == 1) stage_normed(x, inv[0], a.norm, H, staged);
  const int p0 = *pos;
  block_gemv<W, 2, NT>(units, H, split, NT == 1 ? staged : x, H, n, NT == 1 ? nullptr : a.norm, red, rows_of,
                       [&](int u, float (&acc)[2][NT]) {
                         const RowPair r = row_pair(u, q_dim, kv_dim, a.head_dim);
                         const int lane = threadIdx.x % kWarp;
#pragma unroll
                         for (int t = 0; t < NT; ++t) {
                           const float scale = NT == 1 ? 1.0f : inv[t];
                           if (t < n && lane == t)
                             rope_and_store(a, r, acc[0][t] * scale, acc[1][t] * scale, t, p0 + t, q_out);
                         }
                       });
}

// Prefill: the projection came from the tensor-core GEMM; one thread per row pair and token.
// grid (ceil(units / 256), n): token t = blockIdx.y, one row pair per thread.
__global__ void bias_rope_append_kernel(QkvRope a, const float* qkv, const int* pos, float* q_out) {
  pdl_wait();
  pdl_trigger();
  const int q_dim = a.heads * a.head_dim, kv_dim = a.kv_heads * a.head_dim, width = q_dim + 2 * kv_dim;
  const int u = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
  if (u >= width / 2) return;
  const RowPair r = row_pair(u, q_dim, kv_dim, a.head_dim);
  const float* row = qkv + size_t(t) * width;
  rope_and_store(a, r, row[r.first], row[r.second], t, *pos + t, q_out);
}

}  // namespace

void rmsnorm_qkv_rope_append(const QkvRope& a, const float* x, int n, const int* pos, float* q_out, int sms,
                             cudaStream_t stream) {
  const int units = (a.heads + 2 * a.kv_heads) * a.head_dim / 2;
  const size_t smem = n == 1 ? size_t(a.hidden) * sizeof(float) : 0;
  with_weight_type(a.dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    auto kernel = n == 1 ? rmsnorm_qkv_rope_append_kernel<W, 1> : rmsnorm_qkv_rope_append_kernel<W, kMaxVecTokens>;
    const int split = gemv_split(units, a.hidden, sms, blocks_per_sm(kernel, kGemvThreads, smem));
    const int blocks = resident_blocks(kernel, kGemvThreads, smem, units, kGemvWarps / split, sms);
    launch_pdl(kernel, dim3(blocks), dim3(kGemvThreads), smem, stream, a, x, n, pos, q_out, split);
  });
}

void bias_rope_append(const QkvRope& a, const float* qkv, int n, const int* pos, float* q_out,
                      cudaStream_t stream) {
  const int units = (a.heads + 2 * a.kv_heads) * a.head_dim / 2;
  launch_pdl(bias_rope_append_kernel, dim3((units + 255) / 256, n), dim3(256), 0, stream, a, qkv, pos, q_out);
}

}  // namespace runahead::cuda
