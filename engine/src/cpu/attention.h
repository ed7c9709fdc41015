#pragma once
// Causal grouped-query attention over the KV cache.
#include <vector>

#include "cpu/kv_cache.h"
#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"

namespace runahead {

struct AttentionShape {
  int heads, kv_heads, head_dim;
};

class Attention {
 public:
  Attention(AttentionShape shape, int threads, int capacity);

  // out[t, h] = sum_{s <= pos0+t} softmax_s(q[t, h] . k[s, h/g] / sqrt(d)) v[s, h/g]
  // for q, out: [n, heads * head_dim] and k, v the cache of `layer` (g = heads / kv_heads).
  // The heads of one group read each key block and each value row once, together. Every score
  // and output takes the same operations whatever n is: a token verified with others gets the
  // bits it gets decoded alone.
  void run(ThreadPool& pool, const Kernels& kernels, const KVCache& cache, int layer, const float* q,
           int n, int pos0, float* out);

 private:
  AttentionShape shape_;
  int stride_;  // floats between a thread's score rows: the capacity in whole key blocks
  std::vector<float> scores_;  // per thread: [heads / kv_heads, capacity rounded up to a key block]
};

}  // namespace runahead
