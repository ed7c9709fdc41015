// The MLP input in one pass over Wgate and Wup: RMSNorm, both projections, SwiGLU.
#include "cuda/bulk_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

// One intermediate index j (its gate row and its up row) per unit.
template <class W, int NT>
__global__ void __launch_bounds__(kGemvThreads, (kGemvMinBlocks<W, NT>)) rmsnorm_gate_up_swiglu_kernel(RowMatrix<W> w, const float* norm,
                                                                             float eps, int I, const float* x,
                                                                             int n, float* act, int split,
                                                                             Q8Inputs q8) {
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
                       [&](int j, float (&acc)[2][NT]) {
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


// One token's gate/up on K-quant rows of one format through a ring of bulk copies: a producer
// thread copies tiles of kRingUnits units (their gate rows, contiguous, then their up rows)
// into `stages` stages of shared memory, starting before pdl_wait (the weights do not depend
// on the previous kernel), and keeps them in flight without holding registers; consumer warp w
// multiplies unit w of each tile (its two rows) with the staged int8 inputs. The grid's blocks
// take tiles round robin. The same dot product on the same bytes as the kernel above, so the
// same bits where that kernel gives a whole row to one warp (the 7B shape); where it splits
// a short row over several warps, the sums are added in another order.
constexpr int kRingUnits = 8;                           // units a tile: one a consumer warp
constexpr int kRingThreads = (kRingUnits + 1) * kWarp;  // + the producer warp
constexpr int kRingMaxStages = 12;
constexpr int kRingBlocksPerSm = 3;  // 2 measured slower on the 7B shape (2.70 against 2.67 ms/token)

template <bool kQ6>
__global__ void __launch_bounds__(kRingThreads, kRingBlocksPerSm) gate_up_ring_kernel(const uint8_t* rows, int row_bytes,
                                                                                    const float* norm, float eps,
                                                                                    int H, int I, const float* x,
                                                                                    float* act, int stages,
                                                                                    int staged_bytes) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[kRingMaxStages], empty[kRingMaxStages];
  __shared__ float squares[kRingUnits + 1];
  unsigned char* ring = smem + staged_bytes;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int tiles = I / kRingUnits;
  const int mine = int(blockIdx.x) < tiles ? (tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x) : 0;
  const size_t half = size_t(kRingUnits) * row_bytes;  // a tile's gate rows; its up rows follow
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbarrier_init(&full[i], 1);
      mbarrier_init(&empty[i], kRingUnits);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const bool producer = warp == kRingUnits && lane == 0;
  uint64_t policy = 0;
  int issued = 0;
  const auto issue = [&](int i) {  // this block's i-th tile into stage i % stages
    const int tile = int(blockIdx.x) + i * int(gridDim.x), stage = i % stages;
    if (i >= stages) mbarrier_wait(&empty[stage], (i / stages - 1) & 1);
    mbarrier_expect_bytes(&full[stage], unsigned(2 * half));
    unsigned char* dst = ring + size_t(stage) * 2 * half;
    bulk_load(dst, rows + size_t(tile) * half, unsigned(half), &full[stage], policy);
    bulk_load(dst + half, rows + size_t(I) * row_bytes + size_t(tile) * half, unsigned(half), &full[stage], policy);
  };
  if (producer) {
    policy = evict_first_policy();
    for (; issued < min(stages, mine); ++issued) issue(issued);
  }
  pdl_wait();
  pdl_trigger();
  float* staged = reinterpret_cast<float*>(smem);
  const Q8Inputs in = stage_q8(x, norm, H, staged, squares);  // every thread; ends with a block barrier
  if (warp == kRingUnits) {
    if (producer)
      for (; issued < mine; ++issued) issue(issued);
    return;
  }
  float total = 0.0f;
  for (int w = 0; w < kRingUnits + 1; ++w) total += squares[w];
  const float inv = rsqrtf(total / float(H) + eps);
  const int chunks = H / Chunk<KQWeight>::kElems;
  for (int i = 0; i < mine; ++i) {
    const int stage = i % stages;
    mbarrier_wait(&full[stage], (i / stages) & 1);
    const unsigned char* tile = ring + size_t(stage) * 2 * half;
    const uint8_t* row[2] = {tile + size_t(warp) * row_bytes, tile + half + size_t(warp) * row_bytes};
    float acc[2][1] = {{0.0f}, {0.0f}};
    if constexpr (kQ6)
      q6k_dot_rows<2, 1, true>(row, H, 0, chunks, in, 1, acc);
    else
      q4k_dot_rows<2, 1, true>(row, H, 0, chunks, in, 1, acc);
    const float g = warp_sum(acc[0][0]) * inv, u = warp_sum(acc[1][0]) * inv;
    __syncwarp();
    if (lane == 0) {
      mbarrier_arrive(&empty[stage]);
      act[(size_t(blockIdx.x) + size_t(i) * gridDim.x) * kRingUnits + warp] = g / (1.0f + expf(-g)) * u;
    }
  }
}

// The ring's launch for a gate/up matrix, or stages 0 where it does not apply: several tokens,
// rows of both formats, I not a multiple of kRingUnits, fewer than two stages fit, or (unless
// forced) fewer than kRingMinTiles tiles a block: measured on an H200, the ring gains where
// each block streams several tiles (7B: six, gate/up 947 -> 841 us a step) and loses where the
// ring's first fill is most of a block's work (1.5B: under three, 324 -> 371).
constexpr int kRingMinTiles = 4;
struct RingLaunch {
  void (*kernel)(const uint8_t*, int, const float*, float, int, int, const float*, float*, int, int) = nullptr;
  int stages = 0, row_bytes = 0, staged_bytes = 0, blocks = 0;
  bool q6 = false;
  size_t smem() const { return size_t(staged_bytes) + size_t(stages) * 2 * kRingUnits * row_bytes; }
};
RingLaunch ring_launch(int q6_from, int H, int I, int n, GateUpRing ring, int sms) {
  const bool all_q6 = q6_from == 0, all_q4 = q6_from == 2 * I;
  RingLaunch p;
  if (ring == GateUpRing::Off || n != 1 || I % kRingUnits != 0 || !(all_q4 || all_q6)) return p;
  p.q6 = all_q6;
  p.row_bytes = int(all_q6 ? q6k_row_bytes(H) : q4k_row_bytes(H));
  p.staged_bytes = int((stage_q8_bytes(H) + 127) / 128 * 128);
  int device = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device), "cudaDeviceGetAttribute");
  const int budget = per_sm / kRingBlocksPerSm - 1024 - 512;  // the runtime's 1 KB a block, static shared memory
  const int stages = std::min(kRingMaxStages, (budget - p.staged_bytes) / (2 * kRingUnits * p.row_bytes));
  if (stages < 2) return p;
  p.kernel = all_q6 ? gate_up_ring_kernel<true> : gate_up_ring_kernel<false>;
  p.stages = stages;
  check_cuda(cudaFuncSetAttribute(p.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(p.smem())),
             "cudaFuncSetAttribute(gate_up_ring_kernel)");
  const int tiles = I / kRingUnits, resident = sms * blocks_per_sm(p.kernel, kRingThreads, p.smem());
  if (ring == GateUpRing::Auto && tiles < kRingMinTiles * resident) p.stages = 0;
  p.blocks = std::min(tiles, resident);
  return p;
}

}  // namespace

void rmsnorm_gate_up_swiglu(const void* w_gate_up, DType dtype, const void* scale, const float* norm, float eps,
                            int H, int I, const float* x, int n, float* act, const Q8Scratch& q8, int sms,
                            cudaStream_t stream, GateUpRing ring) {
  if (dtype == DType::Q4_K) {
    const RingLaunch p = ring_launch(kq_q6_from(w_gate_up, scale, 2 * I, 2 * I), H, I, n, ring, sms);
    if (p.stages > 0) {
      launch_pdl(p.kernel, dim3(p.blocks), dim3(kRingThreads), p.smem(), stream,
                 static_cast<const uint8_t*>(p.q6 ? scale : w_gate_up), p.row_bytes, norm, eps, H, I, x, act, p.stages,
                 p.staged_bytes);
      return;
    }
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

bool gate_up_ring_applies(const void* w_gate_up, const void* scale, int H, int I, GateUpRing ring, int sms) {
  return ring_launch(kq_q6_from(w_gate_up, scale, 2 * I, 2 * I), H, I, 1, ring, sms).stages > 0;
}

}  // namespace runahead::cuda
