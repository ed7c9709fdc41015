// Causal attention of n new tokens over the f32 KV cache, with grouped-query heads.
// Head dims 64 and 128: flash attention on tensor cores (bf16 Q, K, V tiles in shared memory,
// f32 scores, online softmax, f32 output). Other head dims: an f32 CUDA-core kernel.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/mma.cuh"

namespace runahead::cuda {
namespace {

// --- tensor cores -------------------------------------------------------------------------

constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * kWarp;
constexpr int kTcQueries = kTcWarps * 16;  // queries per block: 16 per warp, one mma row block
constexpr int kTcKeys = 64;                // keys per shared-memory tile

// Shared-memory row of D bf16 plus 16 bytes: the 8 rows one ldmatrix reads start in
// different bank groups.
template <int D> constexpr int kTcStride = D + 8;

template <int D> constexpr size_t tc_smem() { return size_t(kTcQueries + 2 * kTcKeys) * kTcStride<D> * 2; }

// dst[r][0, D) = bf16(src[(row0 + r) * ld + 0 .. D)) for r < rows_in_tile; rows at or past `limit`
// are zeros. The loads of a batch are all issued before its conversions.
template <int D, int Rows>
__device__ __forceinline__ void load_tile_bf16(const float* src, size_t ld, int row0, int limit, __nv_bfloat16* dst) {
  constexpr int kVecs = D / 4, kPerThread = Rows * kVecs / kTcThreads, kBatch = 4;
  static_assert(kPerThread % kBatch == 0);
#pragma unroll
  for (int b = 0; b < kPerThread; b += kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int e = threadIdx.x + (b + i) * kTcThreads, r = e / kVecs, c = e % kVecs;
      v[i] = row0 + r < limit ? *reinterpret_cast<const float4*>(src + size_t(row0 + r) * ld + 4 * c)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int e = threadIdx.x + (b + i) * kTcThreads, r = e / kVecs, c = e % kVecs;
      *reinterpret_cast<uint2*>(dst + r * kTcStride<D> + 4 * c) =
          make_uint2(pack_bf16(v[i].x, v[i].y), pack_bf16(v[i].z, v[i].w));
    }
  }
}

// grid (heads, ceil(n / 64)); block 4 warps, warp w owning queries 16 w .. 16 w + 15 of the
// block's 64. Key/value tiles of 64 pass through shared memory; each warp computes its
// 16 x 64 scores S = Q K^T, masks keys after each query's position, folds them into its running
// max / sum, and adds P V to its 16 x D output in registers. The largest query blocks run
// first so the causal triangle's long rows do not finish last.
// Three blocks per multiprocessor (168 registers, no spills at head_dim 128) so one block's
// tile loads overlap another's tensor-core work.
template <int D>
__global__ void __launch_bounds__(kTcThreads, 3) attention_prefill_tc_kernel(DecodeAttention a, const float* q, int n,
                                                                         const int* pos, float* out) {
  extern __shared__ __align__(16) unsigned char tiles[];
  constexpr int S = kTcStride<D>;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(tiles);  // [64][S]
  __nv_bfloat16* ks = qs + kTcQueries * S;                       // [64][S]
  __nv_bfloat16* vs = ks + kTcKeys * S;                          // [64][S]
  const int h = blockIdx.x, t0 = (gridDim.y - 1 - blockIdx.y) * kTcQueries;
  const int kv = h / (a.heads / a.kv_heads), kv_dim = a.kv_heads * D;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, tq = lane % 4;
  pdl_wait();
  pdl_trigger();
  const int p0 = *pos;
  const int rows = min(n - t0, kTcQueries);
  const int keys = p0 + t0 + rows;  // every query of the block sees keys [0, keys) at most
  load_tile_bf16<D, kTcQueries>(q + size_t(h) * D, size_t(a.heads) * D, t0, n, qs);
  __syncthreads();

  // This warp's Q rows, read as A fragments (16 dims at a time) for every tile: lane l addresses
  // row l % 8 (+ 8 for matrices 1, 3) and dims + 8 for matrices 2, 3. Keeping them in
  // registers instead would cost 32 per thread and a block per multiprocessor at head_dim 128.
  const __nv_bfloat16* q_lane = qs + (warp * 16 + lane % 8 + 8 * ((lane / 8) & 1)) * S + 8 * (lane / 16);

  const bool idle = warp * 16 >= rows;        // all of this warp's queries are past n
  const int first = p0 + t0 + warp * 16;      // position of the warp's first query
  const int row_pos[2] = {first + g, first + g + 8};
  const float scale_log2 = rsqrtf(float(D)) * 1.4426950408889634f;  // scores in log2 units
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's part of the row sum

  for (int k0 = 0; k0 < keys; k0 += kTcKeys) {
    __syncthreads();  // every warp is done with the previous tile
    load_tile_bf16<D, kTcKeys>(a.k_cache + size_t(kv) * D, kv_dim, k0, keys, ks);
    load_tile_bf16<D, kTcKeys>(a.v_cache + size_t(kv) * D, kv_dim, k0, keys, vs);
    __syncthreads();
    if (idle || k0 > first + 15) continue;  // warp-uniform: every key is after every query

    // S = Q K^T: B fragments straight from K rows (key-major = the "col" layout); one x4 load
    // covers 16 keys x 16 dims: matrices (keys +0, dims +0), (keys +0, dims +8), (keys +8, ...).
    float s[kTcKeys / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qf[4];
      ldmatrix_x4(shared_address(q_lane + kk * 16), qf);
#pragma unroll
      for (int j = 0; j < kTcKeys / 16; ++j) {
        uint32_t b[4];
        ldmatrix_x4(shared_address(ks + (j * 16 + lane % 8 + 8 * (lane / 16)) * S + kk * 16 + 8 * ((lane / 8) & 1)), b);
        mma_bf16(s[2 * j], qf, b[0], b[1]);
        mma_bf16(s[2 * j + 1], qf, b[2], b[3]);
      }
    }

    // Scale, mask (only a tile that reaches past the warp's first query needs it), online softmax.
    const bool diagonal = k0 + kTcKeys - 1 > first;
    float tile_max[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < kTcKeys / 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = k0 + j * 8 + 2 * tq + (c & 1);
        s[j][c] = diagonal && key > row_pos[c / 2] ? -INFINITY : s[j][c] * scale_log2;
        tile_max[c / 2] = fmaxf(tile_max[c / 2], s[j][c]);
      }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      base[r] = tile_max[r] == -INFINITY ? 0.0f : tile_max[r];  // a row with nothing visible yet
      const float rescale = exp2f(m[r] - base[r]);
      m[r] = tile_max[r];
      l[r] *= rescale;
#pragma unroll
      for (int d = 0; d < D / 8; ++d) o[d][2 * r] *= rescale, o[d][2 * r + 1] *= rescale;
    }
#pragma unroll
    for (int j = 0; j < kTcKeys / 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[j][c] = exp2f(s[j][c] - base[c / 2]);
        l[c / 2] += s[j][c];
      }

    // O += P V: the score accumulators of keys 16 kk .. 16 kk + 15 are the A fragment as they
    // lie; V rows (key-major) need the transposed load: matrices (keys +0, dims +0),
    // (keys +8, dims +0), (keys +0, dims +8), (keys +8, dims +8).
#pragma unroll
    for (int kk = 0; kk < kTcKeys / 16; ++kk) {
      const uint32_t p[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                             pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int d = 0; d < D / 16; ++d) {
        uint32_t b[4];
        ldmatrix_x4_trans(
            shared_address(vs + (kk * 16 + lane % 8 + 8 * ((lane / 8) & 1)) * S + d * 16 + 8 * (lane / 16)), b);
        mma_bf16(o[2 * d], p, b[0], b[1]);
        mma_bf16(o[2 * d + 1], p, b[2], b[3]);
      }
    }
  }
  if (idle) return;

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int t = t0 + warp * 16 + g + 8 * r;
    if (t >= n) continue;
    const float inv = 1.0f / l[r];
    float* row = out + (size_t(t) * a.heads + h) * D + 2 * tq;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<float2*>(row + 8 * d) = make_float2(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
  }
}

template <int D>
void launch_tc(const DecodeAttention& a, const float* q, int n, const int* pos, float* out, cudaStream_t stream) {
  constexpr size_t smem = tc_smem<D>();
  if (smem > 48 * 1024)
    check_cuda(
        cudaFuncSetAttribute(attention_prefill_tc_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "cudaFuncSetAttribute(attention_prefill_tc_kernel)");
  launch_pdl(attention_prefill_tc_kernel<D>, dim3(a.heads, (n + kTcQueries - 1) / kTcQueries), dim3(kTcThreads),
             smem, stream, a, q, n, pos, out);
}

// --- CUDA cores (other head dims) ---------------------------------------------------------

constexpr int kTileKeys = 32;       // keys per shared-memory tile: one per lane
constexpr int kQueriesPerWarp = 4;
constexpr int kPrefillWarps = 8;
constexpr int kMaxHeadDim = 128;

// grid (ceil(n / 32), heads); block 8 warps, each owning 4 queries. Keys and values pass
// through shared memory a tile of 32 at a time; lane j scores key j, then every lane
// accumulates head_dim / 32 output columns. Online softmax, f32 throughout.
__global__ void __launch_bounds__(kPrefillWarps * kWarp)
    attention_prefill_cuda_cores_kernel(DecodeAttention a, const float* q, int n, const int* pos, float* out) {
  extern __shared__ float smem[];
  pdl_wait();
  pdl_trigger();
  const int h = blockIdx.y, hd = a.head_dim, kv_dim = a.kv_heads * hd, kv = h / (a.heads / a.kv_heads);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  // ks: [32][hd + 1] (padded: lane j reads row j), vs: [32][hd], qs: [warps][4][hd].
  float* ks = smem;
  float* vs = ks + kTileKeys * (hd + 1);
  float* qs = vs + kTileKeys * hd + size_t(warp) * kQueriesPerWarp * hd;
  const int t0 = blockIdx.x * kPrefillWarps * kQueriesPerWarp + warp * kQueriesPerWarp;
  const int p0 = *pos;
  const float scale = rsqrtf(float(hd));
  constexpr int kCols = kMaxHeadDim / kWarp;  // output columns per lane: d = lane + 32 c
  for (int i = 0; i < kQueriesPerWarp; ++i)
    for (int d = lane; d < hd; d += kWarp)
      qs[i * hd + d] = t0 + i < n ? q[(size_t(t0 + i) * a.heads + h) * hd + d] : 0.0f;
  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][kCols];
#pragma unroll
  for (int i = 0; i < kQueriesPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;
  }
  // Keys up to the block's last query position.
  const int block_last = min(n, int(blockIdx.x + 1) * kPrefillWarps * kQueriesPerWarp) - 1;
  const int keys = p0 + block_last + 1;
  for (int k0 = 0; k0 < keys; k0 += kTileKeys) {
    __syncthreads();
    for (int i = threadIdx.x; i < kTileKeys * hd; i += blockDim.x) {
      const int j = i / hd, d = i % hd;
      const bool in = k0 + j < keys;
      ks[j * (hd + 1) + d] = in ? a.k_cache[size_t(k0 + j) * kv_dim + size_t(kv) * hd + d] : 0.0f;
      vs[j * hd + d] = in ? a.v_cache[size_t(k0 + j) * kv_dim + size_t(kv) * hd + d] : 0.0f;
    }
    __syncthreads();
    float s[kQueriesPerWarp];
#pragma unroll
    for (int i = 0; i < kQueriesPerWarp; ++i) s[i] = 0.0f;
    for (int d = 0; d < hd; ++d) {
      const float kd = ks[lane * (hd + 1) + d];
#pragma unroll
      for (int i = 0; i < kQueriesPerWarp; ++i) s[i] = fmaf(qs[i * hd + d], kd, s[i]);
    }
    // Online softmax per query; p[i] is this lane's key's weight for query i.
    float p[kQueriesPerWarp];
    bool any = false;
#pragma unroll
    for (int i = 0; i < kQueriesPerWarp; ++i) {
      const int key = k0 + lane, query_pos = p0 + t0 + i;
      const bool visible = t0 + i < n && key <= query_pos;
      const float tile_max = warp_max(visible ? s[i] : -INFINITY);
      p[i] = 0.0f;
      if (tile_max == -INFINITY) continue;  // warp-uniform: nothing visible in this tile
      any = true;
      const float m_new = fmaxf(m[i], tile_max);
      p[i] = visible ? expf((s[i] - m_new) * scale) : 0.0f;
      const float rescale = expf((m[i] - m_new) * scale);
      l[i] = l[i] * rescale + warp_sum(p[i]);
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[i][c] *= rescale;
    }
    if (!any) continue;  // warp-uniform
    // acc[i][c] += sum_j p_j[i] v[j][lane + 32 c]: each value row is read once for 4 queries.
    for (int j = 0; j < kTileKeys; ++j) {
      float pj[kQueriesPerWarp];
#pragma unroll
      for (int i = 0; i < kQueriesPerWarp; ++i) pj[i] = __shfl_sync(0xffffffffu, p[i], j);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        if (lane + kWarp * c >= hd) break;
        const float v = vs[j * hd + lane + kWarp * c];
#pragma unroll
        for (int i = 0; i < kQueriesPerWarp; ++i) acc[i][c] = fmaf(pj[i], v, acc[i][c]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kQueriesPerWarp; ++i) {
    if (t0 + i >= n) continue;
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      if (lane + kWarp * c < hd) out[(size_t(t0 + i) * a.heads + h) * hd + lane + kWarp * c] = acc[i][c] / l[i];
  }
}


void launch_cuda_cores(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                       cudaStream_t stream) {
  if (a.head_dim > kMaxHeadDim)
    throw EngineError("unsupported", "head_dim " + std::to_string(a.head_dim) + " above " +
                                         std::to_string(kMaxHeadDim) + " in the CUDA prefill attention");
  const int per_block = kPrefillWarps * kQueriesPerWarp;
  const size_t smem = (size_t(kTileKeys) * (2 * a.head_dim + 1) + size_t(per_block) * a.head_dim) * sizeof(float);
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(attention_prefill_cuda_cores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)),
               "cudaFuncSetAttribute(attention_prefill_cuda_cores_kernel)");
  launch_pdl(attention_prefill_cuda_cores_kernel, dim3((n + per_block - 1) / per_block, a.heads),
             dim3(kPrefillWarps * kWarp), smem, stream, a, q, n, pos, out);
}

}  // namespace

void attention_prefill(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                       cudaStream_t stream) {
  switch (a.head_dim) {
    case 64: return launch_tc<64>(a, q, n, pos, out, stream);
    case 128: return launch_tc<128>(a, q, n, pos, out, stream);
    default: return launch_cuda_cores(a, q, n, pos, out, stream);
  }
}

}  // namespace runahead::cuda
