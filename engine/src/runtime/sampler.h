#pragma once
// Turns a row of logits into a token. Each Sampler owns its random generator, so
// the same seed and parameters give the same tokens whatever else runs in the process.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "runtime/sampling.h"

namespace runahead {

// Index of the largest logit; the first one on ties (as torch.argmax).
int32_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  const SamplingParams& params() const { return params_; }

  // The next token: argmax when greedy, otherwise a draw from distribution().
  int32_t sample(std::span<const float> logits);

  // The target distribution p(x) after temperature, top-k and top-p, normalised to
  // sum to 1 over `logits.size()` entries (zeros outside the kept support). Greedy
  // gives a one-hot at the argmax. Speculative rejection sampling compares drafts to it.
  void distribution(std::span<const float> logits, std::vector<float>& probs) const;

  // A draw from a normalised distribution (e.g. the residual max(0, p - q) after a rejection).
  int32_t draw(std::span<const float> probs);

  // A uniform number in [0, 1) from this sampler's stream (the acceptance test).
  double uniform();

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;  // fully specified by the standard, unlike the distributions
  std::vector<float> scratch_;
};

}  // namespace runahead
