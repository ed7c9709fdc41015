// AVX-512 VNNI quantized matvec: vpdpbusd does the u8 x s8 -> s32 four-way dot product in
// one instruction. Its 256-bit (AVX-512VL) form: a 32-weight block fills exactly one
// vector and decode is bound by memory, not by the dot products. Q8_0, the shipped model's
// format, has a 512-bit tile of its own: two blocks per vector and no sign folding.
// This file is built with -mavx512f/bw/vl/dq; VNNI is enabled here, and the table is only
// offered when the CPU reports avx512vnni (quant_kernels.cpp).
#pragma GCC target("avx512vnni")
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "cpu/simd/quant_matvec_rows.h"

namespace runahead {
namespace {

struct VnniDot {
  static __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i madd_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }
};

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
      const __m128i d0 = _mm_set1_epi16(short(b[i][k].d)), d1 = pair ? _mm_set1_epi16(short(b[i][k + 1].d)) : d0;
      d[i] = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(d0), d1, 1));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m512i xq = _mm512_maskz_loadu_epi32(lanes, &x[t].q[32 * k]);
      const __m512i bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, xq));
      const float xd1 = pair ? x[t].d[k + 1] : 0.0f;
      const __m512 xd = _mm512_insertf32x8(_mm512_set1_ps(x[t].d[k]), _mm256_set1_ps(xd1), 1);
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
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) b[i] = reinterpret_cast<const BlockQ8_0*>(w + i * row_bytes);
    __m512 acc[R][T];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
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
        y[t * ldy + i] = simd::hsum(_mm256_add_ps(_mm512_castps512_ps256(acc[i][t]), _mm512_extractf32x8_ps(acc[i][t], 1)));
  }
};

}  // namespace

const QuantKernels& avx512_vnni_quant_kernels() {
  static const QuantKernels k = [] {
    QuantKernels t = simd::make_quant_kernels<VnniDot>("avx512-vnni");
    t.q8_0 = &simd::matmul_tiled<Q8_0Tile512>;
    return t;
  }();
  return k;
}

}  // namespace runahead
