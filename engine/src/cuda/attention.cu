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
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxHeadDim = 128;

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
// of a block is independent of the others, so a block costs a few memory latencies: a
// position's key and value rows are read by head_dim / 4 lanes, a float4 each (q in
// registers), kBatch positions per lane in flight.
constexpr int kBatch = 8;
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
  float* sums = smem;                    // [kThreads * 4]: P V per position group
  float* scores = sums + kThreads * 4;   // [chunk]
  // Lanes of a position: cols (a power of two dividing 32), each a float4 column; `groups`
  // positions at a time across the block.
  const int cols = hd / 4, groups = kThreads / cols, col = threadIdx.x % cols, group = threadIdx.x / cols;
  const float4 q4 = reinterpret_cast<const float4*>(q + (size_t(t) * a.heads + h) * hd)[col];
  const float4* K = reinterpret_cast<const float4*>(a.k_cache + size_t(begin) * kv_dim + size_t(kv) * hd);
  const float4* V = reinterpret_cast<const float4*>(a.v_cache + size_t(begin) * kv_dim + size_t(kv) * hd);
  const int row4 = kv_dim / 4;
  const auto load = [&](const float4* rows, int i0, float4 (&r)[kBatch]) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * groups;
      r[b] = i < count ? rows[size_t(i) * row4 + col] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  float m = -INFINITY;
  // Every lane of a warp runs the same iterations (the shuffles need the whole warp).
  for (int i0 = group; i0 - group < count; i0 += kBatch * groups) {
    float4 k[kBatch];
    load(K, i0, k);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      float dot = fmaf(q4.x, k[b].x, fmaf(q4.y, k[b].y, fmaf(q4.z, k[b].z, q4.w * k[b].w)));
      for (int o = cols / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const int i = i0 + b * groups;
      if (i < count) {
        if (col == 0) scores[i] = dot;
        m = fmaxf(m, dot);
      }
    }
  }
  m = block_reduce(m, true, red);  // its barriers also publish scores[]
  float l = 0.0f;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const float e = expf((scores[i] - m) * scale);
    scores[i] = e;
    l += e;
  }
  l = block_reduce(l, false, red);  // and the weights

  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int i0 = group; i0 < count; i0 += kBatch * groups) {
    float4 v[kBatch];
    load(V, i0, v);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * groups;
      const float p = i < count ? scores[i] : 0.0f;
      acc.x = fmaf(p, v[b].x, acc.x), acc.y = fmaf(p, v[b].y, acc.y), acc.z = fmaf(p, v[b].z, acc.z), acc.w = fmaf(p, v[b].w, acc.w);
    }
  }
  reinterpret_cast<float4*>(sums)[group * cols + col] = acc;
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
  const int width = a.heads * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float num = 0.0f;
#pragma unroll 8
    for (int s = 0; s < S; ++s) num = fmaf(weight[s], __ldcg(part + s * stride + 2 + d), num);
    const size_t k = size_t(h) * hd + d;
    out[size_t(t) * width + k] = num;
    if (a.q8.q) {  // a warp holds whole groups of 32 (head_dim a multiple of 32)
      float scale;
      a.q8.q[size_t(t) * width + k] = q8_lane(num, scale);
      if (threadIdx.x % kWarp == 0) a.q8.d[size_t(t) * (width / 32) + k / 32] = scale;
    }
  }
  if (threadIdx.x == 0) *counter = 0;
}

size_t decode_smem(const DecodeAttention& a) {
  return (size_t(kThreads) * 4 + (a.capacity + a.splits - 1) / a.splits) * sizeof(float);
}

}  // namespace

int attention_splits(int heads, int sms) { return std::clamp((2 * sms + heads - 1) / heads, 1, kWarp); }

size_t attention_partial_floats(int heads, int head_dim, int splits) {
  return size_t(kMaxVecTokens) * heads * splits * (head_dim + 2);
}

void attention_decode(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                      cudaStream_t stream) {
  if (a.q8.q && a.head_dim % 32 != 0) throw EngineError("internal", "attention_decode: quantized outputs need head_dim % 32 == 0");
  if (a.head_dim % 4 != 0 || kThreads % (a.head_dim / 4) != 0 || a.head_dim > kMaxHeadDim)
    throw EngineError("unsupported", "head_dim " + std::to_string(a.head_dim) +
                                         ": the CUDA attention needs a multiple of 4 that divides 512, at most 128");
  const size_t smem = decode_smem(a);
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(attention_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute(attention_decode_kernel)");
  launch_pdl(attention_decode_kernel, dim3(a.splits, a.heads, n), dim3(kThreads), smem, stream, a, q, pos, out);
}

}  // namespace runahead::cuda
