#include "runtime/drafters/model_drafter.h"

#include <algorithm>
#include <cmath>

namespace runahead {

float pick_draft_token(std::span<const float> logits, Sampler& sampler, Draft& draft) {
  int32_t token;
  if (sampler.params().greedy()) {
    token = argmax(logits);
  } else {
    const size_t offset = draft.probs.size();
    draft.probs.resize(offset + logits.size());
    std::vector<float> q;
    sampler.distribution(logits, q);
    std::copy(q.begin(), q.end(), draft.probs.begin() + std::ptrdiff_t(offset));
    token = sampler.draw(q);
  }
  draft.tokens.push_back(token);
  const float top = *std::max_element(logits.begin(), logits.end());
  double total = 0;
  for (float l : logits) total += std::exp(double(l) - top);
  return float(std::exp(double(logits[size_t(token)]) - top) / total);
}

}  // namespace runahead
