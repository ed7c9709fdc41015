#pragma once
// Drives a Generator in tests: collects what the sink receives (tokens, their ms,
// the batch each step sent) and the result.
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include "runtime/generator.h"
#include "runtime/sampling.h"

namespace runahead::testing {

struct Run {
  std::vector<int32_t> tokens;
  std::vector<double> ms;
  std::vector<size_t> batch_sizes;
  GenerateResult result;
};

inline Run run(Generator& generator, const GenerateRequest& request, const std::atomic<bool>& cancel) {
  Run r;
  r.result = generator.generate(
      request,
      [&](std::span<const int32_t> tokens, std::span<const double> ms) {
        CHECK(tokens.size() == ms.size());
        r.tokens.insert(r.tokens.end(), tokens.begin(), tokens.end());
        r.ms.insert(r.ms.end(), ms.begin(), ms.end());
        r.batch_sizes.push_back(tokens.size());
      },
      cancel);
  return r;
}

inline Run run(Generator& generator, const GenerateRequest& request) {
  const std::atomic<bool> never{false};
  return run(generator, request, never);
}

inline GenerateRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

inline SamplingParams sampling(float temperature, int top_k = 0, float top_p = 1.0f, uint64_t seed = 0) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  return p;
}

}  // namespace runahead::testing
