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
// consecutive ones. Each weight becomes its exact f32 by a byte permute (2^23 + q) and one
// subtraction; a run's 16 products are summed in f32 and scaled once (Q4_K also subtracts
// its min times the run's sum of inputs).
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

// 2^23 + byte j of `bytes`, as an f32 (exact).
__device__ __forceinline__ float kq_biased(uint32_t bytes, int j) {
  return __uint_as_float(__byte_perm(bytes, 0x4B000000u, 0x7540u + j));
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

// The lanes reading one block's 8 chunks read their runs' inputs (4 float4 each) starting at
// float4 `rot` of the run and wrapping: rot = (j / 2) % 4 for the chunk's index j in its block
// (constant for a lane, as a lane's chunks are 32 apart). Each of the 8 lanes' float4 then falls
// in a different quarter of the shared memory's banks; in order, the runs (offsets 0, 16, 64,
// 80, ... floats in a block) put 4 lanes on one quarter (ncu: 11.7-way conflicts on average).
__device__ __forceinline__ int kq_rotation(int c) { return (c >> 1) & 3; }

// Token t's 16 inputs of a run starting at k, times g when given: slot q holds float4
// (q + rot) % 4 of the run.
__device__ __forceinline__ void kq_inputs(const float* x, int ldx, int t, int k, const float* g, int rot,
                                          float (&v)[16]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int e = 4 * q, from = k + 4 * ((q + rot) & 3);
    const float4 a = *reinterpret_cast<const float4*>(x + size_t(t) * ldx + from);
    v[e] = a.x, v[e + 1] = a.y, v[e + 2] = a.z, v[e + 3] = a.w;
    if (g) {
      const float4 s = __ldg(reinterpret_cast<const float4*>(g + from));
      v[e] *= s.x, v[e + 1] *= s.y, v[e + 2] *= s.z, v[e + 3] *= s.w;
    }
  }
}

// The words of v in kq_inputs' order: w[q] = word (q + rot) % 4 (two conditional rotations).
__device__ __forceinline__ void kq_rotated_words(const uint4& v, int rot, uint32_t (&w)[4]) {
  uint32_t a0 = v.x, a1 = v.y, a2 = v.z, a3 = v.w;
  if (rot & 1) {
    const uint32_t t = a0;
    a0 = a1, a1 = a2, a2 = a3, a3 = t;
  }
  if (rot & 2) {
    uint32_t t = a0;
    a0 = a2, a2 = t;
    t = a1;
    a1 = a3, a3 = t;
  }
  w[0] = a0, w[1] = a1, w[2] = a2, w[3] = a3;
}

// sum_i (q_i - offset) * x[i] over the 16 values in the bytes of `q` (4 words, 4 bytes each).
__device__ __forceinline__ float kq_run_dot(const uint32_t (&q)[4], float offset, const float (&x)[16]) {
  const float bias = 8388608.0f + offset;  // 2^23
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) s = fmaf(kq_biased(q[i], j) - bias, x[4 * i + j], s);
  return s;
}

__device__ __forceinline__ float kq_sum16(const float (&x)[16]) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < 16; ++e) s += x[e];
  return s;
}

// acc[r][t] += row r . x[t] over chunks [c_begin, c_end) of R Q4_K rows (layout above), as
// warp_dot_rows (common.cuh) does for the other types; summed across the warp at the end.
template <int R, int NT>
__device__ __forceinline__ void q4k_dot_rows(const uint8_t* const (&row)[R], int K, int c_begin, int c_end,
                                             const float* x, int ldx, int n, const float* g, float (&acc)[R][NT]) {
  constexpr int U = NT > 1 ? 1 : 2;
  const int lane = threadIdx.x % 32;
  for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * U) {
    uint4 qv[U][R], hv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = c0 + 32 * u;
        qv[u][r] = c < c_end ? load_stream(row[r] + size_t(c) * 16) : make_uint4(0, 0, 0, 0);
        hv[u][r] = c < c_end ? __ldg(reinterpret_cast<const uint4*>(row[r] + K / 2) + c / 8) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c >= c_end) break;
      const int j = c & 7, k_lo = (c >> 3) * kKBlock + (j >> 1) * 64 + (j & 1) * 16;  // high run: k_lo + 32
      const int rot = kq_rotation(c);
      float a_lo[R], b_lo[R], a_hi[R], b_hi[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        q4k_sub_block(hv[u][r], (j >> 1) * 2, a_lo[r], b_lo[r]);
        q4k_sub_block(hv[u][r], (j >> 1) * 2 + 1, a_hi[r], b_hi[r]);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= n) break;
        float xl[16], xh[16];
        kq_inputs(x, ldx, t, k_lo, g, rot, xl);
        kq_inputs(x, ldx, t, k_lo + 32, g, rot, xh);
        const float sum_lo = kq_sum16(xl), sum_hi = kq_sum16(xh);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          uint32_t w[4], lo[4], hi[4];
          kq_rotated_words(qv[u][r], rot, w);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            lo[i] = w[i] & 0x0F0F0F0Fu;
            hi[i] = (w[i] >> 4) & 0x0F0F0F0Fu;
          }
          float s = fmaf(a_lo[r], kq_run_dot(lo, 0.0f, xl), -b_lo[r] * sum_lo);
          s = fmaf(a_hi[r], kq_run_dot(hi, 0.0f, xh), fmaf(-b_hi[r], sum_hi, s));
          acc[r][t] += s;
        }
      }
    }
  }
}

// As q4k_dot_rows for R Q6_K rows.
template <int R, int NT>
__device__ __forceinline__ void q6k_dot_rows(const uint8_t* const (&row)[R], int K, int c_begin, int c_end,
                                             const float* x, int ldx, int n, const float* g, float (&acc)[R][NT]) {
  constexpr int U = NT > 1 ? 1 : 2;
  const int lane = threadIdx.x % 32;
  for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * U) {
    uint4 lv[U][R], hv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = c0 + 32 * u, j = c & 7;
        // The high bits of a chunk's weights: 16 bytes of its block's 64, shared by chunks j and j ^ 2.
        const size_t high = size_t(K) / 2 + size_t(c >> 3) * 64 + (j >> 2) * 32 + (j & 1) * 16;
        lv[u][r] = c < c_end ? load_stream(row[r] + size_t(c) * 16) : make_uint4(0, 0, 0, 0);
        hv[u][r] = c < c_end ? __ldg(reinterpret_cast<const uint4*>(row[r] + high)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c >= c_end) break;
      const int j = c & 7, half = j >> 2, part = (j >> 1) & 1, l0 = (j & 1) * 16;
      const int blk = c >> 3, k_lo = blk * kKBlock + half * 128 + part * 32 + l0;  // high nibbles: k_lo + 64
      const int rot = kq_rotation(c);
      float s_lo[R], s_hi[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int8_t* sc = reinterpret_cast<const int8_t*>(row[r] + K / 2 + K / 4) + blk * 16 + half * 8 + part * 2 + l0 / 16;
        const float d = __half2float(__ldg(reinterpret_cast<const __half*>(row[r] + K / 2 + K / 4 + K / 16) + blk));
        s_lo[r] = d * float(__ldg(sc));
        s_hi[r] = d * float(__ldg(sc + 4));
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= n) break;
        float xl[16], xh[16];
        kq_inputs(x, ldx, t, k_lo, g, rot, xl);
        kq_inputs(x, ldx, t, k_lo + 64, g, rot, xh);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          uint32_t l4[4], h2[4], lo[4], hi[4];
          kq_rotated_words(lv[u][r], rot, l4);
          kq_rotated_words(hv[u][r], rot, h2);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            lo[i] = (l4[i] & 0x0F0F0F0Fu) | (((h2[i] >> (2 * part)) & 0x03030303u) << 4);
            hi[i] = ((l4[i] >> 4) & 0x0F0F0F0Fu) | (((h2[i] >> (2 * part + 4)) & 0x03030303u) << 4);
          }
          acc[r][t] += fmaf(s_lo[r], kq_run_dot(lo, 32.0f, xl), s_hi[r] * kq_run_dot(hi, 32.0f, xh));
        }
      }
    }
  }
}

}  // namespace runahead::cuda
