#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/half.h"
#include "model/quant_blocks.h"
#include "cpu/quant_kernels.h"
#include "cpu/quant_matvec.h"

using namespace runahead;

namespace {

constexpr QuantType kTypes[] = {QuantType::Q8_0, QuantType::Q4_K, QuantType::Q6_K, QuantType::Q4_0,
                                 QuantType::Q5_0, QuantType::Q5_K, QuantType::Q4_1, QuantType::Q5_1};

// Weights like a trained layer's: mostly Gaussian, a few outliers, some all-zero blocks.
std::vector<float> weights(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(n);
  for (int64_t i = 0; i < n; ++i) w[i] = normal(rng) * (rng() % 97 == 0 ? 8.0f : 1.0f);
  for (int64_t i = 0; i < std::min<int64_t>(n, 64); ++i) w[i] = 0;  // a zero block
  return w;
}

std::vector<uint8_t> quantize(QuantType t, const std::vector<float>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> q(quant_row_bytes(t, cols) * rows);
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, &w[r * cols], cols, &q[r * quant_row_bytes(t, cols)]);
  return q;
}

std::vector<float> dequantize(QuantType t, const std::vector<uint8_t>& q, int64_t rows, int64_t cols) {
  std::vector<float> w(rows * cols);
  for (int64_t r = 0; r < rows; ++r) dequantize_row(t, &q[r * quant_row_bytes(t, cols)], cols, &w[r * cols]);
  return w;
}

// The largest step of the block holding weight i of a row: |error| <= step / 2.
float step_of(QuantType t, const uint8_t* row, int64_t i) {
  switch (t) {
    case QuantType::Q8_0: return f16_to_f32(reinterpret_cast<const BlockQ8_0*>(row)[i / 32].d);
    case QuantType::Q4_K: {
      const BlockQ4_K& b = reinterpret_cast<const BlockQ4_K*>(row)[i / 256];
      uint8_t sc, m;
      q4_k_scale_min(int(i % 256) / 32, b.scales, sc, m);
      return f16_to_f32(b.d) * sc;
    }
    case QuantType::Q6_K: {
      const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(row)[i / 256];
      return f16_to_f32(b.d) * b.scales[(i % 256) / 16];
    }
    case QuantType::Q4_0: return f16_to_f32(reinterpret_cast<const BlockQ4_0*>(row)[i / 32].d);
    case QuantType::Q5_0: return f16_to_f32(reinterpret_cast<const BlockQ5_0*>(row)[i / 32].d);
    case QuantType::Q4_1: return f16_to_f32(reinterpret_cast<const BlockQ4_1*>(row)[i / 32].d);
    case QuantType::Q5_1: return f16_to_f32(reinterpret_cast<const BlockQ5_1*>(row)[i / 32].d);
    case QuantType::Q5_K: {
      const BlockQ5_K& b = reinterpret_cast<const BlockQ5_K*>(row)[i / 256];
      uint8_t sc, m;
      q4_k_scale_min(int(i % 256) / 32, b.scales, sc, m);
      return f16_to_f32(b.d) * sc;
    }
  }
  return 0;
}

// The activation step of element i in the blocks format t reads (Q8_0 blocks of 32 or Q8_K
// blocks of 256): |x_i - x_i's quantized value| <= step / 2.
double activation_step(const Q8Activations& xq, QuantType t, int64_t i) {
  return activation_blocks(t) == kBlocks256 ? std::fabs(xq.dk[i / 256]) : xq.d[i / 32];
}

}  // namespace

TEST_CASE("quant: block sizes are llama.cpp's") {
  CHECK(quant_format(QuantType::Q8_0).block_bytes == 34);
  CHECK(quant_format(QuantType::Q4_K).block_bytes == 144);
  CHECK(quant_format(QuantType::Q6_K).block_bytes == 210);
  CHECK(quant_format(QuantType::Q4_0).block_bytes == 18);
  CHECK(quant_format(QuantType::Q5_0).block_bytes == 22);
  CHECK(quant_format(QuantType::Q5_K).block_bytes == 176);
  CHECK(quant_format(QuantType::Q4_1).block_bytes == 20);
  CHECK(quant_format(QuantType::Q5_1).block_bytes == 24);
  CHECK(quant_row_bytes(QuantType::Q5_1, 896) == 28 * 24);
  CHECK(quant_row_bytes(QuantType::Q5_0, 896) == 28 * 22);
  CHECK(*quant_type_of_ggml(2) == QuantType::Q4_0);
  CHECK(*quant_type_of_ggml(6) == QuantType::Q5_0);
  CHECK(*quant_type_of_ggml(13) == QuantType::Q5_K);
  CHECK(*quant_type_of_ggml(3) == QuantType::Q4_1);
  CHECK(*quant_type_of_ggml(7) == QuantType::Q5_1);
  CHECK(quant_row_bytes(QuantType::Q4_K, 4864) == 19 * 144);
  CHECK(*quant_type_of_ggml(12) == QuantType::Q4_K);
  CHECK(*quant_type_named("q6_k") == QuantType::Q6_K);
  CHECK_FALSE(quant_type_of_ggml(9));  // Q8_1
}

TEST_CASE("quant: hand-made blocks dequantize as ggml-quants.c defines them") {
  SUBCASE("Q8_0") {
    BlockQ8_0 b{f32_to_f16(0.5f), {}};
    for (int l = 0; l < 32; ++l) b.qs[l] = int8_t(l - 16);
    float out[32];
    dequantize_row(QuantType::Q8_0, reinterpret_cast<const uint8_t*>(&b), 32, out);
    for (int l = 0; l < 32; ++l) CHECK(out[l] == 0.5f * float(l - 16));
  }
  SUBCASE("Q4_K: 6-bit scales/mins packed in 12 bytes, low nibbles first") {
    BlockQ4_K b{};
    b.d = f32_to_f16(1.0f);
    b.dmin = f32_to_f16(0.5f);
    // sub-block j: scale 10 + j (j >= 4: 50 + j, so the top bits matter), min 3 + j (j >= 4: 40 + j)
    for (int j = 0; j < 8; ++j) {
      const int sc = j < 4 ? 10 + j : 50 + j, m = j < 4 ? 3 + j : 40 + j;
      if (j < 4) {
        b.scales[j] |= uint8_t(sc);
        b.scales[j + 4] |= uint8_t(m);
      } else {
        b.scales[j + 4] = uint8_t((sc & 15) | (m & 15) << 4);
        b.scales[j - 4] |= uint8_t((sc >> 4) << 6);
        b.scales[j] |= uint8_t((m >> 4) << 6);
      }
    }
    for (int l = 0; l < 128; ++l) b.qs[l] = uint8_t((l % 16) | ((15 - l % 16) << 4));
    std::vector<float> out(256);
    dequantize_row(QuantType::Q4_K, reinterpret_cast<const uint8_t*>(&b), 256, out.data());
    for (int i = 0; i < 256; ++i) {
      const int j = i / 32, l = i % 32;
      const int sc = j < 4 ? 10 + j : 50 + j, m = j < 4 ? 3 + j : 40 + j;
      const int q = j % 2 == 0 ? (32 * (j / 2) + l) % 16 : 15 - (32 * (j / 2) + l) % 16;
      INFO("weight " << i);
      CHECK(out[i] == float(sc * q) - 0.5f * float(m));
    }
  }
  SUBCASE("Q6_K: low 4 bits in ql, high 2 in qh, 16 int8 scales") {
    BlockQ6_K b{};
    b.d = f32_to_f16(0.25f);
    for (int j = 0; j < 16; ++j) b.scales[j] = int8_t(j % 2 ? -(j + 1) : j + 1);
    // weight i holds q = i % 64, spread as the layout says
    for (int i = 0; i < 256; ++i) {
      const int q = i % 64, n = i / 128, r = i % 128, part = r / 32, l = r % 32;
      b.ql[64 * n + 32 * (part % 2) + l] |= uint8_t((q & 15) << (part < 2 ? 0 : 4));
      b.qh[32 * n + l] |= uint8_t((q >> 4) << (2 * part));
    }
    std::vector<float> out(256);
    dequantize_row(QuantType::Q6_K, reinterpret_cast<const uint8_t*>(&b), 256, out.data());
    for (int i = 0; i < 256; ++i) CHECK(out[i] == 0.25f * float(b.scales[i / 16]) * float(i % 64 - 32));
  }
  // Q4_0/Q5_0/Q4_1/Q5_1/Q5_K are checked against llama.cpp's dequantize_row_q* loops, written as there.
  SUBCASE("Q4_0 and Q5_0: byte j holds weights j (low nibble) and j + 16 (high); qh bit i is weight i's fifth bit") {
    BlockQ5_0 b5{};
    BlockQ4_0 b4{};
    b4.d = b5.d = f32_to_f16(0.5f);
    const uint32_t qh = 0xA5C3F00Fu;
    std::memcpy(b5.qh, &qh, 4);
    for (int j = 0; j < 16; ++j) b4.qs[j] = b5.qs[j] = uint8_t(j | (15 - j) << 4);
    float out4[32], out5[32];
    dequantize_row(QuantType::Q4_0, reinterpret_cast<const uint8_t*>(&b4), 32, out4);
    dequantize_row(QuantType::Q5_0, reinterpret_cast<const uint8_t*>(&b5), 32, out5);
    for (int j = 0; j < 16; ++j) {
      CHECK(out4[j] == 0.5f * float((b4.qs[j] & 0x0F) - 8));
      CHECK(out4[j + 16] == 0.5f * float((b4.qs[j] >> 4) - 8));
      const int xh_0 = int(((qh >> j) << 4) & 0x10), xh_1 = int((qh >> (j + 12)) & 0x10);
      CHECK(out5[j] == 0.5f * float(((b5.qs[j] & 0x0F) | xh_0) - 16));
      CHECK(out5[j + 16] == 0.5f * float(((b5.qs[j] >> 4) | xh_1) - 16));
    }
  }
  SUBCASE("Q4_1 and Q5_1: Q4_0's and Q5_0's bits, w = d q + m") {
    BlockQ5_1 b5{};
    BlockQ4_1 b4{};
    b4.d = b5.d = f32_to_f16(0.3f);
    b4.m = b5.m = f32_to_f16(-3.25f);
    const uint32_t qh = 0x5A3CF00Fu;
    std::memcpy(b5.qh, &qh, 4);
    for (int j = 0; j < 16; ++j) b4.qs[j] = b5.qs[j] = uint8_t((3 * j + 1) % 16 | (15 - j) << 4);
    float out4[32], out5[32];
    dequantize_row(QuantType::Q4_1, reinterpret_cast<const uint8_t*>(&b4), 32, out4);
    dequantize_row(QuantType::Q5_1, reinterpret_cast<const uint8_t*>(&b5), 32, out5);
    const float d = f16_to_f32(b4.d), m = f16_to_f32(b4.m);
    for (int j = 0; j < 16; ++j) {
      const int x0 = b4.qs[j] & 0x0F, x1 = b4.qs[j] >> 4;
      CHECK(out4[j] == x0 * d + m);
      CHECK(out4[j + 16] == x1 * d + m);
      const uint8_t xh_0 = uint8_t(((qh >> (j + 0)) << 4) & 0x10), xh_1 = uint8_t((qh >> (j + 12)) & 0x10);
      const int y0 = (b5.qs[j] & 0x0F) | xh_0, y1 = (b5.qs[j] >> 4) | xh_1;
      CHECK(out5[j] == y0 * d + m);
      CHECK(out5[j + 16] == y1 * d + m);
    }
  }
  SUBCASE("Q5_K: Q4_K's scales and nibbles, bit j of qh[l] the fifth bit of sub-block j") {
    BlockQ5_K b{};
    b.d = f32_to_f16(1.0f);
    b.dmin = f32_to_f16(0.5f);
    for (int i = 0; i < 12; ++i) b.scales[i] = uint8_t(37 * i + 11);
    for (int l = 0; l < 128; ++l) b.qs[l] = uint8_t(13 * l + 5);
    for (int l = 0; l < 32; ++l) b.qh[l] = uint8_t(29 * l + 3);
    std::vector<float> out(256);
    dequantize_row(QuantType::Q5_K, reinterpret_cast<const uint8_t*>(&b), 256, out.data());
    const uint8_t* ql = b.qs;
    int is = 0, i = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
      uint8_t sc, m;
      q4_k_scale_min(is, b.scales, sc, m);
      const float d1 = float(sc), m1 = 0.5f * float(m);
      q4_k_scale_min(is + 1, b.scales, sc, m);
      const float d2 = float(sc), m2 = 0.5f * float(m);
      for (int l = 0; l < 32; ++l, ++i) CHECK(out[i] == d1 * float((ql[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1);
      for (int l = 0; l < 32; ++l, ++i) CHECK(out[i] == d2 * float((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2);
      ql += 32;
      is += 2;
      u1 = uint8_t(u1 << 2);
      u2 = uint8_t(u2 << 2);
    }
  }
}

TEST_CASE("quant: round trip error is at most half a step, and small relative to the weights") {
  const int64_t rows = 7, cols = 1024;
  const std::vector<float> w = weights(rows * cols, 1);
  // Relative RMS error bounds of each format on Gaussian weights (4-bit ~ 1/15 of the
  // range per step; 6-bit ~ 1/63; 8-bit ~ 1/255).
  const double rms_bound[] = {0.01, 0.12, 0.035, 0.17, 0.08, 0.06, 0.11, 0.055};  // kTypes' order
  for (QuantType t : kTypes) {
    INFO(std::string(quant_format(t).name));
    const auto q = quantize(t, w, rows, cols);
    const auto back = dequantize(t, q, rows, cols);
    double err2 = 0, w2 = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < cols; ++i) {
        const float e = std::fabs(back[r * cols + i] - w[r * cols + i]);
        const float step = step_of(t, &q[r * quant_row_bytes(t, cols)], i);
        REQUIRE(e <= step * 0.5f * 1.0001f + 1e-7f);
        err2 += double(e) * e;
        w2 += double(w[r * cols + i]) * w[r * cols + i];
      }
    const double rel = std::sqrt(err2 / w2);
    MESSAGE(std::string(quant_format(t).name) << " relative RMS error " << rel);
    CHECK(rel < rms_bound[int(t)]);
    CHECK(back[0] == 0.0f);  // the zero block stays zero
  }
}

TEST_CASE("quant: matvec of every kernel table matches a double reference on the dequantized weights") {
  const auto tables = available_quant_kernels();
  REQUIRE(std::string(tables.back()->simd) == "portable");
  std::string names;
  for (const QuantKernels* k : tables) names += std::string(k->simd) + " ";
  MESSAGE("quant kernel tables on this CPU: " << names);
  for (const int64_t rows : {1, 13, 67}) {
    for (const int64_t cols : {256, 768, 4864}) {
      const std::vector<float> w = weights(rows * cols, uint64_t(rows * cols));
      std::vector<float> x(cols);
      std::mt19937_64 rng(cols);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      Q8Activations xq;
      xq.quantize(x.data(), cols);
      for (QuantType t : kTypes) {
        const auto q = quantize(t, w, rows, cols);
        const auto deq = dequantize(t, q, rows, cols);
        std::vector<float> portable(rows);
        for (const QuantKernels* k : tables) {
          INFO(std::string(k->simd) << " " << std::string(quant_format(t).name) << " rows " << rows << " cols " << cols);
          std::vector<float> y(rows, NAN);
          k->rows(t)(q.data(), quant_row_bytes(t, cols), 0, rows, cols, &xq, 1, y.data(), 0);
          for (int64_t r = 0; r < rows; ++r) {
            // Exact on the dequantized weights; the only error allowed is the activations'
            // rounding (at most d_x/2 per element) and f32 accumulation.
            double ref = 0, bound = 0, mag = 0;
            for (int64_t i = 0; i < cols; ++i) {
              const double wi = deq[r * cols + i];
              ref += wi * x[i];
              bound += std::fabs(wi) * activation_step(xq, t, i) * 0.5;
              mag += std::fabs(wi * x[i]);
            }
            REQUIRE(std::fabs(y[r] - ref) <= bound + 1e-5 * mag + 1e-6);
            if (k == tables.back()) portable[r] = y[r];
          }
        }
        // Against portable, for each SIMD table (run after the portable result exists).
        for (const QuantKernels* k : tables) {
          std::vector<float> y(rows);
          k->rows(t)(q.data(), quant_row_bytes(t, cols), 0, rows, cols, &xq, 1, y.data(), 0);
          for (int64_t r = 0; r < rows; ++r) {
            INFO(std::string(k->simd) << " " << std::string(quant_format(t).name) << " row " << r);
            CHECK(std::fabs(y[r] - portable[r]) <= 1e-5f * (1.0f + std::fabs(portable[r])) + 1e-4f);
          }
        }
      }
    }
  }
}

// Every array of two quantized activations equal.
void check_same_activations(const Q8Activations& got, const Q8Activations& want) {
  CHECK(got.d == want.d);
  CHECK(got.q == want.q);
  CHECK(got.sum == want.sum);
  CHECK(got.dk == want.dk);
  CHECK(got.qk == want.qk);
  CHECK(got.bsum16 == want.bsum16);
  CHECK(got.bsum32 == want.bsum32);
  CHECK(got.qk_pairs == want.qk_pairs);
}

TEST_CASE("quant: every kernel table quantizes activations as Q8Activations::quantize does, bit for bit") {
  const int64_t cols = 1024;
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(cols);
  for (float& v : x) v = normal(rng) * (rng() % 50 == 0 ? 30.0f : 1.0f);
  for (int i = 256; i < 512; ++i) x[i] = 0;           // a zero block of 256 (and eight of 32)
  for (int i = 512; i < 768; ++i) x[i] = normal(rng) * 0.1f;
  x[520] = -3.0f, x[530] = 3.0f, x[600] = 3.0f;  // block 2's largest magnitude, first negative
  for (int i = 768; i < 800; ++i) x[i] = (i % 5) * 0.5f;  // q exactly at halves: round to even
  Q8Activations want;
  want.quantize(x.data(), cols);
  for (const QuantKernels* k : available_quant_kernels()) {
    INFO(k->simd);
    Q8Activations got;
    k->quantize(got, x.data(), cols, kAllBlocks);
    check_same_activations(got, want);
  }
  // Random widths of activations (a spread of magnitudes, repeated largest magnitudes of both
  // signs, runs of zeros, values on half steps): every table, the same bits.
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 256 * (1 + trial % 4);
    std::vector<float> v(n);
    const float scale = std::ldexp(1.0f, int(rng() % 40) - 20);
    for (float& e : v) e = normal(rng) * scale;
    if (trial % 3 == 0) v[rng() % n] = -v[rng() % n], v[rng() % n] = std::fabs(v[rng() % n]);
    if (trial % 5 == 0) std::fill(v.begin() + int64_t(rng() % (n / 2)), v.begin() + n / 2, 0.0f);
    if (trial % 7 == 0) for (float& e : v) e = std::nearbyint(e * 4 / scale) * 0.5f;
    Q8Activations ref;
    ref.quantize(v.data(), n);
    for (const QuantKernels* k : available_quant_kernels()) {
      INFO(k->simd << " trial " << trial);
      Q8Activations got;
      k->quantize(got, v.data(), n, kAllBlocks);
      check_same_activations(got, ref);
    }
  }
  // Sub-blocks 0 2 1 3 4 6 5 7 of each 256: the 512-bit Q4_K tile's pairs.
  for (int64_t b = 0; b < cols; b += 256)
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) CHECK(want.qk_pairs[b + 32 * j + l] == want.qk[b + 32 * kQkPairOrder[j] + l]);
  // quantize_row_q8_K_ref: iscale = -127 / (the first element of largest |x|), d = 1 / iscale.
  CHECK(want.dk[2] == 1 / (-127.f / -3.0f));
  CHECK(want.qk[520] == -127);
  CHECK(want.qk[530] == 127);
  CHECK(want.dk[1] == 0);
}

TEST_CASE("quant: every kernel table's multi-token rows give each of n = 2..9 and 64 tokens its single-token result") {
  // 67 rows leave a remainder after any row tile; 800 columns are an odd number of 32-blocks.
  const int64_t rows = 67;
  const int kMaxTokens = 64;
  for (QuantType t : kTypes) {
    const int64_t cols = quant_format(t).block_elems == 256 ? 768 : 800;
    const std::vector<float> w = weights(rows * cols, uint64_t(cols) + 11);
    const auto q = quantize(t, w, rows, cols);
    const auto deq = dequantize(t, q, rows, cols);
    std::vector<float> x(kMaxTokens * cols);
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
    std::vector<Q8Activations> xq(kMaxTokens);
    for (int tok = 0; tok < kMaxTokens; ++tok) xq[tok].quantize(&x[tok * cols], cols);
    std::vector<float> first_simd;  // Q8_0: the AVX-512 and AVX2 tiles add in the same order
    for (const QuantKernels* k : available_quant_kernels()) {
      const QuantMatmulRowsFn fn = k->rows(t);
      std::vector<float> single(kMaxTokens * rows);
      for (int tok = 0; tok < kMaxTokens; ++tok)
        fn(q.data(), quant_row_bytes(t, cols), 0, rows, cols, &xq[tok], 1, &single[tok * rows], 0);
      if (t == QuantType::Q8_0 && std::string(k->simd) != "portable") {
        if (first_simd.empty()) first_simd = single;
        for (size_t i = 0; i < single.size(); ++i) REQUIRE(single[i] == first_simd[i]);
      }
      for (const int n : {2, 3, 4, 5, 6, 7, 8, 9, kMaxTokens}) {
        INFO(std::string(k->simd) << " " << std::string(quant_format(t).name) << " tokens " << n);
        std::vector<float> y(n * rows, NAN);
        fn(q.data(), quant_row_bytes(t, cols), 0, 5, cols, xq.data(), n, y.data(), rows);  // a range, then the rest
        fn(q.data(), quant_row_bytes(t, cols), 5, rows, cols, xq.data(), n, y.data() + 5, rows);
        for (int tok = 0; tok < n; ++tok)
          for (int64_t r = 0; r < rows; ++r) {
            INFO("token " << tok << " row " << r);
            REQUIRE(y[tok * rows + r] == single[tok * rows + r]);
            double ref = 0, bound = 0, mag = 0;  // as in the matvec test above
            for (int64_t i = 0; i < cols; ++i) {
              const double wi = deq[r * cols + i];
              ref += wi * x[tok * cols + i];
              bound += std::fabs(wi) * activation_step(xq[tok], t, i) * 0.5;
              mag += std::fabs(wi * x[tok * cols + i]);
            }
            REQUIRE(std::fabs(y[tok * rows + r] - ref) <= bound + 1e-5 * mag + 1e-6);
          }
      }
    }
  }
}

// n tokens of cols standard-normal values each, quantized (Q8Activations::quantize).
std::vector<Q8Activations> normal_activations(int n, int64_t cols, uint64_t seed) {
  std::vector<Q8Activations> xq(n);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Q8Activations& a : xq) {
    std::vector<float> x(cols);
    for (float& v : x) v = normal(rng);
    a.quantize(x.data(), cols);
  }
  return xq;
}

// Several tokens go through a call's rows a token group at a time, each group over every row
// tile before the next (matmul_tiled): with many rows (1.7 MB of Q8_0, past a caller's 64 KB
// tiles) and a row range that starts inside a row tile, every (row, token) is still its
// single-token result.
TEST_CASE("quant: multi-token rows over many row tiles give each token its single-token result") {
  const int64_t rows = 403, cols = 4096, n = 9;  // Q8_0: 4352-byte rows; Q4_K: 2304
  for (QuantType t : {QuantType::Q8_0, QuantType::Q4_K}) {
    const auto q = quantize(t, weights(rows * cols, 17), rows, cols);
    const size_t row_bytes = quant_row_bytes(t, cols);
    const std::vector<Q8Activations> xq = normal_activations(n, cols, 13);
    for (const QuantKernels* k : available_quant_kernels()) {
      INFO(std::string(k->simd) << " " << std::string(quant_format(t).name));
      const QuantMatmulRowsFn fn = k->rows(t);
      std::vector<float> single(n * rows), y(n * rows, NAN);
      for (int tok = 0; tok < n; ++tok) fn(q.data(), row_bytes, 0, rows, cols, &xq[tok], 1, &single[tok * rows], 0);
      fn(q.data(), row_bytes, 0, 7, cols, xq.data(), n, y.data(), rows);
      fn(q.data(), row_bytes, 7, rows, cols, xq.data(), n, y.data() + 7, rows);
      CHECK(std::memcmp(y.data(), single.data(), y.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("quant: RUNAHEAD_SIMD picks a quantized table by name, and AVX2 with and without VNNI give the same bits") {
  const auto tables = available_quant_kernels();
  const auto find = [&](const char* name) -> const QuantKernels* {
    for (const QuantKernels* k : tables)
      if (std::string(k->simd) == name) return k;
    return nullptr;
  };
  const QuantKernels* avx2 = find("avx2");
  const QuantKernels* vnni = find("avx2-vnni");
  for (const QuantKernels* k : tables) {
    setenv("RUNAHEAD_SIMD", k->simd, 1);
    CHECK(&select_quant_kernels() == k);
  }
  if (avx2) {
    setenv("RUNAHEAD_SIMD", "avx2", 1);  // the plain table, though "avx2-vnni" starts with it
    CHECK(&select_quant_kernels() == avx2);
  }
  if (const QuantKernels* k512 = find("avx512-vnni")) {
    setenv("RUNAHEAD_SIMD", "avx512", 1);
    CHECK(&select_quant_kernels() == k512);
  }
  setenv("RUNAHEAD_SIMD", "avx3", 1);
  CHECK_THROWS_WITH(select_quant_kernels(), doctest::Contains("avx3"));
  unsetenv("RUNAHEAD_SIMD");
  CHECK(&select_quant_kernels() == tables.front());
  if (!avx2 || !vnni) return;  // this CPU has no AVX-VNNI: nothing to compare
  const int64_t rows = 37;
  for (QuantType t : kTypes) {
    INFO(std::string(quant_format(t).name));
    const int64_t cols = quant_format(t).block_elems == 256 ? 512 : 480;
    const auto q = quantize(t, weights(rows * cols, uint64_t(cols) + 3), rows, cols);
    const std::vector<Q8Activations> xq = normal_activations(9, cols, 9);
    for (int n : {1, 4, 9}) {
      std::vector<float> a(n * rows), b(n * rows);
      avx2->rows(t)(q.data(), quant_row_bytes(t, cols), 0, rows, cols, xq.data(), n, a.data(), rows);
      vnni->rows(t)(q.data(), quant_row_bytes(t, cols), 0, rows, cols, xq.data(), n, b.data(), rows);
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("quant: the threaded matvec and the prefill matmul of 1 to 9 tokens equal the rows kernel") {
  ThreadPool pool(2);
  const QuantKernels& k = select_quant_kernels();
  const int64_t rows = 301, cols = 512;
  const std::vector<float> w = weights(rows * cols, 7);
  std::vector<float> x(9 * cols);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  for (QuantType t : kTypes) {
    INFO(std::string(quant_format(t).name));
    const auto q = quantize(t, w, rows, cols);
    const QuantMatrix m{t, q.data(), rows, cols};
    for (int n = 1; n <= 9; ++n) {
      INFO("tokens " << n);
      std::vector<float> y(n * rows);
      matmul_quant(pool, k, m, x.data(), n, y.data());
      Q8Activations xq;
      for (int tok = 0; tok < n; ++tok) {
        std::vector<float> one(rows), direct(rows);
        matvec_quant(pool, k, m, &x[tok * cols], xq, one.data());
        k.rows(t)(q.data(), m.row_bytes(), 0, rows, cols, &xq, 1, direct.data(), 0);
        for (int64_t r = 0; r < rows; ++r) {
          REQUIRE(one[r] == direct[r]);
          REQUIRE(y[tok * rows + r] == direct[r]);
        }
      }
    }
  }
}
