#include "cpu/quant_matvec.h"

#include <algorithm>
#include <vector>

namespace runahead {

namespace {
constexpr int64_t kRowAlign = 8;          // rows per split unit: whole cache lines of y
constexpr size_t kTileBytes = 64u << 10;  // weight bytes of one prefill tile (fits L2)
// Quantized activation bytes of one token chunk: each row tile streams the chunk's activations
// once per pair of rows, so the chunk must stay in L2 beside the tile. All 512 tokens of a
// prefill were 4.9 MB for a 8960-wide matrix, read from beyond L2 by every pair of rows.
constexpr size_t kChunkBytes = 384u << 10;
constexpr int kChunkAlign = 8;  // tokens: a multiple of every format's register tile
}  // namespace

void matvec_quant(ThreadPool& pool, const QuantKernels& kernels, const QuantMatrix& w, const float* x,
                  Q8Activations& xq, float* y) {
  kernels.quantize(xq, x, w.cols, activation_blocks(w.type));
  const QuantMatmulRowsFn rows = kernels.rows(w.type);
  const size_t row_bytes = w.row_bytes();
  pool.for_range(w.rows, kRowAlign, [&](int64_t begin, int64_t end) {
    rows(w.data, row_bytes, begin, end, w.cols, &xq, 1, y + begin, 0);
  });
}

void matmul_quant_rows(const QuantKernels& kernels, const QuantMatrix& w, int64_t row_begin, int64_t row_end,
                       const Q8Activations* xq, int n, float* y) {
  const QuantMatmulRowsFn rows = kernels.rows(w.type);
  const size_t row_bytes = w.row_bytes();
  const int64_t tile = std::max<int64_t>(1, int64_t(kTileBytes / row_bytes));
  // Per token: the int8 values and, per block of 16 or 32, a scale or sum (at most 1/8 more).
  const size_t token_bytes = size_t(w.cols) + size_t(w.cols) / 8;
  const int chunk = std::max(kChunkAlign, int(kChunkBytes / token_bytes) / kChunkAlign * kChunkAlign);
  for (int t0 = 0; t0 < n; t0 += chunk) {
    const int tokens = std::min(chunk, n - t0);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += tile) {
      const int64_t r1 = std::min(row_end, r0 + tile);
      rows(w.data, row_bytes, r0, r1, w.cols, xq + t0, tokens, y + int64_t(t0) * w.rows + r0, w.rows);
    }
  }
}

void matmul_quant(ThreadPool& pool, const QuantKernels& kernels, const QuantMatrix& w, const float* x, int n,
                  float* y) {
  std::vector<Q8Activations> xq(n);
  for (int t = 0; t < n; ++t) kernels.quantize(xq[t], x + int64_t(t) * w.cols, w.cols, activation_blocks(w.type));
  pool.for_range(w.rows, kRowAlign, [&](int64_t begin, int64_t end) {
    matmul_quant_rows(kernels, w, begin, end, xq.data(), n, y);
  });
}

}  // namespace runahead
