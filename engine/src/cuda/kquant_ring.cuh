#pragma once
// One token's product with a K-quant matrix of one format (every row Q4_K, or every row Q6_K)
// through a ring of bulk copies in shared memory. A producer thread copies tiles into `stages`
// stages, starting before pdl_wait (weights do not depend on the previous kernel), and keeps
// them in flight without holding registers; kRingWarps consumer warps take a unit each from a
// tile. A tile is P runs of kRingWarps consecutive rows (gate/up: its 8 gate rows, then the
// matching 8 up rows; a plain matrix: 8 rows), a unit is row w of each run. Blocks take tiles
// round robin. The dot product is q4k_dot_rows / q6k_dot_rows (kquant.cuh) on the same bytes,
// so a row summed by one warp gives the bits the per-warp kernels give.
#include <algorithm>

#include "cuda/bulk_copy.cuh"
#include "cuda/common.cuh"

namespace runahead::cuda {

constexpr int kRingWarps = 8;                           // consumer warps: units a tile
constexpr int kRingThreads = (kRingWarps + 1) * kWarp;  // + the producer warp
constexpr int kRingMaxStages = 12;
constexpr int kRingBlocksPerSm = 3;  // 2 measured slower on the 7B gate/up (2.70 against 2.67 ms/token)

// The block's shared memory: `staged_bytes` (a multiple of 128) for the kernel's own use (its
// staged inputs), then the ring.
struct RingShape {
  const uint8_t* rows;  // row 0 of the matrix (its Q4_K rows, or its Q6_K rows)
  int row_bytes;
  size_t run_rows;  // rows from one run of a tile to the next (gate/up: I)
  int tiles, stages, staged_bytes;
};

// Every thread of the block calls it. `inputs()` runs in every thread after pdl_wait (it may
// synchronise the block) and returns the int8 inputs; `epilogue(unit, acc)` runs in lane 0 of
// the consumer warp that summed unit `unit` (tile * kRingWarps + w): acc[p] is row w of run p.
template <bool kQ6, int P, class Inputs, class Epilogue>
__device__ __forceinline__ void ring_gemv(const RingShape& s, int K, unsigned char* smem, Inputs inputs,
                                          Epilogue epilogue) {
  __shared__ uint64_t full[kRingMaxStages], empty[kRingMaxStages];
  unsigned char* ring = smem + s.staged_bytes;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int mine = int(blockIdx.x) < s.tiles ? (s.tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x) : 0;
  const size_t run = size_t(kRingWarps) * s.row_bytes;  // the bytes of one run of a tile
  if (threadIdx.x == 0) {
    for (int i = 0; i < s.stages; ++i) {
      mbarrier_init(&full[i], 1);
      mbarrier_init(&empty[i], kRingWarps);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  const bool producer = warp == kRingWarps && lane == 0;
  uint64_t policy = 0;
  int issued = 0;
  const auto issue = [&](int i) {  // this block's i-th tile into stage i % stages
    const int tile = int(blockIdx.x) + i * int(gridDim.x), stage = i % s.stages;
    if (i >= s.stages) mbarrier_wait(&empty[stage], (i / s.stages - 1) & 1);
    mbarrier_expect_bytes(&full[stage], unsigned(P * run));
    unsigned char* dst = ring + size_t(stage) * P * run;
#pragma unroll
    for (int p = 0; p < P; ++p)
      bulk_load(dst + p * run, s.rows + (size_t(p) * s.run_rows * s.row_bytes) + size_t(tile) * run, unsigned(run),
                &full[stage], policy);
  };
  if (producer) {
    policy = evict_first_policy();
    for (; issued < min(s.stages, mine); ++issued) issue(issued);
  }
  pdl_wait();
  pdl_trigger();
  const Q8Inputs in = inputs();
  if (warp == kRingWarps) {
    if (producer)
      for (; issued < mine; ++issued) issue(issued);
    return;
  }
  const int chunks = K / Chunk<KQWeight>::kElems;
  for (int i = 0; i < mine; ++i) {
    const int stage = i % s.stages;
    mbarrier_wait(&full[stage], (i / s.stages) & 1);
    const unsigned char* tile = ring + size_t(stage) * P * run;
    const uint8_t* row[P];
#pragma unroll
    for (int p = 0; p < P; ++p) row[p] = tile + p * run + size_t(warp) * s.row_bytes;
    float acc[P][1];
#pragma unroll
    for (int p = 0; p < P; ++p) acc[p][0] = 0.0f;
    if constexpr (kQ6)
      q6k_dot_rows<P, 1, true>(row, K, 0, chunks, in, 1, acc);
    else
      q4k_dot_rows<P, 1, true>(row, K, 0, chunks, in, 1, acc);
    float sum[P];
#pragma unroll
    for (int p = 0; p < P; ++p) sum[p] = warp_sum(acc[p][0]);
    __syncwarp();
    if (lane == 0) {
      mbarrier_arrive(&empty[stage]);
      epilogue((int(blockIdx.x) + i * int(gridDim.x)) * kRingWarps + warp, sum);
    }
  }
}

// Host side: the ring for a K-quant matrix of `total_rows` rows (P runs) of K weights, or stages
// 0 where it does not apply: several tokens, rows of both formats, runs not a multiple of
// kRingWarps rows, fewer than two stages fit.
inline RingShape ring_shape(const void* q4, const void* q6, int q6_from, int total_rows, int P, int K, int n,
                            size_t staged_bytes) {
  RingShape s{};
  const bool all_q6 = q6_from == 0, all_q4 = q6_from == total_rows;
  const int run_rows = total_rows / P;
  if (n != 1 || run_rows % kRingWarps != 0 || !(all_q4 || all_q6)) return s;
  s.rows = static_cast<const uint8_t*>(all_q6 ? q6 : q4);
  s.row_bytes = int(all_q6 ? q6k_row_bytes(K) : q4k_row_bytes(K));
  s.run_rows = size_t(run_rows);
  s.tiles = run_rows / kRingWarps;
  s.staged_bytes = int((staged_bytes + 127) / 128 * 128);
  int device = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device), "cudaDeviceGetAttribute");
  const int budget = per_sm / kRingBlocksPerSm - 1024 - 512;  // the runtime's 1 KB a block, static shared memory
  const int stages = std::min(kRingMaxStages, (budget - s.staged_bytes) / (P * kRingWarps * s.row_bytes));
  s.stages = stages >= 2 ? stages : 0;
  return s;
}
inline size_t ring_smem(const RingShape& s, int P) {
  return size_t(s.staged_bytes) + size_t(s.stages) * P * kRingWarps * s.row_bytes;
}
// Blocks for the ring's kernel (its dynamic shared memory set): at most the resident ones.
template <class Kernel> int ring_blocks(Kernel kernel, const RingShape& s, int P, int sms, int& resident) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_smem(s, P))),
             "cudaFuncSetAttribute(ring kernel)");
  resident = sms * blocks_per_sm(kernel, kRingThreads, ring_smem(s, P));
  return std::min(s.tiles, resident);
}

}  // namespace runahead::cuda
