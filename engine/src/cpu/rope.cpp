#include "cpu/rope.h"

#include "model/rope.h"

namespace runahead {

Rope::Rope(const ModelConfig& c, int positions) : half_(c.head_dim / 2) {
  RopeTables t = rope_tables(c, positions);
  cos_ = std::move(t.cos);
  sin_ = std::move(t.sin);
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
