// Every SIMD kernel table this CPU can run, against the portable one and a double reference.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/half.h"
#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"
#include "runtime/cpus.h"

using namespace runahead;

namespace {

// Weights of one dtype, with the f32 values they stand for.
struct RandomWeights {
  DType dtype;
  std::vector<float> values;  // exactly representable in dtype
  std::vector<uint16_t> half;
  const void* data() const { return dtype == DType::F32 ? (const void*)values.data() : half.data(); }
};

RandomWeights random_weights(DType dtype, size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  RandomWeights w{dtype, std::vector<float>(count), {}};
  for (float& v : w.values) v = u(rng);
  if (dtype == DType::F32) return w;
  w.half.resize(count);
  for (size_t i = 0; i < count; ++i) {
    w.half[i] = dtype == DType::BF16 ? f32_to_bf16(w.values[i]) : f32_to_f16(w.values[i]);
    w.values[i] = dtype == DType::BF16 ? bf16_to_f32(w.half[i]) : f16_to_f32(w.half[i]);
  }
  return w;
}

std::vector<float> random_floats(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& f : v) f = u(rng);
  return v;
}

}  // namespace

TEST_CASE("f16 and bf16 conversions round-trip and hit known values") {
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0xc000) == -2.0f);
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::isinf(f16_to_f32(0x7c00)));
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -9)) == 0x3f80);  // ties to even
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / nan
    if (h == 0x8000) continue;             // -0 compares equal to 0 but has other bits
    INFO("f16 bits " << h);
    REQUIRE(f32_to_f16(f16_to_f32(uint16_t(h))) == h);
  }
}

TEST_CASE("matmul kernels match a double reference and the portable kernel") {
  std::mt19937 rng(7);
  const auto tables = available_kernels();
  REQUIRE(tables.back() == &portable_kernels());
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t k : {1, 7, 16, 33, 100, 257}) {
      for (int n : {1, 2, 3, 5, 9}) {
        const int64_t rows = 37, ldw = k + 3, ldx = k + 1, ldy = rows + 2;
        const int64_t r0 = 2, r1 = 35;  // a sub-range: rows outside it must stay untouched
        RandomWeights w = random_weights(dtype, size_t(rows * ldw), rng);
        std::vector<float> x = random_floats(size_t(n * ldx), rng);
        std::vector<float> portable;
        for (const Kernels* kernels : tables) {
          INFO(std::string(kernels->simd) << " " << std::string(dtype_name(dtype)) << " k=" << k << " n=" << n);
          std::vector<float> y(size_t(n * ldy), -7.0f);
          kernels->matmul(dtype)(w.data(), ldw, r0, r1, k, x.data(), ldx, n, y.data(), ldy);
          for (int t = 0; t < n; ++t) {
            for (int64_t r = 0; r < ldy; ++r) {
              const float got = y[t * ldy + r];
              if (r < r0 || r >= r1) {
                REQUIRE(got == -7.0f);
                continue;
              }
              double ref = 0.0, magnitude = 0.0;
              for (int64_t i = 0; i < k; ++i) {
                ref += double(w.values[r * ldw + i]) * x[t * ldx + i];
                magnitude += std::fabs(double(w.values[r * ldw + i]) * x[t * ldx + i]);
              }
              REQUIRE(std::fabs(got - ref) <= 1e-6 * magnitude + 1e-7);
            }
          }
          if (kernels == &portable_kernels()) continue;
          if (portable.empty()) {
            portable.assign(y.size(), -7.0f);
            portable_kernels().matmul(dtype)(w.data(), ldw, r0, r1, k, x.data(), ldx, n,
                                             portable.data(), ldy);
          }
          for (size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == doctest::Approx(portable[i]).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("combine_rows and sum kernels match a double reference, each head the same bits whatever the heads") {
  std::mt19937 rng(3);
  for (const Kernels* kernels : available_kernels()) {
    for (int64_t d : {1, 15, 16, 17, 64, 131}) {
      for (int64_t rows : {1, 2, 29}) {
        // 9 heads: more than any table's register tile (7), so a tile and a remainder.
        const int heads = 9;
        INFO(std::string(kernels->simd) << " d=" << d << " rows=" << rows);
        const int64_t ldv = d + 5, lda = rows + 3, ldy = d + 2;
        std::vector<float> a = random_floats(size_t(heads * lda), rng), v = random_floats(size_t(rows * ldv), rng);
        std::vector<float> y(size_t(heads * ldy) + 1, -7.0f);
        kernels->combine_rows(a.data(), lda, heads, v.data(), ldv, rows, d, y.data(), ldy);
        for (int j = 0; j < heads; ++j) {
          for (int64_t i = 0; i < d; ++i) {
            double ref = 0.0, magnitude = 0.0;
            for (int64_t p = 0; p < rows; ++p) {
              ref += double(a[j * lda + p]) * v[p * ldv + i];
              magnitude += std::fabs(double(a[j * lda + p]) * v[p * ldv + i]);
            }
            REQUIRE(std::fabs(y[j * ldy + i] - ref) <= 1e-6 * magnitude + 1e-7);
          }
          for (int64_t i = d; i < ldy; ++i) CHECK(y[j * ldy + i] == -7.0f);  // nothing past d
          // Alone (a thread's slice of a group may hold one head): the same bits.
          std::vector<float> alone(size_t(d), 0.0f);
          kernels->combine_rows(a.data() + j * lda, lda, 1, v.data(), ldv, rows, d, alone.data(), d);
          CHECK(std::memcmp(alone.data(), y.data() + j * ldy, size_t(d) * sizeof(float)) == 0);
        }
      }
      std::vector<float> x = random_floats(size_t(d * 5), rng);
      double ref = 0.0, magnitude = 0.0;
      for (float f : x) {
        ref += f;
        magnitude += std::fabs(f);
      }
      CHECK(std::fabs(kernels->sum(x.data(), d * 5) - ref) <= 1e-6 * magnitude);
    }
  }
}

TEST_CASE("softmax and swiglu kernels match a double reference, extremes included") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-30.0f, 30.0f);
  for (const Kernels* kernels : available_kernels()) {
    for (int64_t n : {1, 7, 16, 33, 300}) {
      INFO(std::string(kernels->simd) << " n=" << n);
      std::vector<float> s(static_cast<size_t>(n));
      for (float& v : s) v = wide(rng);
      s[0] = -1000.0f;  // underflows to 0 rather than to garbage
      const std::vector<float> x = s;
      kernels->softmax(s.data(), n, 0.7f);
      double max = x[0], sum = 0.0;
      for (float v : x) max = std::max(max, double(v));
      for (float v : x) sum += std::exp(0.7 * (v - max));
      for (int64_t i = 0; i < n; ++i) {
        const double ref = std::exp(0.7 * (x[i] - max)) / sum;
        REQUIRE(std::fabs(s[i] - ref) <= 2e-6 * ref + 1e-8);  // probabilities: absolute error matters
      }

      std::vector<float> gate(static_cast<size_t>(n)), up = random_floats(size_t(n), rng);
      for (float& v : gate) v = wide(rng);
      gate[0] = -100.0f;
      if (n > 1) gate[1] = 100.0f;
      const std::vector<float> g0 = gate;
      kernels->swiglu(gate.data(), up.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = g0[i] / (1.0 + std::exp(-double(g0[i]))) * up[i];
        REQUIRE(std::fabs(gate[i] - ref) <= 1e-6 * std::fabs(ref) + 1e-30);
      }
    }
  }
}

// The largest score sets the shift: found wherever it is (a vector lane, the scalar tail), or
// exp of the others' distance to a smaller "max" overflows.
TEST_CASE("softmax finds the largest score wherever it is") {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (const Kernels* kernels : available_kernels()) {
    for (int64_t n : {1, 15, 16, 17, 40, 131}) {
      for (int64_t at : {int64_t(0), n / 2, n - 1}) {
        INFO(std::string(kernels->simd) << " n=" << n << " at=" << at);
        std::vector<float> s(static_cast<size_t>(n));
        for (float& v : s) v = small(rng);
        s[size_t(at)] = 200.0f;
        kernels->softmax(s.data(), n, 1.0f);
        CHECK(s[size_t(at)] == doctest::Approx(1.0f));
        for (float v : s) CHECK(std::isfinite(v));
      }
    }
  }
}

TEST_CASE("RUNAHEAD_SIMD picks a table or names the ones available") {
  const auto tables = available_kernels();
  setenv("RUNAHEAD_SIMD", "portable", 1);
  CHECK(&select_kernels() == &portable_kernels());
  setenv("RUNAHEAD_SIMD", "no-such-isa", 1);
  CHECK_THROWS(select_kernels());
  unsetenv("RUNAHEAD_SIMD");
  CHECK(&select_kernels() == tables.front());
}

TEST_CASE("thread pool ranges cover every index once, on aligned bounds") {
  CHECK(default_threads() >= 1);
  CHECK(default_threads() <= usable_cpus());
  // A small model (the embedded one is 23 MB) decodes on one thread; a large one on every core.
  CHECK(default_threads(size_t(23) << 20) == 1);
  CHECK(default_threads(size_t(0)) == 1);
  CHECK(default_threads(size_t(1) << 40) == default_threads());
  CHECK(default_threads(2 * kBytesPerThread) == std::min(2, default_threads()));
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 15, 16, 100, 1001}) {
      std::vector<int> hits(size_t(n), 0);
      for (int rep = 0; rep < 3; ++rep) {
        pool.for_range(n, 16, [&](int64_t begin, int64_t end) {
          CHECK(begin % 16 == 0);
          for (int64_t i = begin; i < end; ++i) ++hits[size_t(i)];
        });
      }
      for (int h : hits) REQUIRE(h == 3);
    }
  }
}

TEST_CASE("a slow thread holds up no one: the others take the rest of its range") {
  // The worker's chunks take 10 ms each (a vCPU whose core is busy elsewhere), the caller's none:
  // with static halves the caller would wait ~16 chunks x 10 ms. It takes the worker's chunks
  // from the back instead, and each index still runs exactly once.
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  const int64_t n = 32 * 64;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> by_caller{0}, by_worker{0};
  pool.for_range(n, 16, [&](int64_t begin, int64_t end) {
    CHECK(begin % 16 == 0);
    for (int64_t i = begin; i < end; ++i) hits[size_t(i)]++;
    if (std::this_thread::get_id() == caller) {
      by_caller += end - begin;
    } else {
      by_worker += end - begin;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  for (const auto& h : hits) REQUIRE(h.load() == 1);
  CHECK(by_caller + by_worker == n);
  CHECK(by_caller > 3 * n / 4);
}
