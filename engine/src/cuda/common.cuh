#pragma once
// Device helpers every op file shares: weight chunks of each dtype, the warp dot product
// that streams weight rows at full bandwidth, reductions, and programmatic dependent launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuda/check.h"
#include "cuda/kernels.h"
#include "cuda/trace.cuh"
#include "model/tensor.h"

namespace runahead::cuda {

constexpr int kWarp = 32;

// Programmatic dependent launch: a kernel may start while the previous one drains. Before
// pdl_wait() it may only read weights; pdl_wait() returns once the previous grid is done
// and its writes are visible. pdl_trigger() lets the next kernel start launching; every kernel
// calls it only after its pdl_wait, so a kernel's start implies that every kernel before the one
// it follows has ended (a ring's producer warp, which waits for nothing, relies on it:
// kernels.h RingFlags::producer_unwaited).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  trace_note_wait();
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Pulls [p, p + bytes) towards L2 without waiting, one 128-byte line per lane and step.
__device__ __forceinline__ void prefetch_l2(const void* p, size_t bytes, int lane) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = size_t(lane) * 128; off < bytes; off += 128 * kWarp)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + off));
}

// 16 bytes of weights, read once: skip L1 so the activations stay there.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// A 16-byte chunk of a weight row of type W holds kElems values.
template <class W> struct Chunk;
template <> struct Chunk<__nv_bfloat16> {
  static constexpr int kElems = 8;
  __device__ static void unpack(uint4 v, float (&f)[8]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(u[i] << 16);
      f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  }
};
template <> struct Chunk<__half> {
  static constexpr int kElems = 8;
  __device__ static void unpack(uint4 v, float (&f)[8]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
};
template <> struct Chunk<float> {
  static constexpr int kElems = 4;
  __device__ static void unpack(uint4 v, float (&f)[4]) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
};

// fp8 e4m3 (model/fp8.h): 16 values a chunk. The dot products do not widen each weight to
// f32 (two conversions a weight bound the kernels at a third of the memory bandwidth): pairs
// become f16x2 by one conversion, each pair's products with the inputs (f16x2, scaled by
// kFp8InputScale so that 448 times an input stays far inside f16's range) are summed in f16
// over the chunk's 16 weights, and only that sum is widened and added in f32. The sums are
// multiplied by kFp8OutputScale = 1 / kFp8InputScale, then by the row's scale. f16 products
// round to 2^-11, far below the 2^-4 of an e4m3 weight.
template <> struct Chunk<__nv_fp8_e4m3> {
  static constexpr int kElems = 16;
  __device__ static void unpack_h2(uint4 v, __half2 (&w)[8]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __half2_raw r =
            __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[i] >> (16 * h)), __NV_E4M3);
        w[2 * i + h] = *reinterpret_cast<const __half2*>(&r);
      }
  }
  __device__ static void unpack(uint4 v, float (&f)[16]) {
    __half2 w[8];
    unpack_h2(v, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 p = __half22float2(w[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
};
constexpr float kFp8InputScale = 0x1p-9f, kFp8OutputScale = 0x1p9f;

// The chunk's inputs x[0..16) times kFp8InputScale, as f16 pairs.
__device__ __forceinline__ void fp8_inputs(const float (&x)[16], __half2 (&h)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = __floats2half2_rn(x[2 * i] * kFp8InputScale, x[2 * i + 1] * kFp8InputScale);
}
// sum of w[i] * x[i] over a chunk, in f16, returned as f32.
__device__ __forceinline__ float fp8_chunk_dot(const __half2 (&w)[8], const __half2 (&x)[8]) {
  __half2 s = __hmul2(w[0], x[0]);
#pragma unroll
  for (int i = 1; i < 8; ++i) s = __hfma2(w[i], x[i], s);
  const float2 f = __half22float2(s);
  return f.x + f.y;
}
template <class W> constexpr bool kIsFp8 = std::is_same_v<W, __nv_fp8_e4m3>;

// Q8_0 (model/quant_format.h) as the device keeps it: the blocks' int8 weights as rows of K
// ([rows, K], 16 weights a chunk, as dense rows are read) and their f16 scales apart
// ([rows, K / 32], a chunk's scale at index chunk / 2 of its row); read by q8_0_dot_rows.
struct Q8Weight {
  int8_t q;
};
constexpr int kQ8Block = 32;
template <> struct Chunk<Q8Weight> {
  static constexpr int kElems = 16;
};
template <class W> constexpr bool kIsQ8 = std::is_same_v<W, Q8Weight>;

}  // namespace runahead::cuda
#include "cuda/kquant.cuh"
namespace runahead::cuda {
// A K-quant chunk (kquant.cuh): 16 bytes of 4-bit weights, 32 weights; read by its own dot product.
template <> struct Chunk<KQWeight> {
  static constexpr int kElems = 32;
};

// What a sum of W's products is multiplied by (before a row's scale).
template <class W> constexpr float kSumScale = kIsFp8<W> ? kFp8OutputScale : 1.0f;

template <class W> __device__ __forceinline__ float to_float(W v);
template <> __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float(float v) { return v; }
template <> __device__ __forceinline__ float to_float(__nv_fp8_e4m3 v) { return float(v); }

// Calls f with a null pointer of the C++ type that `dtype` names.
template <class F> void with_weight_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::BF16: f(static_cast<const __nv_bfloat16*>(nullptr)); break;
    case DType::F16: f(static_cast<const __half*>(nullptr)); break;
    case DType::F32: f(static_cast<const float*>(nullptr)); break;
    case DType::F8_E4M3: f(static_cast<const __nv_fp8_e4m3*>(nullptr)); break;
    default: break;  // I8 and the block formats never reach these kernels (with_matrix_type: Q8_0)
  }
}

// with_weight_type for a matrix of the matrix-vector ops, which also read Q8_0 (as Q8Weight)
// and K-quant matrices (DType::Q4_K on the device, kquant.cuh, as KQWeight).
template <class F> void with_matrix_type(DType dtype, F&& f) {
  if (dtype == DType::Q8_0)
    f(static_cast<const Q8Weight*>(nullptr));
  else if (dtype == DType::Q4_K || dtype == DType::Q6_K)
    f(static_cast<const KQWeight*>(nullptr));
  else
    with_weight_type(dtype, std::forward<F>(f));
}

// The element type with_weight_type passed, as a type.
template <class P> using WeightOf = std::remove_cv_t<std::remove_pointer_t<P>>;

// pick(NT) for the token count NT a matrix-vector kernel is built for that serves n tokens:
// 1, 2, 4, kMidVecTokens or kMaxVecTokens (NT arrives as a std::integral_constant). A build
// for more tokens than the step has costs it registers (fewer resident warps) and latency.
template <class Pick> auto for_vec_tokens(int n, Pick&& pick) {
  if (n == 1) return pick(std::integral_constant<int, 1>{});
  if (n == 2) return pick(std::integral_constant<int, 2>{});
  if (n <= 4) return pick(std::integral_constant<int, 4>{});
  if (n <= kMidVecTokens) return pick(std::integral_constant<int, kMidVecTokens>{});
  return pick(std::integral_constant<int, kMaxVecTokens>{});
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// acc[r][t] = sum_k w[r][k] * x[t * ldx + k] * (g ? g[k] : 1)   for r < R, t < n <= NT and
// k in 16-byte chunks [c_begin, c_end) of the rows (the dense types and fp8; Q8_0 and the
// K-quants have their own, on int8 inputs). Each lane streams 16-byte weight
// chunks, U of them per row in flight; the result is summed across the warp and valid in
// every lane. x may live in shared or global memory. One token: load U chunks, then use them.
// Several: the next U chunks are loaded while these are used (their compute per chunk grows
// with the tokens; without the overlap a warp had no loads in flight for that long).
template <class W, int R, int NT>
__device__ __forceinline__ void warp_dot_rows(const W* const (&w)[R], int c_begin, int c_end, const float* x, int ldx,
                                              int n, const float* g, float (&acc)[R][NT]) {
  constexpr int E = Chunk<W>::kElems;
  constexpr int U = NT > 1 ? 2 : R == 1 ? 8 : 4;
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  const auto load = [&](int c0, uint4 (&wv)[U][R]) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
        wv[u][r] = c0 + kWarp * u < c_end ? load_stream(w[r] + size_t(c0 + kWarp * u) * E) : make_uint4(0, 0, 0, 0);
  };
  const auto use = [&](int c0, const uint4 (&wv)[U][R]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + kWarp * u;
      if (c >= c_end) break;
      float gv[E];
#pragma unroll
      for (int e = 0; e < E; ++e) gv[e] = 1.0f;
      if (g) {
#pragma unroll
        for (int e = 0; e < E; e += 4) {
          const float4 v = __ldg(reinterpret_cast<const float4*>(g + c * E + e));
          gv[e] = v.x, gv[e + 1] = v.y, gv[e + 2] = v.z, gv[e + 3] = v.w;
        }
      }
      // Token t's inputs of this chunk, times g when `scaled` (else g is in the weights already).
      const auto inputs = [&](int t, float (&xv)[E], bool scaled = true) {
#pragma unroll
        for (int e = 0; e < E; e += 4) {
          const float4 v = *reinterpret_cast<const float4*>(x + size_t(t) * ldx + c * E + e);
          if (scaled)
            xv[e] = v.x * gv[e], xv[e + 1] = v.y * gv[e + 1], xv[e + 2] = v.z * gv[e + 2], xv[e + 3] = v.w * gv[e + 3];
          else
            xv[e] = v.x, xv[e + 1] = v.y, xv[e + 2] = v.z, xv[e + 3] = v.w;
        }
      };
      if constexpr (kIsFp8<W>) {
        __half2 wh[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) Chunk<W>::unpack_h2(wv[u][r], wh[r]);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= n) break;
          float xv[E];
          inputs(t, xv);
          __half2 xh[8];
          fp8_inputs(xv, xh);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][t] += fp8_chunk_dot(wh[r], xh);
        }
      } else {
        float wf[R][E];
#pragma unroll
        for (int r = 0; r < R; ++r) Chunk<W>::unpack(wv[u][r], wf[r]);
        // g multiplies the chunk's weights once rather than each token's inputs.
        if (g)
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int e = 0; e < E; ++e) wf[r][e] *= gv[e];
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= n) break;
          float xv[E];
          inputs(t, xv, false);
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int e = 0; e < E; ++e) acc[r][t] = fmaf(wf[r][e], xv[e], acc[r][t]);
        }
      }
    }
  };
  if constexpr (NT == 1) {
    for (int c0 = c_begin + lane; c0 < c_end; c0 += kWarp * U) {
      uint4 wv[U][R];
      load(c0, wv);
      use(c0, wv);
    }
  } else {
    uint4 wv[U][R], next[U][R];
    int c0 = c_begin + lane;
    if (c0 < c_end) load(c0, wv);
    for (; c0 < c_end; c0 += kWarp * U) {
      if (c0 + kWarp * U < c_end) load(c0 + kWarp * U, next);
      use(c0, wv);
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) wv[u][r] = next[u][r];
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);
}

// The matrix-vector ops run blocks of kGemvWarps warps. A unit (R rows) is shared by
// `split` warps, each taking a contiguous part of K, so matrices with few rows still
// keep every multiprocessor's loads in flight.
constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * kWarp;

// Resident blocks per multiprocessor the matrix-vector kernels are built for (__launch_bounds__):
// a one-token K-quant kernel is held to 3 (80 registers, from 125; its loads wait on shared
// memory and L1, so more resident warps hide more of it); RUNAHEAD_KQ_MIN_BLOCKS=1 at build
// time lifts the cap, to measure what it gains. Every other kernel: 1 (no cap).
#ifndef RUNAHEAD_KQ_MIN_BLOCKS
#define RUNAHEAD_KQ_MIN_BLOCKS 3
#endif
template <class W, int NT> constexpr int kGemvMinBlocks = kIsKQ<W> && NT == 1 ? RUNAHEAD_KQ_MIN_BLOCKS : 1;

struct GemvSplit {
  int split, slot, part, c_begin, c_end;
  __device__ GemvSplit(int split_, int chunks) : split(split_) {
    const int warp = threadIdx.x / kWarp;
    slot = warp / split;
    part = warp % split;
    const int per_part = (chunks + split - 1) / split;
    c_begin = min(chunks, part * per_part);
    c_end = min(chunks, c_begin + per_part);
  }
  __device__ int units_per_block() const { return kGemvWarps / split; }
};

// A weight matrix as the matrix-vector ops read it: rows of K elements of W, and `scale`: for
// fp8 an f32 per row by which each row's sums are multiplied, for Q8_0 the f16 block scales
// ([rows, K / 32]), for a K-quant matrix its Q6_K rows (from row q6_from on; `w` holds the
// Q4_K rows before it), null otherwise.
template <class W> struct RowMatrix {
  const W* w;
  const void* scale;
  int K;
  int q6_from = 0;
  __device__ const W* row(int r) const { return w + size_t(r) * K; }
  __device__ const uint8_t* kq_row(int r) const {
    return r < q6_from ? reinterpret_cast<const uint8_t*>(w) + size_t(r) * q4k_row_bytes(K)
                       : static_cast<const uint8_t*>(scale) + size_t(r - q6_from) * q6k_row_bytes(K);
  }
  __device__ const __half* block_scales(int r) const {
    return kIsQ8<W> ? static_cast<const __half*>(scale) + size_t(r) * (K / kQ8Block) : nullptr;
  }
};

// warp_dot_rows for R rows of a Q8_0 matrix (w: int8 weights, d: their f16 block scales) on
// int8 inputs (kquant.cuh Q8Inputs): a chunk's 16 products are 4 dp4a, scaled once by the
// block's scale times the inputs' (llama.cpp's vec_dot_q8_0_q8_1). kTile: w and d lie in a
// tile in shared memory (kquant.cuh weight16).
template <int R, int NT, bool kTile = false>
__device__ __forceinline__ void q8_0_dot_rows(const Q8Weight* const (&w)[R], const __half* const (&d)[R], int c_begin,
                                              int c_end, const Q8Inputs& in, int n, float (&acc)[R][NT]) {
  constexpr int U = NT > 1 ? 2 : 4;
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  for (int c0 = c_begin + lane; c0 < c_end; c0 += kWarp * U) {
    uint4 wv[U][R];
    float scale[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = c0 + kWarp * u;
        wv[u][r] = c < c_end ? weight16<kTile>(w[r] + size_t(c) * 16) : make_uint4(0, 0, 0, 0);
        scale[u][r] = c < c_end ? __half2float(read_only<kTile>(d[r] + c / 2)) : 0.0f;
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + kWarp * u;
      if (c >= c_end) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= n) break;
        const uint4 x = *reinterpret_cast<const uint4*>(in.q + size_t(t) * in.K + size_t(c) * 16);
        const float xd = in.d[size_t(t) * (in.K / 32) + c / 2];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          acc[r][t] = fmaf(scale[u][r] * xd, float(run_dot(wv[u][r], x)), acc[r][t]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);
}

// Whether a matrix of W reads its inputs quantized to int8 (Q8Inputs): Q8_0 and the K-quants.
template <class W> constexpr bool kQ8Inputs = kIsQ8<W> || kIsKQ<W>;

// warp_dot_rows for the R rows `rows` of a K-quant matrix (kquant.cuh); the rows of a unit are
// all Q4_K or all Q6_K.
template <int R, int NT>
__device__ __forceinline__ void kq_dot_rows(const RowMatrix<KQWeight>& m, const int (&rows)[R], int c_begin,
                                            int c_end, const Q8Inputs& in, int n, float (&acc)[R][NT]) {
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  const uint8_t* row[R];
#pragma unroll
  for (int r = 0; r < R; ++r) row[r] = m.kq_row(rows[r]);
  if (rows[0] < m.q6_from)
    q4k_dot_rows<R, NT>(row, m.K, c_begin, c_end, in, n, acc);
  else
    q6k_dot_rows<R, NT>(row, m.K, c_begin, c_end, in, n, acc);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = warp_sum(acc[r][t]);
}

// Pulls this warp's share of unit u's rows towards L2 without waiting (a K-quant row's
// headers, high bits and scales too); returns the weight bytes it asked for.
template <class W, int R, class RowsOf>
__device__ __forceinline__ size_t prefetch_unit(const RowMatrix<W>& m, int u, const GemvSplit& s, RowsOf rows_of) {
  const int lane = threadIdx.x % kWarp;
  const size_t bytes = size_t(s.c_end - s.c_begin) * 16;
  int rows[R];
  rows_of(u, rows);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if constexpr (kIsKQ<W>) {
      const uint8_t* row = m.kq_row(rows[r]);
      prefetch_l2(row + size_t(s.c_begin) * 16, bytes, lane);
      if (s.c_end <= s.c_begin) continue;
      if (rows[r] < m.q6_from) {
        prefetch_l2(row + m.K / 2 + size_t(s.c_begin / 8) * 16, size_t((s.c_end - 1) / 8 - s.c_begin / 8 + 1) * 16, lane);
      } else {
        const size_t high = q6k_high_at(m.K, s.c_begin);
        prefetch_l2(row + high, q6k_high_at(m.K, s.c_end - 1) + 16 - high, lane);
        const size_t scales = q6k_scales_at(m.K, s.c_begin);
        prefetch_l2(row + scales, q6k_row_bytes(m.K) - scales, lane);  // scales, then d
      }
    } else {
      prefetch_l2(m.row(rows[r]) + size_t(s.c_begin) * Chunk<W>::kElems, bytes, lane);
    }
  }
  return R * bytes;
}

// Before pdl_wait(): pulls this warp's share of its first units (up to kPrefetchBytes)
// towards L2, so the loads after the wait start from L2 while DRAM keeps streaming.
constexpr size_t kPrefetchBytes = 8192;
template <class W, int R, class RowsOf>
__device__ __forceinline__ void prefetch_units(const RowMatrix<W>& m, int units, int split, RowsOf rows_of) {
  const GemvSplit s(split, m.K / Chunk<W>::kElems);
  size_t done = 0;
  for (int u = blockIdx.x * s.units_per_block() + s.slot; u < units && done < kPrefetchBytes;
       u += gridDim.x * s.units_per_block())
    done += prefetch_unit<W, R>(m, u, s, rows_of);
}

// Visits every unit once: rows_of(u, rows) names its R row indices of m, epilogue(u, acc) runs
// in the warp holding the full sums (lane t owns token t), scaled by the rows' scales. Every
// thread of the block calls it (it synchronises when split > 1); `red` holds
// kGemvWarps * R * NT floats. A Q8_0 or K-quant matrix reads its inputs from q8 (x and g unused).
// preload(u, pre) runs in that warp before the unit's dot products (lane t may load into pre
// what token t's epilogue reads: a residual's old x, a bias, RoPE's cos and sin) and the
// epilogue is epilogue(u, acc, pre): the loads overlap the sums instead of following them
// (H200, Q8_0 decode, v29: 7B 2.850 -> 2.742 ms/token).
constexpr int kPreloads = 4;  // floats a preload leaves a lane (here and in ring_gemv), 0 if it loads none
struct NoPreload {
  __device__ void operator()(int, float (&)[kPreloads]) const {}
};
// cursor (zero before the launch; the caller sets it back to zero once every block is done):
// after its first units, each block takes the next ones not yet taken (a count in *cursor past
// the first round) instead of striding, so blocks that run faster take more.
template <class W, int R, int NT, class RowsOf, class Epilogue, class Preload = NoPreload>
__device__ __forceinline__ void block_gemv(const RowMatrix<W>& m, int units, int split, const float* x, int ldx,
                                           int n, const float* g, float* red, RowsOf rows_of, Epilogue epilogue,
                                           const Q8Inputs& q8 = {}, Preload preload = {}, int* cursor = nullptr) {
  const GemvSplit s(split, m.K / Chunk<W>::kElems);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  __shared__ int next_base;
  for (int base = blockIdx.x * s.units_per_block(); base < units;) {
    int taken = 0;  // thread 0: the next units, asked for now, read after this round's sums
    if (cursor && threadIdx.x == 0) taken = int(gridDim.x) * s.units_per_block() + atomicAdd(cursor, s.units_per_block());
    const int u = base + s.slot;
    float acc[R][NT];
    int rows[R];
    float pre[kPreloads];
#pragma unroll
    for (int i = 0; i < kPreloads; ++i) pre[i] = 0.0f;
    if (s.part == 0 && u < units) preload(u, pre);
    if (u < units) {
      rows_of(u, rows);
      if constexpr (kIsKQ<W>) {
        kq_dot_rows<R, NT>(m, rows, s.c_begin, s.c_end, q8, n, acc);
      } else {
        const W* w[R];
#pragma unroll
        for (int r = 0; r < R; ++r) w[r] = m.row(rows[r]);
        if constexpr (kIsQ8<W>) {
          const __half* d[R];
#pragma unroll
          for (int r = 0; r < R; ++r) d[r] = m.block_scales(rows[r]);
          q8_0_dot_rows<R, NT>(w, d, s.c_begin, s.c_end, q8, n, acc);
        } else {
          warp_dot_rows<W, R, NT>(w, s.c_begin, s.c_end, x, ldx, n, g, acc);
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    }
    if (split > 1) {
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int t = 0; t < NT; ++t) red[(warp * R + r) * NT + t] = acc[r][t];
      __syncthreads();
      if (s.part == 0)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            float sum = 0.0f;
            for (int p = 0; p < split; ++p) sum += red[((warp + p) * R + r) * NT + t];
            acc[r][t] = sum;
          }
      __syncthreads();
    }
    if (s.part == 0 && u < units) {
      if (kIsFp8<W> && m.scale)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float scale = __ldg(static_cast<const float*>(m.scale) + rows[r]) * kSumScale<W>;
#pragma unroll
          for (int t = 0; t < NT; ++t) acc[r][t] *= scale;
        }
      epilogue(u, acc, pre);
    }
    if (cursor) {
      if (threadIdx.x == 0) next_base = taken;
      __syncthreads();
      base = next_base;
      __syncthreads();
    } else {
      base += gridDim.x * s.units_per_block();
    }
  }
}

// Host side: warps per unit. Short rows (K < 3072): the most that keeps the matrix within
// one round of the resident warps (`blocks_per_sm` blocks of kGemvWarps). Long rows: the
// fewest that give two rounds, so no warp walks a whole long row alone. (Measured on an
// H200 for the Qwen2.5-Coder shapes: engine/bench/cuda/NOTES.md.)
inline int gemv_split(int units, int K, int sms, int blocks_per_sm) {
  const size_t resident_warps = size_t(sms) * blocks_per_sm * kGemvWarps;
  if (K >= 3072) {
    int split = 1;
    while (split < kGemvWarps && size_t(units) * split < 2 * resident_warps) split *= 2;
    return split;
  }
  for (int split = kGemvWarps; split > 1; split /= 2)
    if (size_t(units) * split <= resident_warps) return split;
  return 1;
}

// Resident blocks per multiprocessor of `kernel`.
template <class Kernel> int blocks_per_sm(Kernel kernel, int threads, size_t smem) {
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return per_sm > 0 ? per_sm : 1;
}

// Lane l's value v of 32 (one per lane of the warp) quantized as llama.cpp's quantize_q8_1:
// scale = largest magnitude / 127, q = round(v / scale) (0 when all are 0). (One reciprocal a
// group, v * (1 / scale) as llama.cpp's CPU quantizer does, measured no faster: NOTES v47.)
__device__ __forceinline__ int8_t q8_value(float v, float amax, float scale) {
  return int8_t(amax == 0.0f ? 0 : int(roundf(v / scale)));
}
__device__ __forceinline__ int8_t q8_lane(float v, float& scale) {
  const float amax = warp_max(fabsf(v));
  scale = amax / 127.0f;
  return q8_value(v, amax, scale);
}

// The floats before stage_q8's int8 values: its K / 32 scales, padded to 16 bytes.
__host__ __device__ constexpr int stage_q8_scales(int K) { return (K / 32 + 3) / 4 * 4; }
// One token's inputs x[k] * g[k] quantized as quantize_inputs_q8 does (the same bits) into
// shared memory: `staged` holds K / 32 scales (stage_q8_scales), then K int8 values; and warp
// w's sum of x[k]^2 in squares[w] (blockDim.x / 32 floats): an RMSNorm's sums from the same
// pass over x. Every thread calls it. x is the previous kernel's output, read after pdl_wait,
// so its loads are on the step's critical path: a lane loads 4 consecutive values a load and
// issues kStageLoads loads of x and of g before it uses any (a group of 32 is 8 lanes), so a
// block of 9 warps stages K <= 4608 in one round trip to memory. (A value a lane and 4 groups
// a round took 4 rounds for the 7B's K = 3584; H200, Q4_K_M, us a step alone: 7B q/k/v 300 ->
// 200, gate/up 722 -> 626; 1.5B q/k/v 186 -> 160, gate/up 324 -> 281.) `planar` (K bytes, or
// null): the values' pair-planar copy too. Trace mark 5 (trace.h): thread 0 has staged its part.
constexpr int kStageLoads = 4;
// Named barrier 1 of the block's first `threads` threads (whole warps; the others do not wait).
__device__ __forceinline__ void sync_first_threads(int threads) {
  asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
}
// `all_but_last`: the block's last warp takes no part (it neither stages nor waits: its
// threads must not call it), the others meet at named barrier 1 instead of the block's.
__device__ __forceinline__ Q8Inputs stage_q8(const float* x, const float* g, int K, float* staged, float* squares,
                                             int8_t* planar = nullptr, bool all_but_last = false) {
  int8_t* q = reinterpret_cast<int8_t*>(staged + stage_q8_scales(K));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp - (all_but_last ? 1 : 0);
  float sq = 0.0f;
  for (int base = 0; base < K; base += kStageLoads * warps * 128) {
    float4 xv[kStageLoads], gv[kStageLoads];
#pragma unroll
    for (int u = 0; u < kStageLoads; ++u) {
      const int k = base + (u * warps + warp) * 128 + 4 * lane;  // K % 32 == 0: a group is all in or out
      xv[u] = k < K ? *reinterpret_cast<const float4*>(x + k) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      gv[u] = k < K ? __ldg(reinterpret_cast<const float4*>(g + k)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kStageLoads; ++u) {
      const int k = base + (u * warps + warp) * 128 + 4 * lane;
      if (base + (u * warps + warp) * 128 >= K) break;  // the warp's whole load is past the end
      const float4 a = xv[u], b = gv[u];
      sq = fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(a.z, a.z, fmaf(a.w, a.w, sq))));
      const float v[4] = {a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w};
      float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
      for (int o = 1; o < 8; o *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));  // the group's 8 lanes
      const float scale = amax / 127.0f;
      uint32_t packed = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        packed |= uint32_t(uint8_t(q8_value(v[i], amax, scale))) << (8 * i);
      if (k < K) {
        *reinterpret_cast<uint32_t*>(q + k) = packed;
        if (planar) *reinterpret_cast<uint32_t*>(planar + planar_index(k, K)) = packed;
        if (lane % 8 == 0) staged[k / 32] = scale;
      }
    }
  }
  trace_mark(4);  // thread 0 has stored its part (so its loads of x and g are back)
  sq = warp_sum(sq);
  if (lane == 0) squares[warp] = sq;
  if (all_but_last)
    sync_first_threads(warps * kWarp);
  else
    __syncthreads();
  return Q8Inputs{q, staged, K, planar};
}
// Its bytes of shared memory.
constexpr size_t stage_q8_bytes(int K) { return size_t(K) + size_t(stage_q8_scales(K)) * sizeof(float); }

// Stages h[k] = x[k] * inv * g[k] (one token) in shared memory for the dot products.
__device__ __forceinline__ void stage_normed(const float* x, float inv, const float* g, int K, float* h) {
  for (int k = threadIdx.x; k < K; k += blockDim.x) h[k] = x[k] * inv * g[k];
  __syncthreads();
}

// inv[t] = 1 / sqrt(mean(x[t, :]^2) + eps) for t < n <= NT, x: [n, H]; every thread of the
// block calls it; `scratch` holds NT * (blockDim.x / 32) floats; the result is in `inv`.
template <int NT>
__device__ __forceinline__ void block_inv_rms(const float* x, int H, int n, float eps, float* scratch,
                                              float* inv) {
  float s[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    s[t] = 0.0f;
    if (t < n)
      for (int i = threadIdx.x; i < H; i += blockDim.x) {
        const float v = x[size_t(t) * H + i];
        s[t] = fmaf(v, v, s[t]);
      }
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    s[t] = warp_sum(s[t]);
    if (lane == 0) scratch[t * warps + warp] = s[t];
  }
  __syncthreads();
  if (threadIdx.x < NT) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += scratch[threadIdx.x * warps + w];
    inv[threadIdx.x] = rsqrtf(total / float(H) + eps);
  }
  __syncthreads();
}

// The inputs of a norm-fused op (rmsnorm(x) * norm times a matrix of W), and 1/rms of token 0
// (inv[t] for every token t < n is in `inv` too, except for one token of Q8_0 or K-quants).
// One token stages them in shared memory: x * inv * norm for the dense types and fp8
// (kStagesNormed: the sums need no scale), x * norm quantized for Q8_0 and the K-quants
// (stage_q8, which also sums the squares in the same pass; inv then scales the sums, as it does
// for several tokens). Several tokens: q8 as given (quantized by prepare_norm_inputs).
// Every thread calls it; `scratch` holds NT * kGemvWarps floats.
template <class W, int NT> constexpr bool kStagesNormed = NT == 1 && !kQ8Inputs<W>;
struct NormInputs {
  Q8Inputs q8;
  float inv0;
};
template <class W, int NT>
__device__ __forceinline__ NormInputs norm_inputs(const float* x, int n, float eps, const float* norm, int H,
                                                  float* staged, float* scratch, float* inv, Q8Inputs q8) {
  if constexpr (NT == 1 && kQ8Inputs<W>) {
    const Q8Inputs staged_q8 = stage_q8(x, norm, H, staged, scratch);
    float total = 0.0f;
    for (int w = 0; w < int(blockDim.x) / kWarp; ++w) total += scratch[w];
    return {staged_q8, rsqrtf(total / float(H) + eps)};
  }
  block_inv_rms<NT>(x, H, n, eps, scratch, inv);
  if constexpr (kStagesNormed<W, NT>) stage_normed(x, inv[0], norm, H, staged);
  return {q8, inv[0]};
}
// Host side, before a norm-fused op of n tokens: several tokens' inputs of a Q8_0 or K-quant
// matrix quantized into q8; returns the shared memory its kernel stages one token in.
template <class W>
size_t prepare_norm_inputs(const float* x, const float* norm, int n, int H, const Q8Scratch& q8, cudaStream_t stream) {
  if (kQ8Inputs<W> && n > 1) quantize_inputs_q8(x, norm, n, H, q8, stream);
  return n > 1 ? 0 : kQ8Inputs<W> ? stage_q8_bytes(H) : size_t(H) * sizeof(float);
}

// The launch attribute that makes every `blocks` consecutive blocks along x one thread block
// cluster (Hopper).
inline cudaLaunchAttribute cluster_attribute(unsigned blocks) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = blocks;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}

// Kernels launched through here may overlap their prologue with the previous kernel;
// `cluster` > 0: in clusters of that many blocks along x (cluster_attribute).
template <class... KArgs, class... Args>
void launch_pdl_clusters(unsigned cluster, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() ? 1 : 0;
  attr[1] = cluster_attribute(cluster);
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = cluster > 0 ? 2 : 1;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), "cudaLaunchKernelEx");
}
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_clusters(0, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// The end of a step, by one thread once tokens[t < n] are known (see StepEnd).
__device__ __forceinline__ void finish_step(const StepEnd& end, const int32_t* tokens, int n) {
  const int p0 = end.pos ? *end.pos : 0;
  for (int t = 0; t < n; ++t) {
    if (end.out) end.out[t] = tokens[t];
    if (end.host) end.host[p0 + end.advance - n + t + 1] = tokens[t];
  }
  int last = n - 1, advance = end.advance;
  if (end.draft) {
    // Greedy verify: drafted token t + 1 stays while it is row t's argmax; the cache keeps
    // the step's first token and those, and the row after them gives the next token.
    int accepted = 0;
    while (accepted < n - 1 && tokens[accepted] == end.draft[accepted + 1]) ++accepted;
    last = accepted;
    advance -= n - 1 - accepted;
    end.verdict[0] = accepted;
    end.verdict[1] = tokens[accepted];
  }
  if (end.next) end.next[0] = tokens[last];
  if (end.pos) *end.pos = p0 + advance;
}

// Blocks for a grid-stride kernel: enough to cover `units` (units_per_block each), at most
// as many as can be resident at once, so the whole grid runs in one wave.
template <class Kernel>
int resident_blocks(Kernel kernel, int threads, size_t smem, int units, int units_per_block, int sms) {
  const int per_sm = blocks_per_sm(kernel, threads, smem);
  const int needed = (units + units_per_block - 1) / units_per_block;
  return needed < sms * per_sm ? (needed > 0 ? needed : 1) : sms * per_sm;
}

}  // namespace runahead::cuda
