#pragma once
// Linear layers on block-quantized weights, split by rows over the thread pool.
#include <cstdint>

#include "cpu/quant_kernels.h"
#include "cpu/thread_pool.h"

namespace runahead {

// A [rows, cols] weight matrix in a block format; each row is quant_row_bytes(type, cols).
struct QuantMatrix {
  QuantType type;
  const uint8_t* data;
  int64_t rows;
  int64_t cols;  // a multiple of the format's block
  size_t row_bytes() const { return quant_row_bytes(type, cols); }
};

// y[rows] = W[rows, cols] x[cols]: x quantized once (into `xq`, reused between calls),
// then each thread takes a contiguous range of rows.
void matvec_quant(ThreadPool& pool, const QuantKernels& kernels, const QuantMatrix& w, const float* x,
                  Q8Activations& xq, float* y);

// y[t, :] = W x[t, :]   for t in [0, n); x: [n, cols], y: [n, rows], row-major. Each
// thread walks its rows in tiles small enough to stay in cache while every token reads them.
void matmul_quant(ThreadPool& pool, const QuantKernels& kernels, const QuantMatrix& w, const float* x, int n,
                  float* y);

// y[t, r] = W[r, :] x[t]   for r in [row_begin, row_end), t in [0, n), with x already
// quantized (xq[t]); y: [n, w.rows]. Tokens are taken in chunks whose activations stay in L2,
// and each chunk's rows in tiles that stay there too; within a tile the format's kernel takes
// the chunk's tokens at once.
void matmul_quant_rows(const QuantKernels& kernels, const QuantMatrix& w, int64_t row_begin, int64_t row_end,
                       const Q8Activations* xq, int n, float* y);

}  // namespace runahead
