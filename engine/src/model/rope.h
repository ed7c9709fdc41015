#pragma once
// RoPE angles, computed once for every backend ("rotate_half" convention: dimension i pairs
// with i + d/2 and turns by pos * inv_freq[i]).
#include <vector>

#include "model/config.h"

namespace runahead {

// inv_freq[i] = theta^(-2i/d), then RopeScaling (its freq_divisors when set, else its
// formula), in f32 as transformers computes them.
std::vector<float> rope_inv_freq(const ModelConfig& c);

// cos/sin of the angle of dimension i at position p, [positions, head_dim / 2]. The angle is
// rounded to f32 as transformers rounds it, so long positions turn by the same angle.
struct RopeTables {
  std::vector<float> cos, sin;
};
RopeTables rope_tables(const ModelConfig& c, int positions);

}  // namespace runahead
