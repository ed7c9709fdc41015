// Sampling on the device: temperature, top-k and top-p over one row of logits, without
// sorting: the top-k and top-p thresholds are found by radix selection on the float bits.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kThreads = 1024;

// Unsigned keys that order like the floats they come from.
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Shared {
  float bucket_mass[256];
  unsigned bucket_count[256];
  float red[kThreads / kWarp];
  uint32_t prefix;
  float remaining;
  int chosen_thread;
  int32_t token;
};

__device__ float block_sum(float v, Shared& sh) {
  v = warp_sum(v);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) sh.red[threadIdx.x / kWarp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / kWarp; ++w) total += sh.red[w];
  return total;
}

__device__ float block_max(float v, Shared& sh) {
  v = warp_max(v);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) sh.red[threadIdx.x / kWarp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kThreads / kWarp; ++w) m = fmaxf(m, sh.red[w]);
  return m;
}

// The largest key k such that the keys >= k (among those >= floor) hold at least `target`
// of the weight: weight 1 per token (by_mass false: the k-th largest) or its probability.
__device__ uint32_t radix_select(const float* logits, int V, uint32_t floor, bool by_mass, float target, float m,
                                 float inv_t, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  if (threadIdx.x == 0) sh.remaining = target;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.bucket_mass[b] = 0.0f, sh.bucket_count[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += kThreads) {
      const uint32_t key = order_key(logits[i]);
      if (key < floor || (key & mask) != prefix) continue;
      const int b = (key >> shift) & 255;
      if (by_mass) atomicAdd(&sh.bucket_mass[b], expf((logits[i] - m) * inv_t));
      else atomicAdd(&sh.bucket_count[b], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float cum = 0.0f;
      int chosen = -1, lowest = 0;
      for (int b = 255; b >= 0; --b) {
        const float w = by_mass ? sh.bucket_mass[b] : float(sh.bucket_count[b]);
        if (w <= 0.0f) continue;
        lowest = b;
        if (cum + w >= sh.remaining) {
          chosen = b;
          sh.remaining -= cum;
          break;
        }
        cum += w;
      }
      if (chosen < 0) chosen = lowest, sh.remaining = 0.0f;  // rounding left the target unreached
      sh.prefix = prefix | (uint32_t(chosen) << shift);
    }
    __syncthreads();
    prefix = sh.prefix;
    mask |= 255u << shift;
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sample_token_kernel(const float* logits, int V, SamplingState* state,
                                                               StepEnd end) {
  __shared__ Shared sh;
  pdl_wait();
  pdl_trigger();
  const float inv_t = 1.0f / fmaxf(state->temperature, 1e-6f);
  const int top_k = state->top_k;
  const float top_p = state->top_p;

  float m = -INFINITY;
  for (int i = threadIdx.x; i < V; i += kThreads) m = fmaxf(m, logits[i]);
  m = block_max(m, sh);

  uint32_t floor = 0;
  if (top_k > 0 && top_k < V) floor = radix_select(logits, V, 0, false, float(top_k), m, inv_t, sh);
  if (top_p < 1.0f) {
    float z = 0.0f;
    for (int i = threadIdx.x; i < V; i += kThreads)
      if (order_key(logits[i]) >= floor) z += expf((logits[i] - m) * inv_t);
    z = block_sum(z, sh);
    floor = max(floor, radix_select(logits, V, floor, true, top_p * z, m, inv_t, sh));
  }

  // Each thread owns a contiguous segment; the draw lands in one of them.
  const int seg = (V + kThreads - 1) / kThreads;
  const int i0 = min(V, int(threadIdx.x) * seg), i1 = min(V, i0 + seg);
  float mine = 0.0f;
  for (int i = i0; i < i1; ++i)
    if (order_key(logits[i]) >= floor) mine += expf((logits[i] - m) * inv_t);
  // Inclusive scan of the segment sums across the block.
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float scan = mine;
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const float v = __shfl_up_sync(0xffffffffu, scan, o);
    if (lane >= o) scan += v;
  }
  __syncthreads();
  if (lane == kWarp - 1) sh.red[warp] = scan;
  if (threadIdx.x == 0) sh.chosen_thread = -1;
  __syncthreads();
  float before = scan - mine, total = 0.0f;
  for (int w = 0; w < kThreads / kWarp; ++w) {
    if (w < warp) before += sh.red[w];
    total += sh.red[w];
  }
  const uint64_t bits = splitmix64(state->seed ^ splitmix64(state->draws));
  const float u = float(double(bits >> 11) * 0x1.0p-53) * total;
  if (mine > 0.0f && before <= u) atomicMax(&sh.chosen_thread, int(threadIdx.x));
  __syncthreads();
  if (int(threadIdx.x) == sh.chosen_thread) {
    float acc = before;
    int32_t token = -1;
    for (int i = i0; i < i1; ++i) {
      if (order_key(logits[i]) < floor) continue;
      token = i;
      acc += expf((logits[i] - m) * inv_t);
      if (acc > u) break;
    }
    sh.token = token;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    finish_step(end, &sh.token, 1);
    state->draws += 1;
  }
}

}  // namespace

void sample_token(const float* logits, int V, SamplingState* state, const StepEnd& end, cudaStream_t stream) {
  launch_pdl(sample_token_kernel, dim3(1), dim3(kThreads), 0, stream, logits, V, state, end);
}

}  // namespace runahead::cuda
