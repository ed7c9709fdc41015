#pragma once
// Rotary position embedding, Hugging Face "rotate_half" convention: dimension i pairs
// with i + d/2 and turns by pos * inv_freq[i] (model/rope.h).
#include <vector>

#include "cpu/thread_pool.h"
#include "model/config.h"

namespace runahead {

class Rope {
 public:
  Rope(const ModelConfig& c, int positions);  // the angles of model/rope.h for [0, positions)

  // In place, for x: [n, heads, head_dim] whose token t sits at position pos0 + t:
  // (a, b) = (x[i], x[i + d/2]) -> (a cos - b sin, b cos + a sin).
  void apply(ThreadPool& pool, float* x, int n, int heads, int pos0) const;

 private:
  int half_;
  std::vector<float> cos_, sin_;  // [positions, head_dim / 2]
};

}  // namespace runahead
