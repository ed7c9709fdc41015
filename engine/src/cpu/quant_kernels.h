#pragma once
// Matrix-vector products read directly from block-quantized weights, per instruction set.
// As llama.cpp does for these formats, the activations are quantized to int8 per block of
// 32 (a float scale each) and the products are int8 dot products: u8 x s8 -> s32 with
// AVX-512 VNNI (vpdpbusd) or AVX2 (vpmaddubsw + vpmaddwd), scaled and summed in f32.
#include <cstdint>
#include <vector>

#include "model/quant_format.h"

namespace runahead {

// Which int8 blocks of the activations a weight format's kernels read (llama.cpp's
// vec_dot_type): blocks of 32 with an f16 scale (Q8_0) for the 32-weight formats, blocks of
// 256 with an f32 scale (Q8_K) for the K-quants.
enum ActivationBlocks : unsigned { kBlocks32 = 1, kBlocks256 = 2, kAllBlocks = 3 };
inline unsigned activation_blocks(QuantType t) { return quant_format(t).block_elems == 256 ? kBlocks256 : kBlocks32; }

// x[cols] quantized to int8, as llama.cpp's quantize_row_q8_0 and quantize_row_q8_K do.
// Per 32: x[32b + l] ~= d[b] * q[32b + l], |q| <= 127; sum[b] = sum_l q[32b + l]. d is rounded
// to f16 as block_q8_0 stores it (q from the unrounded scale, as there): with the f32 scale,
// greedy runs of the embedded model agreed with llama.cpp's in 11 of 20 instead of 17 of 20
// (test/integration/llamaCppAccuracy.test.ts).
// Per 256 (Q8_K): x[256b + l] ~= dk[b] * qk[256b + l] with dk = max / -127 (max: the element
// of largest magnitude, so dk may be negative); bsum16/bsum32: sums of qk per 16 and per 32.
// Integer sub-block scales then apply to integer sums (K-quant kernels add sc_j * dot_j in
// int32 and scale once per 256), which is both llama.cpp's arithmetic and its speed.
inline constexpr int kQkPairOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
struct Q8Activations {
  int64_t cols = 0;
  std::vector<float> d;
  std::vector<int8_t> q;
  std::vector<int32_t> sum;
  std::vector<float> dk;
  std::vector<int8_t> qk;
  std::vector<int16_t> bsum16, bsum32;
  // qk with each 256-block's 32-value sub-blocks in the order 0 2 1 3 4 6 5 7 (kQkPairOrder):
  // the pairs a 512-bit Q4_K/Q5_K tile multiplies at once, one 64-byte load each.
  std::vector<int8_t> qk_pairs;

  // Quantizes x[0..cols) into the blocks asked for (cols a multiple of 32, and of 256 for
  // kBlocks256; a width that is not is skipped); reuses the buffers.
  void quantize(const float* x, int64_t cols, unsigned blocks = kAllBlocks);
};

// y[r - row_begin] = sum_i W[r, i] x[i]   for r in [row_begin, row_end);
// W: rows of `cols` weights (a multiple of the format's block), row_bytes apart.
using QuantMatvecRowsFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end,
                                   int64_t cols, const Q8Activations& x, float* y);

// y[t * ldy + r - row_begin] = sum_i W[r, i] x[t][i]   for r in [row_begin, row_end), t in [0, n):
// the rows of W times n quantized tokens. A kernel gives every (r, t) the same result for any
// n, so a token's logits do not depend on how many tokens were verified with it.
using QuantMatmulRowsFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end,
                                   int64_t cols, const Q8Activations* x, int n, float* y, int64_t ldy);

// A format with no multi-token kernel yet: the rows kernel once per token.
template <QuantMatvecRowsFn rows>
void rows_per_token(const uint8_t* w, size_t row_bytes, int64_t row_begin, int64_t row_end, int64_t cols,
                    const Q8Activations* x, int n, float* y, int64_t ldy) {
  for (int t = 0; t < n; ++t) rows(w, row_bytes, row_begin, row_end, cols, x[t], y + t * ldy);
}

// xq = x[cols] quantized into `blocks` (Q8Activations::quantize's result, bit for bit).
using QuantizeActivationsFn = void (*)(Q8Activations& xq, const float* x, int64_t cols, unsigned blocks);

// Q8Activations::quantize as a table entry: the portable and AVX2 tables' quantizer.
void quantize_activations(Q8Activations& xq, const float* x, int64_t cols, unsigned blocks);
// Fills xq.qk_pairs from xq.qk (every quantizer ends its Q8_K blocks with it).
void pair_sub_blocks(Q8Activations& xq);
// Sizes xq's Q8_0 arrays (d, q, sum) for cols values; returns the count of blocks.
int64_t size_q8_0(Q8Activations& xq, int64_t cols);
// Sizes xq's Q8_K arrays (dk, qk, bsum16, bsum32) for cols values; returns the count of blocks.
int64_t size_q8_k(Q8Activations& xq, int64_t cols);
// A Q8_K block's last step, once its qk and bsum16 are in: bsum32 from bsum16, and dk.
void finish_q8_k_block(Q8Activations& xq, int64_t b, float amax, float iscale);

struct QuantKernels {
  const char* simd;  // "avx512-vnni", "avx2-vnni", "avx2", "portable"
  QuantizeActivationsFn quantize;
  QuantMatmulRowsFn q8_0;
  QuantMatmulRowsFn q4_k;
  QuantMatmulRowsFn q6_k;
  QuantMatmulRowsFn q4_0;
  QuantMatmulRowsFn q5_0;
  QuantMatmulRowsFn q5_k;
  QuantMatmulRowsFn q4_1;
  QuantMatmulRowsFn q5_1;

  QuantMatmulRowsFn rows(QuantType t) const {
    switch (t) {
      case QuantType::Q8_0: return q8_0;
      case QuantType::Q4_K: return q4_k;
      case QuantType::Q6_K: return q6_k;
      case QuantType::Q4_0: return q4_0;
      case QuantType::Q5_0: return q5_0;
      case QuantType::Q5_K: return q5_k;
      case QuantType::Q4_1: return q4_1;
      case QuantType::Q5_1: return q5_1;
    }
    return q8_0;
  }
};

const QuantKernels& portable_quant_kernels();
#ifdef RUNAHEAD_X86
const QuantKernels& avx2_quant_kernels();         // needs AVX2, FMA, F16C
const QuantKernels& avx2_vnni_quant_kernels();    // needs AVX-VNNI as well
const QuantKernels& avx512_vnni_quant_kernels();  // needs AVX-512 F/BW/VL and VNNI as well
#endif

// Every table this CPU can run, best first; the portable one is always last.
std::vector<const QuantKernels*> available_quant_kernels();
// The best table, or the one RUNAHEAD_SIMD names: a table's name, or the part before its
// "-" ("avx512" picks avx512-vnni; "avx2" is the plain AVX2 table, "avx2-vnni" the other). Throws
// EngineError{"bad_request"} for a name this CPU cannot run.
const QuantKernels& select_quant_kernels();

}  // namespace runahead
