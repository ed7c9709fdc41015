// When do a dependent kernel's reads issued before griddepcontrol.wait complete?
// The decode step's rings ask for their first weight tiles before pdl_wait, so that DRAM serves
// them beside the kernel before (programmatic dependent launch). The trace (NOTES v41) has those
// tiles land at the same moment after the previous kernel's end whenever they were asked for.
// This probe measures it apart from the engine: kernel A's blocks spin for SPIN us (no memory
// traffic) after letting the dependents launch; kernel B (launched after A with the PDL
// attribute, or without it as the control) reads BYTES a block from DRAM before its wait, as a
// bulk copy into shared memory (mode bulk) or as plain loads (mode ld), and records when its block
// started, when the bytes were in, and when its wait returned. Printed, per mode: medians (and
// p10 / p90) of each, in us from A's last block's end.
// Build and run (a GPU machine, repository root):
//   nvcc -O2 -std=c++20 -arch=sm_90a -o /tmp/pdl_probe engine/bench/cuda/pdl_probe.cu
//   /tmp/pdl_probe [SPIN us] [BYTES] [CARVEOUT: both kernels' preferred shared-memory share, %] [GRAPH: 1]
//                  [B's blocks a multiprocessor] [RUNS: bulk copies a block]
// (gate/up's first round on the 1.5B, v41: /tmp/pdl_probe 20 13824 100 0 3 2)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe.cuh"

namespace {

using probe::check;
using probe::now;
using probe::smem_u32;


// A: every block lets the dependents launch, spins `spin_ns`, records its end.
__global__ void spin_kernel(uint64_t spin_ns, uint64_t* ends) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const uint64_t t0 = now();
  while (now() - t0 < spin_ns) {
  }
  __syncthreads();
  if (threadIdx.x == 0) ends[blockIdx.x] = now();
}

constexpr int kThreads = 256;
constexpr int kMaxBytes = 64 * 1024;

// B: block b reads `bytes` before its wait (mode 0: `runs` bulk copies of bytes / runs, run r from
// src + r * gridDim.x * (bytes / runs) + b * (bytes / runs), as a ring's gate and up rows lie apart;
// 1: loads of src + b * bytes). times[b] = {start, in, waited}.
__global__ void read_kernel(const unsigned char* src, int bytes, int runs, int mode, uint64_t* times, float* sink) {
  extern __shared__ __align__(128) unsigned char buf[];
  __shared__ __align__(8) uint64_t bar;
  const uint64_t start = now();
  const unsigned char* from = src + size_t(blockIdx.x) * bytes;
  float acc = 0.0f;
  if (mode == 0) {
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar)) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(&bar)), "r"(bytes) : "memory");
      const int run = bytes / runs;
      for (int r = 0; r < runs; ++r)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         smem_u32(buf + r * run)),
                     "l"(src + (size_t(r) * gridDim.x + blockIdx.x) * run), "r"(run), "r"(smem_u32(&bar))
                     : "memory");
    }
    unsigned done = 0;
    do {
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done)
                   : "r"(smem_u32(&bar))
                   : "memory");
    } while (!done);
    acc = reinterpret_cast<const float*>(buf)[threadIdx.x];
  } else {
    const float4* f = reinterpret_cast<const float4*>(from);
    for (int i = threadIdx.x; i < bytes / 16; i += kThreads) {
      const float4 v = __ldg(f + i);
      acc += v.x + v.y + v.z + v.w;
    }
    __syncthreads();  // every thread's loads are back
  }
  const uint64_t in = now();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const uint64_t waited = now();
  if (acc == 12345.0f) sink[0] = acc;  // keeps the loads
  if (threadIdx.x == 0) {
    times[3 * blockIdx.x + 0] = start;
    times[3 * blockIdx.x + 1] = in;
    times[3 * blockIdx.x + 2] = waited;
  }
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[size_t(p * double(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  probe::name = "pdl_probe";
  const double spin_us = argc > 1 ? std::atof(argv[1]) : 20.0;
  const int bytes = argc > 2 ? std::atoi(argv[2]) : 16384;
  const int carveout = argc > 3 ? std::atoi(argv[3]) : -1;  // A's preferred shared-memory carveout, % (-1: the driver's)
  const bool graph = argc > 4 && std::atoi(argv[4]) == 1;  // both launches captured in a CUDA graph
  const int reps = 20;
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
  const int b_per_sm = argc > 5 ? std::max(1, std::atoi(argv[5])) : 2;  // B's blocks a multiprocessor
  const int runs = argc > 6 ? std::max(1, std::atoi(argv[6])) : 1;       // B's bulk copies a block
  if (bytes % (16 * runs) != 0 || bytes > kMaxBytes) {
    std::fprintf(stderr, "pdl_probe: BYTES must be a multiple of 16 x RUNS and at most %d\n", kMaxBytes);
    return 2;
  }
  const int a_blocks = sms, b_blocks = b_per_sm * sms;
  const size_t pool = size_t(512) << 20;  // reads move through it, so each comes from DRAM
  unsigned char* src = nullptr;
  uint64_t *ends = nullptr, *times = nullptr;
  float* sink = nullptr;
  check(cudaMalloc(&src, pool), "cudaMalloc");
  check(cudaMemset(src, 1, pool), "cudaMemset");
  check(cudaMalloc(&ends, sizeof(uint64_t) * a_blocks), "cudaMalloc");
  check(cudaMalloc(&times, sizeof(uint64_t) * 3 * b_blocks), "cudaMalloc");
  check(cudaMalloc(&sink, sizeof(float)), "cudaMalloc");
  check(cudaFuncSetAttribute(read_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxBytes), "smem");
  if (carveout >= 0) {
    check(cudaFuncSetAttribute(spin_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout), "carveout");
    check(cudaFuncSetAttribute(read_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout), "carveout");
  }
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  std::printf("spin %.1f us, %d bytes a block in %d run(s), %d blocks of B beside %d of A (%d SMs), carveout %d,%s %d reps\n",
              spin_us, bytes, runs, b_blocks, a_blocks, sms, carveout, graph ? " in a graph," : "", reps);
  std::printf("| B's read | launch | start | bytes in | in - start | waited |\n|---|---|---|---|---|---|\n");
  size_t offset = 0;
  for (int mode = 0; mode < 2; ++mode)
    for (int pdl = 1; pdl >= 0; --pdl) {
      std::vector<double> start, in, lat, waited;
      for (int r = 0; r < reps; ++r) {
        if (offset + size_t(bytes) * b_blocks > pool) offset = 0;
        if (graph) check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
        spin_kernel<<<a_blocks, 128, 0, stream>>>(uint64_t(spin_us * 1e3), ends);
        cudaLaunchAttribute attr{};
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = pdl;
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(b_blocks);
        config.blockDim = dim3(kThreads);
        config.dynamicSmemBytes = mode == 0 ? size_t(bytes) : 0;
        config.stream = stream;
        config.attrs = &attr;
        config.numAttrs = 1;
        check(cudaLaunchKernelEx(&config, read_kernel, static_cast<const unsigned char*>(src + offset), bytes, runs, mode,
                                 times, sink),
              "launch");
        offset += size_t(bytes) * b_blocks;
        if (graph) {
          cudaGraph_t g;
          cudaGraphExec_t exec;
          check(cudaStreamEndCapture(stream, &g), "capture");
          check(cudaGraphInstantiate(&exec, g, 0), "instantiate");
          check(cudaGraphLaunch(exec, stream), "graph launch");
          check(cudaStreamSynchronize(stream), "sync");
          cudaGraphExecDestroy(exec);
          cudaGraphDestroy(g);
        }
        check(cudaStreamSynchronize(stream), "sync");
        std::vector<uint64_t> e(a_blocks), t(3 * b_blocks);
        check(cudaMemcpy(e.data(), ends, e.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "copy");
        check(cudaMemcpy(t.data(), times, t.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "copy");
        if (r < 3) continue;  // warm-up
        const double a_end = double(*std::max_element(e.begin(), e.end()));
        for (int b = 0; b < b_blocks; ++b) {
          start.push_back((double(t[3 * b]) - a_end) / 1e3);
          in.push_back((double(t[3 * b + 1]) - a_end) / 1e3);
          lat.push_back((double(t[3 * b + 1]) - double(t[3 * b])) / 1e3);
          waited.push_back((double(t[3 * b + 2]) - a_end) / 1e3);
        }
      }
      const auto cell = [](const std::vector<double>& v) {
        static char s[64];
        std::snprintf(s, sizeof s, "%.2f (%.2f..%.2f)", pct(v, 0.5), pct(v, 0.1), pct(v, 0.9));
        return std::string(s);
      };
      std::printf("| %s | %s | %s | %s | %s | %s |\n", mode == 0 ? "bulk copy" : "loads", pdl ? "PDL" : "plain",
                  cell(start).c_str(), cell(in).c_str(), cell(lat).c_str(), cell(waited).c_str());
    }
  return 0;
}
