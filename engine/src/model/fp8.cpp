#include "model/fp8.h"

#include <cmath>

namespace runahead {

float fp8_e4m3_to_f32(uint8_t v) {
  const float sign = v & 0x80 ? -1.0f : 1.0f;
  const int exponent = (v >> 3) & 0xf, mantissa = v & 7;
  if (exponent == 15 && mantissa == 7) return std::copysign(std::nanf(""), sign);
  if (exponent == 0) return sign * std::ldexp(float(mantissa), -9);  // subnormal: a multiple of 2^-9
  return sign * std::ldexp(float(8 + mantissa), exponent - 10);
}

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xff : 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return sign | 0x7e;
  if (a == 0.0f) return sign;
  // Below 2^-6 the step is 2^-9 (subnormals; 8 steps is the smallest normal, code 8). Above,
  // a value in [2^e, 2^(e+1)) has steps of 2^(e-3): the code is (e + 7) * 8 + steps - 8, and
  // rounding up to 16 steps lands on the next exponent's code, as it should.
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  e -= 1;
  if (e < -6) return sign | uint8_t(std::nearbyint(std::ldexp(a, 9)));
  const int steps = int(std::nearbyint(std::ldexp(a, 3 - e)));  // 8..16, exact scaling
  const int code = (e + 7) * 8 + steps - 8;
  return sign | uint8_t(code > 0x7e ? 0x7e : code);
}

float quantize_fp8_row(const float* x, int64_t cols, uint8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < cols; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float inv = amax > 0.0f ? kFp8E4M3Max / amax : 0.0f;
  for (int64_t i = 0; i < cols; ++i) q[i] = f32_to_fp8_e4m3(x[i] * inv);
  return amax / kFp8E4M3Max;
}

}  // namespace runahead
