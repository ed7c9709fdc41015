#include "cpu/rope.h"

#include <cmath>

namespace runahead {

Rope::Rope(int head_dim, float theta, int positions)
    : half_(head_dim / 2),
      cos_(size_t(positions) * half_),
      sin_(size_t(positions) * half_) {
  for (int i = 0; i < half_; ++i) {
    // The angle is rounded to f32 the way transformers computes it, so long positions
    // turn by the same (slightly rounded) angle as the reference.
    const float inv_freq = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
    for (int p = 0; p < positions; ++p) {
      const float angle = float(p) * inv_freq;
      cos_[size_t(p) * half_ + i] = float(std::cos(double(angle)));
      sin_[size_t(p) * half_ + i] = float(std::sin(double(angle)));
    }
  }
}

void Rope::apply(ThreadPool& pool, float* x, int n, int heads, int pos0) const {
  pool.for_range(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* c = cos_.data() + size_t(pos0 + t) * half_;
      const float* s = sin_.data() + size_t(pos0 + t) * half_;
      for (int h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * 2 * half_;
        for (int i = 0; i < half_; ++i) {
          const float a = v[i], b = v[i + half_];
          v[i] = a * c[i] - b * s[i];
          v[i + half_] = b * c[i] + a * s[i];
        }
      }
    }
  });
}

}  // namespace runahead
