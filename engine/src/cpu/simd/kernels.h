#pragma once
// The CPU kernels that differ per instruction set, as a table picked at run time.
#include <cstdint>
#include <string>
#include <vector>

#include "model/tensor.h"

namespace runahead {

// y[t, r] = sum_i w[r, i] * x[t, i]   for r in [row_begin, row_end), t in [0, n).
// w: [rows, k] with row stride ldw (elements of its dtype), read in place and widened
// to f32 in registers; x: [n, k] f32 with row stride ldx; y: [n, ldy] f32.
using MatmulRowsFn = void (*)(const void* w, int64_t ldw, int64_t row_begin, int64_t row_end,
                              int64_t k, const float* x, int64_t ldx, int n, float* y,
                              int64_t ldy);
// y[j, i] = sum_p a[j, p] * v[p, i]   for j in [0, heads), i in [0, d), p in [0, rows);
// a: [heads, lda], v: row stride ldv, y: [heads, ldy]. (Attention's weighted sums of value
// rows: the heads of a group read each value row once, together.) Every y[j, i] adds its
// products in p order with the same operations whatever `heads` is.
using CombineRowsFn = void (*)(const float* a, int64_t lda, int heads, const float* v, int64_t ldv,
                               int64_t rows, int64_t d, float* y, int64_t ldy);
// sum_i x[i]   for i in [0, n): a read-only sweep as fast as loads go (bandwidth probe).
using SumFn = float (*)(const float* x, int64_t n);
// s[i] = exp(scale (s[i] - max s)) / sum_j exp(scale (s[j] - max s))   for s: [n].
using SoftmaxFn = void (*)(float* s, int64_t n, float scale);
// gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i]   for i in [0, n)  (SiLU(gate) * up).
using SwigluFn = void (*)(float* gate, const float* up, int64_t n);

struct Kernels {
  const char* simd;  // "avx512", "avx2", "portable"
  MatmulRowsFn matmul_f32;
  MatmulRowsFn matmul_f16;
  MatmulRowsFn matmul_bf16;
  CombineRowsFn combine_rows;
  SumFn sum;
  SoftmaxFn softmax;
  SwigluFn swiglu;

  MatmulRowsFn matmul(DType weights) const {
    switch (weights) {
      case DType::F32: return matmul_f32;
      case DType::F16: return matmul_f16;
      case DType::BF16: return matmul_bf16;
      default: return nullptr;  // I8 and block formats: cpu/matmul.cpp dispatches them to the quantized kernels
    }
  }
};

const Kernels& portable_kernels();
#ifdef RUNAHEAD_X86
const Kernels& avx2_kernels();    // needs AVX2, FMA, F16C
const Kernels& avx512_kernels();  // needs AVX-512 F/BW/VL/DQ, FMA, F16C
#endif

// Every table this CPU can run, best first; the portable one is always last.
std::vector<const Kernels*> available_kernels();

// The best table, or the one named by RUNAHEAD_SIMD ("avx512", "avx2", "portable") if
// this CPU can run it. Throws EngineError{"bad_request"} for a name it cannot run.
const Kernels& select_kernels();

}  // namespace runahead
