// The MLP input in one pass over Wgate and Wup: RMSNorm, both projections, SwiGLU.
#include "cuda/common.cuh"
#include "cuda/kquant_ring.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

// One intermediate index j (its gate row and its up row) per unit.
template <class W, int NT>
__global__ void __launch_bounds__(kGemvThreads, (kGemvMinBlocks<W, NT>)) rmsnorm_gate_up_swiglu_kernel(RowMatrix<W> w, const float* norm,
                                                                             float eps, int I, const float* x,
                                                                             int n, float* act, int split,
                                                                             Q8Inputs q8) {
  RUNAHEAD_TRACE_BLOCK(gate_up_warps);
  const int H = w.K;
  extern __shared__ float staged[];
  __shared__ float scratch[NT * kGemvWarps];
  __shared__ float inv[NT];
  __shared__ float red[kGemvWarps * 2 * NT];
  auto rows_of = [&](int j, int (&rows)[2]) {
    rows[0] = j;
    rows[1] = I + j;
  };
  prefetch_units<W, 2>(w, I, split, rows_of);
  pdl_wait();
  pdl_trigger();
  constexpr bool kStaged = kStagesNormed<W, NT>;
  const NormInputs in = norm_inputs<W, NT>(x, n, eps, norm, H, staged, scratch, inv, q8);
  block_gemv<W, 2, NT>(w, I, split, kStaged ? staged : x, H, n, NT == 1 ? nullptr : norm, red, rows_of,
                       [&](int j, float (&acc)[2][NT], const float (&)[kPreloads]) {
                         const int lane = threadIdx.x % kWarp;
#pragma unroll
                         for (int t = 0; t < NT; ++t) {
                           if (t < n && lane == t) {
                             const float scale = kStaged ? 1.0f : t == 0 ? in.inv0 : inv[t];
                             const float g = acc[0][t] * scale, u = acc[1][t] * scale;
                             act[size_t(t) * I + j] = g / (1.0f + expf(-g)) * u;
                           }
                         }
                       },
                       in.q8);
}

// One token's gate/up on K-quant rows of one format, or Q8_0 rows, through a ring of bulk copies
// (kquant_ring.cuh): a tile is 8 / split gate rows and the matching up rows (kSplit: split may
// be more than 1); the inputs are staged as the kernel above stages them (stage_q8, which also
// sums x^2 for the norm).
template <RingRows kRows, bool kSplit>
__global__ void __launch_bounds__(kRingThreads, kRingBlocksPerSm)
    gate_up_ring_kernel(RingShape shape, const float* norm, float eps, int H, const float* x, float* act) {
  RUNAHEAD_TRACE_BLOCK(gate_up_ring);
  extern __shared__ __align__(128) unsigned char smem[];
  float inv = 0.0f;
  const auto epilogue = [&](int j, const float (&sum)[2], const float (&)[kPreloads]) {
    const float g = sum[0] * inv, u = sum[1] * inv;
    act[j] = g / (1.0f + expf(-g)) * u;
  };
  const auto inputs = [&] { return ring_norm_inputs(shape, x, norm, H, eps, smem, inv); };
  ring_gemv<kRows, 2, kSplit>(shape, smem, inputs, epilogue);
}

// The ring's launch wherever it fits (stages 0 where it does not). It once ran only where each
// block got at least 4 tiles (H200, v21: the 7B's six gained, gate/up 947 -> 841 us a step; the
// 1.5B's under three lost, 324 -> 371, while each block staged its inputs in several rounds of
// loads). Measured again with the inputs in one round (v30, ms/token against the per-warp
// kernel, same call): Q4_K_M 1.5B 0.988 / 0.986 -> 0.972 / 0.971; Q8_0 7B (two warps a row)
// 2.626 / 2.621 -> 2.508 / 2.509, 1.5B 1.008 -> 0.963.
struct GateUpRingLaunch {
  RingShape shape{};
  void (*kernel)(RingShape, const float*, float, int, const float*, float*) = nullptr;
  int blocks = 0;
};
// A Q8_0 row is 1.9x a Q4_K one: the fewest warps a row (1, 2 or 4) that fit two
// stages (the 7B's 16 rows of 3808 bytes do not: 2).
GateUpRingLaunch gate_up_ring_launch(const void* w, DType dtype, const void* q6, int H, int I, int n, KqRing use,
                                     int sms, const Q8Scratch& q8 = {}) {
  GateUpRingLaunch l;
  if (use == KqRing::Off || (dtype != DType::Q4_K && dtype != DType::Q8_0)) return l;
  if (dtype == DType::Q8_0) {
    for (int split = 1; split <= 4 && l.shape.stages == 0; split *= 2)
      l.shape = ring_shape_rows(w, q6, 2 * I, 2, H, n, stage_q8_bytes(H), split, kRingBlocksPerSm, true);
  } else {
    l.shape = ring_shape_rows(w, q6, 2 * I, 2, H, n, ring_norm_staged_bytes(H));
    with_planar_inputs(l.shape, H, q8);
  }
  if (l.shape.stages == 0) return l;
  l.kernel = ring_rows(l.shape) == RingRows::Q6   ? gate_up_ring_kernel<RingRows::Q6, false>
             : ring_rows(l.shape) == RingRows::Q4 ? gate_up_ring_kernel<RingRows::Q4, false>
             : l.shape.split > 1                  ? gate_up_ring_kernel<RingRows::Q8, true>
                                                  : gate_up_ring_kernel<RingRows::Q8, false>;
  int resident = 0;
  l.blocks = ring_blocks(l.kernel, l.shape, sms, resident);
  return l;
}

}  // namespace

void rmsnorm_gate_up_swiglu(const void* w_gate_up, DType dtype, const void* scale, const float* norm, float eps,
                            int H, int I, const float* x, int n, float* act, const Q8Scratch& q8, int sms,
                            cudaStream_t stream, KqRing ring, int* ring_cursor, const RingFlags& ring_flags) {
  if (GateUpRingLaunch l = gate_up_ring_launch(w_gate_up, dtype, scale, H, I, n, ring, sms, q8);
      l.shape.stages > 0) {
    take_tiles(l.shape, l.blocks, ring_cursor);
    l.shape.flags = ring_flags;
    launch_pdl(l.kernel, dim3(l.blocks), dim3(kRingThreads), ring_smem(l.shape), stream, l.shape, norm, eps, H, x, act);
    return;
  }
  with_matrix_type(dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    const size_t smem = prepare_norm_inputs<W>(x, norm, n, H, q8, stream);
    auto kernel = for_vec_tokens(n, [](auto nt) { return rmsnorm_gate_up_swiglu_kernel<W, decltype(nt)::value>; });
    const int split = gemv_split(I, H, sms, blocks_per_sm(kernel, kGemvThreads, smem));
    const int blocks = resident_blocks(kernel, kGemvThreads, smem, I, kGemvWarps / split, sms);
    launch_pdl(kernel, dim3(blocks), dim3(kGemvThreads), smem, stream,
               RowMatrix<W>{static_cast<const W*>(w_gate_up), scale, H, kq_q6_from(w_gate_up, scale, 2 * I, 2 * I)}, norm, eps, I, x, n, act, split,
               Q8Inputs{q8.q, q8.d, H});
  });
}

bool gate_up_ring_applies(const void* w_gate_up, DType dtype, const void* scale, int H, int I, KqRing ring, int sms) {
  return gate_up_ring_launch(w_gate_up, dtype, scale, H, I, 1, ring, sms).shape.stages > 0;
}

RingPrefetch gate_up_ring_prefix(const void* w_gate_up, DType dtype, const void* scale, int H, int I, KqRing ring,
                                 int sms, size_t bytes) {
  return ring_prefix(gate_up_ring_launch(w_gate_up, dtype, scale, H, I, 1, ring, sms).shape, 2, bytes);
}

}  // namespace runahead::cuda
