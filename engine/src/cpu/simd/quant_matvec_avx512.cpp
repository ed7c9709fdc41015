// AVX-512 VNNI quantized matvec: vpdpbusd does the u8 x s8 -> s32 four-way dot product in
// one instruction. Its 256-bit (AVX-512VL) form: a 32-weight block fills exactly one
// vector and decode is bound by memory, not by the dot products. Q8_0, the shipped model's
// format, has a 512-bit tile of its own: two blocks per vector and no sign folding.
// This file is built with -mavx512f/bw/vl/dq and -mavx512vnni (CMakeLists.txt); the table is only
// offered when the CPU reports avx512vnni (quant_kernels.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <vector>

#include "cpu/simd/quant_matvec_rows.h"

namespace runahead {
namespace {

struct VnniDot {
  static __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i madd_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }
};

inline float hsum512(__m512 v) {
  return simd::hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// Blocks k and k + 1's f16 scales as floats in lanes 0-7 and 8-15 (only k's: a lone last block).
inline __m512 q8_0_pair_scales(const BlockQ8_0* b, int64_t k, bool pair) {
  const __m128i d0 = _mm_set1_epi16(short(b[k].d)), d1 = pair ? _mm_set1_epi16(short(b[k + 1].d)) : d0;
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(d0), d1, 1));
}
// A token's scales of blocks k and k + 1 the same way (0 in lanes 8-15 for a lone block).
inline __m512 q8_0_token_scales(const Q8Activations& x, int64_t k, bool pair) {
  return _mm512_insertf32x8(_mm512_set1_ps(x.d[k]), _mm256_set1_ps(pair ? x.d[k + 1] : 0.0f), 1);
}

// Q8_0, R rows x T tokens, blocks k and k + 1 in lanes 0-7 and 8-15 of one vector: the
// 256-bit tile's even and odd accumulators side by side, so its sums are bit for bit the
// same. vpdpbusd wants u8 x s8: the weights go in as q_w + 128 (xor 0x80), once per block for
// all T tokens, and each token's sum starts from -128 sum(q_x), once per block for all R rows.
struct Q8_0Tile512 {
  static constexpr int kRows = 4, kTokens = 4;

  // acc[i][t] += the products of blocks k and k + 1, or (the last of an odd count) of block k
  // alone in lanes 0-7.
  template <int R, int T, bool pair>
  static void add_blocks(const BlockQ8_0* const (&b)[R], int64_t k, const Q8Activations* x, __m512 (&acc)[R][T]) {
    const __mmask16 lanes = pair ? 0xFFFF : 0x00FF;
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    __m512i q[R];
    __m512 d[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i lo = _mm512_zextsi256_si512(simd::load32(b[i][k].qs));
      q[i] = _mm512_xor_si512(pair ? _mm512_inserti64x4(lo, simd::load32(b[i][k + 1].qs), 1) : lo, flip);
      d[i] = q8_0_pair_scales(b[i], k, pair);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i xq = _mm512_maskz_loadu_epi32(lanes, &x[t].q[32 * k]);
      const __m512i bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, xq));
      const __m512 xd = q8_0_token_scales(x[t], k, pair);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, q[i], xq));
        acc[i][t] = _mm512_mask3_fmadd_ps(p, _mm512_mul_ps(d[i], xd), acc[i][t], lanes);
      }
    }
  }

  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    const BlockQ8_0* b[R];
    simd::tile_rows(w, row_bytes, b);
    __m512 acc[R][T];
    simd::fill_tile(acc, _mm512_setzero_ps());
    const int64_t blocks = cols / 32;
    int64_t k = 0;
    for (; k + 1 < blocks; k += 2) {
      simd::prefetch_next_rows<R>(b, k, row_bytes);
      add_blocks<R, T, true>(b, k, x, acc);
    }
    if (k < blocks) add_blocks<R, T, false>(b, k, x, acc);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        y[t * ldy + i] = hsum512(acc[i][t]);
  }
};

// Q8_0 prefill: Q8_0Tile512's sums from rows prepared once per call. A prefill passes over the
// caller's ~64 KB of rows once per group of 4 tokens, and each pass redid the rows' work (the
// sign flip, two f16 scales widened) and each token's bias (-128 sum q_x, by vpdpbusd and a
// subtraction) for every block pair: ~50 of ~140 instructions a 4 x 4 step. Prepared, a block
// pair of a row is its 64 weight bytes as stored (s8), its scales as 16 floats and
// -128 sum q_w per 4 weights, and the activations go in as u8 (q_x + 128): vpdpbusd(bias_w,
// x + 128, w) = sum q_w q_x, lane for lane the integer Q8_0Tile512 gets from
// vpdpbusd(bias_x, w + 128, x), then the same conversion, scale product and fma: the same bits.
struct Q8_0Prepared512 {
  static constexpr int kRows = 4, kTokens = 4;
  // Per block pair: weights, scales, bias. A lone last block fills lanes 0-7 (its fma is masked).
  struct Pair {
    __m512i w;
    __m512 d;
    __m512i bias;
  };
  static size_t row_bytes(int64_t cols) { return size_t((cols / 32 + 1) / 2) * sizeof(Pair); }

  static void prepare(const uint8_t* w, size_t row_bytes_in, int64_t rows, int64_t cols, Pair* out) {
    const int64_t blocks = cols / 32, pairs = (blocks + 1) / 2;
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    for (int64_t r = 0; r < rows; ++r) {
      const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(w + r * row_bytes_in);
      for (int64_t p = 0; p < pairs; ++p) {
        const int64_t k = 2 * p;
        const bool pair = k + 1 < blocks;
        const __m512i lo = _mm512_zextsi256_si512(simd::load32(b[k].qs));
        const __m512i q = pair ? _mm512_inserti64x4(lo, simd::load32(b[k + 1].qs), 1) : lo;
        Pair& o = out[r * pairs + p];
        o.w = q;
        o.d = q8_0_pair_scales(b, k, pair);
        o.bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, q));
      }
    }
  }

  template <int R, int T, bool pair>
  static void add_pair(const Pair* const (&b)[R], int64_t p, const Q8Activations* x, __m512 (&acc)[R][T]) {
    const __mmask16 lanes = pair ? 0xFFFF : 0x00FF;
    const int64_t k = 2 * p;
    __m512i w[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) w[i] = b[i][p].w;
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i xu = _mm512_xor_si512(_mm512_maskz_loadu_epi32(lanes, &x[t].q[32 * k]), _mm512_set1_epi8(char(0x80)));
      const __m512 xd = q8_0_token_scales(x[t], k, pair);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(b[i][p].bias, xu, w[i]));
        acc[i][t] = _mm512_mask3_fmadd_ps(s, _mm512_mul_ps(b[i][p].d, xd), acc[i][t], lanes);
      }
    }
  }

  // Rows prepared by prepare(), row_bytes(cols) apart, times T tokens.
  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    const Pair* b[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) b[i] = reinterpret_cast<const Pair*>(w + i * row_bytes);
    __m512 acc[R][T];
    simd::fill_tile(acc, _mm512_setzero_ps());
    const int64_t blocks = cols / 32;
    int64_t p = 0;
    for (; 2 * p + 1 < blocks; ++p) add_pair<R, T, true>(b, p, x, acc);
    if (2 * p < blocks) add_pair<R, T, false>(b, p, x, acc);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + i] = hsum512(acc[i][t]);
  }
};

// Tokens from which a call prepares its rows: one pass per group of 4 tokens over 64 KB of rows
// has to pay for a pass that writes ~3x their bytes.
constexpr int kPrepareTokens = 16;

void q8_0_rows_512(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                   const Q8Activations* x, int n, float* y, int64_t ldy) {
  if (n < kPrepareTokens) return simd::matmul_tiled<Q8_0Tile512>(w, row_bytes, row_begin, row_end, cols, x, n, y, ldy);
  using Pair = Q8_0Prepared512::Pair;
  const int64_t rows = row_end - row_begin;
  const size_t prepared_row = Q8_0Prepared512::row_bytes(cols);
  thread_local std::vector<Pair> prepared;
  prepared.resize(size_t(rows) * prepared_row / sizeof(Pair));
  Q8_0Prepared512::prepare(w + row_begin * row_bytes, row_bytes, rows, cols, prepared.data());
  simd::matmul_tiled<Q8_0Prepared512>(reinterpret_cast<const uint8_t*>(prepared.data()), prepared_row, 0, rows, cols, x,
                                       n, y, ldy);
}

// A vpshufb index whose 128-bit lane L picks 16-bit word w[L] of the source lane into all eight words.
inline __m512i words_per_lane(int w0, int w1, int w2, int w3) {
  auto pick = [](int w) { return (long long)(uint64_t(0x0100 + 0x0202 * w) * 0x0001000100010001ull); };
  return _mm512_set_epi64(pick(w3), pick(w3), pick(w2), pick(w2), pick(w1), pick(w1), pick(w0), pick(w0));
}

// Two vectors of 4-weight sums (vpdpbusd's, each within an int16) as one of int16 words, a's
// in the low word of each int32 lane and b's in the high one: one vpdpwssd then adds a and b
// times their scales into the same lane, so the lanes sum the same weights as they did with a
// vpmaddubsw + vpdpwssd per vector (same integers, same floats: the same bits).
inline __m512i interleave_sums(__m512i a, __m512i b) {
  return _mm512_mask_blend_epi16(0xAAAAAAAA, a, _mm512_slli_epi32(b, 16));
}
// The vpshufb index giving interleave_sums(a, b) its scales: in 128-bit lane L, word sa[L] of
// the source lane in the even words and word sb[L] in the odd ones.
inline __m512i interleaved_scales(const int (&sa)[4], const int (&sb)[4]) {
  auto pair = [](int a, int b) {
    const uint64_t words = uint64_t(0x0100 + 0x0202 * a) | uint64_t(0x0100 + 0x0202 * b) << 16;
    return (long long)(words | words << 32);
  };
  return _mm512_set_epi64(pair(sa[3], sb[3]), pair(sa[3], sb[3]), pair(sa[2], sb[2]), pair(sa[2], sb[2]),
                          pair(sa[1], sb[1]), pair(sa[1], sb[1]), pair(sa[0], sb[0]), pair(sa[0], sb[0]));
}

// The float side of a tile in token quads: a block's int32 sums (16 lanes a token) are folded
// exactly to 4 lanes, so four tokens share one vector (token t in 128-bit lane t) for the
// conversion, the scales and the accumulation; a token outside a quad takes the same lane
// operations in a 128-bit vector. Integer sums are exact in any order, so every (row, token)
// gets the same float operations whatever R, T and n are.
inline __m512i fold_quad(__m512i s0, __m512i s1, __m512i s2, __m512i s3) {
  constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1);
  const __m512i w01 = _mm512_add_epi32(_mm512_shuffle_i32x4(s0, s1, kEven), _mm512_shuffle_i32x4(s0, s1, kOdd));
  const __m512i w23 = _mm512_add_epi32(_mm512_shuffle_i32x4(s2, s3, kEven), _mm512_shuffle_i32x4(s2, s3, kOdd));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(w01, w23, kEven), _mm512_shuffle_i32x4(w01, w23, kOdd));
}
inline __m128i fold_one(__m512i s) {
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline float hsum128(__m128 v) {
  const __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
// Four tokens' values, each in all four lanes of its 128-bit lane.
inline __m512 per_token_lanes(float v0, float v1, float v2, float v3) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                               _mm512_castps128_ps512(_mm_setr_ps(v0, v1, v2, v3)));
}

// Q4_K/Q5_K (simd::QK4Tile's arithmetic) two sub-blocks per vector: 64 bytes of nibbles give
// sub-blocks (4h, 4h + 2) in their low nibbles and (4h + 1, 4h + 3) in their high ones, so the
// activations are loaded as the two matching 32-byte halves. Half the vector instructions of
// the 256-bit tile. A block adds d d_x sum_j sc_j dot_j to four float lanes a token and
// -dmin d_x sum_j m_j bsum_j to four others (token quads, above): 2 x 8 tiles for a prefill,
// which loads each row's block and unpacks its scales once for 8 tokens. One token converts and
// scales both sums with one instruction each (4.1-4.3 -> 3.9-4.0 ns per 256 weights in L2).
template <class Block>
struct QK4Tile512 {
  static constexpr int kRows = 2, kTokens = 8;
  static constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;

  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    constexpr int Q = T / 4, S = T % 4;  // token quads, then single tokens
    const Block* b[R];
    simd::tile_rows(w, row_bytes, b);
    // Per token, four lanes of d d_x sum_j sc_j dot_j and four of -dmin d_x sum_j m_j bsum_j,
    // each added up over the blocks on its own: a quad's in two 512-bit vectors, a single
    // token's in the two halves of one 256-bit vector, converted and scaled by one vcvtdq2ps
    // and one vfmadd a block. y = the four (sum + min) lanes added as hsum128 does, either way.
    __m512 quad[R][Q > 0 ? Q : 1], quad_min[R][Q > 0 ? Q : 1];
    __m256 single[R][S > 0 ? S : 1];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) quad[i][q] = quad_min[i][q] = _mm512_setzero_ps();
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) single[i][s] = _mm256_setzero_ps();
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const __m256 negate_mins = _mm256_setr_ps(0.f, 0.f, 0.f, 0.f, -0.f, -0.f, -0.f, -0.f);  // sign bits, for xor
    const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const int64_t blocks = cols / 256;
    for (int64_t k = 0; k < blocks; ++k) {
      simd::prefetch_next_rows<R>(b, k, row_bytes);
      __m512i scales[R], sumi[R][T];
      __m128i mins[R];
      __m128 d_dmin[R];  // lanes 0, 1: d and dmin (adjacent f16 at the block's start)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256i scales_mins = simd::q4_k_scales_mins(b[i][k].scales);  // int16: sc_0..7, m_0..7
        scales[i] = _mm512_broadcast_i32x4(_mm256_castsi256_si128(scales_mins));
        mins[i] = _mm256_extracti128_si256(scales_mins, 1);
        uint32_t packed;
        std::memcpy(&packed, &b[i][k].d, 4);
        d_dmin[i] = _mm_cvtph_ps(_mm_cvtsi32_si128(int(packed)));
      }
      // The mins: -dmin d_x sum_j m_j bsum_j, in int32 per pair of sub-blocks.
      __m512 dk[Q > 0 ? Q : 1];  // each quad's d_x, for the mins and the sums
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) {
        const Q8Activations* xt = x + 4 * q;
        __m512i bsum = _mm512_castsi128_si512(load16(&xt[0].bsum32[8 * k]));
        bsum = _mm512_inserti32x4(bsum, load16(&xt[1].bsum32[8 * k]), 1);
        bsum = _mm512_inserti32x4(bsum, load16(&xt[2].bsum32[8 * k]), 2);
        bsum = _mm512_inserti32x4(bsum, load16(&xt[3].bsum32[8 * k]), 3);
        dk[q] = per_token_lanes(xt[0].dk[k], xt[1].dk[k], xt[2].dk[k], xt[3].dk[k]);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m512 m = _mm512_cvtepi32_ps(_mm512_madd_epi16(_mm512_broadcast_i32x4(mins[i]), bsum));
          quad_min[i][q] = _mm512_fnmadd_ps(m, _mm512_mul_ps(_mm512_set1_ps(_mm_cvtss_f32(_mm_movehdup_ps(d_dmin[i]))), dk[q]),
                                            quad_min[i][q]);
        }
      }
      // 64 bytes of nibbles at a time, their low nibbles (sub-blocks 4p, 4p + 2) and high ones
      // (4p + 1, 4p + 3): vpdpbusd sums each 4 weights' products into an int32 (at most
      // 4 * 31 * 128, so it fits an int16), the low and high sums go into one vector of int16
      // (interleave_sums), and one vpdpwssd multiplies them by their sub-blocks' scales into
      // sumi: 6 multiplies per 256 weights a token where vpmaddubsw + vpdpwssd per 64 weights took
      // 8. On a Zen 4 these three instructions go one 512-bit vector a cycle between them, and the
      // tile waited on them: 64 tokens of the 1.5B down, one thread, 11.3 -> 10.0-10.1 ms.
#pragma GCC unroll 2
      for (int p = 0; p < 2; ++p) {
        __m512i lo[R], hi[R], sc[R];
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m512i bytes = _mm512_loadu_si512(b[i][k].qs + 64 * p);
          lo[i] = _mm512_and_si512(bytes, low4);
          hi[i] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
          if constexpr (kFifthBit) {
            const __m512i qh = _mm512_broadcast_i64x4(simd::load32(b[i][k].qh));
            const int j = 4 * p;
            const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(short(j)), _mm256_set1_epi16(short(j + 2)), 1);
            lo[i] = _mm512_or_si512(lo[i], _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift), one), 4));
            const __m512i shift1 = _mm512_add_epi16(shift, _mm512_set1_epi16(1));
            hi[i] = _mm512_or_si512(hi[i], _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift1), one), 4));
          }
          sc[i] = _mm512_shuffle_epi8(scales[i], interleaved_scales({4 * p, 4 * p, 4 * p + 2, 4 * p + 2},
                                                                   {4 * p + 1, 4 * p + 1, 4 * p + 3, 4 * p + 3}));
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m512i xlo = _mm512_loadu_si512(&x[t].qk_pairs[256 * k + 128 * p]);       // sub-blocks 4p, 4p + 2
          const __m512i xhi = _mm512_loadu_si512(&x[t].qk_pairs[256 * k + 128 * p + 64]);  // 4p + 1, 4p + 3
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) {
            const __m512i sums = interleave_sums(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[i], xlo),
                                                 _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[i], xhi));
            sumi[i][t] = p == 0 ? _mm512_madd_epi16(sums, sc[i]) : _mm512_dpwssd_epi32(sumi[i][t], sums, sc[i]);
          }
        }
      }
      // d d_x sum_j sc_j dot_j.
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q)
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m512i s = fold_quad(sumi[i][4 * q], sumi[i][4 * q + 1], sumi[i][4 * q + 2], sumi[i][4 * q + 3]);
          quad[i][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_set1_ps(_mm_cvtss_f32(d_dmin[i])), dk[q]),
                                       quad[i][q]);
        }
      // A single token: [sums | mins] converted at once, times [d d_x x4 | -dmin d_x x4].
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        const Q8Activations& xt = x[4 * Q + s];
        const __m128i bsum = load16(&xt.bsum32[8 * k]);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(fold_one(sumi[i][4 * Q + s])),
                                                        _mm_madd_epi16(mins[i], bsum), 1);
          const __m256 scale = _mm256_xor_ps(
              _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps(d_dmin[i], _mm_set1_ps(xt.dk[k]))), spread),
              negate_mins);
          single[i][s] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(both), scale, single[i][s]);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) {
        const __m512 v = _mm512_add_ps(quad[i][q], quad_min[i][q]);
        y[(4 * q) * ldy + i] = hsum128(_mm512_castps512_ps128(v));
        y[(4 * q + 1) * ldy + i] = hsum128(_mm512_extractf32x4_ps(v, 1));
        y[(4 * q + 2) * ldy + i] = hsum128(_mm512_extractf32x4_ps(v, 2));
        y[(4 * q + 3) * ldy + i] = hsum128(_mm512_extractf32x4_ps(v, 3));
      }
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s)
        y[(4 * Q + s) * ldy + i] =
            hsum128(_mm_add_ps(_mm256_castps256_ps128(single[i][s]), _mm256_extractf128_ps(single[i][s], 1)));
    }
  }
};

// Q6_K (simd::Q6KTile's arithmetic) 64 weights per vector: 64 bytes of ql give weights
// 128n + [0, 64) in their low nibbles and 128n + [64, 128) in their high ones, each 128-bit
// lane one 16-weight sub-block; the 2-bit highs come from qh shifted per 256-bit half.
struct Q6KTile512 {
  static constexpr int kRows = 2, kTokens = 4;

  template <int R, int T>
  static void run(const uint8_t* w, size_t row_bytes, int64_t cols, const Q8Activations* x, float* y, int64_t ldy) {
    const BlockQ6_K* b[R];
    simd::tile_rows(w, row_bytes, b);
    __m512 acc[R][T];
    simd::fill_tile(acc, _mm512_setzero_ps());
    const __m512i low4 = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3);
    const int64_t blocks = cols / 256;
    for (int64_t k = 0; k < blocks; ++k) {
      simd::prefetch_next_rows<R>(b, k, row_bytes);
      __m256i sc16[R];
      __m512i sumi[R][T];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        sc16[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i][k].scales)));
        const __m256i minus32 = _mm256_mullo_epi16(sc16[i], _mm256_set1_epi16(-32));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          sumi[i][t] = _mm512_zextsi256_si512(_mm256_madd_epi16(minus32, simd::load32(&x[t].bsum16[16 * k])));
      }
#pragma GCC unroll 2
      for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 2
        for (int high = 0; high < 2; ++high) {  // weights 128n + 64 high + [0, 64)
          const __m512i shift =
              _mm512_inserti64x4(_mm512_set1_epi16(short(4 * high)), _mm256_set1_epi16(short(4 * high + 2)), 1);
          __m512i q[R], sc[R];
#pragma GCC unroll 8
          for (int i = 0; i < R; ++i) {
            const __m512i ql = _mm512_loadu_si512(b[i][k].ql + 64 * n);
            const __m512i qh = _mm512_broadcast_i64x4(simd::load32(b[i][k].qh + 32 * n));
            const __m512i lowbits = _mm512_and_si512(high ? _mm512_srli_epi16(ql, 4) : ql, low4);
            q[i] = _mm512_or_si512(lowbits, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, shift), three), 4));
            const __m128i half = n ? _mm256_extracti128_si256(sc16[i], 1) : _mm256_castsi256_si128(sc16[i]);
            sc[i] = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(half),
                                        words_per_lane(4 * high, 4 * high + 1, 4 * high + 2, 4 * high + 3));
          }
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m512i xv = _mm512_loadu_si512(&x[t].qk[256 * k + 128 * n + 64 * high]);
#pragma GCC unroll 8
            for (int i = 0; i < R; ++i)
              sumi[i][t] = _mm512_dpwssd_epi32(sumi[i][t], _mm512_maddubs_epi16(q[i], xv), sc[i]);
          }
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const float d = _cvtsh_ss(b[i][k].d);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t)
          acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[i][t]), _mm512_set1_ps(d * x[t].dk[k]), acc[i][t]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) y[t * ldy + i] = hsum512(acc[i][t]);
  }
};

// Q8Activations::quantize in vectors, bit for bit: max |x| is exact in any order, the f16
// scale rounds to nearest even as f32_to_f16 does, and vroundscaleps rounds x * inv to nearest
// even as nearbyint does. Q8_K takes the sign of the first element of largest magnitude, as
// quantize_row_q8_K_ref does. Scalar, it was ~2.5 ns per element: ~1 ms of a 1.5B token.
void quantize_activations_512(Q8Activations& xq, const float* x, int64_t n, unsigned blocks) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  xq.cols = n;
  if (blocks & kBlocks32) {
    const int64_t count = size_q8_0(xq, n);
    for (int64_t b = 0; b < count; ++b) {
      const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      xq.d[b] = _cvtsh_ss(_cvtss_sh(amax / 127, _MM_FROUND_TO_NEAREST_INT));
      const __m512 inv = _mm512_set1_ps(amax ? 127 / amax : 0);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, inv), kRound));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, inv), kRound));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(&xq.q[32 * b]), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(&xq.q[32 * b + 16]), _mm512_cvtepi32_epi8(q1));
      xq.sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
  }
  if ((blocks & kBlocks256) && n % 256 == 0) {
    const int64_t count = size_q8_k(xq, n);
    for (int64_t b = 0; b < count; ++b) {
      const float* xb = x + 256 * b;
      __m512 amax_v = _mm512_setzero_ps();
      for (int j = 0; j < 16; ++j) amax_v = _mm512_max_ps(amax_v, _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * j)));
      const float amax = _mm512_reduce_max_ps(amax_v);
      float max = 0;
      for (int j = 0; j < 16 && amax; ++j) {
        const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + 16 * j)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
        if (hit) {
          max = xb[16 * j + __builtin_ctz(hit)];
          break;
        }
      }
      const float iscale = amax ? -127.f / max : 0.f;
      const __m512 scale = _mm512_set1_ps(iscale);
      for (int j = 0; j < 16; ++j) {
        __m512i q = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * j), scale), kRound));
        q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(&xq.qk[256 * b + 16 * j]), _mm512_cvtepi32_epi8(q));
        xq.bsum16[16 * b + j] = int16_t(_mm512_reduce_add_epi32(q));
      }
      finish_q8_k_block(xq, b, amax, iscale);
    }
    pair_sub_blocks(xq);
  }
}

}  // namespace

const QuantKernels& avx512_vnni_quant_kernels() {
  static const QuantKernels k = [] {
    QuantKernels t = simd::make_quant_kernels<VnniDot>("avx512-vnni");
    t.quantize = &quantize_activations_512;
    t.q8_0 = &q8_0_rows_512;
    t.q4_k = &simd::matmul_tiled<QK4Tile512<BlockQ4_K>>;
    t.q5_k = &simd::matmul_tiled<QK4Tile512<BlockQ5_K>>;
    t.q6_k = &simd::matmul_tiled<Q6KTile512>;
    return t;
  }();
  return k;
}

}  // namespace runahead
