// Portable quantized matvec: the same arithmetic as the SIMD kernels (int32 sums per
// 32-weight block, scaled in f32), one weight at a time.
#include <type_traits>

#include "model/half.h"
#include "cpu/quant_kernels.h"

namespace runahead {
namespace {

int32_t dot32(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int l = 0; l < 32; ++l) s += int32_t(a[l]) * b[l];
  return s;
}

void matvec_q8_0_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                      const Q8Activations& x, float* y) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(w + r * row_bytes);
    float acc = 0;
    for (int64_t k = 0; k < cols / 32; ++k) acc += f16_to_f32(b[k].d) * x.d[k] * float(dot32(b[k].qs, &x.q[32 * k]));
    y[r - row_begin] = acc;
  }
}

// Q4_K, and Q5_K (Block = BlockQ5_K) with q's fifth bit, bit j of qh[l], added; on Q8_K
// activations, as llama.cpp's ggml_vec_dot_q4_K_q8_K: per block d d_x sum_j sc_j dot_j
// - dmin d_x sum_j m_j bsum_j, both sums in int32.
template <class Block>
void matvec_k_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                   const Q8Activations& x, float* y) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const Block*>(w + r * row_bytes);
    float acc = 0;
    for (int64_t k = 0; k < cols / 256; ++k) {
      int32_t sumi = 0, summ = 0;
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        q4_k_scale_min(j, b[k].scales, sc, m);
        const uint8_t* q = b[k].qs + 32 * (j / 2);
        const int8_t* xq = &x.qk[256 * k + 32 * j];
        int32_t s = 0;
        for (int l = 0; l < 32; ++l) {
          int v = (q[l] >> (4 * (j % 2))) & 0xF;
          if constexpr (std::is_same_v<Block, BlockQ5_K>) v |= ((b[k].qh[l] >> j) & 1) << 4;
          s += v * xq[l];
        }
        sumi += sc * s;
        summ += m * x.bsum32[8 * k + j];
      }
      acc += x.dk[k] * (f16_to_f32(b[k].d) * float(sumi) - f16_to_f32(b[k].dmin) * float(summ));
    }
    y[r - row_begin] = acc;
  }
}

// Q6_K on Q8_K activations: per block d d_x sum_j sc_j sum (q - 32) q_x, in int32.
void matvec_q6_k_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                      const Q8Activations& x, float* y) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(w + r * row_bytes);
    float acc = 0;
    for (int64_t k = 0; k < cols / 256; ++k) {
      int32_t sumi = 0;
      for (int i0 = 0; i0 < 256; i0 += 16) {
        int32_t s = 0;
        for (int i = i0; i < i0 + 16; ++i) {
          const int n = i / 128, rr = i % 128, part = rr / 32, l = rr % 32;
          const uint8_t ql = b[k].ql[64 * n + 32 * (part % 2) + l];
          const int q = ((part < 2 ? ql : ql >> 4) & 0xF) | ((b[k].qh[32 * n + l] >> (2 * part)) & 3) << 4;
          s += (q - 32) * x.qk[256 * k + i];
        }
        sumi += b[k].scales[i0 / 16] * s;
      }
      acc += x.dk[k] * f16_to_f32(b[k].d) * float(sumi);
    }
    y[r - row_begin] = acc;
  }
}

// Q4_0/Q5_0: w = d (q - half) with q unsigned, so a block's product is
// d d_x (sum(q q_x) - half sum(q_x)); Q4_1/Q5_1: w = d q + m, so it is d_x (d sum(q q_x) + m sum(q_x)).
template <class Block>
void matvec_32_rows(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                    const Q8Activations& x, float* y) {
  constexpr int kHalf = kHasFifthBit<Block> ? 16 : 8;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* b = reinterpret_cast<const Block*>(w + r * row_bytes);
    float acc = 0;
    for (int64_t k = 0; k < cols / 32; ++k) {
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += q_of_32(b[k], l) * x.q[32 * k + l];
      const float d = f16_to_f32(b[k].d);
      if constexpr (kHasMin<Block>)
        acc += x.d[k] * (d * float(s) + f16_to_f32(b[k].m) * float(x.sum[k]));
      else
        acc += d * x.d[k] * float(s - kHalf * x.sum[k]);
    }
    y[r - row_begin] = acc;
  }
}

}  // namespace

const QuantKernels& portable_quant_kernels() {
  static const QuantKernels k{"portable",
                              &quantize_activations,
                              &rows_per_token<&matvec_q8_0_rows>,
                              &rows_per_token<&matvec_k_rows<BlockQ4_K>>,
                              &rows_per_token<&matvec_q6_k_rows>,
                              &rows_per_token<&matvec_32_rows<BlockQ4_0>>,
                              &rows_per_token<&matvec_32_rows<BlockQ5_0>>,
                              &rows_per_token<&matvec_k_rows<BlockQ5_K>>,
                              &rows_per_token<&matvec_32_rows<BlockQ4_1>>,
                              &rows_per_token<&matvec_32_rows<BlockQ5_1>>};
  return k;
}

}  // namespace runahead
