#include "model/half.h"

#include <cmath>

namespace runahead {

// Finite values only (weights); overflow saturates to inf.
uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) {  // subnormal: a multiple of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t abits = bits & 0x7fffffff;
  uint32_t mantissa = abits & 0x7fffff;
  uint32_t exponent = (abits >> 23) - 112;
  uint32_t h = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // carry may bump the exponent: correct
  return sign | static_cast<uint16_t>(h);
}

}  // namespace runahead
