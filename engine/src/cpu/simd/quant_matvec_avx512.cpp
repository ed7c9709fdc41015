// AVX-512 VNNI quantized matvec: vpdpbusd does the u8 x s8 -> s32 four-way dot product in
// one instruction. Its 256-bit (AVX-512VL) form: a 32-weight block fills exactly one
// vector and decode is bound by memory, not by the dot products.
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
};

}  // namespace

const QuantKernels& avx512_vnni_quant_kernels() {
  static const QuantKernels k = simd::make_quant_kernels<VnniDot>("avx512-vnni");
  return k;
}

}  // namespace runahead
