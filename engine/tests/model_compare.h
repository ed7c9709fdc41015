#pragma once
// Test helper: runs two models on the CPU backend over the same tokens and measures how far
// the second's logits are from the first's, and whether greedy decoding picks the same tokens.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "model/weights.h"
#include "runtime/backend.h"

namespace runahead::test {

// The fixture model folders, and the embedded default model as it ships.
inline const std::filesystem::path kFixtureModels = std::filesystem::path(RUNAHEAD_FIXTURES) / "models";
inline const std::filesystem::path kEmbeddedModel =
    std::filesystem::path(RUNAHEAD_FIXTURES) / ".." / ".." / "engine" / "models" / "runahead-coder";

inline std::shared_ptr<const ModelWeights> load_shared(const std::filesystem::path& path) {
  return std::make_shared<const ModelWeights>(load_model(path));
}

// logits of every position of `tokens`, [n, V], on a fresh CPU backend.
inline std::vector<float> all_logits(std::shared_ptr<const ModelWeights> w, const std::vector<int32_t>& tokens) {
  auto backend = make_cpu_backend(std::move(w), BackendOptions{2, 256});
  std::vector<float> logits;
  backend->forward(tokens, int(tokens.size()), logits);
  return logits;
}

// ||b - a|| / ||a|| over all logits (a: the reference).
inline double relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += double(b[i] - a[i]) * double(b[i] - a[i]);
    norm += double(a[i]) * a[i];
  }
  return std::sqrt(diff / norm);
}

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<float> margins;  // top-1 minus top-2 logit at each choice
};

// `count` greedy tokens after `prompt` (one forward per token after the prompt's).
inline Greedy greedy_tokens(std::shared_ptr<const ModelWeights> w, const std::vector<int32_t>& prompt, int count) {
  auto backend = make_cpu_backend(std::move(w), BackendOptions{2, 256});
  std::vector<float> logits;
  Greedy out;
  backend->forward(prompt, 1, logits);
  for (int i = 0; i < count; ++i) {
    int32_t best = 0;
    for (size_t v = 1; v < logits.size(); ++v)
      if (logits[v] > logits[size_t(best)]) best = int32_t(v);
    float second = -INFINITY;
    for (size_t v = 0; v < logits.size(); ++v)
      if (int32_t(v) != best) second = std::max(second, logits[v]);
    out.tokens.push_back(best);
    out.margins.push_back(logits[size_t(best)] - second);
    backend->forward(std::vector<int32_t>{best}, 1, logits);
  }
  return out;
}

// The reference's greedy tokens up to (not including) its first choice closer than `tie`
// logits to the runner-up: where a lossy format must choose the same (past a near-tie
// either choice is right, and the two runs continue different texts).
inline std::vector<int32_t> decided_prefix(const Greedy& reference, float tie) {
  size_t n = 0;
  while (n < reference.tokens.size() && reference.margins[n] >= tie) ++n;
  return {reference.tokens.begin(), reference.tokens.begin() + std::ptrdiff_t(n)};
}

// The first `n` tokens of g.
inline std::vector<int32_t> first(const Greedy& g, size_t n) {
  return {g.tokens.begin(), g.tokens.begin() + std::ptrdiff_t(std::min(n, g.tokens.size()))};
}

// Teacher-forced top-1 agreement of `b` with `a` over rows [from, n) of [n, V] logits.
inline double top1_agreement(const std::vector<float>& a, const std::vector<float>& b, size_t vocab, size_t from = 0) {
  const size_t n = a.size() / vocab;
  size_t agree = 0;
  for (size_t t = from; t < n; ++t) {
    const auto ra = a.begin() + std::ptrdiff_t(t * vocab), rb = b.begin() + std::ptrdiff_t(t * vocab);
    agree += std::max_element(ra, ra + std::ptrdiff_t(vocab)) - ra == std::max_element(rb, rb + std::ptrdiff_t(vocab)) - rb;
  }
  return double(agree) / double(n - from);
}

// Tokens [3, 3 + n) of a fixed pseudo-random sequence below `vocab`.
inline std::vector<int32_t> sample_tokens(int n, int vocab, uint32_t seed = 7) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    t.push_back(int32_t((seed >> 8) % uint32_t(vocab)));
  }
  return t;
}

}  // namespace runahead::test
