// AVX2 + FMA kernels: 8 floats per vector; bf16 widened by a 16-bit shift, f16 by F16C.
#include <immintrin.h>

#include "cpu/simd/make_kernels.h"

namespace runahead {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int width = 8;
  static constexpr int decode_rows = 4;
  static constexpr int tile_rows = 4;
  static constexpr int tile_tokens = 2;  // 8 accumulators + 4 weights + 1 token of 16 registers
  static constexpr int combine_heads = 6, combine_cols = 2;  // 6 heads x 2 vectors + 2 value vectors + 1 broadcast of 16 registers
  static constexpr int prefetch_bytes = 4096;  // ahead in the same row stream

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const simd::Bf16* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static V load(const simd::F16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // out[0..4) = the sums of a, b, c, d.
  static void sum4(V a, V b, V c, V d, float* out) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127], built in the exponent field.
  static V pow2(V n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static float scalar(float w) { return w; }
  static float scalar(simd::Bf16 w) { return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(w.bits << 16))); }
  static float scalar(simd::F16 w) { return _cvtsh_ss(w.bits); }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
};

}  // namespace

const Kernels& avx2_kernels() {
  static const Kernels kernels = simd::make_kernels<Avx2>("avx2");
  return kernels;
}

}  // namespace runahead
