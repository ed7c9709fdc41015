// Attention of new tokens over the f32 KV cache, with grouped-query heads.
// Decode: split-K over positions, the last block of each (token, head) merges the splits.
// Prefill: query tiles that share each key/value tile through shared memory.
#include <algorithm>
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
  v = is_max ? warp_max(v) : warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kWarps; ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

// grid (splits, heads, n); block kThreads. Partial of split s: [m, l, acc[head_dim]] with
// m the largest raw score, l = sum exp((s - m) * scale), acc = sum exp(...) v. Every load
// of a block is independent of the others, so a block costs a few memory latencies:
// one thread per position for the scores, (column, position group) threads for P V.
__global__ void __launch_bounds__(kThreads) attention_decode_kernel(DecodeAttention a, const float* q,
                                                                   const int* pos, float* out) {
  extern __shared__ float smem[];
  __shared__ float red[kWarps];
  __shared__ bool last;
  pdl_wait();
  pdl_trigger();
  const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, S = gridDim.x;
  const int hd = a.head_dim, kv_dim = a.kv_heads * hd, kv = h / (a.heads / a.kv_heads);
  const float scale = rsqrtf(float(hd));
  const int len = *pos + t + 1;
  const int chunk = (len + S - 1) / S;
  const int begin = min(len, split * chunk), end = min(len, begin + chunk), count = end - begin;
  float* qs = smem;                                   // [hd]
  float* sums = qs + hd;                              // [kThreads * 4]: P V per position group
  float* scores = sums + kThreads * 4;                // [chunk]
  for (int d = threadIdx.x; d < hd; d += kThreads) qs[d] = q[(size_t(t) * a.heads + h) * hd + d];
  __syncthreads();

  const float* K = a.k_cache + size_t(kv) * hd;
  const float* V = a.v_cache + size_t(kv) * hd;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const float4* k = reinterpret_cast<const float4*>(K + size_t(begin + i) * kv_dim);
    float dot = 0.0f;
#pragma unroll 8
    for (int e = 0; e < hd / 4; ++e) {
      const float4 kv4 = k[e];
      dot = fmaf(qs[4 * e], kv4.x, dot);
      dot = fmaf(qs[4 * e + 1], kv4.y, dot);
      dot = fmaf(qs[4 * e + 2], kv4.z, dot);
      dot = fmaf(qs[4 * e + 3], kv4.w, dot);
    }
    scores[i] = dot;
    m = fmaxf(m, dot);
  }
  m = block_reduce(m, true, red);
  float l = 0.0f;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const float e = expf((scores[i] - m) * scale);
    scores[i] = e;
    l += e;
  }
  l = block_reduce(l, false, red);  // its barriers also publish scores[]

  const int cols = hd / 4, groups = kThreads / cols, col = threadIdx.x % cols, group = threadIdx.x / cols;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (group < groups) {
#pragma unroll 4
    for (int i = group; i < count; i += groups) {
      const float p = scores[i];
      const float4 v = reinterpret_cast<const float4*>(V + size_t(begin + i) * kv_dim)[col];
      acc.x = fmaf(p, v.x, acc.x), acc.y = fmaf(p, v.y, acc.y), acc.z = fmaf(p, v.z, acc.z), acc.w = fmaf(p, v.w, acc.w);
    }
    reinterpret_cast<float4*>(sums)[group * cols + col] = acc;
  }
  __syncthreads();

  const size_t stride = size_t(hd) + 2;
  float* part = a.partial + (size_t(t) * a.heads + h) * S * stride;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float total = 0.0f;
    for (int g = 0; g < groups; ++g) total += sums[g * hd + d];
    part[split * stride + 2 + d] = total;
  }
  if (threadIdx.x == 0) {
    part[split * stride] = m;
    part[split * stride + 1] = l;
  }

  // The last block of this (token, head) to finish merges every split.
  __threadfence();
  __syncthreads();
  int* counter = a.counters + size_t(t) * a.heads + h;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1) == S - 1;
  __syncthreads();
  if (!last) return;
  // Split s weighs exp((m_s - M) * scale) / sum_s exp((m_s - M) * scale) l_s; the loads of
  // every split are issued together.
  __threadfence();
  float* weight = sums;  // [S], reused
  if (threadIdx.x < kWarp) {
    const int s = threadIdx.x;
    const float ms = s < S ? __ldcg(part + s * stride) : -INFINITY;
    const float ls = s < S ? __ldcg(part + s * stride + 1) : 0.0f;
    const float M = warp_max(ms);
    const float w = s < S ? expf((ms - M) * scale) : 0.0f;
    const float den = warp_sum(w * ls);
    if (s < S) weight[s] = w / den;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float num = 0.0f;
#pragma unroll 8
    for (int s = 0; s < S; ++s) num = fmaf(weight[s], __ldcg(part + s * stride + 2 + d), num);
    out[(size_t(t) * a.heads + h) * hd + d] = num;
  }
  if (threadIdx.x == 0) *counter = 0;
}

constexpr int kTileKeys = 32;       // keys per shared-memory tile: one per lane
constexpr int kQueriesPerWarp = 4;
constexpr int kPrefillWarps = 8;
constexpr int kMaxHeadDim = 128;

// grid (ceil(n / 32), heads); block 8 warps, each owning 4 queries. Keys and values pass
// through shared memory a tile of 32 at a time; lane j scores key j, then every lane
// accumulates head_dim / 32 output columns. Online softmax, f32 throughout.
__global__ void __launch_bounds__(kPrefillWarps * kWarp) attention_prefill_kernel(DecodeAttention a, const float* q,
                                                                                 int n, const int* pos, float* out) {
  extern __shared__ float smem[];
  pdl_wait();
  pdl_trigger();
  const int h = blockIdx.y, hd = a.head_dim, kv_dim = a.kv_heads * hd, kv = h / (a.heads / a.kv_heads);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  // ks: [32][hd + 1] (padded: lane j reads row j), vs: [32][hd], qs: [warps][4][hd].
  float* ks = smem;
  float* vs = ks + kTileKeys * (hd + 1);
  float* qs = vs + kTileKeys * hd + size_t(warp) * kQueriesPerWarp * hd;
  const int t0 = blockIdx.x * kPrefillWarps * kQueriesPerWarp + warp * kQueriesPerWarp;
  const int p0 = *pos;
  const float scale = rsqrtf(float(hd));
  constexpr int kCols = kMaxHeadDim / kWarp;  // output columns per lane: d = lane + 32 c
  for (int i = 0; i < kQueriesPerWarp; ++i)
    for (int d = lane; d < hd; d += kWarp)
      qs[i * hd + d] = t0 + i < n ? q[(size_t(t0 + i) * a.heads + h) * hd + d] : 0.0f;
  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kCols];
#pragma unroll
  for (int i = 0; i < kQueriesPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;
  }
  // Keys up to the block's last query position.
  const int block_last = min(n, int(blockIdx.x + 1) * kPrefillWarps * kQueriesPerWarp) - 1;
  const int keys = p0 + block_last + 1;
  for (int k0 = 0; k0 < keys; k0 += kTileKeys) {
    __syncthreads();
    for (int i = threadIdx.x; i < kTileKeys * hd; i += blockDim.x) {
      const int j = i / hd, d = i % hd;
      const bool in = k0 + j < keys;
      ks[j * (hd + 1) + d] = in ? a.k_cache[size_t(k0 + j) * kv_dim + size_t(kv) * hd + d] : 0.0f;
      vs[j * hd + d] = in ? a.v_cache[size_t(k0 + j) * kv_dim + size_t(kv) * hd + d] : 0.0f;
    }
    __syncthreads();
    float s[kQueriesPerWarp];
#pragma unroll
    for (int i = 0; i < kQueriesPerWarp; ++i) s[i] = 0.0f;
    for (int d = 0; d < hd; ++d) {
      const float kd = ks[lane * (hd + 1) + d];
#pragma unroll
      for (int i = 0; i < kQueriesPerWarp; ++i) s[i] = fmaf(qs[i * hd + d], kd, s[i]);
    }
    // Online softmax per query; p[i] is this lane's key's weight for query i.
    float p[kQueriesPerWarp];
    bool any = false;
#pragma unroll
    for (int i = 0; i < kQueriesPerWarp; ++i) {
      const int key = k0 + lane, query_pos = p0 + t0 + i;
      const bool visible = t0 + i < n && key <= query_pos;
      const float tile_max = warp_max(visible ? s[i] : -INFINITY);
      p[i] = 0.0f;
      if (tile_max == -INFINITY) continue;  // warp-uniform: nothing visible in this tile
      any = true;
      const float m_new = fmaxf(m[i], tile_max);
      p[i] = visible ? expf((s[i] - m_new) * scale) : 0.0f;
      const float rescale = expf((m[i] - m_new) * scale);
      l[i] = l[i] * rescale + warp_sum(p[i]);
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[i][c] *= rescale;
    }
    if (!any) continue;  // warp-uniform
    // acc[i][c] += sum_j p_j[i] v[j][lane + 32 c]: each value row is read once for 4 queries.
    for (int j = 0; j < kTileKeys; ++j) {
      float pj[kQueriesPerWarp];
#pragma unroll
      for (int i = 0; i < kQueriesPerWarp; ++i) pj[i] = __shfl_sync(0xffffffffu, p[i], j);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        if (lane + kWarp * c >= hd) break;
        const float v = vs[j * hd + lane + kWarp * c];
#pragma unroll
        for (int i = 0; i < kQueriesPerWarp; ++i) acc[i][c] = fmaf(pj[i], v, acc[i][c]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kQueriesPerWarp; ++i) {
    if (t0 + i >= n) continue;
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      if (lane + kWarp * c < hd) out[(size_t(t0 + i) * a.heads + h) * hd + lane + kWarp * c] = acc[i][c] / l[i];
  }
}

size_t decode_smem(const DecodeAttention& a) {
  return (size_t(a.head_dim) + kThreads * 4 + (a.capacity + a.splits - 1) / a.splits) * sizeof(float);
}

}  // namespace

int attention_splits(int heads, int sms) { return std::clamp((2 * sms + heads - 1) / heads, 1, kWarp); }

size_t attention_partial_floats(int heads, int head_dim, int splits) {
  return size_t(kMaxVecTokens) * heads * splits * (head_dim + 2);
}

void attention_decode(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                      cudaStream_t stream) {
  if (a.head_dim % 4 != 0 || kThreads % (a.head_dim / 4) != 0 || a.head_dim > kMaxHeadDim)
    throw EngineError("unsupported", "head_dim " + std::to_string(a.head_dim) +
                                         ": the CUDA attention needs a multiple of 4 that divides 512, at most 128");
  const size_t smem = decode_smem(a);
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(attention_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute(attention_decode_kernel)");
  launch_pdl(attention_decode_kernel, dim3(a.splits, a.heads, n), dim3(kThreads), smem, stream, a, q, pos, out);
}

void attention_prefill(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                       cudaStream_t stream) {
  if (a.head_dim > kMaxHeadDim)
    throw EngineError("unsupported", "head_dim " + std::to_string(a.head_dim) + " above " +
                                         std::to_string(kMaxHeadDim) + " in the CUDA prefill attention");
  const int per_block = kPrefillWarps * kQueriesPerWarp;
  const size_t smem = (size_t(kTileKeys) * (2 * a.head_dim + 1) + size_t(per_block) * a.head_dim) * sizeof(float);
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(attention_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute(attention_prefill_kernel)");
  launch_pdl(attention_prefill_kernel, dim3((n + per_block - 1) / per_block, a.heads), dim3(kPrefillWarps * kWarp),
             smem, stream, a, q, n, pos, out);
}

}  // namespace runahead::cuda
