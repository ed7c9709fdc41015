// K-quant matrices on the device (kquant.cuh): ggml's Q4_K and Q6_K blocks regrouped at load
// into the rows the matrix-vector kernels read, and widened to bf16 for the tensor-core prefill.
#include <cstdlib>
#include <string>

#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kQ4KBlockBytes = 144;  // f16 d, f16 dmin, scales[12], qs[128]
constexpr int kQ6KBlockBytes = 210;  // ql[128], qh[64], scales[16], f16 d

// One thread a block: its bytes to their places in its row (kquant.cuh).
__global__ void pack_kquant_kernel(const uint8_t* blocks, bool q6, int rows, int K, uint8_t* out) {
  const int per_row = K / kKBlock;
  const size_t count = size_t(rows) * per_row;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / per_row;
    const int b = int(i % per_row);
    const auto copy = [](const uint8_t* from, uint8_t* to, int bytes) {
      for (int k = 0; k < bytes; ++k) to[k] = from[k];
    };
    if (!q6) {
      const uint8_t* in = blocks + i * kQ4KBlockBytes;
      uint8_t* row = out + r * q4k_row_bytes(K);
      copy(in + 16, row + b * 128, 128);      // the 4-bit weights
      copy(in, row + K / 2 + b * 16, 16);     // d, dmin, the scales
    } else {
      const uint8_t* in = blocks + i * kQ6KBlockBytes;
      uint8_t* row = out + r * q6k_row_bytes(K);
      copy(in, row + b * 128, 128);                                // low 4 bits
      copy(in + 128, row + K / 2 + b * 64, 64);                    // high 2 bits
      copy(in + 192, row + K / 2 + K / 4 + b * 16, 16);            // int8 scales
      copy(in + 208, row + K / 2 + K / 4 + K / 16 + b * 2, 2);     // f16 d
    }
  }
}

// grid: rows blocks, one per row.
__global__ void dequantize_kquant_kernel(const uint8_t* q4, const uint8_t* q6, int q6_from, int K,
                                         __nv_bfloat16* out) {
  const int r = blockIdx.x;
  const bool is_q6 = r >= q6_from;
  const uint8_t* row = is_q6 ? q6 + size_t(r - q6_from) * q6k_row_bytes(K) : q4 + size_t(r) * q4k_row_bytes(K);
  for (int k = threadIdx.x; k < K; k += blockDim.x)
    out[size_t(r) * K + k] = __float2bfloat16_rn(kq_weight(row, is_q6, K, k));
}

// grid (ceil(K / 256), n), 256 threads: warp w of block b quantizes the 32 values of token
// blockIdx.y from 256 b + 32 w (q8_lane: llama.cpp's quantize_q8_1). trigger_first: the next
// kernel may launch before this one's wait (kernels.h quantize_inputs_q8).
__global__ void __launch_bounds__(256) quantize_inputs_q8_kernel(const float* x, const float* g, int K, int8_t* q,
                                                                 float* d, int8_t* planar, bool trigger_first) {
  RUNAHEAD_TRACE_BLOCK(quantize_inputs);
  if (trigger_first) pdl_trigger();
  pdl_wait();
  if (!trigger_first) pdl_trigger();
  const int lane = threadIdx.x % kWarp, group = blockIdx.x * (256 / kWarp) + threadIdx.x / kWarp, t = blockIdx.y;
  if (group * 32 >= K) return;
  const int k = group * 32 + lane;
  float scale;
  const int8_t v = q8_lane(g ? x[size_t(t) * K + k] * g[k] : x[size_t(t) * K + k], scale);
  q[size_t(t) * K + k] = v;
  if (planar) planar[planar_index(k, K)] = v;
  if (lane == 0) d[size_t(t) * (K / 32) + group] = scale;
}

}  // namespace

void quantize_inputs_q8(const float* x, const float* g, int n, int K, const Q8Scratch& s, cudaStream_t stream,
                        bool trigger_first) {
  launch_pdl(quantize_inputs_q8_kernel, dim3((K + 255) / 256, n), dim3(256), 0, stream, x, g, K, s.q, s.d,
             n == 1 ? s.planar : nullptr, trigger_first);
}

bool kq_planar_enabled() {
  const char* v = std::getenv("RUNAHEAD_CUDA_KQ_PLANAR");
  return !(v && std::string(v) == "0");
}

void pack_kquant_rows(const void* blocks, bool q6, int rows, int K, void* out, cudaStream_t stream) {
  const size_t count = size_t(rows) * (K / kKBlock);
  const int threads = 256, grid = int(std::min<size_t>((count + threads - 1) / threads, 65535));
  if (count == 0) return;
  pack_kquant_kernel<<<grid, threads, 0, stream>>>(static_cast<const uint8_t*>(blocks), q6, rows, K,
                                                  static_cast<uint8_t*>(out));
  check_cuda(cudaGetLastError(), "pack_kquant_rows");
}

void dequantize_kquant_rows(const void* q4, const void* q6, int q6_from, int rows, int K, void* out,
                            cudaStream_t stream) {
  dequantize_kquant_kernel<<<rows, 256, 0, stream>>>(static_cast<const uint8_t*>(q4), static_cast<const uint8_t*>(q6),
                                                     q6_from, K, static_cast<__nv_bfloat16*>(out));
  check_cuda(cudaGetLastError(), "dequantize_kquant_rows");
}

}  // namespace runahead::cuda
