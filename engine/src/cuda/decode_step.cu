// The decode step of one token as one persistent kernel (see decode_step.h).
//
// Block layout: 15 consumer warps compute, one producer warp (its first lane) streams
// weights. Every weight matrix is split by rows into one contiguous share per block; a
// share is cut into tiles of at most kStageBytes (whole rows, or for long rows four rows'
// slices of columns), and the producer bulk-copies tile after tile into a ring of
// stages, waiting only for a free stage. Each tile belongs to one consumer warp (round robin),
// so several warps work on different stages at once with no block-wide barrier per tile: a
// warp multiplies its tile's rows with the phase's input vector (staged in shared memory as
// f32) four rows at a time, so that each input value read from shared memory serves four
// weights, and hands each finished row to the phase's epilogue.
//
// Phases of a layer, each ended by a grid-wide barrier:
//   qkv        in = rmsnorm(x) * attn_norm;  qkv = in Wqkv^T (bias and RoPE come later)
//   attention  per (head, chunk of positions): bias and RoPE on q and on the new key, online
//              softmax over the cache plus the new token, written as a partial; the first
//              head of each kv group appends the new key and value to the cache
//   o_proj     in = the partials of each head merged;  x += in Wo^T
//   gate_up    in = rmsnorm(x) * mlp_norm;  gate_up = in Wgu^T
//   down       in = silu(gate) * up;  x += in Wdown^T
// and at the end lm_head: logits = rmsnorm(x) * final_norm . W^T and the argmax, which the
// last block to finish reduces and passes to StepEnd. Q8_0 and K-quant layers take the same
// phases with tiles of whole rows and int8 inputs ("block-quantized layers" below).
#include <algorithm>
#include <cmath>
#include <mutex>

#include "cuda/bulk_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/decode_step.h"

namespace runahead::cuda {
namespace {

constexpr int kConsumerWarps = 15;
constexpr int kConsumers = kConsumerWarps * kWarp;
constexpr int kStepThreads = kConsumers + kWarp;  // + the producer warp
constexpr int kStageBytes = 32 * 1024;
constexpr int kMaxStages = 12;
// The ring's stage size for layers of W. A tile is one warp's work: fp8 tiles of 32 KB hold
// twice the weights of bf16 ones, and with the few stages a wide model leaves room for (four
// on the 7B shape) too few warps computed at once; 16 KB stages keep more of them busy.
template <class W> constexpr int kStageBytesFor = kIsFp8<W> ? kStageBytes / 2 : kStageBytes;
constexpr int kRowsPerUnit = 4;    // rows one warp multiplies together
constexpr int kMaxChunks = 16;     // attention splits per head
constexpr int kBatch = 8;          // staging: vector loads each thread has in flight at once
constexpr int kLoadsPerBatch = 4;  // attention: key/value rows in flight per lane group
constexpr int kPhasesPerLayer = 5;
constexpr int kSyncBarrier = 0, kSyncArrivals = 1, kSyncWords = 2;  // words of DecodeStep::sync
// A softmax partial: (max, sum, 2 unused) then head_dim outputs, so the outputs are 16-byte aligned.
constexpr int kSoftmaxHeader = 4;
__host__ __device__ constexpr size_t softmax_stride(int head_dim) { return size_t(head_dim) + kSoftmaxHeader; }

// The consumer warps only (the producer warp runs ahead and never joins).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"r"(kConsumers) : "memory"); }

// Every block's consumers arrive; returns once all gridDim.x blocks have arrived `target /
// gridDim.x` times. Writes before it are visible to every block after it: the block barrier
// orders them before thread 0's release, and its acquire before the block's reads.
__device__ __forceinline__ void grid_barrier(unsigned* counter, unsigned target) {
  consumers_sync();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
  }
  consumers_sync();
}

// --- the tiles of a matrix ---------------------------------------------------------------

struct Matrix {
  const char* w;
  int rows, K;
  int element_bytes;
  const float* scale;  // F8_E4M3: a scale per row; else null
};

// Matrix m of the step: 4 per layer, then lm_head. W: the layers' element type, HW: lm_head's.
template <class W, class HW>
__device__ __forceinline__ Matrix matrix_of(const DecodeStep& s, int m) {
  const int H = s.hidden, qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim, e = int(sizeof(W));
  const auto f32 = [](const void* p) { return static_cast<const float*>(p); };
  if (m == 4 * s.layers) return {static_cast<const char*>(s.lm_head), s.vocab, H, int(sizeof(HW)), f32(s.lm_head_scale)};
  const DecodeLayer& l = s.layer[m / 4];
  switch (m % 4) {
    case 0: return {static_cast<const char*>(l.wqkv), qd + 2 * kvd, H, e, f32(l.wqkv_scale)};
    case 1: return {static_cast<const char*>(l.wo), H, qd, e, f32(l.wo_scale)};
    case 2: return {static_cast<const char*>(l.w_gate_up), 2 * s.intermediate, H, e, f32(l.w_gate_up_scale)};
    default: return {static_cast<const char*>(l.w_down), H, s.intermediate, e, f32(l.w_down_scale)};
  }
}

// This block's rows [begin, end) of a matrix with `rows` rows.
struct Share {
  int begin, end;
  __device__ explicit Share(int rows)
      : begin(int(int64_t(rows) * blockIdx.x / gridDim.x)), end(int(int64_t(rows) * (blockIdx.x + 1) / gridDim.x)) {}
};

// This block's rows [r0, r1) of a matrix, cut into tiles of `group` rows by `kc` columns:
// whole rows when a stage holds kRowsPerUnit of them or more, else kRowsPerUnit rows cut into
// nk column slices (each tile then is one bulk copy per row).
struct Tiling {
  int r0, r1, nk, kc, group, count;
  __device__ Tiling(const Matrix& m, int element_bytes, int stage_bytes) {
    const Share share(m.rows);
    r0 = share.begin;
    r1 = share.end;
    const int row_bytes = m.K * element_bytes, per_chunk = 16 / element_bytes;
    if (stage_bytes / row_bytes >= kRowsPerUnit) {
      nk = 1, kc = m.K, group = stage_bytes / row_bytes;
    } else {
      group = kRowsPerUnit;
      nk = (group * row_bytes + stage_bytes - 1) / stage_bytes;
      kc = ((m.K + nk - 1) / nk + per_chunk - 1) / per_chunk * per_chunk;
      nk = (m.K + kc - 1) / kc;
    }
    count = (r1 - r0 + group - 1) / group * nk;
  }
};
struct Tile {
  int row, rows, k0, kn, slice;
};
__device__ __forceinline__ Tile tile_at(const Tiling& t, int i, int K) {
  Tile x;
  x.slice = i % t.nk;
  x.row = t.r0 + (i / t.nk) * t.group;
  x.rows = min(t.group, t.r1 - x.row);
  x.k0 = x.slice * t.kc;
  x.kn = min(t.kc, K - x.k0);
  return x;
}

constexpr int kSliceSlots = 64;  // long rows whose column slices are in flight at once
constexpr int kMaxTileSums = 64;  // block-quantized tiles: rows x column slices of a tile
constexpr int kMaxSlices = 16;

struct Shared {
  uint64_t full[kMaxStages], empty[kMaxStages];
  int issued[kMaxStages];                   // the tile each stage was last loaded with
  float slice_sum[kSliceSlots][kMaxSlices];  // per-slice sums of long rows
  int slices_done[kSliceSlots];
  float tile_sum[kMaxStages][kMaxTileSums];  // block-quantized tiles: each unit's sums (consume_blocks)
  int units_done[kMaxStages];
  float residual[kConsumers];               // x at this block's rows, read before a residual phase
  float scratch[kConsumerWarps];
  float best_v[kConsumers];
  int best_i[kConsumers];
  int flag;
};

// The producer: every tile of every matrix of the step, in order.
template <class W, class HW>
__device__ void produce(const DecodeStep& s, int stages, unsigned char* ring, Shared& sh) {
  const uint64_t policy = evict_first_policy();
  int tile = 0;
  for (int m = 0; m <= 4 * s.layers; ++m) {
    const Matrix mat = matrix_of<W, HW>(s, m);
    const size_t element = size_t(mat.element_bytes);
    const Tiling tiling(mat, mat.element_bytes, kStageBytesFor<W>);
    for (int i = 0; i < tiling.count; ++i, ++tile) {
      const Tile t = tile_at(tiling, i, mat.K);
      const int stage = tile % stages;
      if (tile >= stages) mbarrier_wait(&sh.empty[stage], (tile / stages - 1) & 1);
      const unsigned row_bytes = unsigned(size_t(t.kn) * element);
      mbarrier_expect_bytes(&sh.full[stage], unsigned(t.rows) * row_bytes);
      unsigned char* dst = ring + size_t(stage) * kStageBytesFor<W>;
      const char* src = mat.w + (size_t(t.row) * mat.K + t.k0) * element;
      if (tiling.nk == 1) {
        bulk_load(dst, src, unsigned(t.rows) * row_bytes, &sh.full[stage], policy);  // whole rows: contiguous
      } else {
        for (int r = 0; r < t.rows; ++r)
          bulk_load(dst + r * row_bytes, src + size_t(r) * mat.K * element, row_bytes, &sh.full[stage], policy);
      }
      *reinterpret_cast<volatile int*>(&sh.issued[stage]) = tile;
    }
  }
}

// sum[r] = x . row r of a tile (R rows of n_chunks 16-byte chunks each), summed over the warp:
// every input value read from shared memory serves R weights.
template <class W, int R>
__device__ __forceinline__ void dot_rows(const W* rows, int n_chunks, const float* x, float (&sum)[R]) {
  constexpr int E = Chunk<W>::kElems;
  const uint4* w = reinterpret_cast<const uint4*>(rows);
#pragma unroll
  for (int r = 0; r < R; ++r) sum[r] = 0.0f;
#pragma unroll 2
  for (int c = threadIdx.x % kWarp; c < n_chunks; c += kWarp) {
    float xf[E];
#pragma unroll
    for (int e = 0; e < E; e += 4) {
      const float4 v = *reinterpret_cast<const float4*>(x + c * E + e);
      xf[e] = v.x, xf[e + 1] = v.y, xf[e + 2] = v.z, xf[e + 3] = v.w;
    }
    if constexpr (kIsFp8<W>) {  // f16 products summed over the chunk (common.cuh)
      __half2 xh[8];
      fp8_inputs(xf, xh);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        __half2 wh[8];
        Chunk<W>::unpack_h2(w[r * n_chunks + c], wh);
        sum[r] += fp8_chunk_dot(wh, xh);
      }
      continue;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float wf[E];
      Chunk<W>::unpack(w[r * n_chunks + c], wf);
#pragma unroll
      for (int e = 0; e < E; ++e) sum[r] = fmaf(wf[e], xf[e], sum[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) sum[r] = warp_sum(sum[r]);
}

// The consumers' side of one matrix: y[r] = in . W[r] for this block's rows, handed to
// epilogue(r, y) by one lane each. Each tile belongs to one warp (tile i of the matrix to warp
// i % kConsumerWarps), so warps work on different stages at once and never wait for each
// other; a long row's column slices land on different warps and the last to finish adds
// them up, in slice order. `tile` is the running tile count of the step.
// S: the ring's stage size (the layers' kStageBytesFor; W may be lm_head's type).
template <class W, int S, class Epilogue>
__device__ void consume(const Matrix& mat, const float* in, int& tile, int stages, const unsigned char* ring,
                        Shared& sh, Epilogue epilogue) {
  constexpr int E = Chunk<W>::kElems, R = kRowsPerUnit;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const Tiling tiling(mat, sizeof(W), S);
  for (int i = warp; i < tiling.count; i += kConsumerWarps) {
    const int at = tile + i, stage = at % stages;
    // A parity wait is only unambiguous once the stage holds this tile's load.
    while (*reinterpret_cast<volatile int*>(&sh.issued[stage]) != at) __nanosleep(32);
    mbarrier_wait(&sh.full[stage], (at / stages) & 1);
    const Tile t = tile_at(tiling, i, mat.K);
    const W* tw = reinterpret_cast<const W*>(ring + size_t(stage) * S);
    const int chunks = t.kn / E;
    const float* x = in + t.k0;
    // Row r's sum is final once its last slice is in (always, for whole rows).
    const auto finish = [&](int row, float y) {
      if (mat.scale) y *= __ldg(mat.scale + row) * kSumScale<W>;  // each slice alike: the sum is scaled
      if (tiling.nk == 1) return epilogue(row, y);
      const int slot = row % kSliceSlots;
      sh.slice_sum[slot][t.slice] = y;
      __threadfence_block();
      if (atomicAdd(&sh.slices_done[slot], 1) != tiling.nk - 1) return;
      __threadfence_block();
      float total = 0.0f;
      for (int k = 0; k < tiling.nk; ++k) total += *reinterpret_cast<volatile float*>(&sh.slice_sum[slot][k]);
      sh.slices_done[slot] = 0;
      epilogue(row, total);
    };
    int r = 0;
    for (; r + R <= t.rows; r += R) {
      float sum[R];
      dot_rows<W, R>(tw + size_t(r) * t.kn, chunks, x, sum);
      float y = sum[0];
#pragma unroll
      for (int k = 1; k < R; ++k) y = lane == k ? sum[k] : y;
      if (lane < R) finish(t.row + r + lane, y);
    }
    for (; r < t.rows; ++r) {
      float sum[1];
      dot_rows<W, 1>(tw + size_t(r) * t.kn, chunks, x, sum);
      if (lane == 0) finish(t.row + r, sum[0]);
    }
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&sh.empty[stage]);
  }
  tile += tiling.count;
}

// --- block-quantized layers: Q8_0 and K-quant matrices ------------------------------------
//
// Their tiles are whole rows (a row's bytes fit a stage: plan_decode_step), each tile as the
// per-op kernels read rows from global memory: Q8_0 the tile's int8 weights ([rows, K]) then
// their f16 block scales ([rows, K / 32]); a K-quant row (kquant.cuh) is contiguous. A
// K-quant matrix with both formats (its Q6_K rows after its Q4_K ones) is two parts, each
// shared out over the blocks. The phase's input is staged quantized to int8 per 32 (put4),
// so the dot products are the per-op kernels' own (q8_0_dot_rows, q4k_dot_rows, q6k_dot_rows
// reading the tile): the same arithmetic as the kernel-per-op path.

enum class BlockKind { Q8_0, Q4_K, Q6_K };
// Rows [row0, row0 + rows) of a matrix of the step, all in one format: at w (local row r at
// w + r * row bytes; Q8_0 its weights, its scales at aux).
struct Part {
  const char* w;
  const char* aux;
  int row0, rows, K;
  BlockKind kind;
  __host__ __device__ size_t row_bytes() const {
    return kind == BlockKind::Q8_0 ? size_t(K) : kind == BlockKind::Q4_K ? q4k_row_bytes(K) : q6k_row_bytes(K);
  }
  // A row's bytes in a tile: Q8_0 adds its scales.
  __host__ __device__ size_t tile_row_bytes() const {
    return kind == BlockKind::Q8_0 ? size_t(K) + size_t(K) / kQ8Block * 2 : row_bytes();
  }
};

// The parts of matrix m of the step (4 per layer, then lm_head, as matrix_of); returns 1 or 2.
template <class W>
__device__ __forceinline__ int parts_of(const DecodeStep& s, int m, Part (&p)[2]) {
  const int H = s.hidden, qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
  const void *w, *aux;
  int rows, K, mixed;
  if (m == 4 * s.layers) {
    w = s.lm_head, aux = s.lm_head_scale, rows = s.vocab, K = H, mixed = rows;
  } else {
    const DecodeLayer& l = s.layer[m / 4];
    switch (m % 4) {
      case 0: w = l.wqkv, aux = l.wqkv_scale, rows = qd + 2 * kvd, K = H, mixed = l.qkv_q6_from; break;
      case 1: w = l.wo, aux = l.wo_scale, rows = H, K = qd, mixed = rows; break;
      case 2: w = l.w_gate_up, aux = l.w_gate_up_scale, rows = 2 * s.intermediate, K = H, mixed = rows; break;
      default: w = l.w_down, aux = l.w_down_scale, rows = H, K = s.intermediate, mixed = rows; break;
    }
  }
  const auto bytes = [](const void* v) { return static_cast<const char*>(v); };
  if constexpr (kIsQ8<W>) {
    p[0] = {bytes(w), bytes(aux), 0, rows, K, BlockKind::Q8_0};
    return 1;
  } else {
    const int q6_from = kq_q6_from(w, aux, rows, mixed);
    int n = 0;
    if (q6_from > 0) p[n++] = {bytes(w), nullptr, 0, q6_from, K, BlockKind::Q4_K};
    if (q6_from < rows) p[n++] = {bytes(aux), nullptr, q6_from, rows - q6_from, K, BlockKind::Q6_K};
    return n;
  }
}

// This block's rows of a part, in tiles of `group` whole rows. A tile's work is cut into
// units, each kRowsPerUnit rows (or the rest) by one of `slices` column slices, so that several
// warps share a tile (one warp a tile left most warps idle: at most `stages` tiles are in a
// block at once, and their dot products, not the copies, took the time).
#ifndef RUNAHEAD_STEP_SLICE_CHUNKS
#define RUNAHEAD_STEP_SLICE_CHUNKS 128
#endif
constexpr int kSliceChunks = RUNAHEAD_STEP_SLICE_CHUNKS;  // chunks of a row a slice aims at: four a lane (64 measured slower)
struct BlockTiling {
  int r0, r1, group, count, chunks, slices;
  __device__ BlockTiling(const Part& p, int stage_bytes) {
    const Share share(p.rows);
    r0 = share.begin;
    r1 = share.end;
    group = min(int(size_t(stage_bytes) / p.tile_row_bytes()), kMaxTileSums);
    count = (r1 - r0 + group - 1) / group;
    chunks = p.K / (p.kind == BlockKind::Q8_0 ? 16 : 32);
    slices = max(1, min((chunks + kSliceChunks - 1) / kSliceChunks, kMaxTileSums / group));
  }
  __device__ int rows_of(int i) const { return min(group, r1 - (r0 + i * group)); }
  __device__ int units_of(int rows) const { return (rows + kRowsPerUnit - 1) / kRowsPerUnit * slices; }
};

// The producer for block-quantized layers: every tile of every part of the step, in order.
template <class W, int S>
__device__ void produce_blocks(const DecodeStep& s, int stages, unsigned char* ring, Shared& sh) {
  const uint64_t policy = evict_first_policy();
  int tile = 0;
  for (int m = 0; m <= 4 * s.layers; ++m) {
    Part parts[2];
    const int n = parts_of<W>(s, m, parts);
    for (int p = 0; p < n; ++p) {
      const Part& part = parts[p];
      const BlockTiling tiling(part, S);
      for (int i = 0; i < tiling.count; ++i, ++tile) {
        const int row = tiling.r0 + i * tiling.group, rows = tiling.rows_of(i), stage = tile % stages;
        if (tile >= stages) mbarrier_wait(&sh.empty[stage], (tile / stages - 1) & 1);
        mbarrier_expect_bytes(&sh.full[stage], unsigned(rows * part.tile_row_bytes()));
        unsigned char* dst = ring + size_t(stage) * S;
        const size_t rb = part.row_bytes();
        bulk_load(dst, part.w + size_t(row) * rb, unsigned(rows * rb), &sh.full[stage], policy);
        if (part.kind == BlockKind::Q8_0) {
          const size_t sb = size_t(part.K) / kQ8Block * 2;
          bulk_load(dst + rows * rb, part.aux + size_t(row) * sb, unsigned(rows * sb), &sh.full[stage], policy);
        }
        *reinterpret_cast<volatile int*>(&sh.issued[stage]) = tile;
      }
    }
  }
}

// The phase's input as put4 staged it for a matrix of K columns.
__device__ __forceinline__ Q8Inputs staged_q8(const float* in, int K) {
  return Q8Inputs{reinterpret_cast<const int8_t*>(in + stage_q8_scales(K)), in, K};
}

// sum[k] = in . row r + k over chunks [c_begin, c_end), for R rows of a tile of `rows` rows,
// summed over the warp.
template <class W, int R>
__device__ __forceinline__ void tile_dot(const Part& part, const unsigned char* tw, int rows, int r, int c_begin,
                                         int c_end, const Q8Inputs& in, float (&sum)[R]) {
  float acc[R][1];
  if constexpr (kIsQ8<W>) {
    const Q8Weight* w[R];
    const __half* d[R];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      w[k] = reinterpret_cast<const Q8Weight*>(tw + size_t(r + k) * part.K);
      d[k] = reinterpret_cast<const __half*>(tw + size_t(rows) * part.K) + size_t(r + k) * (part.K / kQ8Block);
    }
    q8_0_dot_rows<R, 1, true>(w, d, c_begin, c_end, in, 1, acc);  // summed over the warp
  } else {
    const uint8_t* row[R];
    const size_t rb = part.row_bytes();
#pragma unroll
    for (int k = 0; k < R; ++k) {
      row[k] = tw + size_t(r + k) * rb;
      acc[k][0] = 0.0f;
    }
    if (part.kind == BlockKind::Q4_K)
      q4k_dot_rows<R, 1, true>(row, part.K, c_begin, c_end, in, 1, acc);
    else
      q6k_dot_rows<R, 1, true>(row, part.K, c_begin, c_end, in, 1, acc);
#pragma unroll
    for (int k = 0; k < R; ++k) acc[k][0] = warp_sum(acc[k][0]);
  }
#pragma unroll
  for (int k = 0; k < R; ++k) sum[k] = acc[k][0];
}

// consume() for a part of a block-quantized matrix: the units of its tiles (BlockTiling), in
// order, go round the warps; a unit's sums go to the stage's tile_sum, and the warp finishing
// a tile's last unit adds each row's slices in slice order (the same sums whichever warp
// finishes), hands the row to epilogue(row of the matrix, y) and frees the stage.
template <class W, int S, class Epilogue>
__device__ void consume_blocks(const Part& part, const Q8Inputs& in, int& tile, int stages,
                               const unsigned char* ring, Shared& sh, Epilogue epilogue) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const BlockTiling t(part, S);
  const int full = t.units_of(t.group);
  const int total = t.count == 0 ? 0 : (t.count - 1) * full + t.units_of(t.rows_of(t.count - 1));
  int waited = -1;
  for (int u = warp; u < total; u += kConsumerWarps) {
    const int i = u / full, k = u % full, at = tile + i, stage = at % stages;
    if (i != waited) {  // a parity wait is only unambiguous once the stage holds this tile's load
      while (*reinterpret_cast<volatile int*>(&sh.issued[stage]) != at) __nanosleep(32);
      mbarrier_wait(&sh.full[stage], (at / stages) & 1);
      waited = i;
    }
    const unsigned char* tw = ring + size_t(stage) * S;
    const int rows = t.rows_of(i), slice = k % t.slices, r = k / t.slices * kRowsPerUnit;
    const int n = min(kRowsPerUnit, rows - r);
    const int c_begin = slice * t.chunks / t.slices, c_end = (slice + 1) * t.chunks / t.slices;
    float* sums = sh.tile_sum[stage] + slice * t.group + r;
    const auto unit = [&](auto width, int at_row) {
      constexpr int R = decltype(width)::value;
      float sum[R];
      tile_dot<W, R>(part, tw, rows, at_row, c_begin, c_end, in, sum);
#pragma unroll
      for (int q = 0; q < R; ++q)
        if (lane == q) sums[at_row - r + q] = sum[q];
    };
    if (n == 4) {
      unit(std::integral_constant<int, 4>{}, r);
    } else {
      if (n >= 2) unit(std::integral_constant<int, 2>{}, r);
      if (n % 2) unit(std::integral_constant<int, 1>{}, r + n - 1);
    }
    __syncwarp();
    __threadfence_block();
    int last = 0;
    if (lane == 0) last = atomicAdd(&sh.units_done[stage], 1) == t.units_of(rows) - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) continue;
    __threadfence_block();
    const int first = part.row0 + t.r0 + i * t.group;
    for (int row = lane; row < rows; row += kWarp) {
      float y = 0.0f;
      for (int q = 0; q < t.slices; ++q) y += *reinterpret_cast<volatile float*>(&sh.tile_sum[stage][q * t.group + row]);
      epilogue(first + row, y);
    }
    __syncwarp();
    if (lane == 0) {
      sh.units_done[stage] = 0;
      mbarrier_arrive(&sh.empty[stage]);
    }
  }
  tile += t.count;
}

// A phase's input, four values v (at 4 i) from each thread, written to shared memory: f32 for
// dense and fp8 matrices, or (kQ8) quantized to int8 per 32 as stage_q8 quantizes it (the same
// bits: q8_lane's scale and rounding), into its layout (K / 32 scales, then K values). Every
// lane of the warp calls it, i = its warp's first index (a multiple of 8) + its lane, so that
// the 8 lanes holding a group of 32 reduce its largest magnitude together; `valid` false
// writes nothing (a whole group is valid or not: K % 32 == 0).
template <bool kQ8>
__device__ __forceinline__ void put4(float* in, int K, int i, float4 v, bool valid) {
  if constexpr (!kQ8) {
    if (valid) reinterpret_cast<float4*>(in)[i] = v;
  } else {
    if (!valid) v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax / 127.0f;
    const auto q = [&](float x) { return static_cast<signed char>(q8_value(x, amax, scale)); };
    if (!valid) return;
    reinterpret_cast<char4*>(in + stage_q8_scales(K))[i] = make_char4(q(v.x), q(v.y), q(v.z), q(v.w));
    if (i % 8 == 0) in[i / 8] = scale;
  }
}

// sh.residual[i] = x[rows.begin + i]: read ahead of a phase whose epilogue adds to x, before
// the block barrier that ends the phase's staging, so no tile waits on a global load.
__device__ __forceinline__ void read_residual(const float* x, const Share& rows, Shared& sh) {
  if (threadIdx.x < rows.end - rows.begin) sh.residual[threadIdx.x] = __ldcg(x + rows.begin + threadIdx.x);
}

// in[k] = v[k] * g[k] for k < H (H % 4 == 0; kQ8: H % 32), where load(i) gives v[4i, 4i + 4), written by
// put4 (kQ8: quantized); returns rsqrt(mean(v^2) + eps), by which the phase scales its dot
// products (rmsnorm(v) * g . w = that * (v * g . w)), so staging needs one barrier. kBatch
// loads in flight per thread; every lane of a warp runs the same iterations (put4).
template <bool kQ8, class Load>
__device__ float stage_normed(Load load, int H, float eps, const float* g, float* in, Shared& sh) {
  const int n = H / 4, lane = threadIdx.x % kWarp;
  float ss = 0.0f;
  for (int i0 = threadIdx.x; i0 - lane < n; i0 += kConsumers * kBatch) {
    float4 v[kBatch], w[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kConsumers;
      v[b] = i < n ? load(i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      w[b] = i < n ? __ldg(reinterpret_cast<const float4*>(g) + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kConsumers;
      put4<kQ8>(in, H, i, make_float4(v[b].x * w[b].x, v[b].y * w[b].y, v[b].z * w[b].z, v[b].w * w[b].w), i < n);
      ss = fmaf(v[b].x, v[b].x, fmaf(v[b].y, v[b].y, fmaf(v[b].z, v[b].z, fmaf(v[b].w, v[b].w, ss))));
    }
  }
  ss = warp_sum(ss);
  if (threadIdx.x % kWarp == 0) sh.scratch[threadIdx.x / kWarp] = ss;
  consumers_sync();
  float total = 0.0f;
  for (int w = 0; w < kConsumerWarps; ++w) total += sh.scratch[w];
  return rsqrtf(total / float(H) + eps);
}

// Online-softmax state of one lane group: the largest score, the sum of exp(score - m),
// and the weighted sum of its 4 value columns.
struct Softmax {
  float m = -INFINITY, l = 0.0f;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  __device__ void add(float score, float4 v) {
    const float m_new = fmaxf(m, score), keep = expf(m - m_new), p = expf(score - m_new);
    l = fmaf(l, keep, p);
    o = make_float4(fmaf(o.x, keep, p * v.x), fmaf(o.y, keep, p * v.y), fmaf(o.z, keep, p * v.z),
                    fmaf(o.w, keep, p * v.w));
    m = m_new;
  }
  __device__ void merge(float m2, float l2, float4 o2) {
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) return;
    const float a = expf(m - M), b = expf(m2 - M);
    l = l * a + l2 * b;
    o = make_float4(o.x * a + o2.x * b, o.y * a + o2.y * b, o.z * a + o2.z * b, o.w * a + o2.w * b);
    m = M;
  }
};

__device__ __forceinline__ float4 shfl_xor4(float4 v, int offset) {
  return make_float4(__shfl_xor_sync(0xffffffffu, v.x, offset), __shfl_xor_sync(0xffffffffu, v.y, offset),
                     __shfl_xor_sync(0xffffffffu, v.z, offset), __shfl_xor_sync(0xffffffffu, v.w, offset));
}

// RoPE of columns [d, d + 4) of a head (rotate_half pairs column i with i + hd/2, which
// sits hd/8 lanes away). Every lane of the warp calls it.
__device__ __forceinline__ float4 rope(float4 v, int d, int hd, const float* cos_row, const float* sin_row) {
  const float4 other = shfl_xor4(v, hd / 8);
  const bool first = d < hd / 2;
  const int i = first ? d : d - hd / 2;
  const float4 c = *reinterpret_cast<const float4*>(cos_row + i);
  const float4 s = *reinterpret_cast<const float4*>(sin_row + i);
  const float sign = first ? -1.0f : 1.0f;
  return make_float4(fmaf(sign * other.x, s.x, v.x * c.x), fmaf(sign * other.y, s.y, v.y * c.y),
                     fmaf(sign * other.z, s.z, v.z * c.z), fmaf(sign * other.w, s.w, v.w * c.w));
}

// How many position chunks each head's attention splits into at context length `len`: as many
// as keep every block's warps busy, no more than the blocks per head.
__device__ __forceinline__ int attention_chunks(const DecodeStep& s, int len) {
  const int rows_per_load = kWarp / (s.head_dim / 4);
  const int per_block = kConsumerWarps * rows_per_load * kLoadsPerBatch;
  return min(min((len + per_block - 1) / per_block, max(1, int(gridDim.x) / s.heads)), min(kMaxChunks, len));
}

// Attention of the token at position `pos` for every head, as one softmax partial per
// (head, chunk) in s.partial; `scratch` holds
// kConsumerWarps * softmax_stride(head_dim) floats.
__device__ void attention(const DecodeStep& s, const DecodeLayer& layer, int pos, float* scratch) {
  const int hd = s.head_dim, qd = s.heads * hd, kvd = s.kv_heads * hd, group = s.heads / s.kv_heads;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int lanes_per_row = hd / 4, rows_per_load = kWarp / lanes_per_row;
  const int d = 4 * (lane % lanes_per_row), sub = lane / lanes_per_row;
  const int len = pos + 1, chunks = attention_chunks(s, len);
  const float* cos_row = s.rope_cos + size_t(pos) * (hd / 2);
  const float* sin_row = s.rope_sin + size_t(pos) * (hd / 2);
  const float scale = rsqrtf(float(hd));
  const size_t stride = softmax_stride(hd);
  for (int item = blockIdx.x; item < s.heads * chunks; item += gridDim.x) {
    const int h = item / chunks, c = item % chunks, g = h / group;
    const int p0 = int(int64_t(len) * c / chunks), p1 = int(int64_t(len) * (c + 1) / chunks);
    const bool appends = h % group == 0 && p1 == len;  // writes the new key and value to the cache
    // qkv + bias: the bias is added here, where its load overlaps the others.
    const auto biased = [&](size_t at) {
      float4 v = __ldcg(reinterpret_cast<const float4*>(s.qkv + at));
      if (layer.bqkv) {
        const float4 b = *reinterpret_cast<const float4*>(layer.bqkv + at);
        v = make_float4(v.x + b.x, v.y + b.y, v.z + b.z, v.w + b.w);
      }
      return v;
    };
    const float4 q_raw = biased(size_t(h) * hd + d);
    float4 q = q_raw;
    bool roped = false;  // q is rotated once the first keys are on their way, so their loads overlap
    const float* K = layer.k_cache + size_t(g) * hd + d;
    const float* V = layer.v_cache + size_t(g) * hd + d;
    const float4 k_new = biased(qd + size_t(g) * hd + d), v_new = biased(qd + kvd + size_t(g) * hd + d);
    Softmax st;
    const int step = kConsumerWarps * rows_per_load;
    for (int base = p0 + warp * rows_per_load + sub; base - sub < p1; base += step * kLoadsPerBatch) {
      float4 kr[kLoadsPerBatch], vr[kLoadsPerBatch];
#pragma unroll
      for (int b = 0; b < kLoadsPerBatch; ++b) {
        const int p = base + b * step;
        if (p >= p1) {
          kr[b] = vr[b] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        } else if (p < pos) {
          kr[b] = *reinterpret_cast<const float4*>(K + size_t(p) * kvd);
          vr[b] = *reinterpret_cast<const float4*>(V + size_t(p) * kvd);
        } else {
          kr[b] = k_new;
          vr[b] = v_new;
        }
      }
      if (!roped) {  // warp-uniform
        q = rope(q_raw, d, hd, cos_row, sin_row);
        q = make_float4(q.x * scale, q.y * scale, q.z * scale, q.w * scale);
        roped = true;
      }
#pragma unroll
      for (int b = 0; b < kLoadsPerBatch; ++b) {
        const int p = base + b * step;
        const bool fresh = p == pos;
        if (__any_sync(0xffffffffu, fresh)) {
          const float4 rotated = rope(kr[b], d, hd, cos_row, sin_row);
          if (fresh) {
            kr[b] = rotated;
            if (appends) {
              *reinterpret_cast<float4*>(layer.k_cache + size_t(pos) * kvd + size_t(g) * hd + d) = rotated;
              *reinterpret_cast<float4*>(layer.v_cache + size_t(pos) * kvd + size_t(g) * hd + d) = vr[b];
            }
          }
        }
        float score = q.x * kr[b].x + q.y * kr[b].y + q.z * kr[b].z + q.w * kr[b].w;
        for (int o = 1; o < lanes_per_row; o <<= 1) score += __shfl_xor_sync(0xffffffffu, score, o);
        if (p < p1) st.add(score, vr[b]);
      }
    }
    for (int o = lanes_per_row; o < kWarp; o <<= 1)
      st.merge(__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.l, o), shfl_xor4(st.o, o));
    float* mine = scratch + warp * stride;
    if (lane < lanes_per_row) *reinterpret_cast<float4*>(mine + kSoftmaxHeader + d) = st.o;
    if (lane == 0) mine[0] = st.m, mine[1] = st.l;
    consumers_sync();
    float* part = s.partial + (size_t(h) * kMaxChunks + c) * stride;
    for (int t = threadIdx.x; t < hd; t += kConsumers) {
      float M = -INFINITY;
      for (int w = 0; w < kConsumerWarps; ++w) M = fmaxf(M, scratch[w * stride]);
      float num = 0.0f, den = 0.0f;
      for (int w = 0; w < kConsumerWarps; ++w) {
        const float mw = scratch[w * stride];
        if (mw == -INFINITY) continue;
        const float e = expf(mw - M);
        num = fmaf(scratch[w * stride + kSoftmaxHeader + t], e, num);
        den = fmaf(scratch[w * stride + 1], e, den);
      }
      part[kSoftmaxHeader + t] = num;
      if (t == 0) part[0] = M, part[1] = den;
    }
    consumers_sync();  // scratch is reused by the next item
  }
}

// in[h * head_dim + t] = the attention output of head h: its chunks' partials merged, written
// by put4. A thread takes 4 columns of a head and has the loads of up to kBatch chunks in
// flight at once; every lane of a warp runs the same iterations.
template <bool kQ8>
__device__ void stage_attention(const DecodeStep& s, int chunks, float* in) {
  const int hd = s.head_dim, groups = hd / 4, total_units = s.heads * groups, lane = threadIdx.x % kWarp;
  const size_t stride = softmax_stride(hd);
  for (int u = threadIdx.x; u - lane < total_units; u += kConsumers) {
    const bool valid = u < total_units;
    const int h = valid ? u / groups : 0, d = 4 * (u % groups);
    const float* part = s.partial + size_t(h) * kMaxChunks * stride;
    Softmax total;
    for (int c0 = 0; c0 < chunks; c0 += kBatch) {
      float m[kBatch], l[kBatch];
      float4 o[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const float* p = part + size_t(c0 + b) * stride;
        const bool in_range = c0 + b < chunks;
        m[b] = in_range ? __ldcg(p) : -INFINITY;
        l[b] = in_range ? __ldcg(p + 1) : 0.0f;
        o[b] = in_range ? __ldcg(reinterpret_cast<const float4*>(p + kSoftmaxHeader + d))
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) total.merge(m[b], l[b], o[b]);
    }
    const float inv = 1.0f / total.l;
    put4<kQ8>(in, s.heads * hd, u, make_float4(total.o.x * inv, total.o.y * inv, total.o.z * inv, total.o.w * inv), valid);
  }
  consumers_sync();
}

// in[j] = silu(gate[j]) * up[j] for j < I (I % 4 == 0; kQ8: I % 32), written by put4: float4 loads, kBatch
// in flight per thread; every lane of a warp runs the same iterations.
template <bool kQ8>
__device__ void stage_swiglu(const float* gate_up, int I, float* in) {
  const float4* gate = reinterpret_cast<const float4*>(gate_up);
  const float4* up = reinterpret_cast<const float4*>(gate_up + I);
  const int n = I / 4, lane = threadIdx.x % kWarp;
  for (int j0 = threadIdx.x; j0 - lane < n; j0 += kConsumers * kBatch) {
    float4 g[kBatch], u[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = j0 + b * kConsumers;
      g[b] = j < n ? __ldcg(gate + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      u[b] = j < n ? __ldcg(up + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = j0 + b * kConsumers;
      const auto silu = [](float v) { return v / (1.0f + expf(-v)); };
      put4<kQ8>(in, I, j, make_float4(silu(g[b].x) * u[b].x, silu(g[b].y) * u[b].y, silu(g[b].z) * u[b].z,
                                      silu(g[b].w) * u[b].w),
                j < n);
    }
  }
  consumers_sync();
}

// (value, index) ordered by value, then by the lower index (torch.argmax keeps the first).
__device__ __forceinline__ bool better(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

// (best_v, best_i) of thread 0 becomes the best over the block's consumer threads.
__device__ __forceinline__ void block_best(float& best_v, int& best_i, Shared& sh) {
  sh.best_v[threadIdx.x] = best_v;
  sh.best_i[threadIdx.x] = best_i;
  consumers_sync();
  if (threadIdx.x != 0) return;
  for (int t = 1; t < kConsumers; ++t)
    if (better(sh.best_v[t], sh.best_i[t], best_v, best_i)) best_v = sh.best_v[t], best_i = sh.best_i[t];
}

// Values [4 i, 4 i + 4) of the embedding of `token`, widened to f32 exactly as the per-op
// embedding lookup widens them (embedding.cu); fp8 layers keep a bf16 embedding.
template <class W>
__device__ __forceinline__ float4 embedding4(const DecodeStep& s, int32_t token, int i) {
  const int H = s.hidden;
  if constexpr (kIsQ8<W>) {
    const char4 q = reinterpret_cast<const char4*>(static_cast<const int8_t*>(s.embed) + size_t(token) * H)[i];
    const float d = __half2float(static_cast<const __half*>(s.embed_scale)[size_t(token) * (H / kQ8Block) + i / 8]);
    return make_float4(d * float(q.x), d * float(q.y), d * float(q.z), d * float(q.w));
  } else if constexpr (kIsKQ<W>) {
    const bool q6 = !s.embed;  // a table is all Q4_K (at embed) or all Q6_K (at embed_scale)
    const uint8_t* row = q6 ? static_cast<const uint8_t*>(s.embed_scale) + size_t(token) * q6k_row_bytes(H)
                            : static_cast<const uint8_t*>(s.embed) + size_t(token) * q4k_row_bytes(H);
    return make_float4(kq_weight(row, q6, H, 4 * i), kq_weight(row, q6, H, 4 * i + 1), kq_weight(row, q6, H, 4 * i + 2),
                       kq_weight(row, q6, H, 4 * i + 3));
  } else {
    using EW = std::conditional_t<kIsFp8<W>, __nv_bfloat16, W>;
    const EW* row = static_cast<const EW*>(s.embed) + size_t(token) * H;
    return make_float4(to_float(row[4 * i]), to_float(row[4 * i + 1]), to_float(row[4 * i + 2]), to_float(row[4 * i + 3]));
  }
}

// 16 warps and one block per multiprocessor: 128 registers a thread (4 warps share each
// quarter of the register file).
template <class W, class HW>
__global__ void __launch_bounds__(kStepThreads, 1) decode_step_kernel(DecodeStep s, int stages) {
  RUNAHEAD_TRACE_BLOCK(persistent_step);
  constexpr bool kBlocks = kQ8Inputs<W>;  // Q8_0 or K-quant layers (and lm_head of the same kind)
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ Shared sh;
  constexpr int S = kStageBytesFor<W>;
  float* in = reinterpret_cast<float*>(ring + size_t(stages) * S);
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x == 0) {
    for (int i = 0; i < stages; ++i) {
      mbarrier_init(&sh.full[i], 1);
      mbarrier_init(&sh.empty[i], 1);
      sh.issued[i] = -1;
    }
    for (int i = 0; i < kSliceSlots; ++i) sh.slices_done[i] = 0;
    for (int i = 0; i < kMaxStages; ++i) sh.units_done[i] = 0;
    mbarrier_init_fence();
  }
  __syncthreads();
  if (warp == kConsumerWarps) {
    if (threadIdx.x % kWarp == 0) {
      if constexpr (kBlocks)
        produce_blocks<W, S>(s, stages, ring, sh);
      else
        produce<W, HW>(s, stages, ring, sh);
    }
    return;
  }

  const bool stamps = s.clock && blockIdx.x == 0 && threadIdx.x == 0;
  int stamp = 0;
  if (stamps) s.clock[stamp++] = clock64();
  unsigned barriers = 0;
  auto sync_grid = [&] {
    if (stamps) s.clock[stamp++] = clock64();
    grid_barrier(&s.sync[kSyncBarrier], ++barriers * gridDim.x);
    if (stamps) s.clock[stamp++] = clock64();
  };
  const int H = s.hidden, I = s.intermediate;
  const int pos = *s.pos;
  const int32_t token = *s.token;
  int tile = 0;
  const Share hidden_rows(H);  // this block's rows of o_proj and down, whose epilogues add to x
  const auto x_at = [&](int i) { return __ldcg(reinterpret_cast<const float4*>(s.x) + i); };
  const auto embedding_at = [&](int i) {  // the token's embedding, which block 0 also writes to x
    const float4 v = embedding4<W>(s, token, i);
    if (blockIdx.x == 0) reinterpret_cast<float4*>(s.x)[i] = v;
    return v;
  };
  // Matrix m of the step times the staged input; the lm_head (m = 4 layers) is of type HW.
  const auto product = [&](int m, auto epilogue) {
    if constexpr (kBlocks) {
      Part parts[2];
      const int n = parts_of<W>(s, m, parts);
      const Q8Inputs q8 = staged_q8(in, parts[0].K);
      for (int p = 0; p < n; ++p) consume_blocks<W, S>(parts[p], q8, tile, stages, ring, sh, epilogue);
    } else if (m == 4 * s.layers) {
      consume<HW, S>(matrix_of<W, HW>(s, m), in, tile, stages, ring, sh, epilogue);
    } else {
      consume<W, S>(matrix_of<W, HW>(s, m), in, tile, stages, ring, sh, epilogue);
    }
  };
  for (int l = 0; l < s.layers; ++l) {
    const DecodeLayer& layer = s.layer[l];
    float inv = l == 0 ? stage_normed<kBlocks>(embedding_at, H, s.eps, layer.attn_norm, in, sh)
                       : stage_normed<kBlocks>(x_at, H, s.eps, layer.attn_norm, in, sh);
    product(4 * l, [&](int r, float y) { s.qkv[r] = y * inv; });
    sync_grid();

    attention(s, layer, pos, in);
    sync_grid();

    read_residual(s.x, hidden_rows, sh);
    stage_attention<kBlocks>(s, attention_chunks(s, pos + 1), in);
    product(4 * l + 1, [&](int r, float y) { s.x[r] = sh.residual[r - hidden_rows.begin] + y; });
    sync_grid();

    inv = stage_normed<kBlocks>(x_at, H, s.eps, layer.mlp_norm, in, sh);
    product(4 * l + 2, [&](int r, float y) { s.gate_up[r] = y * inv; });
    sync_grid();

    read_residual(s.x, hidden_rows, sh);
    stage_swiglu<kBlocks>(s.gate_up, I, in);
    product(4 * l + 3, [&](int r, float y) { s.x[r] = sh.residual[r - hidden_rows.begin] + y; });
    sync_grid();
  }

  // lm_head and the argmax: each thread keeps the best of the rows it finished.
  const float inv = stage_normed<kBlocks>(x_at, H, s.eps, s.final_norm, in, sh);
  float best_v = -INFINITY;
  int best_i = 0x7fffffff;
  product(4 * s.layers, [&](int r, float y) {
    y *= inv;
    if (s.logits) s.logits[r] = y;
    if (better(y, r, best_v, best_i)) best_v = y, best_i = r;
  });
  if (stamps) s.clock[stamp++] = clock64();
  block_best(best_v, best_i, sh);
  if (threadIdx.x == 0) {
    s.best[2 * blockIdx.x] = best_v;
    s.best[2 * blockIdx.x + 1] = __int_as_float(best_i);
    __threadfence();
    sh.flag = atomicAdd(&s.sync[kSyncArrivals], 1u) == gridDim.x - 1;
  }
  consumers_sync();
  if (!sh.flag) return;
  // The last block: every other block is past its last barrier.
  __threadfence();
  best_v = -INFINITY;
  best_i = 0x7fffffff;
  for (int b = threadIdx.x; b < int(gridDim.x); b += kConsumers) {
    const float v = __ldcg(s.best + 2 * b);
    const int i = __float_as_int(__ldcg(s.best + 2 * b + 1));
    if (better(v, i, best_v, best_i)) best_v = v, best_i = i;
  }
  block_best(best_v, best_i, sh);
  if (threadIdx.x == 0) {
    const int32_t token = best_i == 0x7fffffff ? 0 : best_i;  // all NaN: token 0 rather than out of range
    finish_step(s.end, &token, 1);
    s.sync[kSyncBarrier] = 0;
    s.sync[kSyncArrivals] = 0;
  }
}

// Calls f with null pointers of the layers' and lm_head's element types: lm_head's is the
// layers' or fp8 (`lm_head: fp8`); Q8_0 (Q8Weight) and K-quant (KQWeight) layers with an
// lm_head of their own kind (block_step_misfit refuses the rest).
template <class F> void with_step_types(const DecodeStep& s, F&& f) {
  if (s.dtype == DType::Q8_0) return f(static_cast<const Q8Weight*>(nullptr), static_cast<const Q8Weight*>(nullptr));
  if (s.dtype == DType::Q4_K) return f(static_cast<const KQWeight*>(nullptr), static_cast<const KQWeight*>(nullptr));
  with_weight_type(s.dtype, [&](auto layers) {
    if (s.head_dtype == DType::F8_E4M3)
      f(layers, static_cast<const __nv_fp8_e4m3*>(nullptr));
    else
      f(layers, layers);
  });
}

bool block_layers(const DecodeStep& s) { return s.dtype == DType::Q8_0 || s.dtype == DType::Q4_K; }

// Shared memory for the phases' input vector: f32 for dense and fp8 matrices, int8 per 32
// with its scales for block-quantized ones (put4), and the attention's partials per warp.
size_t input_bytes(const DecodeStep& s) {
  const int widest = std::max({s.hidden, s.heads * s.head_dim, s.intermediate});
  const size_t vector = block_layers(s) ? stage_q8_bytes(widest) : size_t(widest) * sizeof(float);
  const size_t bytes = std::max(vector, kConsumerWarps * softmax_stride(s.head_dim) * sizeof(float));
  return (bytes + 15) / 16 * 16;
}

}  // namespace

// Why the persistent step cannot read a model's block-quantized matrices ("" when it can): its
// tiles are whole rows (a stage must hold one), Q8_0 tiles copy their scales in 16-byte pieces,
// and lm_head and the embedding are of the layers' kind.
std::string block_step_misfit(const DecodeStep& s) {
  const bool q8 = s.dtype == DType::Q8_0;
  if (s.head_dtype != s.dtype || s.embed_dtype != s.dtype)
    return "an lm_head and embedding of the layers' format (" + std::string(dtype_name(s.head_dtype)) + " with " +
           dtype_name(s.dtype) + " layers)";
  for (const int K : {s.hidden, s.heads * s.head_dim, s.intermediate}) {
    if (q8 && K % 256 != 0) return "Q8_0 rows of a multiple of 256 weights (a row of " + std::to_string(K) + ")";
    const size_t row = q8 ? size_t(K) + size_t(K) / kQ8Block * 2 : std::max(q4k_row_bytes(K), q6k_row_bytes(K));
    if (row > size_t(kStageBytes))
      return "rows of at most " + std::to_string(kStageBytes / 1024) + " KB (a row of " + std::to_string(row) + " bytes)";
  }
  return "";
}

size_t decode_step_partial_floats(int heads, int head_dim) { return size_t(heads) * kMaxChunks * softmax_stride(head_dim); }
int decode_step_sync_words() { return kSyncWords; }
int decode_step_stamps(int layers) { return 2 * kPhasesPerLayer * layers + 2; }

DecodeStepPlan plan_decode_step(const DecodeStep& s, int device) {
  DecodeStepPlan plan;
  const int hd = s.head_dim;
  if (hd < 8 || hd > 128 || (hd & (hd - 1)) != 0) {
    plan.refused = "head_dim " + std::to_string(hd) + " (it needs 8, 16, 32, 64 or 128)";
    return plan;
  }
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  if ((s.hidden + prop.multiProcessorCount - 1) / prop.multiProcessorCount > kConsumers) {
    plan.refused = "at most " + std::to_string(kConsumers) + " rows of the hidden size per multiprocessor";
    return plan;
  }
  if (block_layers(s)) {
    plan.refused = block_step_misfit(s);
    if (!plan.refused.empty()) return plan;
  }
  const size_t element = block_layers(s) ? 1 : dtype_size(s.dtype);
  for (int K : {s.hidden, s.heads * hd, s.intermediate}) {
    if (block_layers(s)) break;  // block_step_misfit checked them
    if ((size_t(K) * element) % 16 != 0 || (size_t(s.hidden) * dtype_size(s.head_dtype)) % 16 != 0) {
      plan.refused = "rows of a multiple of 16 bytes";
      return plan;
    }
    const size_t stage = s.dtype == DType::F8_E4M3 ? kStageBytes / 2 : kStageBytes;
    if (size_t(K) * element * kRowsPerUnit > size_t(kMaxSlices) * stage) {
      plan.refused = "rows of at most " + std::to_string(kMaxSlices * stage / kRowsPerUnit / 1024) + " KB";
      return plan;
    }
  }
  if (prop.major < 9) {
    plan.refused = "bulk copies of compute capability 9.0 (this device has " + std::to_string(prop.major) + "." +
                   std::to_string(prop.minor) + ")";
    return plan;
  }
  int optin = 0;
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute");
  with_step_types(s, [&](auto layers, auto head) {
    const auto kernel = decode_step_kernel<WeightOf<decltype(layers)>, WeightOf<decltype(head)>>;
    cudaFuncAttributes attributes{};
    check_cuda(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes");
    const size_t in_bytes = input_bytes(s), fixed = in_bytes + attributes.sharedSizeBytes;
    const size_t stage = size_t(kStageBytesFor<WeightOf<decltype(layers)>>);
    if (size_t(optin) < fixed + 2 * stage) {
      plan.refused = "more shared memory than the device has for its widest input vector";
      return;
    }
    plan.stages = int(std::min<size_t>(kMaxStages, (optin - fixed) / stage));
    plan.stage_bytes = int(stage);
    plan.smem = size_t(plan.stages) * stage + in_bytes;
    plan.blocks = prop.multiProcessorCount;
    // The limit belongs to the kernel, so to the whole process: a target and its draft model (or
    // MTP layer) plan different sizes, and a later, smaller plan must not cut an earlier one's
    // launches short (they fail with "invalid argument"). It is only ever raised.
    static std::mutex raising;
    static size_t most = 0;
    {
      const std::lock_guard<std::mutex> lock(raising);
      if (plan.smem > most) {
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(plan.smem)),
                   "cudaFuncSetAttribute");
        most = plan.smem;
      }
    }
    int resident = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kStepThreads, plan.smem),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    // Every block must be resident at once: the grid-wide barriers wait for all of them.
    if (resident < 1) plan.refused = "one resident block of the step kernel per multiprocessor";
  });
  return plan;
}

void decode_step(const DecodeStep& s, const DecodeStepPlan& plan, cudaStream_t stream) {
  with_step_types(s, [&](auto layers, auto head) {
    decode_step_kernel<WeightOf<decltype(layers)>, WeightOf<decltype(head)>>
        <<<plan.blocks, kStepThreads, plan.smem, stream>>>(s, plan.stages);
    check_cuda(cudaGetLastError(), "decode_step_kernel");
  });
}

}  // namespace runahead::cuda
