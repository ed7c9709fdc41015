#pragma once
// Q4_K and Q6_K matrices (model/quant_format.h) as the CUDA kernels read them: a "K-quant
// matrix" (DType::Q4_K on the device, whatever mix of the two it holds). Its Q4_K rows come
// first, at `w`, and its Q6_K rows after them, at `scale`; either part may be absent (null).
// Each row is regrouped at upload (kquant.cu) so that every part a lane reads is 16-byte
// aligned; the values are the file's bits:
//   Q4_K row (q4k_row_bytes): the blocks' 4-bit weights (K / 2 bytes, as stored: bytes
//     [32g, 32g + 32) of a block hold sub-block 2g in their low nibbles and 2g + 1 in their
//     high ones), then each block's 16-byte header (f16 d, f16 dmin, 12 bytes of 6-bit
//     scales and mins).
//   Q6_K row (q6k_row_bytes): the low 4 bits (K / 2 bytes, as stored), the high 2 bits
//     (K / 4), the int8 scales (K / 16), the f16 d (K / 128 bytes), padded to 16 bytes.
// A lane reads a chunk of 16 bytes of 4-bit weights: 32 weights in two runs of 16
// consecutive ones. The inputs arrive quantized to int8 (Q8Inputs); a run's 16 products are
// 4 dp4a on the weights' bytes, its sum scaled once (Q4_K also subtracts its min times the
// run's sum of inputs).
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/kernels.h"

namespace runahead::cuda {

struct KQWeight {
  uint8_t b;
};
template <class W> constexpr bool kIsKQ = std::is_same_v<W, KQWeight>;
constexpr int kKBlock = 256;  // weights of a Q4_K or Q6_K block

// Loads of the dot products below: from global memory (weights streamed past L1, headers and
// scales through the read-only cache), or with kTile from a tile the persistent step copied to
// shared memory (decode_step.cu).
template <bool kTile> __device__ __forceinline__ uint4 weight16(const void* p) {
  if constexpr (kTile)
    return *reinterpret_cast<const uint4*>(p);
  else
    return load_stream(p);
}
template <bool kTile, class T> __device__ __forceinline__ T read_only(const T* p) {
  if constexpr (kTile)
    return *p;
  else
    return __ldg(p);
}

// Byte k (0..11) of a Q4_K header's scales (the header's words y, z, w).
__device__ __forceinline__ uint32_t q4k_scale_byte(const uint4& h, int k) {
  const uint32_t word = k < 4 ? h.y : k < 8 ? h.z : h.w;
  return (word >> (8 * (k & 3))) & 0xFFu;
}
// Sub-block j's weights are a * q - b (ggml's get_scale_min_k4).
__device__ __forceinline__ void q4k_sub_block(const uint4& h, int j, float& a, float& b) {
  uint32_t sc, m;
  if (j < 4) {
    sc = q4k_scale_byte(h, j) & 63;
    m = q4k_scale_byte(h, j + 4) & 63;
  } else {
    sc = (q4k_scale_byte(h, j + 4) & 0xF) | ((q4k_scale_byte(h, j - 4) >> 6) << 4);
    m = (q4k_scale_byte(h, j + 4) >> 4) | ((q4k_scale_byte(h, j) >> 6) << 4);
  }
  a = __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFFu))) * float(sc);
  b = __half2float(__ushort_as_half(uint16_t(h.x >> 16))) * float(m);
}

// Weight k of a K-quant row (one weight at a time: the embedding and the prefill's widening).
__device__ __forceinline__ float kq_weight(const uint8_t* row, bool q6, int K, int k) {
  const int blk = k / kKBlock, i = k % kKBlock;
  if (!q6) {
    const int j = i / 32;
    const uint8_t byte = row[blk * 128 + 32 * (j / 2) + i % 32];
    const uint4 h = *reinterpret_cast<const uint4*>(row + K / 2 + blk * 16);
    float a, b;
    q4k_sub_block(h, j, a, b);
    return a * float((byte >> (4 * (j % 2))) & 0xF) - b;
  }
  const int n = i / 128, r = i % 128, part = r / 32, l = r % 32;
  const uint8_t low = row[blk * 128 + 64 * n + 32 * (part % 2) + l];
  const uint8_t high = row[K / 2 + blk * 64 + 32 * n + l];
  const int q = (part < 2 ? low & 0xF : low >> 4) | ((high >> (2 * part)) & 3) << 4;
  const int8_t sc = reinterpret_cast<const int8_t*>(row + K / 2 + K / 4)[blk * 16 + i / 16];
  const float d = __half2float(reinterpret_cast<const __half*>(row + K / 2 + K / 4 + K / 16)[blk]);
  return d * float(sc) * float(q - 32);
}

// The inputs of a Q8_0 or K-quant matrix-vector product, quantized once per op by
// quantize_inputs_q8 (kquant.cu) or stage_q8 (common.cuh) as llama.cpp quantizes them for its
// own kernels on the GPU (q8_1): token
// t's value k is d[t * K / 32 + k / 32] * q[t * K + k], |q| <= 127, d = the 32 values' largest
// magnitude / 127. A run of 16 weights then costs 4 dp4a and its input 16 bytes.
struct Q8Inputs {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  int K = 0;
  // When set (one token): its q again, pair-planar: the 16-byte piece j (0..3) of inputs
  // [64 p, 64 p + 64) at planar[j * K / 4 + 16 p], so a warp's lanes, a chunk pair of Q4_K
  // weights each (q4k_pair), load their inputs as 4 runs of consecutive 16 bytes.
  const int8_t* planar = nullptr;
};
// Where input k of K lies in a pair-planar copy.
__device__ __forceinline__ int planar_index(int k, int K) { return (k % 64) / 16 * (K / 4) + k / 64 * 16 + k % 16; }

// sum_i w_i * q_i over 16 bytes: w's (int8; the K-quants' unsigned 0..63 fit) times q's.
__device__ __forceinline__ int run_dot(const uint4& w, const uint4& q, int c = 0) {
  return __dp4a(int(w.w), int(q.w), __dp4a(int(w.z), int(q.z), __dp4a(int(w.y), int(q.y), __dp4a(int(w.x), int(q.x), c))));
}

// As run_dot with w's bytes unsigned (0..255).
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ int run_dot_u(const uint4& w, const uint4& q, int c = 0) {
  return dp4a_us(w.w, q.w, dp4a_us(w.z, q.z, dp4a_us(w.y, q.y, dp4a_us(w.x, q.x, c))));
}

// The 16 inputs of token t from k (a multiple of 16), their scale, and the sum of their q.
struct Q8Run {
  uint4 q;
  float d;
  int sum;
};
__device__ __forceinline__ Q8Run q8_run(const Q8Inputs& in, int t, int k) {
  Q8Run r;  // generic loads: the inputs are in global memory, or (one token) shared
  r.q = *reinterpret_cast<const uint4*>(in.q + size_t(t) * in.K + k);
  r.d = in.d[size_t(t) * (in.K / 32) + k / 32];
  r.sum = run_dot(make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u), r.q);
  return r;
}

// The 6-bit scales (sc) and mins (m) of sub-blocks 2g and 2g + 1 of a Q4_K header (ggml's
// get_scale_min_k4), without a branch on g: the 12 bytes hold sub-blocks 0-3 in the low 6 bits
// of bytes 0-7 and 4-7 split between bytes 8-11 and the top bits of bytes 0-7.
struct Q4KScales {
  int sc_lo, m_lo, sc_hi, m_hi;
};
__device__ __forceinline__ Q4KScales q4k_scales(const uint4& h, int g) {
  const bool high = g >= 2;
  const uint32_t sc = high ? (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u) : h.y & 0x3F3F3F3Fu;
  const uint32_t m = high ? ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u) : h.z & 0x3F3F3F3Fu;
  // bytes 2 (g & 1) and 2 (g & 1) + 1, one byte permute each (zeros above)
  const uint32_t lo = 0x4440u + 2 * (g & 1), hi = lo + 1;
  return {int(__byte_perm(sc, 0, lo)), int(__byte_perm(m, 0, lo)), int(__byte_perm(sc, 0, hi)), int(__byte_perm(m, 0, hi))};
}

// acc[r][t] += row r . x[t] over chunk c of R Q4_K rows: qv[r] its 16 bytes of 4-bit weights,
// hv[r] its block's header. A run's weights are d * sc * q - dmin * m, so its sum is
// d_x * (d * sc * sum(q * q_x) - dmin * m * sum(q_x)); the integer products are exact in f32.
template <int R, int NT>
__device__ __forceinline__ void q4k_chunk(const uint4 (&qv)[R], const uint4 (&hv)[R], int c, const Q8Inputs& in,
                                          int n, float (&acc)[R][NT]) {
  const int j = c & 7, k_lo = (c >> 3) * kKBlock + (j >> 1) * 64 + (j & 1) * 16;  // high run: k_lo + 32
  Q4KScales sm[R];
  float2 dm[R];  // d, dmin
#pragma unroll
  for (int r = 0; r < R; ++r) {
    sm[r] = q4k_scales(hv[r], j >> 1);
    dm[r] = __half22float2(*reinterpret_cast<const __half2*>(&hv[r].x));
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= n) break;
    const Q8Run xl = q8_run(in, t, k_lo), xh = q8_run(in, t, k_lo + 32);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4 w = qv[r];
      const uint4 lo = make_uint4(w.x & 0x0F0F0F0Fu, w.y & 0x0F0F0F0Fu, w.z & 0x0F0F0F0Fu, w.w & 0x0F0F0F0Fu);
      const uint4 hi = make_uint4((w.x >> 4) & 0x0F0F0F0Fu, (w.y >> 4) & 0x0F0F0F0Fu, (w.z >> 4) & 0x0F0F0F0Fu,
                                  (w.w >> 4) & 0x0F0F0F0Fu);
      const float dot = fmaf(xl.d, float(sm[r].sc_lo * run_dot(lo, xl.q)), xh.d * float(sm[r].sc_hi * run_dot(hi, xh.q)));
      const float mins = fmaf(xl.d, float(sm[r].m_lo * xl.sum), xh.d * float(sm[r].m_hi * xh.sum));
      acc[r][t] = fmaf(dm[r].x, dot, fmaf(-dm[r].y, mins, acc[r][t]));
    }
  }
}

// acc[r][0] += row r . x over chunk pair p (chunks 2p and 2p + 1: one sub-block pair of a
// block, 32 bytes, so one decode of its scales) of R Q4_K rows, one token's inputs laid out
// pair-planar (Q8Inputs::planar): qv[r] the pair's 32 bytes of 4-bit weights, hv[r] its
// block's header, g = p % 4 (the caller's: every pair a lane takes has the same). The low
// nibbles weigh inputs [k, k + 32) (one int8 scale), the high ones [k + 32, k + 64): their sums
// are d_x * (d * sc * sum(q * q_x) - dmin * m * sum(q_x)), the integer products exact in f32
// (|sc * sum| <= 63 * 32 * 15 * 127 < 2^24). qv[r][0] holds the pair's bytes [16 half,
// 16 half + 16) (chunk 2p + half), qv[r][1] the other 16 (RUNAHEAD_KQ_PAIR_SWAP).
// kChecked: a chunk outside [c_begin, c_end) counts as inputs of 0; else both are in range.
template <int R, int NT, bool kChecked>
__device__ __forceinline__ void q4k_pair(const uint4 (&qv)[R][2], const uint4 (&hv)[R], int p, int g, int half,
                                         int c_begin, int c_end, const Q8Inputs& in, float (&acc)[R][NT]) {
  const int k = 64 * p;
  const uint4 zero = make_uint4(0, 0, 0, 0), ones = make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
  const int8_t* q = in.planar + 16 * p;
  const int plane = in.K / 4, a_at = half * plane, b_at = (1 - half) * plane;
  bool a_in = true, b_in = true;
  if constexpr (kChecked) {
    const bool first = 2 * p >= c_begin, second = 2 * p + 2 <= c_end;  // (2p + 1 < c_end)
    a_in = half ? second : first;
    b_in = half ? first : second;
  }
  const uint4 l0 = a_in ? *reinterpret_cast<const uint4*>(q + a_at) : zero;
  const uint4 l1 = b_in ? *reinterpret_cast<const uint4*>(q + b_at) : zero;
  const uint4 h0 = a_in ? *reinterpret_cast<const uint4*>(q + 2 * plane + a_at) : zero;
  const uint4 h1 = b_in ? *reinterpret_cast<const uint4*>(q + 2 * plane + b_at) : zero;
  const float2 d = *reinterpret_cast<const float2*>(in.d + k / 32);
  const int sum_lo = run_dot(ones, l1, run_dot(ones, l0)), sum_hi = run_dot(ones, h1, run_dot(ones, h0));
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const Q4KScales sm = q4k_scales(hv[r], g);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&hv[r].x));  // d, dmin
    const uint4 a = qv[r][0], b = qv[r][1];
    const int lo = run_dot(make_uint4(b.x & 0x0F0F0F0Fu, b.y & 0x0F0F0F0Fu, b.z & 0x0F0F0F0Fu, b.w & 0x0F0F0F0Fu), l1,
                           run_dot(make_uint4(a.x & 0x0F0F0F0Fu, a.y & 0x0F0F0F0Fu, a.z & 0x0F0F0F0Fu, a.w & 0x0F0F0F0Fu), l0));
    // the high nibbles in place (16 times their value, unsigned bytes): one shift of the sum
    const int hi = run_dot_u(make_uint4(b.x & 0xF0F0F0F0u, b.y & 0xF0F0F0F0u, b.z & 0xF0F0F0F0u, b.w & 0xF0F0F0F0u), h1,
                             run_dot_u(make_uint4(a.x & 0xF0F0F0F0u, a.y & 0xF0F0F0F0u, a.z & 0xF0F0F0F0u, a.w & 0xF0F0F0F0u), h0)) >> 4;
    const float dot = fmaf(d.x, float(sm.sc_lo * lo), d.y * float(sm.sc_hi * hi));
    const float mins = fmaf(d.x, float(sm.m_lo * sum_lo), d.y * float(sm.m_hi * sum_hi));
    acc[r][0] = fmaf(dm.x, dot, fmaf(-dm.y, mins, acc[r][0]));
  }
}

// As q4k_chunk for R Q6_K rows: lv[r] the chunk's low 4 bits, hv[r] its high 2 bits, sc[r] the
// 8 bytes of int8 scales and d2[r] the 4 bytes of f16 d (q6k_scales_at, q6k_d_at). A run's
// weights are d * sc * (q - 32).
template <int R, int NT>
__device__ __forceinline__ void q6k_chunk(const uint4 (&lv)[R], const uint4 (&hv)[R], const uint2 (&sc)[R],
                                          const uint32_t (&d2)[R], int c, const Q8Inputs& in, int n,
                                          float (&acc)[R][NT]) {
  const int j = c & 7, half = j >> 2, part = (j >> 1) & 1, l0 = (j & 1) * 16;
  const int k_lo = (c >> 3) * kKBlock + half * 128 + part * 32 + l0;  // high nibbles: k_lo + 64
  int sc_lo[R], sc_hi[R];
  float d[R];
  const int at = 8 * (c & 3);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    sc_lo[r] = int8_t(uint8_t(sc[r].x >> at));
    sc_hi[r] = int8_t(uint8_t(sc[r].y >> at));
    d[r] = __half2float(__ushort_as_half(uint16_t(d2[r] >> (16 * ((c >> 3) & 1)))));
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= n) break;
    const Q8Run xl = q8_run(in, t, k_lo), xh = q8_run(in, t, k_lo + 64);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t l4[4] = {lv[r].x, lv[r].y, lv[r].z, lv[r].w}, h2[4] = {hv[r].x, hv[r].y, hv[r].z, hv[r].w};
      uint32_t lo[4], hi[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        lo[i] = (l4[i] & 0x0F0F0F0Fu) | (((h2[i] >> (2 * part)) & 0x03030303u) << 4);
        hi[i] = ((l4[i] >> 4) & 0x0F0F0F0Fu) | (((h2[i] >> (2 * part + 4)) & 0x03030303u) << 4);
      }
      const uint4 lo4 = make_uint4(lo[0], lo[1], lo[2], lo[3]), hi4 = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      const int p_lo = sc_lo[r] * (run_dot(lo4, xl.q) - 32 * xl.sum), p_hi = sc_hi[r] * (run_dot(hi4, xh.q) - 32 * xh.sum);
      acc[r][t] = fmaf(d[r], fmaf(xl.d, float(p_lo), xh.d * float(p_hi)), acc[r][t]);
    }
  }
}

// Where chunk c's parts lie in a Q6_K row: its high bits (16 bytes of its block's 64, shared
// by chunks j and j ^ 2), the 8 int8 scales from its block's 16 holding its two (bytes j % 4
// and j % 4 + 4), the 4 bytes holding its block's f16 d (half c / 8 % 2).
__device__ __forceinline__ size_t q6k_high_at(int K, int c) {
  const int j = c & 7;
  return size_t(K) / 2 + size_t(c >> 3) * 64 + (j >> 2) * 32 + (j & 1) * 16;
}
__device__ __forceinline__ size_t q6k_scales_at(int K, int c) {
  return size_t(K) / 2 + size_t(K) / 4 + size_t(c >> 3) * 16 + ((c & 7) >> 2) * 8;
}
__device__ __forceinline__ size_t q6k_d_at(int K, int c) {
  return size_t(K) / 2 + size_t(K) / 4 + size_t(K) / 16 + size_t((c >> 3) & ~1) * 2;
}

// acc[r][t] += row r . x[t] over chunks [c_begin, c_end) of R Q4_K rows (layout above), as
// warp_dot_rows (common.cuh) does for the other types; summed across the warp by the caller.
// One token loads kKqUnroll chunks of each row before it uses them (RUNAHEAD_KQ_UNROLL at build
// time, to measure another); with pair-planar inputs (one token) a lane takes a chunk pair at a
// time (q4k_pair). kTile: the rows lie in a tile in shared memory (weight16).
// A tile in shared memory (a ring's): lanes take consecutive pairs, 32 bytes apart, so the 8
// lanes of a quarter warp loading the same half of their pairs hit 4 banks twice (two
// wavefronts a load where one does). Lanes 4-7 of each 8 load the pair's second half first,
// which spreads each load over all 32 banks; their pair-planar inputs then come from the other
// planes first, conflict-free where a plane (K / 4 bytes) is a multiple of 128 (elsewhere the
// inputs would conflict instead, so every lane takes the first half first). The integer sums
// are the same either way. H200, 7B Q4_K_M, us a step alone: gate/up 632 -> 607, q/k/v 201 ->
// 206; the step 2.138 -> 2.117 ms/token. From global memory (the per-warp kernels) it measured
// slower (7B down 630 -> 646), so there every lane takes the first half first.
// RUNAHEAD_KQ_PAIR_SWAP=0 at build time turns it off, to measure.
#ifndef RUNAHEAD_KQ_PAIR_SWAP
#define RUNAHEAD_KQ_PAIR_SWAP 1
#endif
// RUNAHEAD_KQ_PAIR_WHOLE=0 at build time checks every pair against the warp's range as before
// v28, to measure: H200, Q4_K_M, decode ms/token in one call, both with q4k_scales' byte
// permutes: 7B 1.983 -> 1.959 (down 584 -> 580 us a step alone), 1.5B 0.991 -> 0.989.
#ifndef RUNAHEAD_KQ_PAIR_WHOLE
#define RUNAHEAD_KQ_PAIR_WHOLE 1
#endif
#ifndef RUNAHEAD_KQ_UNROLL
#define RUNAHEAD_KQ_UNROLL 2
#endif
constexpr int kKqUnroll = RUNAHEAD_KQ_UNROLL;
template <int R, int NT, bool kTile = false>
__device__ __forceinline__ void q4k_dot_rows(const uint8_t* const (&row)[R], int K, int c_begin, int c_end,
                                             const Q8Inputs& in, int n, float (&acc)[R][NT]) {
  const int lane = threadIdx.x % 32;
  if (NT == 1 && in.planar) {
    // Chunk pairs: a range of odd ends shares its end pair with the next warp's range, each
    // counting only its own chunk (the rows hold whole blocks, so the pair is in the row).
    // A lane's pairs are 32 apart, so each is the same sub-block pair g of its block. Where the
    // range is whole pairs (every ring and most warps' parts) no chunk is checked against it.
    const int half = RUNAHEAD_KQ_PAIR_SWAP && kTile && (K / 4) % 128 == 0 ? (lane >> 2) & 1 : 0;
    const int g = (c_begin / 2 + lane) & 3;
    const auto pairs = [&](auto mode) {
      for (int p = c_begin / 2 + lane; 2 * p < c_end; p += 32) {
        uint4 qv[R][2], hv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          qv[r][0] = weight16<kTile>(row[r] + size_t(p) * 32 + 16 * half);
          qv[r][1] = weight16<kTile>(row[r] + size_t(p) * 32 + 16 * (1 - half));
          hv[r] = read_only<kTile>(reinterpret_cast<const uint4*>(row[r] + K / 2) + p / 4);
        }
        q4k_pair<R, NT, decltype(mode)::value>(qv, hv, p, g, half, c_begin, c_end, in, acc);
      }
    };
    if (RUNAHEAD_KQ_PAIR_WHOLE && c_begin % 2 == 0 && c_end % 2 == 0)
      pairs(std::false_type{});
    else
      pairs(std::true_type{});
    return;
  }
  constexpr int U = NT > 1 ? 1 : kKqUnroll;
  for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * U) {
    uint4 qv[U][R], hv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = c0 + 32 * u;
        qv[u][r] = c < c_end ? weight16<kTile>(row[r] + size_t(c) * 16) : make_uint4(0, 0, 0, 0);
        hv[u][r] = c < c_end ? read_only<kTile>(reinterpret_cast<const uint4*>(row[r] + K / 2) + c / 8) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c >= c_end) break;
      q4k_chunk<R, NT>(qv[u], hv[u], c, in, n, acc);
    }
  }
}

// As q4k_dot_rows for R Q6_K rows.
template <int R, int NT, bool kTile = false>
__device__ __forceinline__ void q6k_dot_rows(const uint8_t* const (&row)[R], int K, int c_begin, int c_end,
                                             const Q8Inputs& in, int n, float (&acc)[R][NT]) {
  constexpr int U = NT > 1 ? 1 : kKqUnroll;
  const int lane = threadIdx.x % 32;
  for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * U) {
    uint4 lv[U][R], hv[U][R];
    uint2 sc[U][R];
    uint32_t d2[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = c0 + 32 * u;
        const bool in_range = c < c_end;
        lv[u][r] = in_range ? weight16<kTile>(row[r] + size_t(c) * 16) : make_uint4(0, 0, 0, 0);
        hv[u][r] = in_range ? read_only<kTile>(reinterpret_cast<const uint4*>(row[r] + q6k_high_at(K, c))) : make_uint4(0, 0, 0, 0);
        sc[u][r] = in_range ? read_only<kTile>(reinterpret_cast<const uint2*>(row[r] + q6k_scales_at(K, c))) : make_uint2(0, 0);
        d2[u][r] = in_range ? read_only<kTile>(reinterpret_cast<const uint32_t*>(row[r] + q6k_d_at(K, c))) : 0u;
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c >= c_end) break;
      q6k_chunk<R, NT>(lv[u], hv[u], sc[u], d2[u], c, in, n, acc);
    }
  }
}

}  // namespace runahead::cuda
