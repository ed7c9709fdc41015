// AVX-512 kernels: 16 floats per vector; bf16 widened by a 16-bit shift, f16 by vcvtph2ps.
// GCC 12's AVX-512 headers initialise _mm*_undefined_* from themselves, which
// -Wuninitialized reports at every use (GCC bug 105593); the warning is the header's.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "cpu/simd/make_kernels.h"

namespace runahead {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int width = 16;
  static constexpr int decode_rows = 1;  // one stream: 4 interleaved rows decoded the 0.5B bf16 shape 28% slower (Zen 5)
  static constexpr int tile_rows = 4;
  static constexpr int tile_tokens = 4;
  static constexpr int combine_heads = 7, combine_cols = 4;  // 7 heads x 4 vectors of accumulators + 4 value vectors of 32 registers (the broadcast is the fma's memory operand)
  static constexpr int prefetch_bytes = 4096;  // ahead in the same row stream

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const simd::Bf16* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static V load(const simd::F16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  // out[0..4) = the sums of a, b, c, d: halves added, then an AVX hadd tree.
  static void sum4(V a, V b, V c, V d, float* out) {
    auto fold = [](V v) {
      return _mm256_add_ps(_mm512_castps512_ps256(v),
                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    };
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(fold(a), fold(b)), _mm256_hadd_ps(fold(c), fold(d)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127], built in the exponent field.
  static V pow2(V n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static float scalar(float w) { return w; }
  static float scalar(simd::Bf16 w) { return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(w.bits << 16))); }
  static float scalar(simd::F16 w) { return _cvtsh_ss(w.bits); }
  static void prefetch(const char* p) { _mm_prefetch(p, _MM_HINT_T0); }
};

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels kernels = simd::make_kernels<Avx512>("avx512");
  return kernels;
}

}  // namespace runahead
