// What do a few instructions cost a decode kernel where the trace sees them take ~0.4-1 us?
// The trace's marks (NOTES v43) put ~0.4 us between a ring's inputs and its wait for its first
// tile (a loop's set-up), ~0.4-0.7 us in that wait though the tile is in, and ~1.1 us in
// attention's merge for ~20 loads and two warp reductions. Three candidates, measured here apart
// from the engine, one warp a block and one block a multiprocessor (no other warp to share the
// issue slots with), medians over the blocks in us:
//   timer: two %globaltimer reads back to back (what a trace mark costs and its resolution);
//   done wait: mbarrier.try_wait on a phase already complete (what a ring's wait costs when its
//     tile is in);
//   code: 8 regions of straight-line code (kRegionOps dependent integer multiply-adds, ~8 KB of
//     instructions each), timed region by region in a kernel's first launch (its code in no
//     cache), its second launch right after (warm), and a third after kernels of as much other
//     code have run (in L2, not in the multiprocessor's instruction caches), and a fourth after
//     256 MB more have streamed through L2 too (its code from DRAM, as weights streaming past
//     might leave it in the engine); the difference
//     between the first region and the others, and between the launches, is what fetching
//     instructions costs a warp that reaches code it has not run;
//   branches: the same four launches of 8 regions that each end in a loop run once and a
//     skipped block of ~7 KB (branch_kernel), with 1 and with 8 warps a block: what a warp pays
//     for cold code it reaches by a jump rather than in order (NOTES v45: ~0.1 us a region
//     near the start, 0.3-0.9 us further on, against ~0.17 warm).
// Build and run (a GPU machine, repository root; cicc takes ~11 minutes over it, so build it
// on the host and carry the binary):
//   nvcc -O2 -std=c++20 -arch=sm_90a -o /tmp/code_probe engine/bench/cuda/code_probe.cu && /tmp/code_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>
#include <vector>

#include "probe.cuh"

namespace {

using probe::check;
using probe::now;

constexpr int kRegions = 8, kRegionOps = 512, kEvictors = 6;

// x = x * c + y with c an odd immediate; every op of the probe has its own c, so that no two
// regions (and no two kernels) share instructions and the compiler cannot fold them.
template <unsigned kC>
__device__ __forceinline__ unsigned mad_op(unsigned x, unsigned y) {
  asm volatile("mad.lo.u32 %0, %0, %1, %2;" : "+r"(x) : "n"(kC | 1u), "r"(y));
  return x;
}
__host__ __device__ constexpr unsigned op_constant(unsigned seed, unsigned i) {
  unsigned h = seed * 2654435761u + i * 40503u + 1013904223u;
  h ^= h >> 15;
  return h * 1664525u;
}
template <unsigned kSeed, unsigned... I>
__device__ __forceinline__ unsigned region(unsigned x, unsigned y, std::integer_sequence<unsigned, I...>) {
  ((x = mad_op<op_constant(kSeed, I)>(x, y)), ...);
  return x;
}

// Runs region_at(R, x) for R = 0 .. kRegions - 1 (R a std::integral_constant), x starting at
// threadIdx.x, and keeps the block's kRegions + 1 moments in times (region r ran from [r] to
// [r + 1]) and x in sink (so that no region's work can be dropped).
template <class Region>
__device__ __forceinline__ void timed_regions(uint64_t* times, unsigned* sink, Region region_at) {
  uint64_t m[kRegions + 1];
  unsigned x = threadIdx.x;
  m[0] = now();
  [&]<int... R>(std::integer_sequence<int, R...>) {
    ((x = region_at(std::integral_constant<int, R>{}, x), m[R + 1] = now()), ...);
  }(std::make_integer_sequence<int, kRegions>{});
  if (threadIdx.x == 0)
    for (int r = 0; r <= kRegions; ++r) times[size_t(blockIdx.x) * (kRegions + 1) + r] = m[r];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

// Straight-line regions of kRegionOps multiply-adds.
template <unsigned kSeed>
__global__ void __launch_bounds__(32) code_kernel(unsigned y, uint64_t* times, unsigned* sink) {
  timed_regions(times, sink, [&](auto r, unsigned x) {
    return region<kSeed * 7919u + unsigned(decltype(r)::value)>(x, y, std::make_integer_sequence<unsigned, kRegionOps>{});
  });
}

// As code_kernel, with branches: each region is a loop of kLoopOps multiply-adds that runs `y`
// (1) times, then kSkipOps more behind a test that never passes (x equal to a value it cannot
// reach at run time, unknown to the compiler), so a warp jumps backwards once and then, unless
// the compiler moves the skipped code out of line, forwards past ~7 KB of code it never runs:
// where fetching follows the code in order, the next region's start is cold. `warps` warps a
// block run it together (they share a multiprocessor's instruction caches).
constexpr int kLoopOps = 64, kSkipOps = 448;
template <unsigned kSeed>
__global__ void __launch_bounds__(256) branch_kernel(unsigned y, uint64_t* times, unsigned* sink) {
  timed_regions(times, sink, [&](auto r, unsigned x) {
    constexpr unsigned R = decltype(r)::value;
    for (unsigned i = 0; i < y; ++i)
      x = region<kSeed * 7919u + 100u + R>(x, y, std::make_integer_sequence<unsigned, kLoopOps>{});
    if (x == y * 0x9e3779b9u + 0x7f4a7c15u + R)
      x = region<kSeed * 7919u + 200u + R>(x, y, std::make_integer_sequence<unsigned, kSkipOps>{});
    return x;
  });
}

// times: a block's {timer: t1 - t0 of two reads back to back, done wait: the try_wait loop on a
// completed phase}.
__global__ void __launch_bounds__(32) primitives_kernel(uint64_t* times) {
  __shared__ __align__(8) uint64_t bar;
  const unsigned b = unsigned(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  if (threadIdx.x == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
  __syncwarp();
  const uint64_t t0 = now(), t1 = now();
  unsigned done = 0;
  const uint64_t w0 = now();
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(b), "r"(0u)
                 : "memory");
  } while (!done);
  const uint64_t w1 = now();
  if (threadIdx.x == 0) times[blockIdx.x * 2] = t1 - t0, times[blockIdx.x * 2 + 1] = w1 - w0;
}

// Reads `n` uint4 (every block a grid-strided part) so that they pass through L2.
__global__ void stream_kernel(const uint4* src, size_t n, unsigned* sink) {
  unsigned x = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = src[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9e3779b9u) sink[0] = x;  // keeps the loads
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One launch of a region kernel (`name` for its errors), its blocks' moments copied to host.
void run_regions(void (*kernel)(unsigned, uint64_t*, unsigned*), const char* name, int blocks, int threads,
                 unsigned y, uint64_t* times, unsigned* sink, std::vector<uint64_t>& host) {
  kernel<<<blocks, threads>>>(y, times, sink);
  check(cudaGetLastError(), "launch");
  check(cudaDeviceSynchronize(), name);
  check(cudaMemcpy(host.data(), times, host.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "copy");
}
template <unsigned kSeed>
void run_code(int blocks, uint64_t* times, unsigned* sink, std::vector<uint64_t>& host) {
  run_regions(code_kernel<kSeed>, "code_kernel", blocks, 32, 3u, times, sink, host);
}
template <unsigned kSeed>
void run_branches(int blocks, int warps, uint64_t* times, unsigned* sink, std::vector<uint64_t>& host) {
  run_regions(branch_kernel<kSeed>, "branch_kernel", blocks, 32 * warps, 1u, times, sink, host);
}
// As much other code as the probed kernel: code_kernel<2> .. <kEvictors + 1>, each once.
void run_evictors(int blocks, uint64_t* times, unsigned* sink, std::vector<uint64_t>& host) {
  [&]<int... E>(std::integer_sequence<int, E...>) { (run_code<2 + E>(blocks, times, sink, host), ...); }(
      std::make_integer_sequence<int, kEvictors>{});
}

void print_regions(const char* what, int blocks, const std::vector<uint64_t>& h) {
  std::printf("| %s |", what);
  double total = 0.0;
  for (int r = 0; r < kRegions; ++r) {
    std::vector<double> d;
    for (int b = 0; b < blocks; ++b)
      d.push_back(double(h[size_t(b) * (kRegions + 1) + r + 1] - h[size_t(b) * (kRegions + 1) + r]) / 1e3);
    const double m = median(d);
    total += m;
    std::printf(" %.3f |", m);
  }
  std::printf(" %.3f |\n", total);
}

}  // namespace

int main() {
  probe::name = "code_probe";
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  uint64_t* times = nullptr;
  unsigned* sink = nullptr;
  check(cudaMalloc(&times, size_t(sms) * (kRegions + 1) * sizeof(uint64_t)), "cudaMalloc");
  check(cudaMalloc(&sink, size_t(sms) * 256 * sizeof(unsigned)), "cudaMalloc");

  std::vector<uint64_t> h(size_t(sms) * 2);
  primitives_kernel<<<sms, 32>>>(times);
  check(cudaDeviceSynchronize(), "primitives_kernel (warm-up)");
  primitives_kernel<<<sms, 32>>>(times);
  check(cudaDeviceSynchronize(), "primitives_kernel");
  check(cudaMemcpy(h.data(), times, h.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "copy");
  std::vector<double> timer, wait;
  for (int b = 0; b < sms; ++b) timer.push_back(double(h[2 * b]) / 1e3), wait.push_back(double(h[2 * b + 1]) / 1e3);
  std::sort(timer.begin(), timer.end());
  std::printf("%d blocks of one warp. timer: two reads back to back %.3f us (median; max %.3f); done wait: %.3f us\n\n",
              sms, median(timer), timer.back(), median(wait));

  std::printf("code: %d regions of %d dependent multiply-adds (~%d KB of instructions each), us a region (medians)\n\n",
              kRegions, kRegionOps, kRegionOps * 16 / 1024);
  std::printf("| launch |");
  for (int r = 0; r < kRegions; ++r) std::printf(" region %d |", r + 1);
  std::printf(" all |\n|---|");
  for (int r = 0; r <= kRegions; ++r) std::printf("---|");
  std::printf("\n");
  h.assign(size_t(sms) * (kRegions + 1), 0);
  run_code<1>(sms, times, sink, h);
  print_regions("first (code in no cache)", sms, h);
  run_code<1>(sms, times, sink, h);
  print_regions("second, right after", sms, h);
  // as much other code, then the first kernel again
  run_evictors(sms, times, sink, h);
  run_code<1>(sms, times, sink, h);
  print_regions("after other kernels' code", sms, h);
  run_code<1>(sms, times, sink, h);
  print_regions("second again", sms, h);
  constexpr size_t kStreamBytes = size_t(256) << 20;
  uint4* big = nullptr;
  check(cudaMalloc(&big, kStreamBytes), "cudaMalloc");
  check(cudaMemset(big, 1, kStreamBytes), "cudaMemset");
  const auto evict_and_stream = [&] {  // other kernels' code, then 256 MB through L2
    run_evictors(sms, times, sink, h);
    stream_kernel<<<sms * 4, 256>>>(big, kStreamBytes / sizeof(uint4), sink);
    check(cudaDeviceSynchronize(), "stream_kernel");
  };
  evict_and_stream();
  run_code<1>(sms, times, sink, h);
  print_regions("after other code and 256 MB streamed", sms, h);

  // Branches: branch_kernel<10 + w> for w warps a block, cold, warm, after other code, after
  // other code and a stream.
  std::printf("\nbranches: %d regions, each a loop of %d multiply-adds run once, then %d skipped (~%d KB of "
              "instructions a region), us a region (medians)\n\n",
              kRegions, kLoopOps, kSkipOps, (kLoopOps + kSkipOps) * 16 / 1024);
  std::printf("| warps a block | launch |");
  for (int r = 0; r < kRegions; ++r) std::printf(" region %d |", r + 1);
  std::printf(" all |\n|---|---|");
  for (int r = 0; r <= kRegions; ++r) std::printf("---|");
  std::printf("\n");
  [&]<int... W>(std::integer_sequence<int, W...>) {
    (
        [&] {
          constexpr int warps = W == 0 ? 1 : 8;
          const auto show = [&](const char* what) {
            std::printf("| %d ", warps);
            print_regions(what, sms, h);
          };
          run_branches<10 + W>(sms, warps, times, sink, h);
          show("first (code in no cache)");
          run_branches<10 + W>(sms, warps, times, sink, h);
          show("second, right after");
          run_evictors(sms, times, sink, h);
          run_branches<10 + W>(sms, warps, times, sink, h);
          show("after other kernels' code");
          evict_and_stream();
          run_branches<10 + W>(sms, warps, times, sink, h);
          show("after other code and 256 MB streamed");
        }(),
        ...);
  }(std::make_integer_sequence<int, 2>{});
  return 0;
}
