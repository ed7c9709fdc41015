#include "model/rope.h"

#include <cmath>
#include <numbers>

namespace runahead {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> f(half);
  for (int i = 0; i < half; ++i) f[i] = 1.0f / std::pow(c.rope_theta, float(2 * i) / float(c.head_dim));
  const RopeScaling& r = c.rope_scaling;
  if (!r.freq_divisors.empty()) {  // llama.cpp's rope_freqs: theta / freq_factors[i]
    for (int i = 0; i < half; ++i) f[i] /= r.freq_divisors[i];
  } else if (r.type == "llama3") {  // transformers' _compute_llama3_parameters
    const float old_len = float(r.original_max_positions);
    const float low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
    for (float& inv : f) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / inv;
      if (wavelen > low_wavelen) {
        inv /= r.factor;
      } else if (!(wavelen < high_wavelen)) {
        const float smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        inv = (1.0f - smooth) * inv / r.factor + smooth * inv;
      }
    }
  }
  return f;
}

RopeTables rope_tables(const ModelConfig& c, int positions) {
  const std::vector<float> inv_freq = rope_inv_freq(c);
  const size_t half = inv_freq.size();
  RopeTables t{std::vector<float>(size_t(positions) * half), std::vector<float>(size_t(positions) * half)};
  for (size_t i = 0; i < half; ++i)
    for (int p = 0; p < positions; ++p) {
      const float angle = float(p) * inv_freq[i];
      t.cos[size_t(p) * half + i] = float(std::cos(double(angle)));
      t.sin[size_t(p) * half + i] = float(std::sin(double(angle)));
    }
  return t;
}

}  // namespace runahead
