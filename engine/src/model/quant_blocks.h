#pragma once
// Block formats to and from f32, one row at a time: the reference the kernels are tested
// against, and the quantizer for tests and for weights quantized at load time.
#include <cstdint>

#include "model/quant_format.h"

namespace runahead {

// out[i] = the weight i of a row of `cols` weights in format t (cols a multiple of its block).
void dequantize_row(QuantType t, const uint8_t* row, int64_t cols, float* out);

// row = x[0..cols) in format t. Scales are rounded so that every value lies within the
// range its block can represent: the error of each weight is at most half its block's step.
void quantize_row(QuantType t, const float* x, int64_t cols, uint8_t* row);

}  // namespace runahead
