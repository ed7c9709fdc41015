// The projections that end a sub-layer: x += in W^T (attention output, MLP down).
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/kquant_ring.cuh"

namespace runahead::cuda {
namespace {

// One pair of output rows per unit; each row of x is owned by one warp, so the
// read-modify-write of the residual needs no atomics.
template <class W, int NT>
__global__ void __launch_bounds__(kGemvThreads, (kGemvMinBlocks<W, NT>)) matvec_residual_add_kernel(RowMatrix<W> w, int rows,
                                                                          const float* in, int n, float* x,
                                                                          int split, Q8Inputs q8) {
  RUNAHEAD_TRACE_BLOCK(residual_warps);
  __shared__ float red[kGemvWarps * 2 * NT];
  const int units = rows / 2;
  auto rows_of = [&](int u, int (&pair)[2]) {
    pair[0] = 2 * u;
    pair[1] = 2 * u + 1;
  };
  prefetch_units<W, 2>(w, units, split, rows_of);
  pdl_wait();
  pdl_trigger();
  // Lane t loads token t's old x before the unit's sums.
  const int lane = threadIdx.x % kWarp;
  block_gemv<W, 2, NT>(
      w, units, split, in, w.K, n, nullptr, red, rows_of,
      [&](int u, float (&acc)[2][NT], const float (&old)[kPreloads]) {
#pragma unroll
        for (int t = 0; t < NT; ++t)
          if (t < n && lane == t)
            *reinterpret_cast<float2*>(x + size_t(t) * rows + 2 * u) = make_float2(old[0] + acc[0][t], old[1] + acc[1][t]);
      },
      q8,
      [&](int u, float (&old)[kPreloads]) {
        if (lane < n) {
          const float2 v = *reinterpret_cast<const float2*>(x + size_t(lane) * rows + 2 * u);
          old[0] = v.x, old[1] = v.y;
        }
      });
}

// One token's x += in W^T on K-quant rows of one format, or Q8_0 rows, through a ring of bulk copies
// (kquant_ring.cuh): a tile is 8 / split rows (kSplit: split may be more than 1), the inputs
// the quantized ones in q8 (global memory). kLong: a tile is two runs of them, the second from
// row rows / 2 on (a warp sums a row of each at once, loading the inputs once for both), and
// each block first copies the inputs into shared memory (ring_copied_inputs); it runs 2 blocks
// a multiprocessor (residual_ring), so its registers are bounded for 2.
template <RingRows kRows, bool kLong, bool kSplit>
__global__ void __launch_bounds__(kRingThreads, kLong ? 2 : kRingBlocksPerSm)
    matvec_residual_ring_kernel(RingShape shape, float* x, Q8Inputs q8) {
  RUNAHEAD_TRACE_BLOCK(residual_ring);
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int P = kLong ? 2 : 1;
  const auto inputs = [&] {
    return kLong ? ring_copied_inputs(q8, (kRows == RingRows::Q4 || kRows == RingRows::Both) && q8.planar, smem,
                                      shape.flags.consumers_stage)
                 : q8;
  };
  ring_gemv<kRows, P, kSplit>(
      shape, smem, inputs,
      [&](int r, const float (&sum)[P], const float (&old)[kPreloads]) {
#pragma unroll
        for (int p = 0; p < P; ++p) x[r + p * shape.run_rows] = old[p] + sum[p];
      },
      [&](int r, float (&old)[kPreloads]) {
#pragma unroll
        for (int p = 0; p < P; ++p) old[p] = x[r + p * shape.run_rows];
      });
}

// The ring for x += in W^T, with the fewest warps a row (split) that fit two stages: 3 blocks a
// multiprocessor and 8 rows a tile where they fit, else several warps a row (the 1.5B's down:
// 2; H200, Q4_K_M, us a step alone against the warps' own loads: 261 -> 205). Matrices of at
// least 3072 rows and 3072 columns (the 7B's o_proj and down) go as kLong with 2 blocks a
// multiprocessor: 7B Q4_K_M o_proj 154 -> 126 us, down 630 either way, the step 2.099 -> 2.066
// ms/token; the 1.5B's o_proj loses that way (65 -> 74). `tuning` forces either. A kLong
// shape is the one of two runs (run_rows half the rows).
// A long matrix's ring takes at most 2 stages: the 7B's Q6_K down rows (split 8, 31 KB a stage)
// fit 3, and with 3 down measured 580 us a step alone against 560 with 2 (H200, Q4_K_M).
// Q8_0 rows take the same rule (v30, H200, 7B Q8_0 ms/token: 2.508 / 2.509 as is, 2.522 / 2.562
// with no matrix as long; the 7B's down goes 8 warps a row, o_proj 2).
constexpr int kLongRingStages = 2;
RingShape residual_ring(const void* w, const void* scale, int rows, int K, RingTuning tuning, bool q8) {
  const bool long_rows =
      rows % (2 * kRingWarps) == 0 && (tuning.long_rows ? tuning.long_rows > 0 : rows >= 3072 && K >= 3072);
  const size_t staged = long_rows ? stage_q8_bytes(K) : 0;
  for (int split = tuning.split ? tuning.split : 1; split <= kRingWarps; split *= 2) {
    RingShape shape = ring_shape_rows(w, scale, rows, long_rows ? 2 : 1, K, 1, staged, split,
                                      long_rows ? 2 : kRingBlocksPerSm, q8);
    if (long_rows) shape.stages = std::min(shape.stages, tuning.stages ? tuning.stages : kLongRingStages);
    shape.flags = tuning.flags;
    if (shape.stages > 0 || tuning.split) return shape;
  }
  return RingShape{};
}

}  // namespace

bool rings_run_here() { return bulk_copies_on(); }

namespace {
// One token's ring for the matrix where one applies (Q4_K rows of one format or Q8_0 rows, ring
// not Off), else stages 0.
RingShape residual_ring_of(const void* w, DType dtype, const void* scale, int rows, int K, KqRing ring,
                           RingTuning tuning) {
  if ((dtype != DType::Q4_K && dtype != DType::Q8_0) || ring == KqRing::Off) return RingShape{};
  return residual_ring(w, scale, rows, K, tuning, dtype == DType::Q8_0);
}
// RingTuning::quantize_early for the matrix's launch (`shape`: its ring, or stages 0).
bool quantizes_early(const RingShape& shape, int rows, const RingTuning& tuning) {
  return tuning.quantize_early > 0 || (tuning.quantize_early == 0 && shape.stages > 0 && shape.run_rows >= rows);
}
}  // namespace

bool residual_quantizes_early(const void* w, DType dtype, const void* scale, int rows, int K, KqRing ring,
                              RingTuning tuning) {
  return (dtype == DType::Q4_K || dtype == DType::Q8_0) &&
         quantizes_early(residual_ring_of(w, dtype, scale, rows, K, ring, tuning), rows, tuning);
}

bool residual_ring_applies(const void* w, DType dtype, const void* scale, int rows, int K, KqRing ring,
                           RingTuning tuning) {
  return residual_ring_of(w, dtype, scale, rows, K, ring, tuning).stages > 0;
}

RingPrefetch residual_ring_prefix(const void* w, DType dtype, const void* scale, int rows, int K, KqRing ring,
                                  RingTuning tuning, size_t bytes) {
  const RingShape shape = residual_ring_of(w, dtype, scale, rows, K, ring, tuning);
  return ring_prefix(shape, shape.run_rows < rows ? 2 : 1, bytes);
}

void matvec_residual_add(const void* w, DType dtype, const void* scale, int rows, int K, const float* in, int n,
                         float* x, const Q8Scratch& q8, int sms, cudaStream_t stream, bool quantized, KqRing ring,
                         RingTuning tuning, int* ring_cursor) {
  // One token's Q4_K rows read the inputs pair-planar where the caller gives the copy's place.
  const Q8Scratch own{q8.q, q8.d, dtype == DType::Q4_K && n == 1 ? q8.planar : nullptr};
  const Q8Inputs inputs{q8.q, q8.d, K, own.planar};
  if (RingShape shape = n == 1 ? residual_ring_of(w, dtype, scale, rows, K, ring, tuning) : RingShape{};
      shape.stages > 0) {
    if (!quantized) quantize_inputs_q8(in, nullptr, n, K, own, stream, quantizes_early(shape, rows, tuning));
    const bool long_rows = shape.run_rows < rows, split = shape.split > 1;
    auto pick = [&](auto rows_c) {
      constexpr RingRows kR = decltype(rows_c)::value;
      if (long_rows)
        return split ? matvec_residual_ring_kernel<kR, true, true> : matvec_residual_ring_kernel<kR, true, false>;
      return split ? matvec_residual_ring_kernel<kR, false, true> : matvec_residual_ring_kernel<kR, false, false>;
    };
    auto kernel = ring_rows(shape) == RingRows::Q6   ? pick(std::integral_constant<RingRows, RingRows::Q6>{})
                  : ring_rows(shape) == RingRows::Q8 ? pick(std::integral_constant<RingRows, RingRows::Q8>{})
                                                     : pick(std::integral_constant<RingRows, RingRows::Q4>{});
    int resident = 0;
    const int blocks = ring_blocks(kernel, shape, sms, resident);
    take_tiles(shape, blocks, ring_cursor);
    launch_pdl(kernel, dim3(blocks), dim3(kRingThreads), ring_smem(shape), stream, shape, x, inputs);
    return;
  }
  with_matrix_type(dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    if constexpr (kQ8Inputs<W>) if (!quantized) quantize_inputs_q8(in, nullptr, n, K, own, stream, quantizes_early({}, rows, tuning));
    auto kernel = for_vec_tokens(n, [](auto nt) { return matvec_residual_add_kernel<W, decltype(nt)::value>; });
    // One token's Q8_0 rows: a warp a row pair up to K = 4096 (o_proj), else two (down).
    // Measured on an H200 with the preload, us a step alone (splits 1 / 2 / 4 / 8): 7B o_proj 165
    // / 180 / 215 / 316, down 809 / 711 / 721 / 784; 1.5B o_proj 53 / 61 / 92 / 137, down 310 /
    // 238 / 276 / 268, where gemv_split's rule (two rounds of the resident warps) took 4 and 4,
    // 2 and 8. Other formats and several tokens keep that rule (not measured this way).
    const int split = tuning.warp_split          ? tuning.warp_split
                      : kIsQ8<W> && n == 1       ? (K <= 4096 ? 1 : 2)
                                                 : gemv_split(rows / 2, K, sms, blocks_per_sm(kernel, kGemvThreads, 0));
    const int blocks = resident_blocks(kernel, kGemvThreads, 0, rows / 2, kGemvWarps / split, sms);
    launch_pdl(kernel, dim3(blocks), dim3(kGemvThreads), 0, stream, RowMatrix<W>{static_cast<const W*>(w), scale, K, kq_q6_from(w, scale, rows, rows)},
               rows, in, n, x, split, inputs);
  });
}

}  // namespace runahead::cuda
