#pragma once
// A drafter proposes tokens that the target model then verifies in one forward.
// Drafters are backend-independent: the CPU and CUDA backends share them. Each one
// keeps itself in step with the target by comparing what it saw last with the
// context it is given, so a rejected draft or a new request needs no special call.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampler.h"

namespace runahead {

struct Draft {
  std::vector<int32_t> tokens;
  // q(token | ...) for each drafted position, [tokens.size(), vocab] row-major; empty
  // when the draft is deterministic (lookup, or a model drafter under greedy), which
  // verification treats as q = one-hot.
  std::vector<float> probs;
  // The drafter's estimate that its first token is accepted, 0..1 (picks k and, in
  // `auto`, the drafter). `bucket` groups drafts of like quality (lookup: match length)
  // so the scheduler can learn each group's acceptance rate on its own.
  float confidence = 0.0f;
  int bucket = 0;
  // Time spent catching up with the context (a new prompt, accepted tokens) rather than
  // drafting: it is not what the next draft will cost, so the scheduler leaves it out.
  double catch_up_ms = 0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;  // "lookup", "mtp", "draft"
  virtual nlohmann::json describe() const { return {{"name", name()}}; }

  // Whether drafting costs next to nothing (no forward): the scheduler then drafts
  // before it decides whether to verify, and judges the draft it got.
  virtual bool drafts_for_free() const { return false; }
  // Whether it needs the target's final hidden states (observe's `hidden`).
  virtual bool wants_hidden() const { return false; }
  // The target ran `tokens` at positions [pos0, pos0 + tokens.size()) and they stay in
  // its KV cache; whatever it held from pos0 on before is gone. `hidden` holds their
  // final hidden states [tokens.size(), hidden] when wants_hidden(), else it is empty.
  virtual void observe(int pos0, std::span<const int32_t> tokens, std::span<const float> hidden) {
    (void)pos0, (void)tokens, (void)hidden;
  }

  // Up to k tokens to follow `context` (the prompt and every token accepted so far; its
  // last token is not yet in the target's KV cache). Draws, when it samples, come from
  // `sampler` (its parameters say greedy or not).
  virtual Draft propose(std::span<const int32_t> context, int k, Sampler& sampler) = 0;

  // The request ended with `all_tokens` (prompt and output): remember them for later requests.
  virtual void end(std::span<const int32_t> all_tokens) { (void)all_tokens; }
};

}  // namespace runahead
