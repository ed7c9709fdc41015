#pragma once
// Sampling parameters shared by the generator and the speculative scheduler.
#include <cstdint>

namespace runahead {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

}  // namespace runahead
