#pragma once
// fp8 e4m3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinity, max 448) with a
// scale per row: the CUDA backend's `weights: fp8` and `lm_head: fp8` (engine/PROTOCOL.md).
// These host functions define the format; the device's quantizer gives the same bytes.
#include <cstdint>

namespace runahead {

constexpr float kFp8E4M3Max = 448.0f;

float fp8_e4m3_to_f32(uint8_t v);
// Round to nearest even; beyond +-448 saturates to +-448, NaN stays NaN (0x7f / 0xff).
uint8_t f32_to_fp8_e4m3(float f);

// One row of `cols` values: scale = max |x| / 448 (0 for a zero row), q[i] = e4m3(x[i] * (448 /
// max |x|)), so x[i] ~= q[i] * scale. Returns the scale.
float quantize_fp8_row(const float* x, int64_t cols, uint8_t* q);

}  // namespace runahead
