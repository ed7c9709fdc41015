#pragma once
// The register-tiled matmul, row combination and sum shared by every instruction set.
// An Isa supplies the vector type V (width floats), loads that widen f32/bf16/f16 to
// f32, fma and horizontal sums. Instantiated only through make_kernels.h.
#include <algorithm>
#include <cstdint>

#include "cpu/simd/kernels.h"

namespace runahead::simd {

struct Bf16 { uint16_t bits; };
struct F16 { uint16_t bits; };

// y[t, r] = sum_i w[r, i] x[t, i]   for R rows and T tokens: every weight vector loaded
// is used by T tokens, every token vector by R rows.
template <class Isa, class W, int R, int T>
inline void tile(const W* w, int64_t ldw, int64_t k, const float* x, int64_t ldx, float* y,
                 int64_t ldy) {
  using V = typename Isa::V;
  V acc[R][T];
  // Fully unrolled (GCC does not at -O2), so that acc lives in registers, not on the stack.
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[r][t] = Isa::zero();
  const int64_t k_vec = k - k % Isa::width;
  for (int64_t i = 0; i < k_vec; i += Isa::width) {
    V wr[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // Decode streams weights once: ask for them well ahead of use.
      if constexpr (T == 1) Isa::prefetch(reinterpret_cast<const char*>(w + r * ldw + i) + Isa::prefetch_bytes);
      wr[r] = Isa::load(w + r * ldw + i);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      V xt = Isa::load(x + t * ldx + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t] = Isa::fma(wr[r], xt, acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    float sums[R];
    // Four rows at a time share one horizontal reduction (hadd tree) where the Isa has one.
    for (int r = 0; r + 4 <= R; r += 4) Isa::sum4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t], sums + r);
    for (int r = R - R % 4; r < R; ++r) sums[r] = Isa::sum(acc[r][t]);
    for (int r = 0; r < R; ++r) {
      for (int64_t i = k_vec; i < k; ++i) sums[r] += Isa::scalar(w[r * ldw + i]) * x[t * ldx + i];
      y[t * ldy + r] = sums[r];
    }
  }
}

// tile<R, T> with the token count known only at run time (1 <= tokens <= T).
template <class Isa, class W, int R, int T>
inline void tile_tokens(int tokens, const W* w, int64_t ldw, int64_t k, const float* x,
                        int64_t ldx, float* y, int64_t ldy) {
  if constexpr (T > 1) {
    if (tokens < T) return tile_tokens<Isa, W, R, T - 1>(tokens, w, ldw, k, x, ldx, y, ldy);
  }
  tile<Isa, W, R, T>(w, ldw, k, x, ldx, y, ldy);
}

// Rows [r0, r1) against `tokens` tokens: tiles of R rows, then single rows.
template <class Isa, class W, int R, int T>
inline void rows_tokens(const W* w, int64_t ldw, int64_t r0, int64_t r1, int64_t k,
                        const float* x, int64_t ldx, int tokens, float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + R <= r1; r += R)
    tile_tokens<Isa, W, R, T>(tokens, w + r * ldw, ldw, k, x, ldx, y + r, ldy);
  for (; r < r1; ++r) tile_tokens<Isa, W, 1, T>(tokens, w + r * ldw, ldw, k, x, ldx, y + r, ldy);
}

// See MatmulRowsFn. Decode (n = 1) streams the rows once; for n > 1 a block of rows
// small enough to stay in L2 is multiplied by every token before the next block, so
// the weights come from memory once for all n tokens.
template <class Isa, class W>
void matmul_rows(const void* weights, int64_t ldw, int64_t row_begin, int64_t row_end, int64_t k,
                 const float* x, int64_t ldx, int n, float* y, int64_t ldy) {
  const W* w = static_cast<const W*>(weights);
  if (n == 1) {
    rows_tokens<Isa, W, Isa::decode_rows, 1>(w, ldw, row_begin, row_end, k, x, ldx, 1, y, ldy);
    return;
  }
  constexpr int64_t kBlockBytes = 128 * 1024;
  const int64_t block = std::max<int64_t>(
      Isa::tile_rows, kBlockBytes / (k * int64_t(sizeof(W))) / Isa::tile_rows * Isa::tile_rows);
  for (int64_t rb = row_begin; rb < row_end; rb += block) {
    const int64_t re = std::min(rb + block, row_end);
    for (int t = 0; t < n; t += Isa::tile_tokens) {
      const int tokens = std::min(Isa::tile_tokens, n - t);
      rows_tokens<Isa, W, Isa::tile_rows, Isa::tile_tokens>(w, ldw, rb, re, k, x + t * ldx, ldx,
                                                            tokens, y + t * ldy, ldy);
    }
  }
}

// y[j, c : c + C * width] = sum_p a[j, p] v[p, c : c + C * width] for H heads, accumulated in
// registers: each value vector loaded once for the H heads.
template <class Isa, int H, int C>
inline void combine_tile(const float* a, int64_t lda, const float* v, int64_t ldv, int64_t rows, int64_t c,
                         float* y, int64_t ldy) {
  using V = typename Isa::V;
  V acc[H][C];
#pragma GCC unroll 8
  for (int j = 0; j < H; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i) acc[j][i] = Isa::zero();
  for (int64_t p = 0; p < rows; ++p) {
    V vp[C];
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i) vp[i] = Isa::load(v + p * ldv + c + i * Isa::width);
#pragma GCC unroll 8
    for (int j = 0; j < H; ++j) {
      const V ap = Isa::set1(a[j * lda + p]);
#pragma GCC unroll 8
      for (int i = 0; i < C; ++i) acc[j][i] = Isa::fma(ap, vp[i], acc[j][i]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < H; ++j)
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i) Isa::store(y + j * ldy + c + i * Isa::width, acc[j][i]);
}

// combine_tile<H, C> with the head count known only at run time (1 <= heads <= H).
template <class Isa, int H, int C>
inline void combine_heads(int heads, const float* a, int64_t lda, const float* v, int64_t ldv, int64_t rows,
                          int64_t c, float* y, int64_t ldy) {
  if constexpr (H > 1) {
    if (heads < H) return combine_heads<Isa, H - 1, C>(heads, a, lda, v, ldv, rows, c, y, ldy);
  }
  combine_tile<Isa, H, C>(a, lda, v, ldv, rows, c, y, ldy);
}

template <class Isa>
void combine_rows(const float* a, int64_t lda, int heads, const float* v, int64_t ldv, int64_t rows, int64_t d,
                  float* y, int64_t ldy) {
  constexpr int H = Isa::combine_heads, C = Isa::combine_cols;
  for (int j0 = 0; j0 < heads; j0 += H) {
    const int h = std::min(H, heads - j0);
    const float* aj = a + j0 * lda;
    float* yj = y + j0 * ldy;
    int64_t c = 0;
    for (; c + C * Isa::width <= d; c += C * Isa::width) combine_heads<Isa, H, C>(h, aj, lda, v, ldv, rows, c, yj, ldy);
    for (; c + Isa::width <= d; c += Isa::width) combine_heads<Isa, H, 1>(h, aj, lda, v, ldv, rows, c, yj, ldy);
    for (int j = 0; j < h; ++j)
      for (int64_t i = c; i < d; ++i) {
        float s = 0.0f;
        for (int64_t p = 0; p < rows; ++p) s += aj[j * lda + p] * v[p * ldv + i];
        yj[j * ldy + i] = s;
      }
  }
}

template <class Isa>
float sum(const float* x, int64_t n) {
  using V = typename Isa::V;
  constexpr int kUnroll = 4;  // independent adds, so the sweep waits on loads only
  const V one = Isa::set1(1.0f);
  V acc[kUnroll];
  for (V& a : acc) a = Isa::zero();
  int64_t i = 0;
  for (; i + kUnroll * Isa::width <= n; i += kUnroll * Isa::width)
#pragma GCC unroll 4
    for (int u = 0; u < kUnroll; ++u) acc[u] = Isa::fma(Isa::load(x + i + u * Isa::width), one, acc[u]);
  float s = 0.0f;
  for (const V& a : acc) s += Isa::sum(a);
  for (; i < n; ++i) s += x[i];
  return s;
}

}  // namespace runahead::simd
