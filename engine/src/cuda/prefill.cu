// The tensor-core path of a long prompt: bf16 activations, f32 accumulation.
// gemm_bf16: C[n, rows] (+)= A[n, K] . W[rows, K]^T with mma.sync m16n8k16, 128x128 block
// tiles, 3-stage cp.async pipeline, swizzled shared memory read by ldmatrix.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 3;
constexpr int kGemmThreads = 256;  // 8 warps: 2 along M x 4 along N, each 64 x 32
constexpr int kTileBytes = kBM * kBK * 2;  // one operand tile of one stage (A and B alike)

// Byte offset of 16-byte chunk c (0..3) of row r in a [128][32] bf16 tile; the XOR keeps
// the 8 rows one ldmatrix reads in 8 different bank groups.
__device__ __forceinline__ uint32_t tile_offset(int r, int c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// grid (ceil(rows / 128), ceil(n / 128)); rows of A past n and of W past `rows` read as zeros.
__global__ void __launch_bounds__(kGemmThreads) gemm_bf16_tn_128x128(const __nv_bfloat16* a, const __nv_bfloat16* w,
                                                                    int n, int rows, int K, float* c,
                                                                    bool accumulate) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int ktiles = K / kBK;

  // Stage s: A tile at base + s * 2 * kTileBytes, W tile right after it.
  auto load_stage = [&](int stage, int kt) {
    const uint32_t sa = base + stage * 2 * kTileBytes, sb = sa + kTileBytes;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int chunk = tid + i * kGemmThreads, r = chunk / 4, cc = chunk % 4;
      const int k = kt * kBK + cc * 8;
      const bool a_ok = m0 + r < n, w_ok = n0 + r < rows;
      cp_async16(sa + tile_offset(r, cc), a + size_t(a_ok ? m0 + r : 0) * K + k, a_ok);
      cp_async16(sb + tile_offset(r, cc), w + size_t(w_ok ? n0 + r : 0) * K + k, w_ok);
    }
  };

  pdl_wait();
  pdl_trigger();
  float acc[4][4][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    asm volatile("cp.async.commit_group;");
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2));
    __syncthreads();
    if (kt + kStages - 1 < ktiles) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    asm volatile("cp.async.commit_group;");
    const uint32_t sa = base + (kt % kStages) * 2 * kTileBytes, sb = sa + kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const int mi = lane / 8, r = lane % 8;
      uint32_t af[4][4], bf[2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        ldmatrix_x4(sa + tile_offset(wm + i * 16 + r + 8 * (mi & 1), kk * 2 + (mi >> 1)), af[i]);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        ldmatrix_x4(sb + tile_offset(wn + j * 16 + r + 8 * (mi >> 1), kk * 2 + (mi & 1)), bf[j]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_bf16(acc[i][j], af[i], bf[j / 2][(j % 2) * 2], bf[j / 2][(j % 2) * 2 + 1]);
    }
  }
  asm volatile("cp.async.wait_group 0;");

  const int g = lane / 4, tig = lane % 4;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int m = m0 + wm + i * 16 + g + 8 * half, col = n0 + wn + j * 8 + 2 * tig;
        if (m >= n || col >= rows) continue;
        float2* out = reinterpret_cast<float2*>(c + size_t(m) * rows + col);
        float2 v = make_float2(acc[i][j][2 * half], acc[i][j][2 * half + 1]);
        if (accumulate) {
          const float2 old = *out;
          v.x += old.x, v.y += old.y;
        }
        *out = v;
      }
}

// grid n, one block per token.
__global__ void rmsnorm_to_bf16_kernel(const float* x, const float* norm, float eps, int H, __nv_bfloat16* h) {
  __shared__ float scratch[8];
  __shared__ float inv[1];
  pdl_wait();
  pdl_trigger();
  const float* row = x + size_t(blockIdx.x) * H;
  block_inv_rms<1>(row, H, 1, eps, scratch, inv);
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    h[size_t(blockIdx.x) * H + i] = __float2bfloat16(row[i] * inv[0] * norm[i]);
}

__global__ void swiglu_to_bf16_kernel(const float* gu, int n, int I, __nv_bfloat16* act) {
  pdl_wait();
  pdl_trigger();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < size_t(n) * I; i += size_t(gridDim.x) * blockDim.x) {
    const size_t t = i / I, j = i % I;
    const float g = gu[t * 2 * I + j], u = gu[t * 2 * I + I + j];
    act[i] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
  }
}

__global__ void to_bf16_kernel(const float* in, size_t count, __nv_bfloat16* out) {
  pdl_wait();
  pdl_trigger();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

int elementwise_blocks(size_t count) { return int(std::clamp<size_t>((count + 255) / 256, 1, 8192)); }

}  // namespace

void rmsnorm_to_bf16(const float* x, const float* norm, float eps, int n, int H, void* h, cudaStream_t stream) {
  launch_pdl(rmsnorm_to_bf16_kernel, dim3(n), dim3(256), 0, stream, x, norm, eps, H, static_cast<__nv_bfloat16*>(h));
}

void gemm_bf16(const void* a, const void* w, int n, int rows, int K, float* c, bool accumulate, cudaStream_t stream) {
  if (K % kBK != 0 || rows % 2 != 0)
    throw EngineError("unsupported", "gemm_bf16 needs K % 32 == 0 and an even row count, got K " + std::to_string(K) +
                                         ", rows " + std::to_string(rows));
  const size_t smem = size_t(kStages) * 2 * kTileBytes;
  launch_pdl(gemm_bf16_tn_128x128, dim3((rows + kBN - 1) / kBN, (n + kBM - 1) / kBM), dim3(kGemmThreads), smem, stream,
             static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(w), n, rows, K, c, accumulate);
}

void swiglu_to_bf16(const float* gu, int n, int I, void* act, cudaStream_t stream) {
  launch_pdl(swiglu_to_bf16_kernel, dim3(elementwise_blocks(size_t(n) * I)), dim3(256), 0, stream, gu, n, I,
             static_cast<__nv_bfloat16*>(act));
}

void to_bf16(const float* in, size_t count, void* out, cudaStream_t stream) {
  launch_pdl(to_bf16_kernel, dim3(elementwise_blocks(count)), dim3(256), 0, stream, in, count,
             static_cast<__nv_bfloat16*>(out));
}

}  // namespace runahead::cuda
