// AVX2 with AVX-VNNI (Intel Alder Lake and later client cores, AMD Zen 5): the AVX2 tiles with
// the VEX-encoded vpdpbusd (u8 x s8 -> s32, four-way) and vpdpwssd (s16 pairs summed into an
// accumulator), one instruction each where plain AVX2 takes vpmaddubsw + vpmaddwd (+ vpaddd).
// Same integer sums, same float order: the results equal the AVX2 table's bit for bit.
// This file is built with the AVX2 flags and -mavxvnni (CMakeLists.txt); the table is only
// offered when the CPU reports avxvnni (quant_kernels.cpp).
#include "cpu/simd/quant_matvec_rows.h"

namespace runahead {
namespace {

struct AvxVnniDot {
  static __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i madd_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
};

}  // namespace

const QuantKernels& avx2_vnni_quant_kernels() {
  static const QuantKernels k = simd::make_quant_kernels<AvxVnniDot>("avx2-vnni");
  return k;
}

}  // namespace runahead
