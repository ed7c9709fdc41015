// quant-matvec-bench: ms per decode matvec y[rows] = W[rows, cols] x[cols] of the block
// formats (Q8_0, Q4_K, Q6_K, on int8 activations) next to the engine's bf16 kernel, and the
// read-bandwidth bound of each one's bytes, measured in the same run on the same threads.
// Then the same matrix times n = 1, 2, 4, 8, 9 tokens (speculative verify widths) and 64
// (a prefill chunk) through matmul_quant, as ms and as a multiple of n = 1's ms.
//   quant-matvec-bench [--threads N] [--iters N]
// Shapes: Qwen2.5-0.5B's largest matrices (down 896x4864, gate/up 4864x896, lm_head
// 151936x896), 1.5B's MLP (1536x8960, 8960x1536) and the shipped runahead-coder's lm_head and
// down (16384x384, 384x1024). Q4_K/Q6_K need cols % 256 == 0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "model/quant_blocks.h"
#include "cpu/quant_matvec.h"
#include "cpu/read_bandwidth.h"
#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"
#include "runtime/cpus.h"
#include "model/half.h"

using namespace runahead;

namespace {

struct Shape {
  const char* name;
  int64_t rows, cols;
};

// Weights ~ N(0, 0.02)-like from a xorshift stream: fast to make, not all equal.
std::vector<float> random_row(int64_t cols, uint64_t& s) {
  std::vector<float> w(cols);
  for (float& v : w) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v = (float(s >> 40) / float(1 << 24) - 0.5f) * 0.07f;
  }
  return w;
}

// The median of `iters` timed calls, after two warm-up calls.
template <class F>
double median_ms(int iters, F&& fn) {
  fn(), fn();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = default_threads(), iters = 21;
  const char* only = "";  // --only TEXT: the shapes whose name contains TEXT
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--only")) only = argv[i + 1];
  }
  ThreadPool pool(threads);
  const Kernels& kernels = select_kernels();
  const QuantKernels& qk = select_quant_kernels();
  const double bandwidth = read_bandwidth(pool, size_t(512) << 20, 5);
  std::printf("threads %d, kernels %s / quant %s, read bandwidth %.1f GB/s\n", threads, kernels.simd, qk.simd,
              bandwidth / 1e9);
  constexpr int kTokens[] = {1, 2, 4, 8, 9, 64};
  std::printf("%-22s %-5s %8s %8s %8s %8s", "matrix rows x cols", "fmt", "MB", "ms", "bound ms", "of bound");
  for (int n : kTokens) std::printf("  %14s", ("n=" + std::to_string(n) + " ms (xn1)").c_str());
  std::printf("\n");

  const Shape shapes[] = {{"0.5B down 896x4864", 896, 4864},
                          {"0.5B gate/up 4864x896", 4864, 896},
                          {"0.5B lm_head 151936x896", 151936, 896},
                          {"1.5B down 1536x8960", 1536, 8960},
                          {"1.5B gate/up 8960x1536", 8960, 1536},
                          // Beyond every cache, as a whole model's weights are: one stream from DRAM.
                          {"1.5B lm_head 151936x1536", 151936, 1536},
                          {"coder lm_head 16384x384", 16384, 384},
                          {"coder down 384x1024", 384, 1024}};
  for (const Shape& s : shapes) {
    if (!std::strstr(s.name, only)) continue;
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ uint64_t(s.rows * s.cols);
    std::vector<float> x = random_row(s.cols, seed);
    std::vector<float> y(s.rows);
    std::vector<uint16_t> bf16(s.rows * s.cols);
    std::vector<std::vector<uint8_t>> quant(3);
    for (QuantType t : {QuantType::Q8_0, QuantType::Q4_K, QuantType::Q6_K})
      if (s.cols % quant_format(t).block_elems == 0) quant[int(t)].resize(quant_row_bytes(t, s.cols) * s.rows);
    for (int64_t r = 0; r < s.rows; ++r) {
      const std::vector<float> w = random_row(s.cols, seed);
      for (int64_t i = 0; i < s.cols; ++i) bf16[r * s.cols + i] = f32_to_bf16(w[i]);
      for (QuantType t : {QuantType::Q8_0, QuantType::Q4_K, QuantType::Q6_K})
        if (!quant[int(t)].empty()) quantize_row(t, w.data(), s.cols, &quant[int(t)][r * quant_row_bytes(t, s.cols)]);
    }
    auto report = [&](const char* fmt, size_t bytes, double ms) {
      const double bound = double(bytes) / bandwidth * 1e3;
      std::printf("%-22s %-5s %8.2f %8.3f %8.3f %7.0f%%", s.name, fmt, double(bytes) / 1e6, ms, bound, 100 * bound / ms);
    };
    const double bf16_ms = median_ms(iters, [&] {
      pool.for_range(s.rows, 8, [&](int64_t begin, int64_t end) {
        kernels.matmul_bf16(bf16.data(), s.cols, begin, end, s.cols, x.data(), s.cols, 1, y.data(), s.rows);
      });
    });
    report("bf16", bf16.size() * 2, bf16_ms);
    std::printf("\n");
    const int most = kTokens[std::size(kTokens) - 1];
    std::vector<float> xs(size_t(most) * s.cols), ys(size_t(most) * s.rows);
    for (int64_t t = 0; t < most; ++t) std::copy(x.begin(), x.end(), xs.begin() + t * s.cols);
    Q8Activations xq;
    for (QuantType t : {QuantType::Q8_0, QuantType::Q4_K, QuantType::Q6_K}) {
      if (quant[int(t)].empty()) {
        std::printf("%-22s %-5s %10s (cols %% %d != 0: llama.cpp stores such a matrix in another format)\n", s.name,
                    quant_format(t).name, "n/a", quant_format(t).block_elems);
        continue;
      }
      const QuantMatrix m{t, quant[int(t)].data(), s.rows, s.cols};
      const double one_ms = median_ms(iters, [&] { matvec_quant(pool, qk, m, x.data(), xq, y.data()); });
      report(quant_format(t).name, quant[int(t)].size(), one_ms);
      for (int n : kTokens) {
        const double ms = median_ms(std::max(3, iters * 4 / n), [&] { matmul_quant(pool, qk, m, xs.data(), n, ys.data()); });
        std::printf("  %7.3f (%4.2f)", ms, ms / one_ms);
      }
      std::printf("\n");
    }
  }
  return 0;
}
