#pragma once
// The x86 quantized matvec rows, written once over 256-bit vectors and templated on how an
// instruction set takes a u8 x s8 dot product. Include only from a simd/quant_matvec_*.cpp
// whose Isa struct lives in an anonymous namespace (see make_kernels.h for why).
#include <immintrin.h>

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

// Q8_0: y = sum_b d_w[b] d_x[b] sum_l q_w q_x.
template <class Isa>
void matvec_q8_0_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                      const Q8Activations& x, float* y) {
  const int64_t blocks = cols / 32;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(w + r * row_bytes);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 1 < blocks; k += 2) {
      const __m256i p0 = dot_s8s8<Isa>(load32(b[k].qs), load32(&x.q[32 * k]));
      const __m256i p1 = dot_s8s8<Isa>(load32(b[k + 1].qs), load32(&x.q[32 * k + 32]));
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(_cvtsh_ss(b[k].d) * x.d[k]), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(_cvtsh_ss(b[k + 1].d) * x.d[k + 1]), acc1);
    }
    if (k < blocks) {
      const __m256i p = dot_s8s8<Isa>(load32(b[k].qs), load32(&x.q[32 * k]));
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(_cvtsh_ss(b[k].d) * x.d[k]), acc0);
    }
    y[r - row_begin] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

// Q4_K: sub-block j (32 weights) = d sc_j q - dmin m_j, so its product with the activation
// block is d sc_j d_x sum(q q_x) - dmin m_j d_x sum(q_x).
template <class Isa>
void matvec_q4_k_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                      const Q8Activations& x, float* y) {
  const int64_t blocks = cols / 256;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const BlockQ4_K*>(w + r * row_bytes);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t k = 0; k < blocks; ++k) {
      const float d = _cvtsh_ss(b[k].d), dmin = _cvtsh_ss(b[k].dmin);
      const float* xd = &x.d[8 * k];
      const int8_t* xq = &x.q[256 * k];
      uint8_t sc[8], m[8];
      for (int j = 0; j < 8; ++j) q4_k_scale_min(j, b[k].scales, sc[j], m[j]);
      for (int g = 0; g < 4; ++g) {
        const __m256i bytes = load32(b[k].qs + 32 * g);
        const __m256i lo = _mm256_and_si256(bytes, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
        const __m256i p0 = Isa::dot_u8s8(lo, load32(xq + 64 * g));
        const __m256i p1 = Isa::dot_u8s8(hi, load32(xq + 64 * g + 32));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(d * sc[2 * g] * xd[2 * g]), acc);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(d * sc[2 * g + 1] * xd[2 * g + 1]), acc);
      }
      for (int j = 0; j < 8; ++j) mins += dmin * m[j] * xd[j] * float(x.sum[8 * k + j]);
    }
    y[r - row_begin] = hsum(acc) - mins;
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
  return QuantKernels{name, &matvec_q8_0_rows<Isa>, &matvec_q4_k_rows<Isa>, &matvec_q6_k_rows<Isa>};
}

}  // namespace runahead::simd
