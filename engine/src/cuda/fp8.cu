// F8_E4M3 matrices with a scale per row (model/fp8.h): quantized on the device at load, and
// widened back to bf16 a matrix at a time for the tensor-core prefill.
#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "model/fp8.h"

namespace runahead::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: the row's largest |x|, then each value times 448 / that, rounded to
// nearest even and saturated (as f32_to_fp8_e4m3 on the host).
template <class W>
__global__ void __launch_bounds__(kThreads) quantize_fp8_rows_kernel(const W* w, int K, __nv_fp8_e4m3* q,
                                                                     float* scale) {
  __shared__ float warp_max_of[kThreads / kWarp];
  const W* row = w + size_t(blockIdx.x) * K;
  float amax = 0.0f;
  for (int k = threadIdx.x; k < K; k += kThreads) amax = fmaxf(amax, fabsf(to_float(row[k])));
  amax = warp_max(amax);
  if (threadIdx.x % kWarp == 0) warp_max_of[threadIdx.x / kWarp] = amax;
  __syncthreads();
  amax = 0.0f;
  for (int i = 0; i < kThreads / kWarp; ++i) amax = fmaxf(amax, warp_max_of[i]);
  const float inv = amax > 0.0f ? __fdiv_rn(kFp8E4M3Max, amax) : 0.0f;
  __nv_fp8_e4m3* out = q + size_t(blockIdx.x) * K;
  for (int k = threadIdx.x; k < K; k += kThreads)
    out[k].__x = __nv_cvt_float_to_fp8(__fmul_rn(to_float(row[k]), inv), __NV_SATFINITE, __NV_E4M3);
  if (threadIdx.x == 0) scale[blockIdx.x] = __fdiv_rn(amax, kFp8E4M3Max);
}

__global__ void dequantize_fp8_rows_kernel(const __nv_fp8_e4m3* q, const float* scale, int K, __nv_bfloat16* out) {
  const size_t base = size_t(blockIdx.x) * K;
  const float s = scale[blockIdx.x];
  for (int k = threadIdx.x; k < K; k += blockDim.x) out[base + k] = __float2bfloat16_rn(float(q[base + k]) * s);
}

}  // namespace

void quantize_fp8_rows(const void* w, DType dtype, int rows, int K, void* q, float* scale, cudaStream_t stream) {
  with_weight_type(dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    quantize_fp8_rows_kernel<W><<<rows, kThreads, 0, stream>>>(static_cast<const W*>(w), K,
                                                               static_cast<__nv_fp8_e4m3*>(q), scale);
  });
  check_cuda(cudaGetLastError(), "quantize_fp8_rows");
}

void dequantize_fp8_rows(const void* q, const float* scale, int rows, int K, void* out, cudaStream_t stream) {
  dequantize_fp8_rows_kernel<<<rows, kThreads, 0, stream>>>(static_cast<const __nv_fp8_e4m3*>(q), scale, K,
                                                           static_cast<__nv_bfloat16*>(out));
  check_cuda(cudaGetLastError(), "dequantize_fp8_rows");
}

}  // namespace runahead::cuda
