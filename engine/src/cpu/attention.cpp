#include "cpu/attention.h"

#include <algorithm>
#include <cmath>

namespace runahead {

Attention::Attention(AttentionShape shape, int threads, int capacity)
    : shape_(shape),
      capacity_(capacity),
      scores_(size_t(threads) * (shape.heads / shape.kv_heads) * capacity) {}

void Attention::run(ThreadPool& pool, const Kernels& kernels, KVCache& cache, int layer,
                    const float* q, int n, int pos0, float* out) {
  const int d = shape_.head_dim, group = shape_.heads / shape_.kv_heads;
  const int q_dim = shape_.heads * d;
  const float scale = 1.0f / std::sqrt(float(d));
  // Work items are (token, kv head, slice of the group's heads). The heads of a group
  // share their key and value reads, so a group is split only when there are too few items
  // to keep every thread busy (a decode step on many cores).
  const int pairs = n * shape_.kv_heads;
  const int slices = std::min(group, (pool.size() + pairs - 1) / pairs);
  const int items = pairs * slices;
  // Dealt round-robin: later tokens attend to more positions, so contiguous ranges
  // would leave the last thread with most of the work.
  pool.run([&](int thread) {
    float* scores = scores_.data() + size_t(thread) * group * capacity_;
    for (int item = thread; item < items; item += pool.size()) {
      const int pair = item / slices, slice = item % slices;
      const int t = pair / shape_.kv_heads, g = pair % shape_.kv_heads;
      const int j0 = group * slice / slices, heads = group * (slice + 1) / slices - j0;
      const int len = pos0 + t + 1;
      const float* q_heads = q + size_t(t) * q_dim + size_t(g * group + j0) * d;
      kernels.matmul_f32(cache.k(layer, g, 0), d, 0, len, d, q_heads, d, heads, scores, len);
      for (int j = 0; j < heads; ++j) kernels.softmax(scores + size_t(j) * len, len, scale);
      // The group's heads read each value row once, together.
      kernels.combine_rows(scores, len, heads, cache.v(layer, g, 0), d, len, d,
                           out + size_t(t) * q_dim + size_t(g * group + j0) * d, d);
    }
  });
}

}  // namespace runahead
