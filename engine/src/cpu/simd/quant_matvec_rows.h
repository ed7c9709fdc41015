#pragma once
// The x86 quantized matvec rows, written once over 256-bit vectors and templated on how an
// instruction set takes a u8 x s8 dot product. Include only from a simd/quant_matvec_*.cpp
// whose Isa struct lives in an anonymous namespace (see make_kernels.h for why).
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "cpu/quant_kernels.h"

namespace runahead::simd {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Signed x signed as unsigned x signed: |w| * (x with w's sign).
template <class Isa>
__m256i dot_s8s8(__m256i w, __m256i x) {
  return Isa::dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

// Touches block k of the rows two groups of R on (`row_bytes` apart): R interleaved rows are
// R streams too short for the hardware prefetcher. Without it a matrix beyond the caches (the
// 0.5B lm_head, 145 MB) took 2-3x the one-row kernel's time for one token; with it, ~1.5x.
template <int R>
inline void prefetch_next_rows(const BlockQ8_0* const (&b)[R], int64_t k, size_t row_bytes) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) _mm_prefetch(reinterpret_cast<const char*>(&b[i][k]) + 2 * R * row_bytes, _MM_HINT_T0);
}

// Q8_0 times T tokens for R rows at once (R x T accumulators), so each weight block is loaded
// and sign-folded once for T tokens and each token block once for R rows. Even and odd blocks
// go to two accumulators and are added before the one horizontal sum, so every (row, token)
// gets the same float operations in the same order whatever R, T and n are:
// y = hsum(sum_even d_w[b] d_x[b] dot_b + sum_odd ...).
template <class Isa>
struct Q8_0Tile {
  static constexpr int kRows = 2, kTokens = 2;  // 2 x 2 x 2 accumulators fit the 16 ymm registers

  template <int R, int T>
  static void add_block(const BlockQ8_0* const (&b)[R], int64_t k, const Q8Activations* x, __m256 (&acc)[R][T]) {
    __m256i q[R], u[R];
    float d[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      q[i] = load32(b[i][k].qs);
      u[i] = _mm256_sign_epi8(q[i], q[i]);
      d[i] = _cvtsh_ss(b[i][k].d);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256i xq = load32(&x[t].q[32 * k]);
      const float xd = x[t].d[k];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256i p = Isa::dot_u8s8(u[i], _mm256_sign_epi8(xq, q[i]));
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d[i] * xd), acc[i][t]);
      }
    }
  }

  // y[t * ldy + i] = row i of w (rows row_bytes apart) times x[t], for i < R, t < T.
  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    const BlockQ8_0* b[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) b[i] = reinterpret_cast<const BlockQ8_0*>(w + i * row_bytes);
    __m256 even[R][T], odd[R][T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) even[i][t] = odd[i][t] = _mm256_setzero_ps();
    const int64_t blocks = cols / 32;
    int64_t k = 0;
    for (; k + 1 < blocks; k += 2) {
      prefetch_next_rows<R>(b, k, row_bytes);
      add_block<R, T>(b, k, x, even);
      add_block<R, T>(b, k + 1, x, odd);
    }
    if (k < blocks) add_block<R, T>(b, k, x, even);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + i] = hsum(_mm256_add_ps(even[i][t], odd[i][t]));
  }
};

// Tile::run<R, T> over n tokens: groups of T, then the remainder by smaller groups.
template <class Tile, int R, int T>
void token_groups(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, int n, float* y,
                  int64_t ldy) {
  for (; n >= T; n -= T, x += T, y += T * ldy) Tile::template run<R, T>(w, row_bytes, cols, x, y, ldy);
  if constexpr (T > 1)
    if (n > 0) token_groups<Tile, R, T - 1>(w, row_bytes, cols, x, n, y, ldy);
}

// A QuantMatmulRowsFn from a register tile: Tile::kRows rows by Tile::kTokens tokens at a time,
// single rows for the remainder.
template <class Tile>
void matmul_tiled(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                  const Q8Activations* x, int n, float* y, int64_t ldy) {
  int64_t r = row_begin;
  for (; r + Tile::kRows <= row_end; r += Tile::kRows)
    token_groups<Tile, Tile::kRows, Tile::kTokens>(w + r * row_bytes, row_bytes, cols, x, n, y + (r - row_begin), ldy);
  for (; r < row_end; ++r)
    token_groups<Tile, 1, Tile::kTokens>(w + r * row_bytes, row_bytes, cols, x, n, y + (r - row_begin), ldy);
}

// The 8 sub-block scales (bytes 0-7) and mins (bytes 8-15) of a Q4_K block's 12 packed bytes,
// unpacked with 32-bit masks (the q4_k_scale_min layout, all eight at once).
inline __m256i q4_k_scales_mins(const uint8_t* packed, __m256i& mins) {
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  const uint32_t m_low = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  u[2] = m_low;
  u[0] &= kLow6;
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
  mins = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
  return _mm256_cvtepu8_epi32(bytes);
}

// [sum of p_0's lanes, ..., sum of p_7's lanes] for eight vectors of int32 partial sums.
inline __m256i lane_sums8(const __m256i p[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Q4_K: sub-block j (32 weights) = d sc_j q - dmin m_j, so its product with the activation
// block is d sc_j d_x sum(q q_x) - dmin m_j d_x sum(q_x). The eight sub-blocks of a block are
// one vector each of scales, mins, activation scales and sums. Q5_K (Block = BlockQ5_K) is
// the same with q's fifth bit, bit j of qh[l], added.
template <class Isa, class Block>
void matvec_k_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                   const Q8Activations& x, float* y) {
  const int64_t blocks = cols / 256;
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const Block*>(w + r * row_bytes);
    __m256 acc = _mm256_setzero_ps(), mins_acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < blocks; ++k) {
      const __m256 xd = _mm256_loadu_ps(&x.d[8 * k]);
      const __m256 xsum = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(&x.sum[8 * k])));
      __m256i m;
      const __m256i sc = q4_k_scales_mins(b[k].scales, m);
      const int8_t* xq = &x.q[256 * k];
      __m256i qh = _mm256_setzero_si256();  // Q5_K: bit j of byte l is sub-block j's fifth bit
      if constexpr (std::is_same_v<Block, BlockQ5_K>) qh = load32(b[k].qh);
      __m256i p[8];
      for (int g = 0; g < 4; ++g) {
        const __m256i bytes = load32(b[k].qs + 32 * g);
        __m256i q0 = _mm256_and_si256(bytes, low4), q1 = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
        if constexpr (std::is_same_v<Block, BlockQ5_K>) {
          q0 = _mm256_or_si256(q0, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4));
          q1 = _mm256_or_si256(q1, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4));
        }
        p[2 * g] = Isa::dot_u8s8(q0, load32(xq + 64 * g));
        p[2 * g + 1] = Isa::dot_u8s8(q1, load32(xq + 64 * g + 32));
      }
      const __m256 dots = _mm256_cvtepi32_ps(lane_sums8(p));
      acc = _mm256_fmadd_ps(_mm256_mul_ps(dots, _mm256_cvtepi32_ps(sc)), _mm256_mul_ps(xd, _mm256_set1_ps(_cvtsh_ss(b[k].d))), acc);
      mins_acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(_cvtsh_ss(b[k].dmin))),
                                 _mm256_mul_ps(xd, xsum), mins_acc);
    }
    y[r - row_begin] = hsum(_mm256_sub_ps(acc, mins_acc));
  }
}

// Byte i of the result: `value` where bit i of `bits` is set, else 0.
inline __m256i bit_bytes(uint32_t bits, __m256i value) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask), value);
}

// Q4_0/Q5_0: w = d (q - half), q unsigned, so a block's product is d d_x (sum(q q_x) - half sum(q_x));
// Q4_1/Q5_1: w = d q + m, so it is d d_x sum(q q_x) + m d_x sum(q_x). The 16 bytes of nibbles
// are weights 0-15 (low) and 16-31 (high); qh, where the block has it, their fifth bits.
template <class Isa, class Block>
void matvec_32_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                    const Q8Activations& x, float* y) {
  constexpr float kHalf = kHasFifthBit<Block> ? 16 : 8;
  const int64_t blocks = cols / 32;
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m256i fifth = _mm256_set1_epi8(0x10);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const Block*>(w + r * row_bytes);
    __m256 acc = _mm256_setzero_ps();
    float offsets = 0;  // sum over blocks of (m or d) d_x sum(q_x)
    for (int64_t k = 0; k < blocks; ++k) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[k].qs));
      __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low4), _mm_and_si128(bytes, low4));
      if constexpr (kHasFifthBit<Block>) {
        uint32_t qh;
        std::memcpy(&qh, b[k].qh, 4);
        q = _mm256_or_si256(q, bit_bytes(qh, fifth));
      }
      const float dd = _cvtsh_ss(b[k].d) * x.d[k];
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Isa::dot_u8s8(q, load32(&x.q[32 * k]))), _mm256_set1_ps(dd), acc);
      if constexpr (kHasMin<Block>)
        offsets += _cvtsh_ss(b[k].m) * x.d[k] * float(x.sum[k]);
      else
        offsets += dd * float(x.sum[k]);
    }
    y[r - row_begin] = kHasMin<Block> ? hsum(acc) + offsets : hsum(acc) - kHalf * offsets;
  }
}

// Q6_K: 16-weight sub-blocks d sc_j (q - 32); a 32-wide product covers two of them, so its
// lanes 0-3 and 4-7 take the two scales.
template <class Isa>
void matvec_q6_k_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                      const Q8Activations& x, float* y) {
  const int64_t blocks = cols / 256;
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(w + r * row_bytes);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < blocks; ++k) {
      const float d = _cvtsh_ss(b[k].d);
      for (int n = 0; n < 2; ++n) {
        const __m256i ql0 = load32(b[k].ql + 64 * n), ql1 = load32(b[k].ql + 64 * n + 32);
        const __m256i qh = load32(b[k].qh + 32 * n);
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, two), 4)),
            _mm256_or_si256(_mm256_and_si256(ql1, low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), two), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), two), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), two), 4)),
        };
        for (int part = 0; part < 4; ++part) {
          const int64_t xb = 8 * k + 4 * n + part;  // the activation block of these 32 weights
          const int j = 8 * n + 2 * part;           // their two sub-blocks: j, j + 1
          const __m256i p = dot_s8s8<Isa>(_mm256_sub_epi8(q[part], bias), load32(&x.q[32 * xb]));
          const float s = d * x.d[xb];
          const __m256 scale = _mm256_set_m128(_mm_set1_ps(s * b[k].scales[j + 1]), _mm_set1_ps(s * b[k].scales[j]));
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc);
        }
      }
    }
    y[r - row_begin] = hsum(acc);
  }
}

template <class Isa>
QuantKernels make_quant_kernels(const char* name) {
  return QuantKernels{name,
                      &matmul_tiled<Q8_0Tile<Isa>>,
                      &rows_per_token<&matvec_k_rows<Isa, BlockQ4_K>>,
                      &rows_per_token<&matvec_q6_k_rows<Isa>>,
                      &rows_per_token<&matvec_32_rows<Isa, BlockQ4_0>>,
                      &rows_per_token<&matvec_32_rows<Isa, BlockQ5_0>>,
                      &rows_per_token<&matvec_k_rows<Isa, BlockQ5_K>>,
                      &rows_per_token<&matvec_32_rows<Isa, BlockQ4_1>>,
                      &rows_per_token<&matvec_32_rows<Isa, BlockQ5_1>>};
}

}  // namespace runahead::simd
