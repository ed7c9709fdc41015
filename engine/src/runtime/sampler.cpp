#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace runahead {

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  if (params_.greedy()) return argmax(logits);
  distribution(logits, scratch_);
  return draw(scratch_);
}

void Sampler::distribution(std::span<const float> logits, std::vector<float>& probs) const {
  const size_t n = logits.size();
  probs.assign(n, 0.0f);
  if (n == 0) return;
  if (params_.greedy()) {
    probs[argmax(logits)] = 1.0f;
    return;
  }
  // Higher logit first, lower index on ties, so the kept support is deterministic.
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  std::vector<int32_t> kept(n);
  std::iota(kept.begin(), kept.end(), 0);
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    std::nth_element(kept.begin(), kept.begin() + params_.top_k, kept.end(), before);
    kept.resize(params_.top_k);
  }

  const float max_logit = logits[argmax(logits)];
  const double inv_t = 1.0 / params_.temperature;
  std::vector<double> weight(n, 0.0);
  double total = 0.0;
  for (int32_t i : kept) {
    weight[i] = std::exp((static_cast<double>(logits[i]) - max_logit) * inv_t);
    total += weight[i];
  }

  if (params_.top_p < 1.0f) {
    // The smallest set of most likely tokens whose mass reaches top_p. Sort a growing
    // prefix only: with a peaked distribution a few dozen tokens usually suffice.
    const double target = static_cast<double>(params_.top_p) * total;
    size_t sorted = std::min<size_t>(kept.size(), 64);
    size_t keep = kept.size();
    for (;;) {
      std::partial_sort(kept.begin(), kept.begin() + sorted, kept.end(), before);
      double mass = 0.0;
      size_t j = 0;
      for (; j < sorted && mass < target; ++j) mass += weight[kept[j]];
      if (mass >= target || sorted == kept.size()) {
        keep = j;
        break;
      }
      sorted = std::min(kept.size(), sorted * 8);
    }
    for (size_t j = keep; j < kept.size(); ++j) total -= weight[kept[j]];
    kept.resize(std::max<size_t>(keep, 1));
  }

  for (int32_t i : kept) probs[i] = static_cast<float>(weight[i] / total);
}

double Sampler::uniform() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::draw(std::span<const float> probs) {
  double total = 0.0;
  for (float p : probs) total += p;
  const double u = uniform() * total;
  double cumulative = 0.0;
  int32_t last_nonzero = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    cumulative += probs[i];
    last_nonzero = static_cast<int32_t>(i);
    if (u < cumulative) return last_nonzero;
  }
  return last_nonzero;  // rounding left u at the very top of the range
}

}  // namespace runahead
