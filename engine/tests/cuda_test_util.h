#pragma once
// What the CUDA tests share: the skip when no device is usable, random inputs (f32, bf16 with
// the f32 values they hold, token ids) and copies to and from the device.
#ifdef RUNAHEAD_CUDA
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "model/half.h"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_memory.h"
#include "model/quantize.h"
#include "runtime/backend.h"
#include "runtime/session.h"

namespace runahead::testing {

inline bool have_device() {
  if (cuda_available()) return true;
  MESSAGE("skipped: no CUDA device (cudaGetDeviceCount failed or found none)");
  return false;
}

// The device's multiprocessors (the ops' launchers size their grids by them).
inline int sms() {
  int n = 0;
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
  return n;
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

inline std::vector<int32_t> random_tokens(size_t n, int vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = id(rng);
  return t;
}

// bf16 matrix with the f32 values it holds.
struct Bf16Matrix {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};
inline Bf16Matrix random_bf16(size_t n, std::mt19937& rng, float scale = 0.5f) {
  Bf16Matrix m{std::vector<uint16_t>(n), random_floats(n, rng, scale)};
  for (size_t i = 0; i < n; ++i) {
    m.bits[i] = f32_to_bf16(m.values[i]);
    m.values[i] = bf16_to_f32(m.bits[i]);
  }
  return m;
}

// A backend whose single-token steps take the path RUNAHEAD_CUDA_PERSISTENT names (1: the
// persistent kernel, 0: a kernel per op) instead of the faster one timed at load.
inline std::unique_ptr<CudaBackend> backend_on(const char* persistent, std::shared_ptr<const ModelWeights> w,
                                               const BackendOptions& o) {
  setenv("RUNAHEAD_CUDA_PERSISTENT", persistent, 1);
  auto b = make_cuda_backend(std::move(w), o);
  unsetenv("RUNAHEAD_CUDA_PERSISTENT");
  return b;
}

inline int32_t argmax_row(const std::vector<float>& v, size_t row, size_t width) {
  return int32_t(std::max_element(v.begin() + row * width, v.begin() + (row + 1) * width) - v.begin() - row * width);
}

// max |a - b| over max |b|
inline double relative_max(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(std::isfinite(a[i]));
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return worst / scale;
}

template <class T> cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b(v.size() * sizeof(T));
  cuda::check_cuda(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice), "test upload");
  return b;
}
template <class T> std::vector<T> to_host(const cuda::DeviceBuffer& b, size_t n) {
  cuda::check_cuda(cudaDeviceSynchronize(), "test kernel");
  std::vector<T> v(n);
  cuda::check_cuda(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost), "test download");
  return v;
}

// The inputs quantized as quantize_inputs_q8 does (llama.cpp's q8_1): per 32 values,
// d = largest magnitude / 127 and q = round(v / d); values[k] ~ d[k / 32] * q[k].
struct HostQ8 {
  std::vector<int8_t> q;
  std::vector<float> d;
};
inline HostQ8 host_q8(const std::vector<float>& x) {
  HostQ8 h{std::vector<int8_t>(x.size()), std::vector<float>(x.size() / 32)};
  for (size_t g = 0; g < h.d.size(); ++g) {
    float amax = 0.0f;
    for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(x[32 * g + l]));
    const float d = amax / 127.0f;
    h.d[g] = d;
    for (int l = 0; l < 32; ++l) h.q[32 * g + l] = int8_t(amax == 0.0f ? 0 : int(std::round(x[32 * g + l] / d)));
  }
  return h;
}

// row r . (the dequantized q8 inputs) in double, for each of `rows` rows of K weights `w`.
inline std::vector<double> q8_products(const std::vector<float>& w, int rows, int K, const HostQ8& x) {
  std::vector<double> y(static_cast<size_t>(rows), 0.0);
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < K; ++k) y[size_t(r)] += double(w[size_t(r) * K + k]) * x.d[size_t(k / 32)] * x.q[size_t(k)];
  return y;
}

// A model of block-quantized weights as the CUDA backend runs it (`cuda`, loaded from `q`)
// against the same weights widened exactly to f32 on the CPU backend: the logits of every path
// within `tol` of the largest (0.1 %: the matrix-vector path at 8 and 17 tokens, single steps,
// the device loop and the device verify of its tokens, which keeps them all) and the
// tensor-core prefill, which reads the weights rounded to bf16, within 2 %.
inline void check_like_f32_reference(const std::shared_ptr<const ModelWeights>& q, CudaBackend& cuda,
                                     double tol = 1e-3) {
  auto reference = std::make_shared<const ModelWeights>(with_dense_matrices(*q, DType::F32));
  auto cpu = make_cpu_backend(reference, BackendOptions{2, 512});
  const int V = q->config.vocab_size;
  std::mt19937 rng(17);
  const std::vector<int32_t> prompt = random_tokens(40, V, rng), long_prompt = random_tokens(300, V, rng);
  const double kTol = tol;
  std::vector<float> a, b;
  // A 40-token prompt in chunks (17 tokens, then the rest), 8 rows of logits; then single steps.
  cpu->forward(prompt, 8, a);
  cuda.forward(prompt, 8, b);
  CHECK(relative_max(b, a) < kTol);
  int32_t next = argmax_row(b, 7, V);
  for (int i = 0; i < 10; ++i) {
    cpu->forward(std::span<const int32_t>(&next, 1), 1, a);
    cuda.forward(std::span<const int32_t>(&next, 1), 1, b);
    CHECK(relative_max(b, a) < kTol);
    CHECK(argmax_row(a, 0, V) == argmax_row(b, 0, V));
    next = argmax_row(b, 0, V);
  }
  // The device loop, then the device verify of its tokens as a draft: all kept, and the
  // reference picks each of them.
  std::vector<int32_t> got;
  cuda.decode_greedy(next, 6, [&](int32_t token) {
    got.push_back(token);
    return true;
  });
  REQUIRE(got.size() == 6);
  cuda.truncate(cuda.kv_len() - 6);
  const GreedyVerdict verdict = cuda.verify_greedy(next, std::span<const int32_t>(got.data(), 5));
  CHECK(verdict.accepted == 5);
  CHECK(verdict.next == got[5]);
  std::vector<int32_t> step = {next};
  step.insert(step.end(), got.begin(), got.begin() + 5);
  cpu->forward(step, 6, a);
  for (size_t i = 0; i < 6; ++i) CHECK(argmax_row(a, i, V) == got[i]);

  // A prompt long enough for the tensor-core prefill (the weights widened to bf16).
  cpu->truncate(0);
  cuda.truncate(0);
  cpu->forward(long_prompt, 8, a);
  cuda.forward(long_prompt, 8, b);
  CHECK(relative_max(b, a) < 0.02);
}

// How block-quantized weights run, as the self-check's quantized_kernels says: whether it is
// active and its `why` (empty when the backend reports no such check).
inline std::pair<bool, std::string> quantized_check(const CudaBackend& backend) {
  for (const OptimizationCheck& c : backend.self_check())
    if (c.name == "quantized_kernels") return {c.active, c.why};
  return {false, ""};
}

// The quantized_kernels entry of a session's load report (null when it has none).
inline nlohmann::json quantized_check(const Session& s) {
  for (const auto& c : s.report()["checks"])
    if (c["name"] == "quantized_kernels") return c;
  return nlohmann::json();
}

}  // namespace runahead::testing
#endif  // RUNAHEAD_CUDA
