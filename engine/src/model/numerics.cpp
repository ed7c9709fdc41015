#include "model/numerics.h"

#include <algorithm>
#include <cmath>

#include "model/quant_blocks.h"
#include "model/fp8.h"
#include "model/half.h"

namespace runahead {

namespace {

// dst[i] = t[offset + i] for a block-quantized t: each row the range touches is dequantized.
void dequantize_range(const Tensor& t, int64_t offset, int64_t count, float* dst) {
  const int64_t cols = t.shape.back();
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t done = 0; done < count;) {
    const int64_t r = (offset + done) / cols, c = (offset + done) % cols, n = std::min(cols - c, count - done);
    const uint8_t* src = static_cast<const uint8_t*>(t.data) + size_t(r) * row_bytes(t.dtype, cols);
    float* out = c == 0 && n == cols ? dst + done : row.data();
    dequantize_row(*quant_type_of(t.dtype), src, cols, out);
    if (out == row.data()) std::copy_n(row.data() + c, n, dst + done);
    done += n;
  }
}

}  // namespace

void widen(const Tensor& t, int64_t offset, int64_t count, float* dst) {
  if (is_quantized(t.dtype)) return dequantize_range(t, offset, count, dst);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = offset + i;
    switch (t.dtype) {
      case DType::F32: dst[i] = static_cast<const float*>(t.data)[j]; break;
      case DType::F16: dst[i] = f16_to_f32(static_cast<const uint16_t*>(t.data)[j]); break;
      case DType::BF16: dst[i] = bf16_to_f32(static_cast<const uint16_t*>(t.data)[j]); break;
      case DType::I8: dst[i] = static_cast<const int8_t*>(t.data)[j]; break;
      case DType::F8_E4M3: dst[i] = fp8_e4m3_to_f32(static_cast<const uint8_t*>(t.data)[j]); break;  // before its row scale
      default: break;  // block formats: dequantize_range
    }
  }
}

std::vector<float> widen(const Tensor& t) {
  std::vector<float> out(t.empty() ? 0 : size_t(t.numel()));
  widen(t, 0, int64_t(out.size()), out.data());
  return out;
}

void rmsnorm_row(const float* x, const float* w, float eps, int h, float* y) {
  double sum_sq = 0.0;
  // Each square rounded to f32 before the f64 sum, as llama.cpp's rms_norm does (and
  // transformers' f32 pow): a GGUF's int8 activations then start from its norm's bits more
  // often (Q8_0 greedy runs identical to llama.cpp's 17 -> 18 of 20, top-1 99.77 -> 99.92 %).
  for (int i = 0; i < h; ++i) sum_sq += double(x[i] * x[i]);
  const float scale = 1.0f / std::sqrt(float(sum_sq / h) + eps);
  for (int i = 0; i < h; ++i) y[i] = x[i] * scale * w[i];
}

}  // namespace runahead
