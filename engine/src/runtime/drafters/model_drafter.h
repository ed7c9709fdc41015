#pragma once
// What the two model drafters share: a way to make a backend for their own weights
// (the CPU or CUDA one, as the target's), and the choice of a token from a row of logits.
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "runtime/backend.h"
#include "runtime/drafter.h"

namespace runahead {

using BackendFactory =
    std::function<std::unique_ptr<Backend>(std::shared_ptr<const ModelWeights>, const BackendOptions&)>;

// Below this probability (softmax of the drafter's logits) a model drafter stops
// drafting: a token it is unsure of is likely rejected and costs a forward to draft.
constexpr float kMinDraftProb = 0.2f;

// Appends the drafter's pick from `logits` to `draft`: the argmax under greedy (q one-hot,
// no probs), otherwise a draw from q = sampler.distribution(logits), whose row is kept for
// verification. Returns the drafter's softmax probability of its pick (its confidence).
float pick_draft_token(std::span<const float> logits, Sampler& sampler, Draft& draft);

}  // namespace runahead
