// Embedding lookup: x[t, :] = embed[tokens[t], :], widened to f32.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

// grid: n blocks, one per token.
template <class W>
__global__ void embedding_lookup_kernel(const W* __restrict__ embed, int H, const int32_t* __restrict__ tokens,
                                        float* __restrict__ x) {
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x;
  const W* row = embed + size_t(tokens[t]) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) x[size_t(t) * H + i] = to_float(row[i]);
}

}  // namespace

void embedding_lookup(const void* embed, DType dtype, int H, const int32_t* tokens, int n, float* x,
                      cudaStream_t stream) {
  with_weight_type(dtype, [&](auto type) {
    using W = WeightOf<decltype(type)>;
    launch_pdl(embedding_lookup_kernel<W>, dim3(n), dim3(256), 0, stream, static_cast<const W*>(embed), H,
               tokens, x);
  });
}

}  // namespace runahead::cuda
