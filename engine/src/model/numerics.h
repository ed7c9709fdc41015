#pragma once
// Numerics every backend and drafter shares, stated once.
#include <cstdint>
#include <vector>

#include "model/tensor.h"

namespace runahead {

// dst[i] = t[offset + i] widened to f32 (norm weights, biases, embedding rows); a
// block-quantized tensor is dequantized.
void widen(const Tensor& t, int64_t offset, int64_t count, float* dst);
// The whole tensor in f32; empty for an empty tensor.
std::vector<float> widen(const Tensor& t);

// y = x / sqrt(mean(x^2) + eps) * w   for x, y, w: [h]; y may be x. The sum of squares
// is taken in double.
void rmsnorm_row(const float* x, const float* w, float eps, int h, float* y);

}  // namespace runahead
