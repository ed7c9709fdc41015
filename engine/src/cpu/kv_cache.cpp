#include "cpu/kv_cache.h"

namespace runahead {

KVCache::KVCache(int layers, int capacity, int kv_dim)
    : layers_(layers),
      capacity_(capacity),
      kv_dim_(kv_dim),
      k_(new float[size_t(layers) * capacity * kv_dim]),
      v_(new float[size_t(layers) * capacity * kv_dim]) {}

}  // namespace runahead
