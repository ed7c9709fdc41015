// The attention input of a layer in one pass over Wqkv: RMSNorm, the q/k/v projection
// with its bias, RoPE on q and k, and the append of k and v to the KV cache. A layer with
// q/k norms (Qwen3) takes a second, small kernel: each head is normalised whole before RoPE.
#include <algorithm>
#include <string>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/kquant_ring.cuh"

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

// What rope_and_store reads besides the sums, as a preload (block_gemv, ring_gemv) loads it
// ahead of them: the rows' biases (0 without), and for a q or k pair RoPE's cos and sin at
// position p.
__device__ __forceinline__ void rope_loads(const QkvRope& a, RowPair r, int p, float (&pre)[kPreloads]) {
  const int q_dim = a.heads * a.head_dim, kv_dim = a.kv_heads * a.head_dim, half = a.head_dim / 2;
  pre[0] = a.bias ? a.bias[r.first] : 0.0f;
  pre[1] = a.bias ? a.bias[r.second] : 0.0f;
  if (r.first < q_dim + kv_dim) {
    const int i = r.first % a.head_dim;
    pre[2] = a.rope_cos[size_t(p) * half + i];
    pre[3] = a.rope_sin[size_t(p) * half + i];
  }
}

// Adds the bias to rows (first, second) of token t at position p, rotates them when they
// are q or k, and stores them in q_out or the cache; `pre` what rope_loads loaded for them.
__device__ __forceinline__ void rope_and_store(const QkvRope& a, RowPair r, float v0, float v1, int t, int p,
                                               float* q_out, const float (&pre)[kPreloads]) {
  const int q_dim = a.heads * a.head_dim, kv_dim = a.kv_heads * a.head_dim;
  if (a.bias) {
    v0 += pre[0];
    v1 += pre[1];
  }
  if (r.first >= q_dim + kv_dim) {
    a.v_cache[size_t(p) * kv_dim + r.first - q_dim - kv_dim] = v0;
    a.v_cache[size_t(p) * kv_dim + r.second - q_dim - kv_dim] = v1;
    return;
  }
  const float c = pre[2], s = pre[3];
  const float o0 = v0 * c - v1 * s, o1 = v1 * c + v0 * s;
  if (r.first < q_dim) {
    q_out[size_t(t) * q_dim + r.first] = o0;
    q_out[size_t(t) * q_dim + r.second] = o1;
  } else {
    a.k_cache[size_t(p) * kv_dim + r.first - q_dim] = o0;
    a.k_cache[size_t(p) * kv_dim + r.second - q_dim] = o1;
  }
}
__device__ __forceinline__ void rope_and_store(const QkvRope& a, RowPair r, float v0, float v1, int t, int p,
                                               float* q_out) {
  float pre[kPreloads] = {};
  rope_loads(a, r, p, pre);
  rope_and_store(a, r, v0, v1, t, p, q_out, pre);
}

// One row pair per unit; NT >= n tokens share each pass over the weights. For one token
// the normalised input is staged in shared memory. kRaw (q/k norms follow): the projection
// goes to a.qkv as it is, for bias_qk_norm_rope_append_kernel.
template <class W, int NT, bool kRaw>
__global__ void __launch_bounds__(kGemvThreads, (kGemvMinBlocks<W, NT>)) rmsnorm_qkv_rope_append_kernel(QkvRope a, const float* x, int n,
                                                                              const int* pos, float* q_out,
                                                                              int split) {
  RUNAHEAD_TRACE_BLOCK(qkv_warps);
  extern __shared__ float staged[];
  __shared__ float scratch[NT * kGemvWarps];
  __shared__ float inv[NT];
  __shared__ float red[kGemvWarps * 2 * NT];
  const int q_dim = a.heads * a.head_dim, kv_dim = a.kv_heads * a.head_dim, H = a.hidden;
  const int units = (q_dim + 2 * kv_dim) / 2;
  const RowMatrix<W> w{static_cast<const W*>(a.w), a.scale, H, kq_q6_from(a.w, a.scale, 2 * units, a.q6_from)};
  auto rows_of = [&](int u, int (&rows)[2]) {
    const RowPair r = row_pair(u, q_dim, kv_dim, a.head_dim);
    rows[0] = r.first;
    rows[1] = r.second;
  };
  prefetch_units<W, 2>(w, units, split, rows_of);
  pdl_wait();
  pdl_trigger();
  constexpr bool kStaged = kStagesNormed<W, NT>;
  const NormInputs in = norm_inputs<W, NT>(x, n, a.eps, a.norm, H, staged, scratch, inv, Q8Inputs{a.q8.q, a.q8.d, H});
  const int p0 = *pos;
  block_gemv<W, 2, NT>(w, units, split, kStaged ? staged : x, H, n, NT == 1 ? nullptr : a.norm, red, rows_of,
                       [&](int u, float (&acc)[2][NT], const float (&pre)[kPreloads]) {
                         const RowPair r = row_pair(u, q_dim, kv_dim, a.head_dim);
                         const int lane = threadIdx.x % kWarp;
#pragma unroll
                         for (int t = 0; t < NT; ++t) {
                           const float scale = kStaged ? 1.0f : t == 0 ? in.inv0 : inv[t];
                           if (t >= n || lane != t) continue;
                           if constexpr (kRaw) {
                             float* row = a.qkv + size_t(t) * (q_dim + 2 * kv_dim);
                             row[r.first] = acc[0][t] * scale;
                             row[r.second] = acc[1][t] * scale;
                           } else {
                             rope_and_store(a, r, acc[0][t] * scale, acc[1][t] * scale, t, p0 + t, q_out, pre);
                           }
                         }
                       },
                       in.q8,
                       // Lane t loads token t's bias, cos and sin before the unit's sums.
                       [&](int u, float (&pre)[kPreloads]) {
                         const int lane = threadIdx.x % kWarp;
                         if (!kRaw && lane < n) rope_loads(a, row_pair(u, q_dim, kv_dim, a.head_dim), p0 + lane, pre);
                       });
}

// One token's q/k/v on K-quant or Q8_0 rows through a ring of bulk copies (kquant_ring.cuh): a tile is
// 8 rows of a head and the 8 rows half a head on, the pairs RoPE rotates together (v's rows are
// paired the same way and stored unrotated); the inputs staged as the kernel above stages them.
// kRaw as above.
template <RingRows kRows, bool kRaw>
__global__ void __launch_bounds__(kRingThreads, kRingBlocksPerSm)
    qkv_ring_kernel(RingShape shape, QkvRope a, const float* x, const int* pos, float* q_out) {
  RUNAHEAD_TRACE_BLOCK(qkv_ring);
  extern __shared__ __align__(128) unsigned char smem[];
  float inv = 0.0f;
  ring_gemv<kRows, 2>(
      shape, smem, [&] { return ring_norm_inputs(shape, x, a.norm, a.hidden, a.eps, smem, inv); },
      // Its bias, cos and sin load here: preloaded before the tile's stage (as the per-warp kernel
      // does) the 7B's q/k/v did not gain (H200, Q4_K_M, v29: 1.941 -> 1.944 ms/token).
      [&](int first, const float (&sum)[2], const float (&)[kPreloads]) {
        const RowPair r{first, first + a.head_dim / 2};
        if constexpr (kRaw) {
          a.qkv[r.first] = sum[0] * inv;
          a.qkv[r.second] = sum[1] * inv;
        } else {
          rope_and_store(a, r, sum[0] * inv, sum[1] * inv, 0, *pos, q_out);
        }
      });
}

// The ring's launch for one token's q/k/v, or stages 0 where it does not apply: rows not K-quant,
// half a head not a multiple of 8 rows, not one stage of a tile fitting (a block of the 7B's
// 288 tiles gets at most one, so one stage does: its copy starts before pdl_wait); or (Auto)
// fewer tiles than half the multiprocessors. Measured on an H200 (Q4_K_M, decode at context
// 512): the 7B's 288 tiles, q/k/v 438 -> 324 us a step, 2.571 -> 2.470 ms/token (v23). The
// 1.5B's 128 lost while each block staged its inputs in several rounds of loads (q/k/v 194 ->
// 187 us, the step 1.208 -> 1.214), so the ring wanted 2 tiles a multiprocessor; with the
// inputs in one round (v25) it gains there too: q/k/v 154 -> 122 us, the step 1.110 -> 1.084
// (forced, against the warps' own loads, same binary). Fewer tiles are not measured. Q8_0 rows
// (one stage of the 7B's 16 rows of 3808 bytes): 7B Q8_0 2.686 -> 2.618 ms/token (q/k/v 338 ->
// 236 us a step), 1.5B 1.034 -> 1.011 (127 -> 113; v30, same binary).
struct QkvRingLaunch {
  RingShape shape{};
  void (*kernel)(RingShape, QkvRope, const float*, const int*, float*) = nullptr;
  int blocks = 0;
};
QkvRingLaunch qkv_ring_launch(const QkvRope& a, int n, KqRing use, int sms) {
  QkvRingLaunch l;
  const int half = a.head_dim / 2, heads = a.heads + 2 * a.kv_heads;
  const bool q8 = a.dtype == DType::Q8_0;
  if (use == KqRing::Off || (a.dtype != DType::Q4_K && !q8) || half % kRingWarps != 0) return l;
  const int q6_from = q8 ? 0 : kq_q6_from(a.w, a.scale, heads * a.head_dim, a.q6_from);
  // (Q8_0 rows read the inputs as stored: no room for a pair-planar copy.)
  l.shape = ring_shape(a.w, a.scale, q6_from, a.hidden, 2, half, a.head_dim, half / kRingWarps,
                       heads * (half / kRingWarps), n, q8 ? stage_q8_bytes(a.hidden) : ring_norm_staged_bytes(a.hidden),
                       1, 1, kRingBlocksPerSm, q8);
  with_planar_inputs(l.shape, a.hidden, a.q8);
  l.shape.flags = a.ring_flags;
  if (l.shape.stages == 0 || (use == KqRing::Auto && 2 * l.shape.tiles < sms)) {
    l.shape.stages = 0;
    return l;
  }
  // [RingRows][q/k norms follow]
  constexpr decltype(l.kernel) kernels[4][2] = {
      {qkv_ring_kernel<RingRows::Q4, false>, qkv_ring_kernel<RingRows::Q4, true>},
      {qkv_ring_kernel<RingRows::Q6, false>, qkv_ring_kernel<RingRows::Q6, true>},
      {qkv_ring_kernel<RingRows::Both, false>, qkv_ring_kernel<RingRows::Both, true>},
      {qkv_ring_kernel<RingRows::Q8, false>, qkv_ring_kernel<RingRows::Q8, true>}};
  l.kernel = kernels[int(ring_rows(l.shape))][a.q_norm != nullptr];
  int resident = 0;
  l.blocks = ring_blocks(l.kernel, l.shape, sms, resident);
  return l;
}

// Prefill: the projection came from the tensor-core GEMM; one thread per row pair and token.
// grid (ceil(units / 256), n): token t = blockIdx.y, one row pair per thread.
__global__ void bias_rope_append_kernel(QkvRope a, const float* qkv, const int* pos, float* q_out) {
  RUNAHEAD_TRACE_BLOCK(bias_rope);
  pdl_wait();
  pdl_trigger();
  const int q_dim = a.heads * a.head_dim, kv_dim = a.kv_heads * a.head_dim, width = q_dim + 2 * kv_dim;
  const int u = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
  if (u >= width / 2) return;
  const RowPair r = row_pair(u, q_dim, kv_dim, a.head_dim);
  const float* row = qkv + size_t(t) * width;
  rope_and_store(a, r, row[r.first], row[r.second], t, *pos + t, q_out);
}

// With q/k norms (Qwen3): one warp per head of token t = blockIdx.y, q heads then k then v;
// grid (ceil((heads + 2 kv_heads) / kNormWarps), n). The head (bias added) is staged in shared
// memory, normalised when it is a q or k head, then rotated and stored as bias_rope_append's.
constexpr int kNormWarps = 4, kMaxNormHeadDim = 128;
__global__ void __launch_bounds__(kNormWarps * kWarp) bias_qk_norm_rope_append_kernel(QkvRope a, const float* qkv,
                                                                                     const int* pos, float* q_out) {
  RUNAHEAD_TRACE_BLOCK(bias_qk_norm_rope);
  __shared__ float staged[kNormWarps][kMaxNormHeadDim];
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int hd = a.head_dim, half = hd / 2, head = blockIdx.x * kNormWarps + warp, t = blockIdx.y;
  if (head >= a.heads + 2 * a.kv_heads) return;
  const int width = (a.heads + 2 * a.kv_heads) * hd, first = head * hd;
  const float* norm = head < a.heads ? a.q_norm : head < a.heads + a.kv_heads ? a.k_norm : nullptr;
  const float* row = qkv + size_t(t) * width + first;
  float* v = staged[warp];
  float ss = 0;
  for (int i = lane; i < hd; i += kWarp) {
    const float value = row[i] + (a.bias ? a.bias[first + i] : 0.0f);
    v[i] = value;
    ss += value * value;
  }
  const float inv = norm ? rsqrtf(warp_sum(ss) / float(hd) + a.eps) : 1.0f;
  __syncwarp();
  QkvRope unbiased = a;  // the bias is in already
  unbiased.bias = nullptr;
  const int p = *pos + t;
  for (int i = lane; i < half; i += kWarp) {
    float v0 = v[i], v1 = v[i + half];
    if (norm) v0 *= inv * norm[i], v1 *= inv * norm[i + half];
    rope_and_store(unbiased, RowPair{first + i, first + i + half}, v0, v1, t, p, q_out);
  }
}

}  // namespace

void rmsnorm_qkv_rope_append(const QkvRope& a, const float* x, int n, const int* pos, float* q_out, int sms,
                             cudaStream_t stream, KqRing ring) {
  const int units = (a.heads + 2 * a.kv_heads) * a.head_dim / 2;
  const bool raw = a.q_norm != nullptr;
  if (const QkvRingLaunch l = qkv_ring_launch(a, n, ring, sms); l.shape.stages > 0) {
    launch_pdl(l.kernel, dim3(l.blocks), dim3(kRingThreads), ring_smem(l.shape), stream, l.shape, a, x, pos, q_out);
    if (raw) bias_rope_append(a, a.qkv, n, pos, q_out, stream);
    return;
  }
  with_matrix_type(a.dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    const size_t smem = prepare_norm_inputs<W>(x, a.norm, n, a.hidden, a.q8, stream);
    auto kernel = for_vec_tokens(n, [raw](auto nt) {
      constexpr int NT = decltype(nt)::value;
      return raw ? rmsnorm_qkv_rope_append_kernel<W, NT, true> : rmsnorm_qkv_rope_append_kernel<W, NT, false>;
    });
    const int split = gemv_split(units, a.hidden, sms, blocks_per_sm(kernel, kGemvThreads, smem));
    const int blocks = resident_blocks(kernel, kGemvThreads, smem, units, kGemvWarps / split, sms);
    launch_pdl(kernel, dim3(blocks), dim3(kGemvThreads), smem, stream, a, x, n, pos, q_out, split);
  });
  if (raw) bias_rope_append(a, a.qkv, n, pos, q_out, stream);
}

bool qkv_ring_applies(const QkvRope& a, KqRing ring, int sms) {
  return qkv_ring_launch(a, 1, ring, sms).shape.stages > 0;
}

RingPrefetch qkv_ring_prefix(const QkvRope& a, KqRing ring, int sms, size_t bytes) {
  return ring_prefix(qkv_ring_launch(a, 1, ring, sms).shape, 2, bytes);
}

void bias_rope_append(const QkvRope& a, const float* qkv, int n, const int* pos, float* q_out,
                      cudaStream_t stream) {
  if (a.q_norm) {
    if (a.head_dim > kMaxNormHeadDim)
      throw EngineError("unsupported", "q/k norm with head_dim " + std::to_string(a.head_dim) + " above " +
                                           std::to_string(kMaxNormHeadDim));
    const int heads = a.heads + 2 * a.kv_heads;
    launch_pdl(bias_qk_norm_rope_append_kernel, dim3((heads + kNormWarps - 1) / kNormWarps, n),
               dim3(kNormWarps * kWarp), 0, stream, a, qkv, pos, q_out);
    return;
  }
  const int units = (a.heads + 2 * a.kv_heads) * a.head_dim / 2;
  launch_pdl(bias_rope_append_kernel, dim3((units + 255) / 256, n), dim3(256), 0, stream, a, qkv, pos, q_out);
}

}  // namespace runahead::cuda
