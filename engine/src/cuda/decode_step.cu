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
// last block to finish reduces and passes to StepEnd.
#include <algorithm>
#include <cmath>
#include <mutex>

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

// --- shared-memory barriers and bulk copies (sm_90) -------------------------------------

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(bar)) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// bytes from global src to shared dst; completion is counted on `bar`. Weights are read
// once per step, so they are marked first to leave L2.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, uint64_t* bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
      "%4;" ::"r"(smem_address(dst)),
      "l"(src), "r"(bytes), "r"(smem_address(bar)), "l"(policy)
      : "memory");
}

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
  if (m == 4 * s.layers) return {static_cast<const char*>(s.lm_head), s.vocab, H, int(sizeof(HW)), s.lm_head_scale};
  const DecodeLayer& l = s.layer[m / 4];
  switch (m % 4) {
    case 0: return {static_cast<const char*>(l.wqkv), qd + 2 * kvd, H, e, l.wqkv_scale};
    case 1: return {static_cast<const char*>(l.wo), H, qd, e, l.wo_scale};
    case 2: return {static_cast<const char*>(l.w_gate_up), 2 * s.intermediate, H, e, l.w_gate_up_scale};
    default: return {static_cast<const char*>(l.w_down), H, s.intermediate, e, l.w_down_scale};
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
constexpr int kMaxSlices = 16;

struct Shared {
  uint64_t full[kMaxStages], empty[kMaxStages];
  int issued[kMaxStages];                   // the tile each stage was last loaded with
  float slice_sum[kSliceSlots][kMaxSlices];  // per-slice sums of long rows
  int slices_done[kSliceSlots];
  float residual[kConsumers];               // x at this block's rows, read before a residual phase
  float scratch[kConsumerWarps];
  float best_v[kConsumers];
  int best_i[kConsumers];
  int flag;
};

// The producer: every tile of every matrix of the step, in order.
template <class W, class HW>
__device__ void produce(const DecodeStep& s, int stages, unsigned char* ring, Shared& sh) {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
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

// sh.residual[i] = x[rows.begin + i]: read ahead of a phase whose epilogue adds to x, before
// the block barrier that ends the phase's staging, so no tile waits on a global load.
__device__ __forceinline__ void read_residual(const float* x, const Share& rows, Shared& sh) {
  if (threadIdx.x < rows.end - rows.begin) sh.residual[threadIdx.x] = __ldcg(x + rows.begin + threadIdx.x);
}

// in[k] = v[k] * g[k] for k < H (H % 4 == 0), where load(i) gives v[4i, 4i + 4); returns
// rsqrt(mean(v^2) + eps), by which the phase scales its dot products (rmsnorm(v) * g . w =
// that * (v * g . w)), so staging needs one barrier. kBatch loads in flight per thread.
template <class Load>
__device__ float stage_normed(Load load, int H, float eps, const float* g, float* in, Shared& sh) {
  const int n = H / 4;
  float ss = 0.0f;
  for (int i0 = threadIdx.x; i0 < n; i0 += kConsumers * kBatch) {
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
      if (i >= n) continue;
      reinterpret_cast<float4*>(in)[i] = make_float4(v[b].x * w[b].x, v[b].y * w[b].y, v[b].z * w[b].z, v[b].w * w[b].w);
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

// in[h * head_dim + t] = the attention output of head h: its chunks' partials merged. A thread
// takes 4 columns of a head and has the loads of up to kBatch chunks in flight at once.
__device__ void stage_attention(const DecodeStep& s, int chunks, float* in) {
  const int hd = s.head_dim, groups = hd / 4;
  const size_t stride = softmax_stride(hd);
  for (int u = threadIdx.x; u < s.heads * groups; u += kConsumers) {
    const int h = u / groups, d = 4 * (u % groups);
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
    *reinterpret_cast<float4*>(in + size_t(h) * hd + d) =
        make_float4(total.o.x * inv, total.o.y * inv, total.o.z * inv, total.o.w * inv);
  }
  consumers_sync();
}

// in[j] = silu(gate[j]) * up[j] for j < I (I % 4 == 0): float4 loads, kBatch in flight per thread.
__device__ void stage_swiglu(const float* gate_up, int I, float* in) {
  const float4* gate = reinterpret_cast<const float4*>(gate_up);
  const float4* up = reinterpret_cast<const float4*>(gate_up + I);
  const int n = I / 4;
  for (int j0 = threadIdx.x; j0 < n; j0 += kConsumers * kBatch) {
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
      if (j < n)
        reinterpret_cast<float4*>(in)[j] = make_float4(silu(g[b].x) * u[b].x, silu(g[b].y) * u[b].y,
                                                       silu(g[b].z) * u[b].z, silu(g[b].w) * u[b].w);
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

// 16 warps and one block per multiprocessor: 128 registers a thread (4 warps share each
// quarter of the register file).
template <class W, class HW>
__global__ void __launch_bounds__(kStepThreads, 1) decode_step_kernel(DecodeStep s, int stages) {
  using EW = std::conditional_t<std::is_same_v<W, __nv_fp8_e4m3>, __nv_bfloat16, W>;  // the embedding
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
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == kConsumerWarps) {
    if (threadIdx.x % kWarp == 0) produce<W, HW>(s, stages, ring, sh);
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
  const EW* embed_row = static_cast<const EW*>(s.embed) + size_t(*s.token) * H;
  int tile = 0;
  const Share hidden_rows(H);  // this block's rows of o_proj and down, whose epilogues add to x
  const auto x_at = [&](int i) { return __ldcg(reinterpret_cast<const float4*>(s.x) + i); };
  const auto embedding_at = [&](int i) {  // the token's embedding, which block 0 also writes to x
    const float4 v = make_float4(to_float(embed_row[4 * i]), to_float(embed_row[4 * i + 1]),
                                 to_float(embed_row[4 * i + 2]), to_float(embed_row[4 * i + 3]));
    if (blockIdx.x == 0) reinterpret_cast<float4*>(s.x)[i] = v;
    return v;
  };
  for (int l = 0; l < s.layers; ++l) {
    const DecodeLayer& layer = s.layer[l];
    float inv = l == 0 ? stage_normed(embedding_at, H, s.eps, layer.attn_norm, in, sh)
                       : stage_normed(x_at, H, s.eps, layer.attn_norm, in, sh);
    consume<W, S>(matrix_of<W, HW>(s, 4 * l), in, tile, stages, ring, sh, [&](int r, float y) { s.qkv[r] = y * inv; });
    sync_grid();

    attention(s, layer, pos, in);
    sync_grid();

    read_residual(s.x, hidden_rows, sh);
    stage_attention(s, attention_chunks(s, pos + 1), in);
    consume<W, S>(matrix_of<W, HW>(s, 4 * l + 1), in, tile, stages, ring, sh,
               [&](int r, float y) { s.x[r] = sh.residual[r - hidden_rows.begin] + y; });
    sync_grid();

    inv = stage_normed(x_at, H, s.eps, layer.mlp_norm, in, sh);
    consume<W, S>(matrix_of<W, HW>(s, 4 * l + 2), in, tile, stages, ring, sh,
               [&](int r, float y) { s.gate_up[r] = y * inv; });
    sync_grid();

    read_residual(s.x, hidden_rows, sh);
    stage_swiglu(s.gate_up, I, in);
    consume<W, S>(matrix_of<W, HW>(s, 4 * l + 3), in, tile, stages, ring, sh,
               [&](int r, float y) { s.x[r] = sh.residual[r - hidden_rows.begin] + y; });
    sync_grid();
  }

  // lm_head and the argmax: each thread keeps the best of the rows it finished.
  const float inv = stage_normed(x_at, H, s.eps, s.final_norm, in, sh);
  float best_v = -INFINITY;
  int best_i = 0x7fffffff;
  consume<HW, S>(matrix_of<W, HW>(s, 4 * s.layers), in, tile, stages, ring, sh, [&](int r, float y) {
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
// layers' or fp8 (`lm_head: fp8`).
template <class F> void with_step_types(const DecodeStep& s, F&& f) {
  with_weight_type(s.dtype, [&](auto layers) {
    if (s.head_dtype == DType::F8_E4M3)
      f(layers, static_cast<const __nv_fp8_e4m3*>(nullptr));
    else
      f(layers, layers);
  });
}

size_t input_floats(const DecodeStep& s) {
  const size_t widest = std::max({size_t(s.hidden), size_t(s.heads) * s.head_dim, size_t(s.intermediate),
                                  kConsumerWarps * softmax_stride(s.head_dim)});
  return (widest + 3) / 4 * 4;
}

}  // namespace

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
  const size_t element = dtype_size(s.dtype);
  for (int K : {s.hidden, s.heads * hd, s.intermediate}) {
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
    const size_t in_bytes = input_floats(s) * sizeof(float), fixed = in_bytes + attributes.sharedSizeBytes;
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
