// The tensor-core path of a long prompt: bf16 activations, f32 accumulation.
// gemm_bf16: C[n, rows] (+)= A[n, K] . W[rows, K]^T through cuBLASLt where the build found it
// (RUNAHEAD_CUBLASLT), else with our mma.sync m16n8k16 kernel: 128x128 block tiles, 3-stage
// cp.async pipeline, swizzled shared memory read by ldmatrix.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#ifdef RUNAHEAD_CUBLASLT
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>
#endif

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/mma.cuh"

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

// grid (ceil(rows / 128), ceil(n / 128)); rows of A past n, of W past `rows` and columns past K
// (the last K tile when K % 32 != 0; K % 8 == 0 keeps each 16-byte chunk wholly in or out) read as
// zeros. Out is float (accumulate adds to c) or __nv_bfloat16 (accumulate is not offered).
template <class Out>
__global__ void __launch_bounds__(kGemmThreads) gemm_bf16_tn_128x128(const __nv_bfloat16* a, const __nv_bfloat16* w,
                                                                    int n, int rows, int K, Out* c,
                                                                    bool accumulate) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int ktiles = (K + kBK - 1) / kBK;

  // Stage s: A tile at base + s * 2 * kTileBytes, W tile right after it.
  auto load_stage = [&](int stage, int kt) {
    const uint32_t sa = base + stage * 2 * kTileBytes, sb = sa + kTileBytes;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int chunk = tid + i * kGemmThreads, r = chunk / 4, cc = chunk % 4;
      const int k = kt * kBK + cc * 8;
      const bool k_ok = k < K, a_ok = k_ok && m0 + r < n, w_ok = k_ok && n0 + r < rows;
      cp_async16(sa + tile_offset(r, cc), a + size_t(a_ok ? m0 + r : 0) * K + (k_ok ? k : 0), a_ok);
      cp_async16(sb + tile_offset(r, cc), w + size_t(w_ok ? n0 + r : 0) * K + (k_ok ? k : 0), w_ok);
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
        float2 v = make_float2(acc[i][j][2 * half], acc[i][j][2 * half + 1]);
        if constexpr (std::is_same_v<Out, float>) {
          float2* out = reinterpret_cast<float2*>(c + size_t(m) * rows + col);
          if (accumulate) {
            const float2 old = *out;
            v.x += old.x, v.y += old.y;
          }
          *out = v;
        } else {
          *reinterpret_cast<__nv_bfloat162*>(c + size_t(m) * rows + col) = __floats2bfloat162_rn(v.x, v.y);
        }
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

// grid (ceil(I / 256 / kSwigluPerThread), n): token t = blockIdx.y, no division per element.
constexpr int kSwigluPerThread = 4;
__global__ void swiglu_to_bf16_kernel(const __nv_bfloat16* gu, int I, __nv_bfloat16* act) {
  pdl_wait();
  pdl_trigger();
  const __nv_bfloat16* row = gu + size_t(blockIdx.y) * 2 * I;
  __nv_bfloat16* out = act + size_t(blockIdx.y) * I;
  const int j0 = blockIdx.x * blockDim.x * kSwigluPerThread + threadIdx.x;
  float g[kSwigluPerThread], u[kSwigluPerThread];
#pragma unroll
  for (int k = 0; k < kSwigluPerThread; ++k) {
    const int j = j0 + k * blockDim.x;
    g[k] = j < I ? __bfloat162float(row[j]) : 0.0f;
    u[k] = j < I ? __bfloat162float(row[I + j]) : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kSwigluPerThread; ++k) {
    const int j = j0 + k * blockDim.x;
    if (j < I) out[j] = __float2bfloat16(g[k] / (1.0f + expf(-g[k])) * u[k]);
  }
}

__global__ void to_bf16_kernel(const float* in, size_t count, __nv_bfloat16* out) {
  pdl_wait();
  pdl_trigger();
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

int elementwise_blocks(size_t count) { return int(std::clamp<size_t>((count + 255) / 256, 1, 8192)); }

template <class Out>
void gemm_bf16_mma(const void* a, const void* w, int n, int rows, int K, Out* c, bool accumulate,
                   cudaStream_t stream) {
  const size_t smem = size_t(kStages) * 2 * kTileBytes;
  launch_pdl(gemm_bf16_tn_128x128<Out>, dim3((rows + kBN - 1) / kBN, (n + kBM - 1) / kBM), dim3(kGemmThreads), smem,
             stream, static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(w), n, rows, K, c,
             accumulate);
}

// RUNAHEAD_CUDA_CUBLASLT=0 in the environment keeps our own kernel, to compare the two.
bool use_cublaslt() {
#ifdef RUNAHEAD_CUBLASLT
  static const bool on = [] {
    const char* v = std::getenv("RUNAHEAD_CUDA_CUBLASLT");
    return !(v && std::string(v) == "0");
  }();
  return on;
#else
  return false;
#endif
}

#ifdef RUNAHEAD_CUBLASLT
void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw EngineError("cuda_error", std::string(what) + ": cuBLASLt status " + std::to_string(int(status)));
}

// Row-major C[n, rows] = A[n, K] . W[rows, K]^T is, column-major, C^T[rows, n] = W^T . A^T with
// W stored as a K x rows matrix (op T) and A as K x n (op N): the "TN" case.
struct LtPlan {
  bool found = false;  // the heuristic offered an algorithm; else our kernel serves the shape
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// The process's handle, workspace and one plan per shape. Never destroyed: they are needed
// until exit, when the CUDA context may already be gone. One workspace serves every call, so
// the calls must come from one stream at a time (the engine runs one prefill at a time).
class Lt {
 public:
  static constexpr size_t kWorkspace = size_t(32) << 20;
  static constexpr uint32_t kAlignment = 16;  // bytes every pointer must be aligned to

  static Lt& get() {
    static Lt* lt = new Lt;
    return *lt;
  }

  const LtPlan& plan(int n, int rows, int K, bool bf16_out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, added] = plans_.try_emplace(std::tuple{n, rows, K, bf16_out});
    if (added) it->second = make_plan(n, rows, K, bf16_out);
    return it->second;
  }

  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;

 private:
  Lt() {
    check_lt(cublasLtCreate(&handle), "cublasLtCreate");
    check_cuda(cudaMalloc(&workspace, kWorkspace), "cudaMalloc (cuBLASLt workspace)");
  }

  LtPlan make_plan(int n, int rows, int K, bool bf16_out) {
    LtPlan p;
    check_lt(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
             "cublasLtMatmulDescSetAttribute (transa)");
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep),
             "cublasLtMatmulDescSetAttribute (transb)");
    check_lt(cublasLtMatrixLayoutCreate(&p.w, CUDA_R_16BF, K, rows, K), "cublasLtMatrixLayoutCreate (W)");
    check_lt(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, K, n, K), "cublasLtMatrixLayoutCreate (A)");
    check_lt(cublasLtMatrixLayoutCreate(&p.c, bf16_out ? CUDA_R_16BF : CUDA_R_32F, rows, n, rows),
             "cublasLtMatrixLayoutCreate (C)");

    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace_bytes = kWorkspace;
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                  sizeof workspace_bytes),
             "cublasLtMatmulPreferenceSetAttribute (workspace)");
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &kAlignment, sizeof kAlignment),
               "cublasLtMatmulPreferenceSetAttribute (alignment)");
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.w, p.a, p.c, p.c, pref, 1, &result, &count);
    cublasLtMatmulPreferenceDestroy(pref);
    p.found = status == CUBLAS_STATUS_SUCCESS && count > 0;
    if (p.found) p.algo = result.algo;
    return p;
  }

  std::mutex mutex_;
  std::map<std::tuple<int, int, int, bool>, LtPlan> plans_;
};

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % Lt::kAlignment == 0; }

// False when cuBLASLt has no algorithm for the shape or a pointer is less aligned than promised.
template <class Out>
bool gemm_bf16_lt(const void* a, const void* w, int n, int rows, int K, Out* c, bool accumulate,
                  cudaStream_t stream) {
  if (!aligned(a) || !aligned(w) || !aligned(c)) return false;
  Lt& lt = Lt::get();
  const LtPlan& p = lt.plan(n, rows, K, std::is_same_v<Out, __nv_bfloat16>);
  if (!p.found) return false;
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  check_lt(cublasLtMatmul(lt.handle, p.op, &one, w, p.w, a, p.a, &beta, c, p.c, c, p.c, &p.algo, lt.workspace,
                          Lt::kWorkspace, stream),
           "cublasLtMatmul");
  return true;
}
#endif

template <class Out>
void gemm(const void* a, const void* w, int n, int rows, int K, Out* c, bool accumulate, cudaStream_t stream) {
  if (K % 8 != 0 || rows % 2 != 0)
    throw EngineError("unsupported", "gemm_bf16 needs K % 8 == 0 (16-byte rows) and an even row count, got K " +
                                         std::to_string(K) + ", rows " + std::to_string(rows));
#ifdef RUNAHEAD_CUBLASLT
  if (use_cublaslt() && gemm_bf16_lt(a, w, n, rows, K, c, accumulate, stream)) return;
#endif
  gemm_bf16_mma(a, w, n, rows, K, c, accumulate, stream);
}

}  // namespace

void rmsnorm_to_bf16(const float* x, const float* norm, float eps, int n, int H, void* h, cudaStream_t stream) {
  launch_pdl(rmsnorm_to_bf16_kernel, dim3(n), dim3(256), 0, stream, x, norm, eps, H, static_cast<__nv_bfloat16*>(h));
}

void gemm_bf16(const void* a, const void* w, int n, int rows, int K, float* c, bool accumulate, cudaStream_t stream) {
  gemm(a, w, n, rows, K, c, accumulate, stream);
}

void gemm_bf16_to_bf16(const void* a, const void* w, int n, int rows, int K, void* c, cudaStream_t stream) {
  gemm(a, w, n, rows, K, static_cast<__nv_bfloat16*>(c), false, stream);
}

const char* gemm_bf16_impl() { return use_cublaslt() ? "cublasLt" : "mma.sync"; }

void swiglu_to_bf16(const void* gu, int n, int I, void* act, cudaStream_t stream) {
  const int per_block = 256 * kSwigluPerThread;
  launch_pdl(swiglu_to_bf16_kernel, dim3((I + per_block - 1) / per_block, n), dim3(256), 0, stream,
             static_cast<const __nv_bfloat16*>(gu), I, static_cast<__nv_bfloat16*>(act));
}

void to_bf16(const float* in, size_t count, void* out, cudaStream_t stream) {
  launch_pdl(to_bf16_kernel, dim3(elementwise_blocks(count)), dim3(256), 0, stream, in, count,
             static_cast<__nv_bfloat16*>(out));
}

}  // namespace runahead::cuda
