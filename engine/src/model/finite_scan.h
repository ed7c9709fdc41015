#pragma once
// NaN or Inf in the weights makes every logit NaN and every completion silently empty:
// the loader looks for them first, on a sample cheap enough for a 32B model.
#include <string>

#include "model/tensor.h"

namespace runahead {

// Scans a bf16 / f16 / f32 tensor whole when it is at most 256 KiB, else its first and last
// 4 KiB and 62 evenly spaced 4 KiB blocks between (at most 256 KiB read per tensor, so a cold
// page cache costs little); a block-quantized tensor by 64 evenly spaced rows, dequantized
// (a non-finite block scale shows there). Throws EngineError{"model_error"} naming `file` and the tensor
// at the first NaN or Inf found.
void check_finite_sample(const Tensor& t, const std::string& file);

}  // namespace runahead
