// AVX2 quantized matvec: u8 x s8 products by vpmaddubsw (pairs to s16; no pair here can
// saturate: |w| <= 128 and |x| <= 127 give at most 32512) then vpmaddwd against ones.
#include "cpu/simd/quant_matvec_rows.h"

namespace runahead {
namespace {

struct Avx2Dot {
  static __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  // acc + the int16 pairs of a times b, summed to int32.
  // The empty asm keeps each sum a running total: GCC otherwise reassociates the integer adds of
  // a fully unrolled block into a tree, computing every product first and spilling them.
  static __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
    __m256i sum = _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
    asm("" : "+x"(sum));
    return sum;
  }
};

}  // namespace

const QuantKernels& avx2_quant_kernels() {
  static const QuantKernels k = simd::make_quant_kernels<Avx2Dot>("avx2");
  return k;
}

}  // namespace runahead
