// The CUDA prefill ops: tensor-core attention and the GEMMs against double-precision
// references. Skipped, with a message, without a CUDA device.
#ifdef RUNAHEAD_CUDA
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "model/half.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_memory.h"
#include "cuda/kernels.h"
#include "cuda_test_util.h"

using namespace runahead;
using namespace runahead::cuda;
using namespace runahead::testing;

namespace {

// max |got - ref| / `scale`; every value must be finite.
double max_error(const std::vector<float>& got, const std::vector<double>& ref, double scale) {
  REQUIRE(got.size() == ref.size());
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(std::isfinite(got[i]));
    err = std::max(err, std::abs(got[i] - ref[i]));
  }
  return err / scale;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// out[t, h] for every token t at position p0 + t over cache rows [0, p0 + t].
std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, int n, int p0, int heads, int kv_heads, int hd) {
  const int kvd = kv_heads * hd;
  std::vector<double> out(size_t(n) * heads * hd, 0.0);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h) {
      const int g = h / (heads / kv_heads), p = p0 + t;
      const float* qr = &q[(size_t(t) * heads + h) * hd];
      std::vector<double> s(p + 1);
      double m = -1e300, z = 0;
      for (int j = 0; j <= p; ++j) {
        double d = 0;
        for (int e = 0; e < hd; ++e) d += double(qr[e]) * k[size_t(j) * kvd + g * hd + e];
        s[j] = d / std::sqrt(double(hd));
        m = std::max(m, s[j]);
      }
      for (double& x : s) z += x = std::exp(x - m);
      double* o = &out[(size_t(t) * heads + h) * hd];
      for (int j = 0; j <= p; ++j)
        for (int e = 0; e < hd; ++e) o[e] += s[j] / z * v[size_t(j) * kvd + g * hd + e];
    }
  return out;
}

}  // namespace

TEST_CASE("cuda ops: attention_prefill on tensor cores matches a double reference") {
  if (!have_device()) return;
  std::mt19937 rng(11);
  for (auto [hd, heads, kv_heads] : {std::tuple{64, 14, 2}, std::tuple{128, 12, 2}}) {
    for (auto [n, p0] : {std::pair{1, 0}, std::pair{300, 0}, std::pair{77, 200}}) {
      CAPTURE(hd);
      CAPTURE(heads);
      CAPTURE(n);
      CAPTURE(p0);
      const int kvd = kv_heads * hd, cap = p0 + n + 13, qd = heads * hd;
      // Scores of standard deviation ~2 after the 1 / sqrt(head_dim) scale: a peaked softmax.
      auto q = random_floats(size_t(n) * qd, rng, 6.0f);
      auto k = random_floats(size_t(cap) * kvd, rng, 1.0f), v = random_floats(size_t(cap) * kvd, rng, 1.0f);
      // Cache rows past the last token's position were never written: NaN must not leak in.
      std::fill(k.begin() + size_t(p0 + n) * kvd, k.end(), std::numeric_limits<float>::quiet_NaN());
      std::fill(v.begin() + size_t(p0 + n) * kvd, v.end(), std::numeric_limits<float>::quiet_NaN());
      DeviceBuffer dq = to_device(q), dk = to_device(k), dv = to_device(v), dpos = to_device(std::vector<int>{p0});
      DeviceBuffer dout(size_t(n) * qd * sizeof(float));
      DecodeAttention att;
      att.heads = heads, att.kv_heads = kv_heads, att.head_dim = hd, att.capacity = cap;
      att.k_cache = dk.get<float>();
      att.v_cache = dv.get<float>();
      attention_prefill(att, dq.get<float>(), n, dpos.get<int>(), dout.get<float>(), nullptr);
      const auto ref = attention_ref(q, k, v, n, p0, heads, kv_heads, hd);
      const double err = max_error(to_host<float>(dout, ref.size()), ref, max_abs(ref));
      CAPTURE(err);
      CHECK(err < 2e-2);  // bf16 Q, K, V and probabilities
    }
  }
}

// Whichever implementation is active: cuBLASLt where the build found it, our mma.sync kernel
// with RUNAHEAD_CUDA_CUBLASLT=0 (the device script runs this test both ways). K need only be a
// multiple of 8 (what the backend's load check asks): 136, 72 and 1000 end in a partial K tile.
TEST_CASE("cuda ops: gemm_bf16 and gemm_bf16_to_bf16 match a double reference") {
  if (!have_device()) return;
  MESSAGE("gemm_bf16 runs " << std::string(gemm_bf16_impl()));
  std::mt19937 rng(3);
  for (auto [n, rows, K] : {std::tuple{100, 130, 96}, std::tuple{257, 384, 512}, std::tuple{64, 256, 4096},
                            std::tuple{70, 136, 136}, std::tuple{129, 202, 72}, std::tuple{65, 136, 1000}}) {
    CAPTURE(n);
    CAPTURE(rows);
    CAPTURE(K);
    const Bf16Matrix a = random_bf16(size_t(n) * K, rng), w = random_bf16(size_t(rows) * K, rng);
    auto c0 = random_floats(size_t(n) * rows, rng, 1.0f);
    DeviceBuffer da = to_device(a.bits), dw = to_device(w.bits), dc = to_device(c0);
    std::vector<double> ref(size_t(n) * rows);
    for (int t = 0; t < n; ++t)
      for (int r = 0; r < rows; ++r) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += double(a.values[size_t(t) * K + k]) * w.values[size_t(r) * K + k];
        ref[size_t(t) * rows + r] = s;
      }
    const double scale = std::max(1.0, max_abs(ref));
    // bf16 output: one rounding of each sum, at most 2^-8 of it.
    DeviceBuffer db = to_device(std::vector<uint16_t>(ref.size(), 0x7fc0));  // NaN until written
    gemm_bf16_to_bf16(da.get(), dw.get(), n, rows, K, db.get(), nullptr);
    const std::vector<uint16_t> bits = to_host<uint16_t>(db, ref.size());
    std::vector<float> rounded(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) rounded[i] = bf16_to_f32(bits[i]);
    CHECK(max_error(rounded, ref, scale) < 4e-3);

    gemm_bf16(da.get(), dw.get(), n, rows, K, dc.get<float>(), false, nullptr);
    CHECK(max_error(to_host<float>(dc, ref.size()), ref, scale) < 1e-5);
    for (double& x : ref) x *= 2;
    gemm_bf16(da.get(), dw.get(), n, rows, K, dc.get<float>(), true, nullptr);
    CHECK(max_error(to_host<float>(dc, ref.size()), ref, 2 * scale) < 1e-5);
  }
}

#endif  // RUNAHEAD_CUDA
