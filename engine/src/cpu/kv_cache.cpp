#include "cpu/kv_cache.h"

#include <algorithm>

namespace runahead {

KVCache::KVCache(int layers, int capacity, int kv_heads, int head_dim)
    : layers_(layers),
      capacity_(capacity),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      k_(new float[size_t(layers) * kv_heads * capacity * head_dim]),
      v_(new float[size_t(layers) * kv_heads * capacity * head_dim]) {}

void KVCache::append(int layer, int pos0, int n, const float* k_rows, const float* v_rows) {
  const size_t row = size_t(kv_heads_) * head_dim_;
  for (int h = 0; h < kv_heads_; ++h)
    for (int t = 0; t < n; ++t) {
      const size_t from = t * row + size_t(h) * head_dim_;
      std::copy_n(k_rows + from, head_dim_, k(layer, h, pos0 + t));
      std::copy_n(v_rows + from, head_dim_, v(layer, h, pos0 + t));
    }
}

}  // namespace runahead
