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

namespace runahead::testing {

inline bool have_device() {
  if (cuda_available()) return true;
  MESSAGE("skipped: no CUDA device (cudaGetDeviceCount failed or found none)");
  return false;
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

}  // namespace runahead::testing
#endif  // RUNAHEAD_CUDA
