#include "cpu/attention.h"

#include <cmath>

namespace runahead {

Attention::Attention(AttentionShape shape, int threads, int capacity)
    : shape_(shape),
      capacity_(capacity),
      scores_(size_t(threads) * (shape.heads / shape.kv_heads) * capacity) {}

void Attention::run(ThreadPool& pool, const Kernels& kernels, KVCache& cache, int layer,
                    const float* q, int n, int pos0, float* out) {
  const int d = shape_.head_dim, group = shape_.heads / shape_.kv_heads;
  const int q_dim = shape_.heads * d, kv_dim = cache.kv_dim();
  const float scale = 1.0f / std::sqrt(float(d));
  const int items = n * shape_.kv_heads;
  // Work items (token, kv head) are dealt round-robin: later tokens attend to more
  // positions, so contiguous ranges would leave the last thread with most of the work.
  pool.run([&](int thread) {
    float* scores = scores_.data() + size_t(thread) * group * capacity_;
    for (int item = thread; item < items; item += pool.size()) {
      const int t = item / shape_.kv_heads, g = item % shape_.kv_heads;
      const int len = pos0 + t + 1;
      const float* q_group = q + size_t(t) * q_dim + size_t(g) * group * d;
      kernels.matmul_f32(cache.k(layer, 0) + g * d, kv_dim, 0, len, d, q_group, d, group, scores,
                         len);
      for (int j = 0; j < group; ++j) {
        float* s = scores + size_t(j) * len;
        kernels.softmax(s, len, scale);
        kernels.combine_rows(s, cache.v(layer, 0) + g * d, kv_dim, len, d,
                             out + size_t(t) * q_dim + size_t(g * group + j) * d);
      }
    }
  });
}

}  // namespace runahead
