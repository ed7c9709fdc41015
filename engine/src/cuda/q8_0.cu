// Q8_0 matrices on the device (kernels.h): ggml's blocks split into their weights and scales at
// load, and widened to bf16 for the tensor-core prefill.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kBlockBytes = 2 + kQ8Block;  // f16 d, then int8 q[32]

// One thread a block: its scale (the first two bytes) to d, its 32 weights to q.
__global__ void split_q8_0_kernel(const uint8_t* blocks, size_t count, int8_t* q, __half* d) {
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < count; b += size_t(gridDim.x) * blockDim.x) {
    const uint8_t* in = blocks + b * kBlockBytes;
    d[b] = __ushort_as_half(uint16_t(in[0] | (in[1] << 8)));
    // The block's weights start 2 bytes past a 2-byte boundary: copy them as 16 halves.
    const uint16_t* src = reinterpret_cast<const uint16_t*>(in + 2);
    uint16_t* dst = reinterpret_cast<uint16_t*>(q + b * kQ8Block);
#pragma unroll
    for (int i = 0; i < kQ8Block / 2; ++i) dst[i] = src[i];
  }
}

__global__ void dequantize_q8_0_kernel(const int8_t* q, const __half* d, int K, __nv_bfloat16* out) {
  const size_t base = size_t(blockIdx.x) * K;
  const __half* scales = d + size_t(blockIdx.x) * (K / kQ8Block);
  for (int k = threadIdx.x; k < K; k += blockDim.x)
    out[base + k] = __float2bfloat16_rn(__half2float(scales[k / kQ8Block]) * float(q[base + k]));
}

}  // namespace

void split_q8_0_blocks(const void* blocks, int rows, int K, void* q, void* d, cudaStream_t stream) {
  const size_t count = size_t(rows) * (K / kQ8Block);
  const int threads = 256, grid = int(std::min<size_t>((count + threads - 1) / threads, 65535));
  split_q8_0_kernel<<<grid, threads, 0, stream>>>(static_cast<const uint8_t*>(blocks), count, static_cast<int8_t*>(q),
                                                  static_cast<__half*>(d));
  check_cuda(cudaGetLastError(), "split_q8_0_blocks");
}

void dequantize_q8_0_rows(const void* q, const void* d, int rows, int K, void* out, cudaStream_t stream) {
  dequantize_q8_0_kernel<<<rows, 256, 0, stream>>>(static_cast<const int8_t*>(q), static_cast<const __half*>(d), K,
                                                   static_cast<__nv_bfloat16*>(out));
  check_cuda(cudaGetLastError(), "dequantize_q8_0_rows");
}

}  // namespace runahead::cuda
