#pragma once
// The x86 quantized matvec rows, written once over 256-bit vectors and templated on how an
// instruction set takes a u8 x s8 dot product. Include only from a simd/quant_matvec_*.cpp
// whose Isa struct lives in an anonymous namespace (see make_kernels.h for why).
#include <immintrin.h>

#include <algorithm>
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

// A tile's R rows, each an array of blocks, `row_bytes` apart from w.
template <class Block, int R>
inline void tile_rows(const uint8_t* w, size_t row_bytes, const Block* (&b)[R]) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) b[i] = reinterpret_cast<const Block*>(w + i * row_bytes);
}

// Every accumulator of an R x T tile set to `zero`.
template <class V, int R, int T>
inline void fill_tile(V (&acc)[R][T], V zero) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[i][t] = zero;
}

// Touches block k of the rows two groups of R on (`row_bytes` apart): R interleaved rows are
// R streams too short for the hardware prefetcher. Without it a matrix beyond the caches (the
// 0.5B lm_head, 145 MB) took 2-3x the one-row kernel's time for one token; with it, ~1.5x.
// Every cache line of the block (a K-quant block spans up to four), by inline asm: GCC 12's
// dead-code elimination dropped every _mm_prefetch of these loops for the 144- and 210-byte
// blocks (two or more per row), though not the one of a Q8_0 block.
// At least kPrefetchAheadBytes ahead: two groups of short rows (a 1536-wide Q4_K row is 864 bytes)
// were too near to cover a DRAM access.
constexpr size_t kPrefetchAheadBytes = 8192;
template <int R, class Block>
inline void prefetch_next_rows(const Block* const (&b)[R], int64_t k, size_t row_bytes) {
  const size_t group = R * row_bytes;  // loop-invariant in the callers' block loops: hoisted
  const size_t ahead = group * std::max<size_t>(2, (kPrefetchAheadBytes + group - 1) / group);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const char* p = reinterpret_cast<const char*>(&b[i][k]) + ahead;
#pragma GCC unroll 4
    for (size_t line = 0; line < sizeof(Block); line += 64) asm volatile("prefetcht0 %0" : : "m"(p[line]));
    if constexpr (sizeof(Block) % 64 != 0 && sizeof(Block) > 64)
      asm volatile("prefetcht0 %0" : : "m"(p[sizeof(Block) - 1]));
  }
}

// Q8_0 times T tokens for R rows at once (R x T accumulators), so each weight block is loaded
// and sign-folded once for T tokens and each token block once for R rows. Even and odd blocks
// go to two accumulators and are added before the one horizontal sum, so every (row, token)
// gets the same float operations in the same order whatever R, T and n are:
// y = hsum(sum_even d_w[b] d_x[b] dot_b + sum_odd ...).
template <class Isa>
struct Q8_0Tile {
  // Up to 2 tokens: even and odd blocks in one pass (2 x 2 x 2 accumulators fill the 16 ymm
  // registers). More: the even blocks in one pass, then the odd ones, so 2 x 4 accumulators fit.
  static constexpr int kRows = 2, kTokens = 4;

  template <int R, int T>
  static void add_block(const BlockQ8_0* const (&b)[R], int64_t k, const Q8Activations* x, __m256 (&acc)[R][T]) {
    __m256i q[R], u[R];
    __m256 d[R];  // each row's scale in every lane: a (row, token) scale is then one vmulps
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      q[i] = load32(b[i][k].qs);
      u[i] = _mm256_sign_epi8(q[i], q[i]);
      d[i] = _mm256_set1_ps(_cvtsh_ss(b[i][k].d));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256i xq = load32(&x[t].q[32 * k]);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256i p = Isa::dot_u8s8(u[i], _mm256_sign_epi8(xq, q[i]));
        acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(d[i], _mm256_broadcast_ss(&x[t].d[k])),
                                    acc[i][t]);
      }
    }
  }

  // Blocks first, first + 2, ... of the rows into acc (every other block).
  template <int R, int T>
  static void add_every_other(const BlockQ8_0* const (&b)[R], int64_t first, int64_t blocks, size_t row_bytes,
                              const Q8Activations* x, __m256 (&acc)[R][T]) {
    fill_tile(acc, _mm256_setzero_ps());
    for (int64_t k = first; k < blocks; k += 2) {
      if (first == 0) prefetch_next_rows<R>(b, k, row_bytes);
      add_block<R, T>(b, k, x, acc);
    }
  }

  // y[t * ldy + i] = row i of w (rows row_bytes apart) times x[t], for i < R, t < T.
  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    const BlockQ8_0* b[R];
    tile_rows(w, row_bytes, b);
    __m256 even[R][T], odd[R][T];
    const int64_t blocks = cols / 32;
    if constexpr (T > 2) {
      add_every_other<R, T>(b, 0, blocks, row_bytes, x, even);
      add_every_other<R, T>(b, 1, blocks, row_bytes, x, odd);
    } else {
      fill_tile(even, _mm256_setzero_ps());
      fill_tile(odd, _mm256_setzero_ps());
      int64_t k = 0;
      for (; k + 1 < blocks; k += 2) {
        prefetch_next_rows<R>(b, k, row_bytes);
        add_block<R, T>(b, k, x, even);
        add_block<R, T>(b, k + 1, x, odd);
      }
      if (k < blocks) add_block<R, T>(b, k, x, even);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + i] = hsum(_mm256_add_ps(even[i][t], odd[i][t]));
  }
};

// Tile::run<R, T> over `rows` rows (a multiple of R) and n tokens: groups of T tokens, then the
// remainder by smaller groups; each group passes over every R-row tile before the next group.
template <class Tile, int R, int T>
void token_groups(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, const Q8Activations* x, int n,
                  float* y, int64_t ldy) {
  for (; n >= T; n -= T, x += T, y += T * ldy)
    for (int64_t r = 0; r < rows; r += R) Tile::template run<R, T>(w + r * row_bytes, row_bytes, cols, x, y + r, ldy);
  if constexpr (T > 1)
    if (n > 0) token_groups<Tile, R, T - 1>(w, row_bytes, rows, cols, x, n, y, ldy);
}

// A QuantMatmulRowsFn from a register tile: Tile::kRows rows by Tile::kTokens tokens at a time,
// single rows for the remainder. One token (decode) goes row by row, every format: one row is
// one sequential stream. Interleaved rows are as many streams too short for the hardware
// prefetcher: a 96-141 MB Q4_K/Q6_K matrix streamed 1.2-1.6x faster on one thread as single
// rows than as two interleaved ones, and on a 2-core Zen 5 the Q8_0 tiles' 4 rows (AVX-512) or
// 2 (AVX2) decoded the 0.5B shape at 33-41 ms/token on one thread where single rows take 21-30.
// Several tokens: every token group passes over all the row tiles before the next group, so the
// rows' weights (the caller's tile: matmul_quant_rows hands ~64 KB, which stay in L2) are read
// once a group from L2 and the tokens' int8 activations stream once a call rather than once a
// row tile (a 512-token prefill holds 2.8 MB of them for the 0.5B's down, past L2). Each (row,
// token) is computed by the same tile whatever the grouping: the results do not depend on it.
template <class Tile>
void matmul_tiled(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                  const Q8Activations* x, int n, float* y, int64_t ldy) {
  constexpr int R = Tile::kRows;
  int64_t r = row_begin;
  if (n > 1) {
    const int64_t rows = (row_end - r) / R * R;
    token_groups<Tile, R, Tile::kTokens>(w + r * row_bytes, row_bytes, rows, cols, x, n, y, ldy);
    r += rows;
  }
  if (r < row_end)
    token_groups<Tile, 1, Tile::kTokens>(w + r * row_bytes, row_bytes, row_end - r, cols, x, n, y + (r - row_begin), ldy);
}

// The 8 sub-block scales and 8 mins of a Q4_K block's 12 packed bytes (q4_k_scale_min's
// layout) as int16, lanes 0-7 and 8-15. In vector registers: unpacked through memory, the
// 16-byte reload of four 32-bit stores missed store forwarding in every block.
// packed's dwords u0, u1, u2: scales 0-3 = u0 & 0x3f, 4-7 = (u2 & 0x0f) | (u0 >> 2 & 0x30);
// mins 0-3 = u1 & 0x3f, 4-7 = (u2 >> 4 & 0x0f) | (u1 >> 2 & 0x30). Reads 16 bytes.
inline __m256i q4_k_scales_mins(const uint8_t* packed) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i lows = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4)),
                                     _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i highs = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2),
                                      _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm256_cvtepu8_epi16(_mm_or_si128(lows, highs));
}

// Q4_K (and Q5_K: Block = BlockQ5_K, q's fifth bit from qh) times T tokens for R rows, on
// Q8_K activations as llama.cpp's ggml_vec_dot_q4_K_q8_K: per block, sum_j sc_j dot_j in
// int32 (u8 x s8 pairs by vpmaddubsw, then times the 16-bit scale and summed by
// Isa::madd_acc), minus sum_j m_j bsum_j; the two scaled by d d_x and dmin d_x. Each (row,
// token) gets the same operations in the same order whatever R, T and n are.
template <class Isa, class Block, int Rows = 2, int Tokens = 4>
struct QK4Tile {
  static constexpr int kRows = Rows, kTokens = Tokens;
  static constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;

  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    const Block* b[R];
    tile_rows(w, row_bytes, b);
    __m256 acc[R][T];
    fill_tile(acc, _mm256_setzero_ps());
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const int64_t blocks = cols / 256;
    for (int64_t k = 0; k < blocks; ++k) {
      prefetch_next_rows<R>(b, k, row_bytes);
      __m256i scales[R], sumi[R][T];
      float d[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256i scales_mins = q4_k_scales_mins(b[i][k].scales);  // int16: sc_0..7, m_0..7
        scales[i] = _mm256_permute4x64_epi64(scales_mins, 0x44);
        const __m128i mins = _mm256_extracti128_si256(scales_mins, 1);
        d[i] = _cvtsh_ss(b[i][k].d);
        const float dmin = _cvtsh_ss(b[i][k].dmin);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m128i m = _mm_madd_epi16(mins, _mm_loadu_si128(reinterpret_cast<const __m128i*>(&x[t].bsum32[8 * k])));
          acc[i][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_zextsi128_si256(m)), _mm256_set1_ps(dmin * x[t].dk[k]),
                                       acc[i][t]);
          sumi[i][t] = _mm256_setzero_si256();
        }
      }
      // One 32-weight sub-block at a time (the low nibbles of 32 bytes, then their high ones):
      // R x T sums, R unpacked rows, R scales and one token's activations stay in the 16 ymm
      // registers of AVX2; both halves of a 64-weight group at once spilled every group.
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const int g = j / 2, h = j % 2;
        __m256i q[R], sc[R];
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m256i bytes = load32(b[i][k].qs + 32 * g);
          q[i] = _mm256_and_si256(h ? _mm256_srli_epi16(bytes, 4) : bytes, low4);
          if constexpr (kFifthBit)
            q[i] = _mm256_or_si256(q[i], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(load32(b[i][k].qh), j), one), 4));
          sc[i] = _mm256_shuffle_epi8(scales[i], _mm256_set1_epi16(short(0x0100 + 0x0202 * j)));
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m256i xq = load32(&x[t].qk[256 * k + 32 * j]);
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) sumi[i][t] = Isa::madd_acc(sumi[i][t], _mm256_maddubs_epi16(q[i], xq), sc[i]);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[i][t]), _mm256_set1_ps(d[i] * x[t].dk[k]), acc[i][t]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + i] = hsum(acc[i][t]);
  }
};

// Byte i of the result: `value` where bit i of `bits` is set, else 0.
inline __m256i bit_bytes(uint32_t bits, __m256i value) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask), value);
}

// Q4_0/Q5_0 (w = d (q - half)) and Q4_1/Q5_1 (w = d q + m) times T tokens for R rows. The
// 16 bytes of nibbles are weights 0-15 (low) and 16-31 (high); qh, where the block has it,
// their fifth bits. _0: q - half as signed bytes, so a block's product is d d_x dot(q - half,
// q_x) in int32, as llama.cpp's vec_dot_q4_0_q8_0 / q5_0_q8_0 take it; _1: d d_x dot(q, q_x)
// + m d_x sum(q_x). Each block's weights are unpacked once for T tokens; the same operations
// per (row, token) whatever R, T and n are.
template <class Isa, class Block, int Rows = 2, int Tokens = 2>
struct Q32Tile {
  static constexpr int kRows = Rows, kTokens = Tokens;

  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    const Block* b[R];
    tile_rows(w, row_bytes, b);
    __m256 acc[R][T];
    float offsets[R][T];  // _1: sum over blocks of m d_x sum(q_x)
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps(), offsets[i][t] = 0;
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m256i fifth = _mm256_set1_epi8(0x10), half = _mm256_set1_epi8(kHasFifthBit<Block> ? 16 : 8);
    const int64_t blocks = cols / 32;
    for (int64_t k = 0; k < blocks; ++k) {
      if (k % 2 == 0) prefetch_next_rows<R>(b, k, row_bytes);  // a block pair spans at most two lines
      __m256i q[R], u[R];
      float d[R], m[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i][k].qs));
        q[i] = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low4), _mm_and_si128(bytes, low4));
        if constexpr (kHasFifthBit<Block>) {
          uint32_t qh;
          std::memcpy(&qh, b[i][k].qh, 4);
          q[i] = _mm256_or_si256(q[i], bit_bytes(qh, fifth));
        }
        if constexpr (!kHasMin<Block>) {
          q[i] = _mm256_sub_epi8(q[i], half);
          u[i] = _mm256_sign_epi8(q[i], q[i]);
        } else {
          m[i] = _cvtsh_ss(b[i][k].m);
        }
        d[i] = _cvtsh_ss(b[i][k].d);
      }
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256i xq = load32(&x[t].q[32 * k]);
        const float xd = x[t].d[k];
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m256i p = kHasMin<Block> ? Isa::dot_u8s8(q[i], xq) : Isa::dot_u8s8(u[i], _mm256_sign_epi8(xq, q[i]));
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d[i] * xd), acc[i][t]);
          if constexpr (kHasMin<Block>) offsets[i][t] += m[i] * xd * float(x[t].sum[k]);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + i] = hsum(acc[i][t]) + offsets[i][t];
  }
};

// Q6_K times T tokens for R rows, on Q8_K activations as llama.cpp's ggml_vec_dot_q6_K_q8_K:
// per block d d_x sum_j sc_j (dot(q, q_x) - 32 bsum_j) in int32, the 16-weight sub-blocks' scales
// in the two 128-bit halves of each 32-weight product; q unsigned (0..63) for vpmaddubsw, the
// -32 from the activation sums. Same operations per (row, token) whatever R, T and n are.
template <class Isa, int Rows = 2, int Tokens = 4>
struct Q6KTile {
  static constexpr int kRows = Rows, kTokens = Tokens;

  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    const BlockQ6_K* b[R];
    tile_rows(w, row_bytes, b);
    __m256 acc[R][T];
    fill_tile(acc, _mm256_setzero_ps());
    const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
    const int64_t blocks = cols / 256;
    for (int64_t k = 0; k < blocks; ++k) {
      prefetch_next_rows<R>(b, k, row_bytes);
      __m256i halves[R][2], sumi[R][T];  // the scales as int16, sc_0..7 and sc_8..15 in both halves
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i][k].scales)));
        halves[i][0] = _mm256_permute4x64_epi64(sc, 0x44);
        halves[i][1] = _mm256_permute4x64_epi64(sc, 0xEE);
        const __m256i minus32 = _mm256_mullo_epi16(sc, _mm256_set1_epi16(-32));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          sumi[i][t] = _mm256_madd_epi16(minus32, load32(&x[t].bsum16[16 * k]));
      }
#pragma GCC unroll 2
      for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 4
        for (int part = 0; part < 4; ++part) {
          const int c = 4 * n + part;  // weights [32c, 32c + 32): sub-blocks 2c and 2c + 1
          const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(short(0x0100 + 0x0202 * ((2 * c + 1) % 8))),
                                                _mm_set1_epi16(short(0x0100 + 0x0202 * ((2 * c) % 8))));
          __m256i q[R], sc[R];
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) {
            const __m256i ql = load32(b[i][k].ql + 64 * n + 32 * (part % 2));
            const __m256i qh = load32(b[i][k].qh + 32 * n);
            const __m256i low = part < 2 ? _mm256_and_si256(ql, low4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), low4);
            q[i] = _mm256_or_si256(low, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * part), two), 4));
            sc[i] = _mm256_shuffle_epi8(halves[i][n], pick);
          }
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m256i xq = load32(&x[t].qk[256 * k + 32 * c]);
#pragma GCC unroll 8
            for (int i = 0; i < R; ++i) sumi[i][t] = Isa::madd_acc(sumi[i][t], _mm256_maddubs_epi16(q[i], xq), sc[i]);
          }
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const float d = _cvtsh_ss(b[i][k].d);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[i][t]), _mm256_set1_ps(d * x[t].dk[k]), acc[i][t]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + i] = hsum(acc[i][t]);
  }
};

// Q8Activations::quantize in AVX2 vectors, bit for bit (the AVX2 tables' quantizer; a template
// only so that each table's copy has its Isa's internal linkage): max |x| is exact in any order,
// the f16 scale rounds to nearest even (F16C) as f32_to_f16 does, and vcvtps2dq rounds x * inv
// to nearest even as nearbyint does. Q8_K takes the sign of the first element of largest
// magnitude, as quantize_row_q8_K_ref does. Scalar it was ~2.5 ns an element on one thread
// while the other waited: ~7 % of a 1.5B Q8_0 prefill's time on a 2-core AVX2 host.
template <class Isa>
void quantize_activations_avx2(Q8Activations& xq, const float* x, int64_t n, unsigned blocks) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const auto abs = [&](__m256 v) { return _mm256_and_ps(v, magnitude); };
  const auto hmax = [](__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  };
  const auto hsum_i32 = [](__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1))));
  };
  // 32 int32 values (each in int8 range) as 32 int8 in order: the two packs interleave 4-value
  // groups across the 128-bit halves, the permutation puts them back.
  const auto store_bytes = [](int8_t* out, const __m256i (&q)[4]) {
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  };
  xq.cols = n;
  if (blocks & kBlocks32) {
    const int64_t count = size_q8_0(xq, n);
    for (int64_t b = 0; b < count; ++b) {
      __m256 v[4];
      for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
      const float amax = hmax(_mm256_max_ps(_mm256_max_ps(abs(v[0]), abs(v[1])), _mm256_max_ps(abs(v[2]), abs(v[3]))));
      xq.d[b] = _cvtsh_ss(_cvtss_sh(amax / 127, _MM_FROUND_TO_NEAREST_INT));
      const __m256 inv = _mm256_set1_ps(amax ? 127 / amax : 0);
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
      xq.sum[b] = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
      store_bytes(&xq.q[32 * b], q);
    }
  }
  if ((blocks & kBlocks256) && n % 256 == 0) {
    const int64_t count = size_q8_k(xq, n);
    for (int64_t b = 0; b < count; ++b) {
      const float* xb = x + 256 * b;
      __m256 m = _mm256_setzero_ps();
      for (int j = 0; j < 32; ++j) m = _mm256_max_ps(m, abs(_mm256_loadu_ps(xb + 8 * j)));
      const float amax = hmax(m);
      float max = 0;
      for (int j = 0; j < 32 && amax; ++j) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs(_mm256_loadu_ps(xb + 8 * j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
        if (hit) {
          max = xb[8 * j + __builtin_ctz(unsigned(hit))];
          break;
        }
      }
      const float iscale = amax ? -127.f / max : 0.f;
      const __m256 scale = _mm256_set1_ps(iscale);
      for (int g = 0; g < 8; ++g) {  // 32 values: two sums of 16
        __m256i q[4];
        for (int i = 0; i < 4; ++i)
          q[i] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(scale, _mm256_loadu_ps(xb + 32 * g + 8 * i))),
                                  _mm256_set1_epi32(127));
        xq.bsum16[16 * b + 2 * g] = int16_t(hsum_i32(_mm256_add_epi32(q[0], q[1])));
        xq.bsum16[16 * b + 2 * g + 1] = int16_t(hsum_i32(_mm256_add_epi32(q[2], q[3])));
        store_bytes(&xq.qk[256 * b + 32 * g], q);
      }
      finish_q8_k_block(xq, b, amax, iscale);
    }
    pair_sub_blocks(xq);
  }
}

template <class Isa>
QuantKernels make_quant_kernels(const char* name) {
  return QuantKernels{name,
                      &quantize_activations_avx2<Isa>,
                      &matmul_tiled<Q8_0Tile<Isa>>,
                      &matmul_tiled<QK4Tile<Isa, BlockQ4_K>>,
                      &matmul_tiled<Q6KTile<Isa>>,
                      &matmul_tiled<Q32Tile<Isa, BlockQ4_0>>,
                      &matmul_tiled<Q32Tile<Isa, BlockQ5_0>>,
                      &matmul_tiled<QK4Tile<Isa, BlockQ5_K>>,
                      &matmul_tiled<Q32Tile<Isa, BlockQ4_1>>,
                      &matmul_tiled<Q32Tile<Isa, BlockQ5_1>>};
}

}  // namespace runahead::simd
