#pragma once
// A drafter proposes tokens that the target model then verifies in one forward.
// Drafters are backend-independent: the CPU and CUDA backends share them.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampling.h"

namespace runahead {

struct Draft {
  std::vector<int32_t> tokens;
  // q(token | ...) for each drafted position, [tokens.size()][vocab]; empty when the
  // drafter is deterministic (lookup), which verification treats as q = one-hot.
  std::vector<std::vector<float>> probs;
  float confidence = 0.0f;  // 0..1, used to pick k
  std::string drafter;      // "lookup", "mtp", "draft"
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // A request starts; `prompt` is what the target holds in its KV cache after prefill.
  virtual void begin(std::span<const int32_t> prompt) = 0;
  // Up to k tokens to follow `context` (prompt + output accepted so far).
  virtual Draft propose(std::span<const int32_t> context, int k, const SamplingParams& sampling) = 0;
  // After verification: `context` now ends with the accepted tokens; `n_accepted`
  // of the last draft's tokens were accepted. Model drafters roll back or catch up.
  virtual void accepted(std::span<const int32_t> context, int n_accepted) = 0;
  // The request ended with `all_tokens` (prompt + output): remember them for later requests.
  virtual void end(std::span<const int32_t> all_tokens) = 0;
};

}  // namespace runahead
