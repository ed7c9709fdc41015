#include "cpu/kv_cache.h"

#include <algorithm>

namespace runahead {

KVCache::KVCache(int layers, int capacity, int kv_heads, int head_dim)
    : layers_(layers),
      capacity_(capacity),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      blocks_((capacity + kKeyBlock - 1) / kKeyBlock),
      k_(new float[size_t(layers) * kv_heads * blocks_ * kKeyBlock * head_dim]),
      v_(new float[size_t(layers) * kv_heads * capacity * head_dim]) {}

void KVCache::append(int layer, int pos0, int n, const float* k_rows, const float* v_rows) {
  const size_t row = size_t(kv_heads_) * head_dim_;
  for (int h = 0; h < kv_heads_; ++h)
    for (int t = 0; t < n; ++t) {
      const int pos = pos0 + t;
      const float* k = k_rows + t * row + size_t(h) * head_dim_;
      float* block = k_.get() + k_offset(layer, h, pos / kKeyBlock) + pos % kKeyBlock;
      for (int i = 0; i < head_dim_; ++i) block[size_t(i) * kKeyBlock] = k[i];
      std::copy_n(v_rows + t * row + size_t(h) * head_dim_, head_dim_, v_.get() + v_offset(layer, h, pos));
    }
}

}  // namespace runahead
