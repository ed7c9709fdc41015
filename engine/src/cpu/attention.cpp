#include "cpu/attention.h"

#include <algorithm>
#include <cmath>

namespace runahead {

Attention::Attention(AttentionShape shape, int threads, int capacity)
    : shape_(shape),
      stride_((capacity + KVCache::kKeyBlock - 1) / KVCache::kKeyBlock * KVCache::kKeyBlock),
      scores_(size_t(threads) * (shape.heads / shape.kv_heads) * stride_) {}

void Attention::run(ThreadPool& pool, const Kernels& kernels, const KVCache& cache, int layer,
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
    float* scores = scores_.data() + size_t(thread) * group * stride_;
    for (int item = thread; item < items; item += pool.size()) {
      const int pair = item / slices, slice = item % slices;
      const int t = pair / shape_.kv_heads, g = pair % shape_.kv_heads;
      const int j0 = group * slice / slices, heads = group * (slice + 1) / slices - j0;
      const int len = pos0 + t + 1;
      const float* q_heads = q + size_t(t) * q_dim + size_t(g * group + j0) * d;
      // q . k, a block of kKeyBlock positions at a time: score[j, p] = sum_i q[j, i] k_block[i, p],
      // the heads' sums of the block's d rows (the last block's positions past len are computed
      // and never read).
      constexpr int B = KVCache::kKeyBlock;
      for (int b = 0; b * B < len; ++b)
        kernels.combine_rows(q_heads, d, heads, cache.k_block(layer, g, b), B, d, B, scores + b * B, stride_);
      for (int j = 0; j < heads; ++j) kernels.softmax(scores + size_t(j) * stride_, len, scale);
      // The group's heads read each value row once, together.
      kernels.combine_rows(scores, stride_, heads, cache.v(layer, g, 0), d, len, d,
                           out + size_t(t) * q_dim + size_t(g * group + j0) * d, d);
    }
  });
}

}  // namespace runahead
