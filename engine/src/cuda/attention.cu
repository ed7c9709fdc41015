// Attention of new tokens over the f32 KV cache, with grouped-query heads.
// Decode: split-K over positions; the splits of a (token, head) merge in a thread block
// cluster (Hopper: their partials in each block's shared memory) or, without one, the last
// block of each (token, head) to finish merges them through global memory.
// (Prefill attention lives in attention_prefill.cu.)
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cuda/bulk_copy.cuh"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace runahead::cuda {
namespace {

constexpr int kMaxHeadDim = 128;
constexpr int kBatch = 8;

// The cluster's barrier (every thread of every block arrives; release/acquire orders the
// shared-memory writes before it with the reads after it), this block's rank in it, and a
// float of block `rank`'s shared memory at the address of `p` in this one.
__device__ __forceinline__ void cluster_sync() {
  RUNAHEAD_SM90(asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory"));
}
__device__ __forceinline__ float cluster_load(const float* p, unsigned rank) {
  float v = 0.0f;
  RUNAHEAD_SM90(asm volatile("{\n .reg .u32 a;\n mapa.shared::cluster.u32 a, %1, %2;\n ld.shared::cluster.f32 %0, [a];\n}"
                             : "=f"(v)
                             : "r"(smem_address(p)), "r"(rank)
                             : "memory"));
  return v;
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r = 0;
  RUNAHEAD_SM90(asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)));
  return r;
}
// The cluster's barrier in halves: arrive (release: this thread's shared-memory writes, its
// own and other blocks', are ordered before what follows the others' wait; relaxed: nothing
// ordered), then wait (acquire).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  RUNAHEAD_SM90(asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"));
}
__device__ __forceinline__ void cluster_arrive_release() {
  RUNAHEAD_SM90(asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"));
}
__device__ __forceinline__ void cluster_wait() {
  RUNAHEAD_SM90(asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"));
}
// v into the float of block `rank`'s shared memory at the address of `p` in this one.
__device__ __forceinline__ void cluster_store(float* p, unsigned rank, float v) {
  RUNAHEAD_SM90(asm volatile("{\n .reg .u32 a;\n mapa.shared::cluster.u32 a, %0, %1;\n st.shared::cluster.f32 [a], %2;\n}"
                             :
                             : "r"(smem_address(p)), "r"(rank), "f"(v)
                             : "memory"));
}
// The same store made asynchronous: its 4 bytes are counted on block `rank`'s barrier at the
// address of `bar` in this one (complete_tx), so the storing block neither fences nor waits.
__device__ __forceinline__ void cluster_store_counted(float* p, unsigned rank, float v, uint64_t* bar) {
  RUNAHEAD_SM90(asm volatile("{\n .reg .u32 a, b;\n mapa.shared::cluster.u32 a, %0, %2;\n mapa.shared::cluster.u32 b, %1, %2;\n"
                             " st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [a], %3, [b];\n}"
                             :
                             : "r"(smem_address(p)), "r"(smem_address(bar)), "r"(rank), "f"(v)
                             : "memory"));
}

// Split s's weight in the merge, exp((m_s - M) * scale) / sum_s exp((m_s - M) * scale) l_s, in
// lane s of the warp that calls it (every lane; m_s, l_s: -INFINITY and 0 past the S splits).
__device__ __forceinline__ float split_weight(float ms, float ls, float scale) {
  const float Ms = warp_max(ms);
  const float w = ms != -INFINITY ? expf((ms - Ms) * scale) : 0.0f;
  return w / warp_sum(w * ls);
}

// grid (splits, heads, n); block kThreads; kCluster: the splits of a (token, head) are one
// cluster. Partial of split s: [m, l, acc[head_dim]] with m the largest raw score,
// l = sum exp((s - m) * scale), acc = sum exp(...) v. A position's key and value rows are read
// together by head_dim / 4 lanes (a group), a float4 each (q in registers), kBatch positions
// a lane in flight; each group keeps its own online softmax over its positions, the groups
// are combined in shared memory, then the splits are merged, every split's values loaded at
// once. The cache rows before *pos were written by earlier steps, so the first round of them
// is loaded before pdl_wait, beside the previous kernel (q/k/v, which appends this step's
// rows); the rows from *pos on are loaded after it.
// Trace marks (trace.h): 1 its positions summed, 2 its partial's stores begin (pushed: every
// block of the cluster has started), 3 the merging block has every partial (pushed), 4 it has
// their weights.
// kPush (with kCluster): each block stores its partial into the cluster's block 0 and leaves
// after one barrier arrival; block 0 waits once and merges from its own shared memory (else
// every block keeps its partial, all meet at a barrier, block 0 loads the others' partials,
// and all meet again so that they stay until it has). kCounted (with kPush): those stores are
// asynchronous and counted in bytes on a barrier of block 0's (its `arrived`), so a block
// leaves right after storing, without a release fence or a barrier arrival, and block 0 waits
// for the bytes alone; its first warp then weighs the splits, a lane each, and the head's warps
// meet at a named barrier (a.weigh_by_warp), or each of its threads weighs them all itself.
template <int kThreads, bool kCluster, bool kPush = false, bool kCounted = false>
__global__ void __launch_bounds__(kThreads) attention_decode_kernel(DecodeAttention a, const float* q,
                                                                   const int* pos, float* out) {
  RUNAHEAD_TRACE_BLOCK(attention);
  static_assert(kThreads >= kMaxHeadDim, "the merge gives each thread at most one dimension of the head");
  __shared__ float4 group_acc[kThreads];       // [groups][cols]: group g's acc, dimension g * head_dim + d as floats
  __shared__ float group_m[kThreads], group_l[kThreads];
  constexpr bool kPushed = kCluster && kPush, kPulled = kCluster && !kPush, kCountedPush = kPushed && kCounted;
  __shared__ float mine[kPulled ? 2 + kMaxHeadDim : 1];  // this split's m, l and values
  // in the cluster's block 0, every split's m, l and values, which each block stores there
  __shared__ float gathered[kPushed ? kMaxAttentionCluster * (2 + kMaxHeadDim) : 1];
  __shared__ float weight[kWarp];
  __shared__ bool last;
  __shared__ uint64_t arrived;  // kCountedPush, in block 0: every split's bytes are in
  if constexpr (kCountedPush) {
    if (threadIdx.x == 0 && cluster_rank() == 0) {
      mbarrier_init(&arrived, 1);
      mbarrier_expect_bytes(&arrived, unsigned(gridDim.x) * unsigned(a.head_dim + 2) * unsigned(sizeof(float)));
      mbarrier_init_fence();  // before the arrival below publishes it to the cluster
    }
  }
  // Every block of the cluster has started once this barrier's first phase is complete (waited
  // for before the first store into block 0's shared memory); arrived at here, it costs no wait.
  if constexpr (kPushed) cluster_arrive_relaxed();
  const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, S = gridDim.x;
  const int hd = a.head_dim, kv_dim = a.kv_heads * hd, kv = h / (a.heads / a.kv_heads);
  const float scale = rsqrtf(float(hd));
  // Lanes of a position: cols (a power of two dividing 32), each a float4 column; `groups`
  // positions at a time across the block.
  const int cols = hd / 4, groups = kThreads / cols, col = threadIdx.x % cols, group = threadIdx.x / cols;
  // The position was advanced by the previous step, at least two kernels back, so it is final
  // before pdl_wait: this kernel starts only once every block of the previous one has passed
  // its own pdl_wait, that is once the kernel before that one is done.
  const int p0 = *pos, len = p0 + t + 1;
  const int chunk = (len + S - 1) / S;
  const int begin = min(len, split * chunk), end = min(len, begin + chunk), count = end - begin;
  const int written = p0 - begin;  // positions i < written of this split were written by earlier steps
  const float4* K = reinterpret_cast<const float4*>(a.k_cache + size_t(begin) * kv_dim + size_t(kv) * hd);
  const float4* V = reinterpret_cast<const float4*>(a.v_cache + size_t(begin) * kv_dim + size_t(kv) * hd);
  const int row4 = kv_dim / 4;
  float4 k[kBatch], v[kBatch];
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const int i = group + b * groups;
    const bool early = i < count && i < written;
    k[b] = early ? K[size_t(i) * row4 + col] : zero;
    v[b] = early ? V[size_t(i) * row4 + col] : zero;
  }
  pdl_wait();
  pdl_trigger();
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const int i = group + b * groups;
    if (i < count && i >= written) k[b] = K[size_t(i) * row4 + col], v[b] = V[size_t(i) * row4 + col];
  }
  const float4 q4 = reinterpret_cast<const float4*>(q + (size_t(t) * a.heads + h) * hd)[col];
  float m = -INFINITY, l = 0.0f;
  float4 acc = zero;
  // Every lane of a warp runs the same iterations (the shuffles need the whole warp).
  // Software-pipelined: the next round's key rows are asked for once this round's scores are
  // made, each value row once this round has used it, so that their loads overlap this round's
  // shuffles and exponentials instead of following them.
  for (int i0 = group; i0 - group < count; i0 += kBatch * groups) {
    const int next = i0 + kBatch * groups;
    const bool more = next - group < count;
    // The batch's scores (the positions' shuffle trees side by side: unrolled, so that their
    // latencies overlap), then one rescale to their largest and independent exponentials.
    float dot[kBatch], m_new = m;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) dot[b] = fmaf(q4.x, k[b].x, fmaf(q4.y, k[b].y, fmaf(q4.z, k[b].z, q4.w * k[b].w)));
    if (more) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = next + b * groups;
        k[b] = i < count ? K[size_t(i) * row4 + col] : zero;
      }
    }
#pragma unroll
    for (int o = kWarp / 2; o > 0; o >>= 1)
      if (o < cols) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) dot[b] += __shfl_xor_sync(0xffffffffu, dot[b], o);
      }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + b * groups < count) m_new = fmaxf(m_new, dot[b]);  // the same for every lane of the group
    if (m_new != -INFINITY) {  // else no position of this group in the batch
      const float c = expf((m - m_new) * scale);
      l *= c;
      acc.x *= c, acc.y *= c, acc.z *= c, acc.w *= c;
      // A position past the split's weighs 0 (its value row is zero), chosen rather than
      // branched around, so that the exponentials are independent of each other.
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const float p = i0 + b * groups < count ? expf((dot[b] - m_new) * scale) : 0.0f;
        l += p;
        acc.x = fmaf(p, v[b].x, acc.x), acc.y = fmaf(p, v[b].y, acc.y);
        acc.z = fmaf(p, v[b].z, acc.z), acc.w = fmaf(p, v[b].w, acc.w);
      }
      m = m_new;
    }
    if (more) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = next + b * groups;
        v[b] = i < count ? V[size_t(i) * row4 + col] : zero;
      }
    }
  }
  trace_mark(0);
  group_acc[threadIdx.x] = acc;  // = group * cols + col
  if (col == 0) group_m[group] = m, group_l[group] = l;
  __syncthreads();

  // The split's partial: the groups rescaled to the largest of their maxima (a group without
  // positions weighs 0).
  float M = -INFINITY;
#pragma unroll 8
  for (int g = 0; g < groups; ++g) M = fmaxf(M, group_m[g]);
  const auto group_weight = [&](int g) { return group_m[g] == -INFINITY ? 0.0f : expf((group_m[g] - M) * scale); };
  // Split s's partial in global memory (without a cluster).
  const auto slot = [&](int s) { return a.partial + ((size_t(t) * a.heads + h) * S + s) * (size_t(hd) + 2); };
  if constexpr (kPushed) cluster_wait();  // every block has started: block 0's shared memory is there
  trace_mark(1);
  const auto put = [&](int at, float v) {
    if constexpr (kCountedPush)
      cluster_store_counted(gathered + split * (hd + 2) + at, 0u, v, &arrived);
    else if constexpr (kPushed)
      cluster_store(gathered + split * (hd + 2) + at, 0u, v);
    else if constexpr (kPulled)
      mine[at] = v;
    else
      slot(split)[at] = v;
  };
  const int d = threadIdx.x;
  if (d < hd) {
    const float* accs = reinterpret_cast<const float*>(group_acc);
    float total = 0.0f;
#pragma unroll 8
    for (int g = 0; g < groups; ++g) total = fmaf(group_weight(g), accs[g * hd + d], total);
    put(2 + d, total);
  }
  if (threadIdx.x == 0) {
    float L = 0.0f;
#pragma unroll 8
    for (int g = 0; g < groups; ++g) L = fmaf(group_weight(g), group_l[g], L);
    put(0, M);
    put(1, L);
  }

  // This head's merged value of dimension d: out, and its int8 copy where quantizing.
  const int width = a.heads * hd;
  const auto store_output = [&](float num) {
    const size_t kk = size_t(h) * hd + d;
    out[size_t(t) * width + kk] = num;
    if (a.q8.q) {
      float q8_scale;
      a.q8.q[size_t(t) * width + kk] = q8_lane(num, q8_scale);
      if (threadIdx.x % kWarp == 0) a.q8.d[size_t(t) * (width / 32) + kk / 32] = q8_scale;
    }
  };
  // Every split's values, m and l, loaded at once: in the cluster's block 0 (pushed: once every
  // block has stored its own there, the others leaving, since nothing reads their shared
  // memory; pulled: from the other blocks' shared memory), or (the last block of this (token,
  // head) to finish) from global memory.
  int* counter = a.counters + size_t(t) * a.heads + h;
  bool merges = false;
  if constexpr (kCountedPush) {
    if (cluster_rank() != 0) return;
    mbarrier_wait(&arrived, 0);
    trace_mark(2);
    if (d >= hd) return;  // whole warps (head_dim a multiple of 32 when quantizing)
    if (a.weigh_by_warp && hd % kWarp == 0) {
      // warp 0 weighs them, a lane a split, and the head's warps meet at a named barrier
      if (threadIdx.x < kWarp) {
        const int s = threadIdx.x;
        weight[s] = split_weight(s < S ? gathered[s * (hd + 2)] : -INFINITY, s < S ? gathered[s * (hd + 2) + 1] : 0.0f, scale);
      }
      asm volatile("bar.sync 2, %0;" ::"r"(hd) : "memory");
      float num = 0.0f;
#pragma unroll
      for (int s = 0; s < kMaxAttentionCluster; ++s)
        if (s < S) num = fmaf(weight[s], gathered[s * (hd + 2) + 2 + d], num);
      trace_mark(3);
      store_output(num);
      return;
    }
    // else every thread weighs them itself from the same broadcast loads
    float M = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxAttentionCluster; ++s)
      if (s < S) M = fmaxf(M, gathered[s * (hd + 2)]);
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxAttentionCluster; ++s) {
      if (s < S) {
        const float* g = gathered + s * (hd + 2);
        const float w = g[0] == -INFINITY ? 0.0f : expf((g[0] - M) * scale);
        den = fmaf(w, g[1], den);
        num = fmaf(w, g[2 + d], num);
      }
    }
    trace_mark(3);
    store_output(num / den);
    return;
  } else if constexpr (kPushed) {
    cluster_arrive_release();
    merges = cluster_rank() == 0;
    if (!merges) return;
    cluster_wait();
    trace_mark(2);
  } else if constexpr (kPulled) {
    cluster_sync();
    merges = cluster_rank() == 0;
  } else {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counter, 1) == S - 1;
    __syncthreads();
    merges = last;
    if (merges) __threadfence();
  }
  const auto partial = [&](int s, int at) {
    if constexpr (kPushed)
      return gathered[s * (hd + 2) + at];
    else if constexpr (kPulled)
      return cluster_load(mine + at, unsigned(s));
    else
      return __ldcg(slot(s) + at);
  };
  // Every split's values, and their weights by warp 0 (split_weight).
  float values[kWarp];
  if (merges) {
#pragma unroll
    for (int s = 0; s < kWarp; ++s) values[s] = s < S && d < hd ? partial(s, 2 + d) : 0.0f;
    if (threadIdx.x < kWarp) {
      const int s = threadIdx.x;
      weight[s] = split_weight(s < S ? partial(s, 0) : -INFINITY, s < S ? partial(s, 1) : 0.0f, scale);
    }
  }
  if constexpr (kPulled) cluster_sync();  // the other blocks' shared memory stays until it is read
  if (!merges) return;
  __syncthreads();
  trace_mark(3);
  if (!kCluster && threadIdx.x == 0) *counter = 0;
  if (d >= hd) return;  // whole warps (head_dim a multiple of 32 when quantizing)
  float num = 0.0f;
#pragma unroll
  for (int s = 0; s < kWarp; ++s)
    if (s < S) num = fmaf(weight[s], values[s], num);
  store_output(num);
}

// RUNAHEAD_CUDA_ATTENTION_THREADS=128|256 forces the block size (threads_for), to measure.
int forced_threads() {
  static const int threads = [] {
    const char* v = std::getenv("RUNAHEAD_CUDA_ATTENTION_THREADS");
    const std::string s = v ? v : "";
    return s == "128" ? 128 : s == "256" ? 256 : 0;
  }();
  return threads;
}
// The cluster kernel, allowed (once) clusters of up to kMaxAttentionCluster blocks, past the
// portable 8.
template <int kThreads, bool kPush, bool kCounted = false> auto cluster_kernel() {
  const auto kernel = attention_decode_kernel<kThreads, true, kPush, kCounted>;
  static const bool allowed = (check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                                          "cudaFuncSetAttribute(attention cluster)"),
                               true);
  (void)allowed;
  return kernel;
}
// The splits of a (token, head) are consecutive blocks along x: one cluster with kCluster.
template <int kThreads, bool kCluster> void launch(const DecodeAttention& a, const float* q, int n, const int* pos,
                                                   float* out, cudaStream_t stream) {
  const auto kernel = !kCluster              ? attention_decode_kernel<kThreads, false>
                      : a.push && a.counted ? cluster_kernel<kThreads, true, true>()
                      : a.push              ? cluster_kernel<kThreads, true>()
                                            : cluster_kernel<kThreads, false>();
  launch_pdl_clusters(kCluster ? unsigned(a.splits) : 0u, kernel, dim3(a.splits, a.heads, n), dim3(kThreads), 0,
                      stream, a, q, pos, out);
}

// Blocks of 256 threads this device holds at once.
int wide_resident() {
  static const int resident = [] {
    int device = 0, sms = 0, per_sm = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attention_decode_kernel<256, false>, 256, 0),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    return sms * per_sm;
  }();
  return resident;
}
// Blocks of 256 threads (8 positions at a time for a head_dim of 128, so 64 a round of loads)
// where the grid fits in one wave of them, else of 128 (two waves of the wider blocks: H200,
// the 7B's 28 heads x 15 splits at 2 blocks of 256 a multiprocessor, us a step alone: 252 at
// 128 threads, 363 at 256; the 1.5B's 12 x 16 splits: 207 at 128, 184 at 256).
int threads_for(const DecodeAttention& a, int n) {
  if (forced_threads()) return forced_threads();
  return a.splits * a.heads * n <= wide_resident() ? 256 : 128;
}

}  // namespace

// About three blocks a multiprocessor (H200, Q4_K_M decode at context 512, ms/token: 1.5B's 12
// heads, 22 splits a head 1.263, 32 1.239; 7B's 28 heads, 10 2.663, 19 2.675). The backend
// takes at most kMaxAttentionCluster of them to merge in a cluster (1.5B: 32 -> 16), which
// gained more than the splits lost: the 1.5B 1.028 -> 1.004 ms/token, 7B 2.070 -> 2.030
// (v27); at context 2048 the 1.5B 1.190 -> 1.189.
// Candidate, built with -DRUNAHEAD_ATTENTION_ONE_WAVE=1, not yet measured (NOTES v57): where those
// splits, at most kMaxAttentionCluster, do not fit one wave of 256-thread blocks (the 7B's 28
// heads: 15 splits of 128 threads, two rounds of loads at context 512), the most that do, at
// least 2 (one_wave_splits): one round there, every position loaded before pdl_wait.
#ifndef RUNAHEAD_ATTENTION_ONE_WAVE
#define RUNAHEAD_ATTENTION_ONE_WAVE 0
#endif
namespace {
// The most splits a head, from `most` down to 2, whose 256-thread blocks are all resident at once:
// where clusters run, as `heads` clusters of that many (a cluster's blocks share one GPC, so a
// device holds fewer clusters than its blocks alone suggest); else as blocks. 0: none.
int one_wave_splits(int heads, int most) {
  for (int s = most; s >= 2; --s) {
    if (s * heads > wide_resident()) continue;
    if (!bulk_copies_on()) return s;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(unsigned(s), unsigned(heads), 1);
    config.blockDim = dim3(256);
    cudaLaunchAttribute attr = cluster_attribute(unsigned(s));
    config.attrs = &attr;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, cluster_kernel<256, true, true>(), &config) != cudaSuccess) {
      cudaGetLastError();  // not a sticky error
      continue;
    }
    if (clusters >= heads) return s;
  }
  return 0;
}
}  // namespace
int attention_splits(int heads, int sms) {
  const int three = std::clamp((3 * sms + heads - 1) / heads, 1, kWarp), most = std::min(three, kMaxAttentionCluster);
  if (!RUNAHEAD_ATTENTION_ONE_WAVE || most * heads <= wide_resident()) return three;
  const int wave = one_wave_splits(heads, most);
  return wave ? wave : three;
}

bool attention_cluster_fits(int splits, bool push, bool counted) {
  if (splits < 2 || splits > kMaxAttentionCluster || !bulk_copies_on()) return false;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(splits, 1, 1);
  config.blockDim = dim3(256);  // the wider block (the narrower one fits where it does)
  const auto kernel = push && counted ? cluster_kernel<256, true, true>()
                      : push          ? cluster_kernel<256, true>()
                                      : cluster_kernel<256, false>();  // the one that will run
  cudaLaunchAttribute attr = cluster_attribute(unsigned(splits));
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    cudaGetLastError();  // not a sticky error: the splits merge through global memory
    return false;
  }
  return clusters > 0;
}

size_t attention_partial_floats(int heads, int head_dim, int splits) {
  return size_t(kMaxVecTokens) * heads * splits * (head_dim + 2);
}

void attention_decode(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                      cudaStream_t stream) {
  if (a.q8.q && a.head_dim % 32 != 0) throw EngineError("internal", "attention_decode: quantized outputs need head_dim % 32 == 0");
  if (a.head_dim % 4 != 0 || 128 % (a.head_dim / 4) != 0 || a.head_dim > kMaxHeadDim)
    throw EngineError("unsupported", "head_dim " + std::to_string(a.head_dim) +
                                         ": the CUDA attention needs a multiple of 4 that divides 512, at most 128");
  if (a.cluster && (a.splits < 2 || a.splits > kMaxAttentionCluster))
    throw EngineError("internal", "attention_decode: a cluster of " + std::to_string(a.splits) + " splits");
  const bool wide = threads_for(a, n) == 256;
  if (a.cluster)
    wide ? launch<256, true>(a, q, n, pos, out, stream) : launch<128, true>(a, q, n, pos, out, stream);
  else
    wide ? launch<256, false>(a, q, n, pos, out, stream) : launch<128, false>(a, q, n, pos, out, stream);
}

}  // namespace runahead::cuda
