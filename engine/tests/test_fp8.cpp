// The fp8 e4m3 format of the CUDA backend's `weights: fp8` / `lm_head: fp8` (model/fp8.h),
// on the host: every code, rounding, saturation, and a row's scale.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/fp8.h"

using namespace runahead;

TEST_CASE("fp8 e4m3: every code decodes to its value and encodes back to itself") {
  CHECK(fp8_e4m3_to_f32(0x7e) == 448.0f);
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(fp8_e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(fp8_e4m3_to_f32(0x38) == 1.0f);
  CHECK(fp8_e4m3_to_f32(0xb8) == -1.0f);
  CHECK(std::isnan(fp8_e4m3_to_f32(0x7f)));
  CHECK(std::isnan(fp8_e4m3_to_f32(0xff)));
  for (int code = 0; code < 256; ++code) {
    CAPTURE(code);
    const float v = fp8_e4m3_to_f32(uint8_t(code));
    CHECK(f32_to_fp8_e4m3(v) == code);
  }
}

TEST_CASE("fp8 e4m3: rounds to nearest, ties to even, saturates at 448") {
  for (int code = 0; code < 0x7e; ++code) {
    CAPTURE(code);
    const float lo = fp8_e4m3_to_f32(uint8_t(code)), hi = fp8_e4m3_to_f32(uint8_t(code + 1));
    const float mid = (lo + hi) / 2;
    CHECK(f32_to_fp8_e4m3(mid) == (code % 2 == 0 ? code : code + 1));
    CHECK(f32_to_fp8_e4m3(std::nextafter(mid, 0.0f)) == code);
    CHECK(f32_to_fp8_e4m3(std::nextafter(mid, 1000.0f)) == code + 1);
    CHECK(f32_to_fp8_e4m3(-std::nextafter(mid, 1000.0f)) == (0x80 | (code + 1)));
  }
  CHECK(f32_to_fp8_e4m3(464.0f) == 0x7e);  // beyond the largest value: saturated, never NaN
  CHECK(f32_to_fp8_e4m3(1e30f) == 0x7e);
  CHECK(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()) == 0xfe);
  CHECK(f32_to_fp8_e4m3(std::ldexp(1.0f, -11)) == 0);  // below half the smallest subnormal
}

TEST_CASE("fp8 e4m3: a row's scale maps its largest |value| to 448 and keeps every value within 1/16") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(4096);
  for (float& x : row) x = normal(rng);
  row[77] = -0.3f;
  std::vector<uint8_t> q(row.size());
  const float scale = quantize_fp8_row(row.data(), int64_t(row.size()), q.data());
  CHECK(scale == doctest::Approx(0.3f / 448.0f).epsilon(1e-6));
  CHECK(q[77] == 0xfe);
  for (size_t i = 0; i < row.size(); ++i) {
    const float back = fp8_e4m3_to_f32(q[i]) * scale;
    // 3 mantissa bits: within 1/16 of the value for normals, one subnormal step below them.
    CHECK(std::abs(back - row[i]) <= std::max(std::abs(row[i]) / 16, std::ldexp(scale, -10)));
  }
  std::vector<float> zeros(64, 0.0f);
  std::vector<uint8_t> qz(64, 0xaa);
  CHECK(quantize_fp8_row(zeros.data(), 64, qz.data()) == 0.0f);
  for (uint8_t c : qz) CHECK(c == 0);
}
