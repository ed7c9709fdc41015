// Embedding lookup: x[t, :] = embed[tokens[t], :], widened to f32 (exactly: Q8_0's d * q too;
// a K-quant weight as the CPU's dequantize_row computes it).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

// grid: n blocks, one per token.
template <class W>
__global__ void embedding_lookup_kernel(const W* __restrict__ embed, int H, const int32_t* __restrict__ tokens,
                                        float* __restrict__ x) {
  RUNAHEAD_TRACE_BLOCK(embedding);
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const W* row = embed + size_t(tokens[t]) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) x[size_t(t) * H + i] = to_float(row[i]);
}

// Q8_0 as the device keeps it (kernels.h): int8 weights [V, H] and f16 block scales [V, H / 32].
__global__ void embedding_lookup_q8_0_kernel(const int8_t* __restrict__ q, const __half* __restrict__ d, int H,
                                             const int32_t* __restrict__ tokens, float* __restrict__ x) {
  RUNAHEAD_TRACE_BLOCK(embedding);
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const size_t row = size_t(tokens[t]);
  for (int i = threadIdx.x; i < H; i += blockDim.x)
    x[size_t(t) * H + i] = __half2float(d[row * (H / kQ8Block) + i / kQ8Block]) * float(q[row * H + i]);
}

// A K-quant table (kquant.cuh), all Q4_K (at q4) or all Q6_K (q4 null, at q6).
__global__ void embedding_lookup_kquant_kernel(const uint8_t* __restrict__ q4, const uint8_t* __restrict__ q6, int H,
                                               const int32_t* __restrict__ tokens, float* __restrict__ x) {
  RUNAHEAD_TRACE_BLOCK(embedding);
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const size_t r = size_t(tokens[t]);
  const uint8_t* row = q4 ? q4 + r * q4k_row_bytes(H) : q6 + r * q6k_row_bytes(H);
  for (int i = threadIdx.x; i < H; i += blockDim.x) x[size_t(t) * H + i] = kq_weight(row, !q4, H, i);
}

}  // namespace

void embedding_lookup(const void* embed, DType dtype, const void* scale, int H, const int32_t* tokens, int n,
                      float* x, cudaStream_t stream) {
  if (dtype == DType::Q8_0) {
    launch_pdl(embedding_lookup_q8_0_kernel, dim3(n), dim3(256), 0, stream, static_cast<const int8_t*>(embed),
               static_cast<const __half*>(scale), H, tokens, x);
    return;
  }
  if (dtype == DType::Q4_K || dtype == DType::Q6_K) {
    launch_pdl(embedding_lookup_kquant_kernel, dim3(n), dim3(256), 0, stream, static_cast<const uint8_t*>(embed),
               static_cast<const uint8_t*>(scale), H, tokens, x);
    return;
  }
  with_weight_type(dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    launch_pdl(embedding_lookup_kernel<W>, dim3(n), dim3(256), 0, stream, static_cast<const W*>(embed), H,
               tokens, x);
  });
}

}  // namespace runahead::cuda
