#include "model/numerics.h"

#include <cmath>

#include "model/half.h"

namespace runahead {

void widen(const Tensor& t, int64_t offset, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = offset + i;
    switch (t.dtype) {
      case DType::F32: dst[i] = static_cast<const float*>(t.data)[j]; break;
      case DType::F16: dst[i] = f16_to_f32(static_cast<const uint16_t*>(t.data)[j]); break;
      case DType::BF16: dst[i] = bf16_to_f32(static_cast<const uint16_t*>(t.data)[j]); break;
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
  for (int i = 0; i < h; ++i) sum_sq += double(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(float(sum_sq / h) + eps);
  for (int i = 0; i < h; ++i) y[i] = x[i] * scale * w[i];
}

}  // namespace runahead
