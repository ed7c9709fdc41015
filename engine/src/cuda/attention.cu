// Attention of new tokens over the f32 KV cache, with grouped-query heads.
// Decode: split-K over positions, the last block of each (token, head) merges the splits.
// (Prefill attention lives in attention_prefill.cu.)
#include <algorithm>
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 128;

// grid (splits, heads, n); block kThreads. Partial of split s: [m, l, acc[head_dim]] with
// m the largest raw score, l = sum exp((s - m) * scale), acc = sum exp(...) v. A block's
// loads are few rounds of independent ones, each a memory latency: a position's key and
// value rows are read together by head_dim / 4 lanes (a group), a float4 each (q in
// registers), kBatch positions a lane in flight; each group keeps its own online softmax
// over its positions, the groups are combined in shared memory; the last block of each
// (token, head) to finish merges the splits, every split's values loaded at once.
constexpr int kBatch = 8;
static_assert(kThreads == kMaxHeadDim, "the merge gives each thread one dimension of the head");
__global__ void __launch_bounds__(kThreads) attention_decode_kernel(DecodeAttention a, const float* q,
                                                                   const int* pos, float* out) {
  __shared__ float4 group_acc[kThreads];       // [groups][cols]: group g's acc, dimension g * head_dim + d as floats
  __shared__ float group_m[kThreads], group_l[kThreads];
  __shared__ float weight[kWarp];
  __shared__ bool last;
  const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, S = gridDim.x;
  const int hd = a.head_dim, kv_dim = a.kv_heads * hd, kv = h / (a.heads / a.kv_heads);
  const float scale = rsqrtf(float(hd));
  // Lanes of a position: cols (a power of two dividing 32), each a float4 column; `groups`
  // positions at a time across the block.
  const int cols = hd / 4, groups = kThreads / cols, col = threadIdx.x % cols, group = threadIdx.x / cols;
  // The position was advanced by the previous step, at least two kernels back, so it is final
  // before pdl_wait: this kernel starts only once every block of the previous one has passed
  // its own pdl_wait, that is once the kernel before that one is done.
  const int len = *pos + t + 1;
  const int chunk = (len + S - 1) / S;
  const int begin = min(len, split * chunk), end = min(len, begin + chunk), count = end - begin;
  const float4* K = reinterpret_cast<const float4*>(a.k_cache + size_t(begin) * kv_dim + size_t(kv) * hd);
  const float4* V = reinterpret_cast<const float4*>(a.v_cache + size_t(begin) * kv_dim + size_t(kv) * hd);
  const int row4 = kv_dim / 4;
  pdl_wait();
  pdl_trigger();
  const float4 q4 = reinterpret_cast<const float4*>(q + (size_t(t) * a.heads + h) * hd)[col];
  float m = -INFINITY, l = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  // Every lane of a warp runs the same iterations (the shuffles need the whole warp).
  for (int i0 = group; i0 - group < count; i0 += kBatch * groups) {
    float4 k[kBatch], v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * groups;
      k[b] = i < count ? K[size_t(i) * row4 + col] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      v[b] = i < count ? V[size_t(i) * row4 + col] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      float dot = fmaf(q4.x, k[b].x, fmaf(q4.y, k[b].y, fmaf(q4.z, k[b].z, q4.w * k[b].w)));
      for (int o = cols / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (i0 + b * groups < count) {  // the same for every lane of the group
        const float m_new = fmaxf(m, dot);
        const float c = expf((m - m_new) * scale), p = expf((dot - m_new) * scale);
        l = fmaf(l, c, p);
        acc.x = fmaf(acc.x, c, p * v[b].x), acc.y = fmaf(acc.y, c, p * v[b].y);
        acc.z = fmaf(acc.z, c, p * v[b].z), acc.w = fmaf(acc.w, c, p * v[b].w);
        m = m_new;
      }
    }
  }
  group_acc[threadIdx.x] = acc;  // = group * cols + col
  if (col == 0) group_m[group] = m, group_l[group] = l;
  __syncthreads();

  // The split's partial: the groups rescaled to the largest of their maxima (a group without
  // positions weighs 0).
  float M = -INFINITY;
  for (int g = 0; g < groups; ++g) M = fmaxf(M, group_m[g]);
  const auto group_weight = [&](int g) { return group_m[g] == -INFINITY ? 0.0f : expf((group_m[g] - M) * scale); };
  const size_t stride = size_t(hd) + 2;
  float* part = a.partial + (size_t(t) * a.heads + h) * S * stride;
  const int d = threadIdx.x;
  if (d < hd) {
    const float* accs = reinterpret_cast<const float*>(group_acc);
    float total = 0.0f;
    for (int g = 0; g < groups; ++g) total = fmaf(group_weight(g), accs[g * hd + d], total);
    part[split * stride + 2 + d] = total;
  }
  if (threadIdx.x == 0) {
    float L = 0.0f;
    for (int g = 0; g < groups; ++g) L = fmaf(group_weight(g), group_l[g], L);
    part[split * stride] = M;
    part[split * stride + 1] = L;
  }

  // The last block of this (token, head) to finish merges every split.
  __threadfence();
  __syncthreads();
  int* counter = a.counters + size_t(t) * a.heads + h;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == S - 1;
  __syncthreads();
  if (!last) return;
  // Split s weighs exp((m_s - M) * scale) / sum_s exp((m_s - M) * scale) l_s; every split's
  // m, l and values are loaded before any is used.
  __threadfence();
  float values[kWarp];
#pragma unroll
  for (int s = 0; s < kWarp; ++s) values[s] = s < S && d < hd ? __ldcg(part + s * stride + 2 + d) : 0.0f;
  if (threadIdx.x < kWarp) {
    const int s = threadIdx.x;
    const float ms = s < S ? __ldcg(part + s * stride) : -INFINITY;
    const float ls = s < S ? __ldcg(part + s * stride + 1) : 0.0f;
    const float Ms = warp_max(ms);
    const float w = s < S && ms != -INFINITY ? expf((ms - Ms) * scale) : 0.0f;
    const float den = warp_sum(w * ls);
    weight[s] = w / den;
  }
  __syncthreads();
  if (d >= hd) return;  // whole warps (head_dim a multiple of 32 when quantizing)
  const int width = a.heads * hd;
  float num = 0.0f;
#pragma unroll
  for (int s = 0; s < kWarp; ++s)
    if (s < S) num = fmaf(weight[s], values[s], num);
  const size_t k = size_t(h) * hd + d;
  out[size_t(t) * width + k] = num;
  if (a.q8.q) {
    float q8_scale;
    a.q8.q[size_t(t) * width + k] = q8_lane(num, q8_scale);
    if (threadIdx.x % kWarp == 0) a.q8.d[size_t(t) * (width / 32) + k / 32] = q8_scale;
  }
  if (threadIdx.x == 0) *counter = 0;
}

}  // namespace

// About three blocks a multiprocessor (H200, Q4_K_M decode at context 512, ms/token: 1.5B's 12
// heads, 22 splits a head 1.263, 32 1.239; 7B's 28 heads, 10 2.663, 19 2.675).
int attention_splits(int heads, int sms) { return std::clamp((3 * sms + heads - 1) / heads, 1, kWarp); }

size_t attention_partial_floats(int heads, int head_dim, int splits) {
  return size_t(kMaxVecTokens) * heads * splits * (head_dim + 2);
}

void attention_decode(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                      cudaStream_t stream) {
  if (a.q8.q && a.head_dim % 32 != 0) throw EngineError("internal", "attention_decode: quantized outputs need head_dim % 32 == 0");
  if (a.head_dim % 4 != 0 || kThreads % (a.head_dim / 4) != 0 || a.head_dim > kMaxHeadDim)
    throw EngineError("unsupported", "head_dim " + std::to_string(a.head_dim) +
                                         ": the CUDA attention needs a multiple of 4 that divides 512, at most 128");
  launch_pdl(attention_decode_kernel, dim3(a.splits, a.heads, n), dim3(kThreads), 0, stream, a, q, pos, out);
}

}  // namespace runahead::cuda
