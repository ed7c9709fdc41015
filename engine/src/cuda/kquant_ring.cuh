#pragma once
// One token's product with a K-quant or Q8_0 matrix through a ring of bulk copies in shared memory. A
// producer thread copies tiles into `stages` stages, starting before pdl_wait (weights do not
// depend on the previous kernel), and keeps them in flight without holding registers (once it
// has asked for its last, it prefetches its part of the next ring's first tiles into L2:
// RingPrefetch);
// kRingWarps consumer warps take a unit each from a tile. A tile is P runs of kRingWarps
// consecutive rows of one format (gate/up: its 8 gate rows, then the matching 8 up rows; q/k/v:
// 8 rows of a head and the 8 that RoPE rotates with them; a plain matrix: 8 rows), a unit is
// row w of each run. Rows too long for two stages of 8 (the 7B's down: 10.4 KB a Q4_K row)
// go `split` warps a unit: a tile is then 8 / split rows a run, each warp sums its part of K
// and the unit's first warp adds the parts in order. Blocks take tiles round robin (with a
// cursor, their tiles past the first round as they free stages: RingShape::cursor). The dot
// product is q4k_dot_rows / q6k_dot_rows (kquant.cuh) on the same bytes; the norm-fused rings
// stage their inputs pair-planar too, so their Q4_K rows go a chunk pair a lane (one decode of
// the scales for two chunks) where the per-warp kernels go a chunk a lane: the same sums in
// another order. Q8_0 rows (as the device keeps them, common.cuh Q8Weight) are copied as a
// run's int8 weights and then its f16 scales, and summed by q8_0_dot_rows.
#include <algorithm>
#include <cstdlib>

#include "cuda/bulk_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {

constexpr int kRingWarps = 8;                           // consumer warps: units a tile
constexpr int kRingThreads = (kRingWarps + 1) * kWarp;  // + the producer warp
constexpr int kRingMaxStages = 12;
constexpr int kRingBlocksPerSm = 3;  // 2 measured slower on the 7B gate/up (2.70 against 2.67 ms/token)

// Build-time switch, to measure what bounds a ring (never in a build that is used): 1, the
// consumers free each stage without summing it (the ring's streaming alone); 2, the producer
// fills the stages once and the consumers sum those bytes again for every tile (the dot
// products alone, on the shapes' real tiles). The results are wrong in both.
#ifndef RUNAHEAD_RING_DIAG
#define RUNAHEAD_RING_DIAG 0
#endif

// Which formats a ring's rows have: every row Q4_K, every row Q6_K, Q4_K rows then Q6_K
// ones (a fused q/k/v whose v, or k and v, are Q6_K), or every row Q8_0.
enum class RingRows { Q4, Q6, Both, Q8 };

// The matrix (Q4_K rows [0, q6_from) at q4, Q6_K rows from q6_from on at q6, as RowMatrix
// reads them) and its tiles: tiles come in groups of group_tiles; tile t's run 0 starts at row
// (t / group_tiles) * group_rows + (t % group_tiles) * kRingWarps, run p at p * run_rows rows
// after it. The block's shared memory: `staged_bytes` (a multiple of 128) for the kernel's
// own use (its staged inputs), then `stages` stages of stage_bytes.
struct RingShape {
  const uint8_t* q4 = nullptr;
  const uint8_t* q6 = nullptr;
  const int8_t* q8 = nullptr;          // a Q8_0 matrix (RingRows::Q8): its int8 weights ([rows, K])
  const __half* q8_scales = nullptr;  // and their f16 block scales ([rows, K / 32])
  int q6_from = 0, K = 0;
  int run_rows = 0, group_rows = 0, group_tiles = 1;
  int tiles = 0, stages = 0, staged_bytes = 0, stage_bytes = 0;
  int planar_at = 0;  // where in the staged bytes the inputs' pair-planar copy lies (0: none)
  int split = 1;      // warps a unit (1, 2, 4 or 8): a run of a tile is kRingWarps / split rows
  // Two ints, zero before the launch and left so by it (one pair a launch of the step: the
  // next kernel's producers start before this one ends): the tiles taken past the first
  // `stages` rounds, and the producers done. Where set, a block's tiles after its first
  // `stages` are the next ones not yet taken rather than every gridDim-th, so blocks that run
  // faster take more; null: round robin.
  int* cursor = nullptr;
  // Each launch sets what the backend says. flags.in_flight: where fewer tiles than stages, the
  // producer asks for a tile only once the one `in_flight` before it is in, so that a block's
  // first tile is not served interleaved with all its others (and every other block's) and its
  // sums begin while the rest stream. flags.consumers_stage: `inputs()` runs in the consumer
  // warps alone. flags.producer_unwaited (with consumers_stage): the producer warp never waits
  // for the kernel before, so it asks for the tiles after its first (each once the one before
  // is in, up to the stages) before that kernel ends too; the consumer warps wait and let the
  // next kernel launch.
  RingFlags flags;
  __host__ __device__ int tile_rows() const { return kRingWarps / split; }
  __host__ __device__ const uint8_t* row(int r) const {
    return r < q6_from ? q4 + size_t(r) * q4k_row_bytes(K) : q6 + size_t(r - q6_from) * q6k_row_bytes(K);
  }
};

// This block's part of the next ring's first bytes (RingPrefetch), prefetched into L2: of each
// run, the gridDim.x-th part from blockIdx.x's on, in multiples of 16 bytes.
__device__ __forceinline__ void ring_prefetch_next(const RingPrefetch& next) {
#pragma unroll
  for (int j = 0; j < kRingPrefetchRanges; ++j) {
    const unsigned bytes = next.bytes[j], part = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
    const unsigned from = blockIdx.x * part;
    if (from < bytes) bulk_prefetch_l2(static_cast<const unsigned char*>(next.at[j]) + from, min(part, bytes - from));
  }
}

// A barrier of the consumer warps alone (the producer warp has left: named barrier 1).
__device__ __forceinline__ void consumer_barrier() { sync_first_threads(kRingWarps * kWarp); }

// Trace marks (trace.h, thread 0: consumer warp 0): 1 its first tile's bytes are in, 2 its last
// tile's, 3 its last epilogue has run, 4 its inputs are ready (and, in a norm-fused ring,
// stage_q8's 5: thread 0 has staged its part of them); 6 the producer has seen the block's first
// tile in, where it waits for it before asking for another (fewer tiles in flight than stages);
// 7 thread 0 is about to wait for its first tile; 8 the last consumer warp's lane 0 is past pdl_wait;
// 9 thread 0's warp has summed its first tile; 10 (only where it was so) that tile was not all in
// when thread 0 came to wait for it.
// Every thread of the block calls it. `inputs()` runs in every thread after pdl_wait (it may
// synchronise the block; with s.flags.consumers_stage it runs in the consumer warps alone, which it
// may synchronise at named barrier 1) and returns the int8 inputs; `epilogue(row, acc, pre)` runs in lane 0
// of the consumer warp that summed unit w of a tile (its first warp where split > 1): `row` is
// row w of the tile's run 0, acc[p] row w of run p, and pre (kPreloads floats) what `preload(row, pre)` left
// there (0 if nothing), called by the same lane before the tile's stage is waited for: what the
// epilogue reads from global memory (a residual's old x) loads while the warp sums the tile.
// Loaded in the epilogue instead, the 7B's down waited on those loads (ncu: long scoreboard 4.4
// stalls an issue), and with several warps a row its next tile's barrier waited with it.
// kSplit: whether s.split may be more than 1 (else it is 1, and each warp sums whole rows).
template <RingRows kRows, int P, bool kSplit = false, class Inputs, class Epilogue, class Preload = NoPreload>
__device__ __forceinline__ void ring_gemv(const RingShape& s, unsigned char* smem, Inputs inputs, Epilogue epilogue,
                                          Preload preload = {}) {
  static_assert(P <= kPreloads, "a residual's preload leaves a float a run");
  // known: the stage's tile index is in `tile_in` (with a cursor; -1: no more tiles).
  __shared__ uint64_t full[kRingMaxStages], empty[kRingMaxStages], known[kRingMaxStages];
  __shared__ int tile_in[kRingMaxStages];
  unsigned char* ring = smem + s.staged_bytes;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int mine = int(blockIdx.x) < s.tiles ? (s.tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x) : 0;
  const bool taking = RUNAHEAD_RING_DIAG == 0 && s.cursor != nullptr;
  // Tile `tile`: its first row, its format, the bytes of a row.
  struct Tile {
    int first;
    bool q6;
    size_t row_bytes;
  };
  // Rows a run of a tile (kRingWarps unless kSplit: a constant there); the tile whose first row
  // is `first`; tile `tile`'s first row from its group (tile / group_tiles) and its place in it
  // (tile % group_tiles), which the consumers without a cursor step through.
  const auto rows_a_run = [&] { return kSplit ? s.tile_rows() : kRingWarps; };
  const auto first_of = [&](int group, int in_group) { return group * s.group_rows + in_group * rows_a_run(); };
  const auto tile_of = [&](int first) {
    const bool q6 = kRows == RingRows::Q6 || (kRows == RingRows::Both && first >= s.q6_from);
    return Tile{first, q6, kRows == RingRows::Q8 ? size_t(s.K) : q6 ? q6k_row_bytes(s.K) : q4k_row_bytes(s.K)};
  };
  const auto tile_at = [&](int tile) { return tile_of(first_of(tile / s.group_tiles, tile % s.group_tiles)); };
  if (threadIdx.x == 0) {
    for (int i = 0; i < s.stages; ++i) {
      mbarrier_init(&full[i], 1);
      mbarrier_init(&empty[i], kRingWarps);
      mbarrier_init(&known[i], 1);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  const bool producer = warp == kRingWarps && lane == 0;
  uint64_t policy = 0;
  int issued = 0;
  bool more = true;  // the producer: tiles may be left
  // Tiles asked for before the one `ahead` after them is in (every stage's with RUNAHEAD_RING_DIAG 2,
  // whose producer fills the stages once before pdl_wait).
  const int ahead = RUNAHEAD_RING_DIAG != 2 && s.flags.in_flight > 0 && s.flags.in_flight < s.stages ? s.flags.in_flight : s.stages;
  const auto issue = [&](int i) {  // this block's i-th tile into stage i % stages (with a cursor: false at the end)
    const int stage = i % s.stages;
    if (i >= s.stages) mbarrier_wait(&empty[stage], (i / s.stages - 1) & 1);
    if (i >= ahead && ahead < s.stages) {
      const int landed = i - ahead;
      mbarrier_wait(&full[landed % s.stages], (landed / s.stages) & 1);
      if (landed == 0) trace_mark_last_warp(5);  // the producer has seen the block's first tile in
    }
    int tile = int(blockIdx.x) + i * int(gridDim.x);
    if (taking) {
      if (i >= s.stages) tile = s.stages * int(gridDim.x) + atomicAdd(s.cursor, 1);
      if (tile >= s.tiles) tile = -1;
      tile_in[stage] = tile;
      mbarrier_arrive(&known[stage]);
      if (tile < 0) return false;
    }
    const Tile t = tile_at(tile);
    const size_t run = rows_a_run() * t.row_bytes;
    unsigned char* dst = ring + size_t(stage) * s.stage_bytes;
    if constexpr (kRows == RingRows::Q8) {  // the runs' weights, then their scales
      const size_t scales = rows_a_run() * size_t(s.K / 16);
      mbarrier_expect_bytes(&full[stage], unsigned(P * (run + scales)));
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const size_t r = size_t(t.first + p * s.run_rows);
        bulk_load(dst + p * run, s.q8 + r * s.K, unsigned(run), &full[stage], policy);
        bulk_load(dst + P * run + p * scales, s.q8_scales + r * (s.K / 32), unsigned(scales), &full[stage], policy);
      }
      return true;
    }
    mbarrier_expect_bytes(&full[stage], unsigned(P * run));
#pragma unroll
    for (int p = 0; p < P; ++p)
      bulk_load(dst + p * run, s.row(t.first + p * s.run_rows), unsigned(run), &full[stage], policy);
    return true;
  };
  // With a cursor the producer goes on until a tile is past the last (told as -1); without,
  // to this block's count.
  const int first_round = min(ahead, taking ? s.stages : mine);
  if (producer) {
    policy = evict_first_policy();
    for (; more && issued < first_round; ++issued) more = issue(issued);
  }
  // The producer warp, where the consumers stage the inputs, reads the weights and this launch's
  // cursor pair alone, so it may skip the wait (flags.producer_unwaited): the kernel before this one
  // launched only once its blocks had waited, so every kernel before that one (this launch's
  // run a step ago, which left the pair zero, among them) has ended.
  if (!(s.flags.consumers_stage && s.flags.producer_unwaited && warp == kRingWarps)) {
    pdl_wait();
    trace_mark_thread(7, (kRingWarps - 1) * kWarp);  // the last consumer warp is past its wait
    pdl_trigger();
  }
  const auto produce = [&] {  // the producer warp, after the wait (or unwaited): the rest of its tiles
    if (producer && RUNAHEAD_RING_DIAG != 2)
      for (; more && (taking || issued < mine); ++issued) more = issue(issued);
    if (producer) ring_prefetch_next(s.flags.next);
    if (producer && taking) {  // every producer done: the last sets the pair back to zero
      __threadfence();
      if (atomicAdd(s.cursor + 1, 1) == int(gridDim.x) - 1) s.cursor[0] = 0, s.cursor[1] = 0;
    }
  };
  if (s.flags.consumers_stage && warp == kRingWarps) return produce();
  const Q8Inputs in = inputs();
  trace_mark(3);
  if (warp == kRingWarps) return produce();
  // This warp's unit of a tile and its part of K (chunks [c_begin, c_end)).
  const int split = kSplit ? s.split : 1, unit = warp / split, part = warp % split, tile_rows = kRingWarps / split;
  const int chunk = kRows == RingRows::Q8 ? Chunk<Q8Weight>::kElems : Chunk<KQWeight>::kElems;
  const int chunks = s.K / chunk, per_part = (chunks + split - 1) / split;
  const int c_begin = min(chunks, part * per_part), c_end = min(chunks, c_begin + per_part);
  __shared__ float parts[2][kRingWarps][P];  // split > 1: the warps' sums, by tile parity
  // The stage and its phase step with i; so do the tile's group and place in it (tile =
  // blockIdx.x + i * gridDim.x) where no cursor hands the tiles out. Divided out of i and the
  // tile's count each time instead (three integer divisions a tile, ~20 % of the 1.5B gate/up's
  // instructions: NOTES v47), the step took 1.029-1.034x as long on the 1.5B Q4_K_M (v49, H100).
  int stage = 0, group = int(blockIdx.x) / s.group_tiles, in_group = int(blockIdx.x) % s.group_tiles;
  unsigned phase = 0;
  const int group_step = int(gridDim.x) / s.group_tiles, in_group_step = int(gridDim.x) % s.group_tiles;
  for (int i = 0; taking || i < mine; ++i) {
    Tile t;
    if (taking) {
      mbarrier_wait(&known[stage], phase);
      const int index = tile_in[stage];
      if (index < 0) break;
      t = tile_at(index);
    } else {
      t = tile_of(first_of(group, in_group));
      group += group_step, in_group += in_group_step;
      if (in_group >= s.group_tiles) in_group -= s.group_tiles, ++group;
    }
    float pre[kPreloads];
#pragma unroll
    for (int j = 0; j < kPreloads; ++j) pre[j] = 0.0f;
    if (lane == 0 && part == 0) preload(t.first + unit, pre);
    if (i == 0) trace_mark(6);  // about to wait for its first tile
#ifdef RUNAHEAD_CUDA_TRACE
    // mark 10 (1-based) only where that tile was not all in when thread 0 came to wait for it
    if (i == 0 && threadIdx.x == 0 && !mbarrier_ready(&full[stage], phase)) trace_mark(9);
#endif
    if (RUNAHEAD_RING_DIAG != 2 || i < s.stages) mbarrier_wait(&full[stage], phase);
    if (i == 0) trace_mark(0);
    trace_mark(1);  // this tile's bytes are in: the last one stays
    const unsigned char* tile = ring + size_t(stage) * s.stage_bytes;
    const uint8_t* row[P];
#pragma unroll
    for (int p = 0; p < P; ++p) row[p] = tile + (p * tile_rows + unit) * t.row_bytes;
    float acc[P][1];
#pragma unroll
    for (int p = 0; p < P; ++p) acc[p][0] = 0.0f;
    if (RUNAHEAD_RING_DIAG == 1)
      ;
    else if constexpr (kRows == RingRows::Q8) {
      const Q8Weight* w[P];
      const __half* d[P];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        w[p] = reinterpret_cast<const Q8Weight*>(row[p]);
        d[p] = reinterpret_cast<const __half*>(tile + P * tile_rows * t.row_bytes + (p * tile_rows + unit) * (s.K / 16));
      }
      q8_0_dot_rows<P, 1, true>(w, d, c_begin, c_end, in, 1, acc);  // summed over the warp already
    } else if (t.q6)
      q6k_dot_rows<P, 1, true>(row, s.K, c_begin, c_end, in, 1, acc);
    else
      q4k_dot_rows<P, 1, true>(row, s.K, c_begin, c_end, in, 1, acc);
    float sum[P];
#pragma unroll
    for (int p = 0; p < P; ++p) sum[p] = kRows == RingRows::Q8 ? acc[p][0] : warp_sum(acc[p][0]);
    __syncwarp();
    if (i == 0) trace_mark(8);  // thread 0's warp has summed its first tile
    if (lane == 0 && RUNAHEAD_RING_DIAG != 2) mbarrier_arrive(&empty[stage]);
    if (split == 1) {
      if (lane == 0) epilogue(t.first + warp, sum, pre);
    } else {
      // The parts of this tile's units meet in `parts`; a slot is written again two tiles on,
      // after every consumer has passed the next tile's barrier (so after its reader read it).
      if (lane == 0)
#pragma unroll
        for (int p = 0; p < P; ++p) parts[i & 1][warp][p] = sum[p];
      consumer_barrier();
      if (part == 0 && lane == 0) {
        for (int q = 1; q < split; ++q)
#pragma unroll
          for (int p = 0; p < P; ++p) sum[p] += parts[i & 1][warp + q][p];
        epilogue(t.first + unit, sum, pre);
      }
    }
    if (++stage == s.stages) stage = 0, phase ^= 1;
  }
  trace_mark(2);
}

// The inputs of a norm-fused ring (gate/up, q/k/v): x * norm quantized into the block's
// staged bytes as stage_q8 does (with their pair-planar copy where the shape has room for it),
// and 1 / rms(x) in `inv`. Every thread calls it (in `inputs`), or every consumer warp's where
// s.flags.consumers_stage.
__device__ __forceinline__ Q8Inputs ring_norm_inputs(const RingShape& s, const float* x, const float* norm, int H,
                                                     float eps, unsigned char* smem, float& inv) {
  __shared__ float squares[kRingWarps + 1];
  int8_t* planar = s.planar_at ? reinterpret_cast<int8_t*>(smem + s.planar_at) : nullptr;
  // ends with a barrier (of the consumer warps where they alone stage)
  const Q8Inputs in = stage_q8(x, norm, H, reinterpret_cast<float*>(smem), squares, planar, s.flags.consumers_stage);
  // The warps' sums in order, unrolled so that their shared loads are asked for together (a loop
  // to a runtime bound asked for them one after another; NOTES v56: 1.5B Q4_K_M x0.996).
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kRingWarps + 1; ++w)
    if (w < kRingWarps || !s.flags.consumers_stage) total += squares[w];
  inv = rsqrtf(total / float(H) + eps);
  return in;
}

// The int8 inputs in q8 (global memory) copied into the block's staged bytes (the scales, then
// the values the rows read: pair-planar where `planar`, else as stored), so that the consumers'
// loads of them wait on shared memory rather than L1 (stage_q8_bytes(K) bytes). Every thread
// calls it (in `inputs`); it ends with a barrier. `consumers`: the consumer warps alone call it
// and meet at named barrier 1 (RingFlags::consumers_stage).
__device__ __forceinline__ Q8Inputs ring_copied_inputs(const Q8Inputs& q8, bool planar, unsigned char* smem,
                                                       bool consumers = false) {
  const int K = q8.K, scales = K / 32, threads = consumers ? kRingWarps * kWarp : int(blockDim.x);
  float* d = reinterpret_cast<float*>(smem);
  int8_t* q = reinterpret_cast<int8_t*>(smem + size_t(scales) * sizeof(float));
  const uint4* from_q = reinterpret_cast<const uint4*>(planar ? q8.planar : q8.q);
  const uint4* from_d = reinterpret_cast<const uint4*>(q8.d);
#pragma unroll 4
  for (int i = threadIdx.x; i < K / 16; i += threads) reinterpret_cast<uint4*>(q)[i] = from_q[i];
  for (int i = threadIdx.x; i < scales / 4; i += threads) reinterpret_cast<uint4*>(d)[i] = from_d[i];
  if (consumers)
    consumer_barrier();
  else
    __syncthreads();
  return Q8Inputs{planar ? nullptr : q, d, K, planar ? q : nullptr};
}

// Host side: the ring for one token over a K-quant matrix (q4, q6, q6_from as RowMatrix takes
// them) or, with q8, a Q8_0 one (q4 its int8 weights, q6 their scales; K a multiple of 256, so
// that a row's scales are whole 16 bytes) of K weights a row, its tiles laid out as RingShape
// describes, or stages 0 where it does not apply: several tokens, fewer than `min_stages`
// stages fit, a device without bulk copies.
inline RingShape ring_shape(const void* q4, const void* q6, int q6_from, int K, int P, int run_rows, int group_rows,
                            int group_tiles, int tiles, int n, size_t staged_bytes, int min_stages = 2, int split = 1,
                            int blocks_per_sm = kRingBlocksPerSm, bool q8 = false) {
  RingShape s{};
  s.split = split;
  if (n != 1 || tiles <= 0 || q6_from % s.tile_rows() != 0 || (q8 && K % 256 != 0) || !bulk_copies_on()) return s;
  if (q8) {
    s.q8 = static_cast<const int8_t*>(q4);
    s.q8_scales = static_cast<const __half*>(q6);
  } else {
    s.q4 = static_cast<const uint8_t*>(q4);
    s.q6 = static_cast<const uint8_t*>(q6);
  }
  s.q6_from = q8 ? 0 : q6_from;
  s.K = K;
  s.run_rows = run_rows;
  s.group_rows = group_rows;
  s.group_tiles = group_tiles;
  s.tiles = tiles;
  s.staged_bytes = int((staged_bytes + 127) / 128 * 128);
  const size_t row_bytes = q8 ? size_t(K) + K / 16 : std::max(q4 ? q4k_row_bytes(K) : 0, q6 ? q6k_row_bytes(K) : 0);
  s.stage_bytes = int(P * s.tile_rows() * row_bytes);
  int device = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device), "cudaDeviceGetAttribute");
  const int budget = per_sm / blocks_per_sm - 1024 - 512;  // the runtime's 1 KB a block, static shared memory
  const int stages = std::min(kRingMaxStages, (budget - s.staged_bytes) / s.stage_bytes);
  s.stages = stages >= min_stages ? stages : 0;
  return s;
}
// The first `bytes` of the tiles `s` reads (rounded up to whole tiles; none where its ring does
// not apply): tile t of a grouped shape (q/k/v) lies in rows [0, (t / group_tiles + 1) *
// group_rows), of a plain one (P runs) in rows [p * run_rows, p * run_rows + (t + 1) * tile
// rows) of each run p; the rows' bytes are Q4_K rows then Q6_K ones from q6_from on, or a Q8_0
// matrix's int8 weights and their scales.
inline RingPrefetch ring_prefix(const RingShape& s, int P, size_t bytes) {
  RingPrefetch f;
  if (s.stages == 0 || bytes == 0) return f;
  const int tiles = int(std::min<size_t>(size_t(s.tiles), (bytes + s.stage_bytes - 1) / size_t(s.stage_bytes)));
  int n = 0;
  const auto add = [&](const void* at, size_t count) {
    if (count > 0 && n < kRingPrefetchRanges) f.at[n] = at, f.bytes[n++] = unsigned(count);
  };
  const auto add_rows = [&](int from, int to) {
    if (s.q8) {
      add(s.q8 + size_t(from) * s.K, size_t(to - from) * s.K);
      add(s.q8_scales + size_t(from) * (s.K / 32), size_t(to - from) * (s.K / 16));
      return;
    }
    const int q6 = std::clamp(s.q6_from, from, to);
    if (q6 > from) add(s.row(from), size_t(q6 - from) * q4k_row_bytes(s.K));
    if (to > q6) add(s.row(q6), size_t(to - q6) * q6k_row_bytes(s.K));
  };
  if (s.group_rows > 0) {
    const int groups = (s.tiles + s.group_tiles - 1) / s.group_tiles;
    add_rows(0, std::min(groups, (tiles + s.group_tiles - 1) / s.group_tiles) * s.group_rows);
  } else {
    for (int p = 0; p < P; ++p)
      add_rows(p * s.run_rows, p * s.run_rows + std::min(s.run_rows, tiles * s.tile_rows()));
  }
  return f;
}

// A plain matrix of total_rows rows, or gate/up (P = 2: the first half's rows, then the
// second's), every row of one format: tile t is rows (8 / split) t.. of each run. q8: a Q8_0
// matrix (w its weights, scale their scales), else K-quant rows of one format (q4 or q6).
inline RingShape ring_shape_rows(const void* q4, const void* q6, int total_rows, int P, int K, int n,
                                 size_t staged_bytes, int split = 1, int blocks_per_sm = kRingBlocksPerSm,
                                 bool q8 = false) {
  const int run_rows = total_rows / P, tile_rows = kRingWarps / split;
  if (run_rows % kRingWarps != 0 || (q4 && q6 && !q8)) return RingShape{};
  return ring_shape(q4, q6, q4 && !q8 ? total_rows : 0, K, P, run_rows, 0, run_rows / tile_rows, run_rows / tile_rows,
                    n, staged_bytes, 2, split, blocks_per_sm, q8);
}
// A norm-fused ring's staged bytes (ring_norm_inputs): stage_q8's, then room for the
// pair-planar copy of the inputs, which with_planar_inputs turns on where the backend reads
// pair-planar inputs (its Q8Scratch has `planar`; RUNAHEAD_CUDA_KQ_PLANAR=0: not, so Q4_K rows
// go a chunk a lane, to measure: H200, 7B Q4_K_M, gate/up 842 -> 729 us a step, q/k/v 320 -> 300).
inline size_t ring_norm_staged_bytes(int K) { return stage_q8_bytes(K) + size_t(K); }
inline void with_planar_inputs(RingShape& s, int K, const Q8Scratch& q8) {
  if (s.stages > 0 && s.q4 && q8.planar) s.planar_at = int(stage_q8_bytes(K));  // Q6_K rows read them as stored
}
inline RingRows ring_rows(const RingShape& s) {
  return s.q8 ? RingRows::Q8 : !s.q4 ? RingRows::Q6 : !s.q6 ? RingRows::Q4 : RingRows::Both;
}
inline size_t ring_smem(const RingShape& s) { return size_t(s.staged_bytes) + size_t(s.stages) * s.stage_bytes; }
// Blocks for the ring's kernel (its dynamic shared memory set): at most the resident ones, and
// at most RUNAHEAD_CUDA_RING_BLOCKS where that is set (so that tests make blocks take many tiles).
template <class Kernel> int ring_blocks(Kernel kernel, const RingShape& s, int sms, int& resident) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_smem(s))),
             "cudaFuncSetAttribute(ring kernel)");
  resident = sms * blocks_per_sm(kernel, kRingThreads, ring_smem(s));
  const char* most = std::getenv("RUNAHEAD_CUDA_RING_BLOCKS");
  return std::min({s.tiles, resident, most && std::atoi(most) > 0 ? std::atoi(most) : resident});
}

// The ring takes its later tiles through `cursor` (RingShape::cursor) where its blocks have more
// tiles than stages (H100, ms/token: 7B Q4_K_M 2.338 -> 2.308, its gate/up's tail 4.4 -> 1.9 us);
// where every tile is in the first round it cost more than it can gain (the 1.5B's rings,
// 1.083 -> 1.137, with nothing to take: the producers' count on one word as the tiles stream
// is the likely cost, not measured apart).
inline void take_tiles(RingShape& s, int blocks, int* cursor) {
  s.cursor = s.tiles > s.stages * blocks ? cursor : nullptr;
}

}  // namespace runahead::cuda
