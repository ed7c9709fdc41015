// The sampler: greedy, reproducibility with a seed, top-k / top-p support, and
// temperature sampling that follows the softmax.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "generate_run.h"
#include "fake_backend.h"
#include "runtime/sampler.h"

using namespace runahead;
using runahead::testing::sampling;

namespace {


std::vector<float> random_logits(size_t n, uint64_t seed) {
  std::vector<float> logits(n);
  runahead::testing::hashed_logits(std::vector<int32_t>{static_cast<int32_t>(seed)}, logits);
  return logits;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp((logits[i] - max) / temperature);
  for (double& x : p) x /= total;
  return p;
}

size_t support(const std::vector<float>& probs) {
  return static_cast<size_t>(std::count_if(probs.begin(), probs.end(), [](float p) { return p > 0; }));
}

}  // namespace

TEST_CASE("greedy picks the first largest logit") {
  Sampler sampler(sampling(0));
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  CHECK(sampler.sample(logits) == 1);
  std::vector<float> probs;
  sampler.distribution(logits, probs);
  CHECK(probs == std::vector<float>{0, 1, 0, 0});
}

TEST_CASE("the same seed and parameters give the same tokens, another seed does not") {
  const std::vector<float> logits = random_logits(1000, 3);
  auto draws = [&](uint64_t seed) {
    Sampler sampler(sampling(1.0f, 50, 0.95f, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(sampler.sample(logits));
    return out;
  };
  CHECK(draws(42) == draws(42));
  CHECK(draws(42) != draws(43));
}

TEST_CASE("temperature sampling follows the softmax") {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f};
  for (double temperature : {1.0, 0.5, 2.0}) {
    Sampler sampler(sampling(static_cast<float>(temperature), 0, 1.0f, 11));
    const std::vector<double> expected = softmax(logits, temperature);
    std::vector<float> probs;
    sampler.distribution(logits, probs);
    std::vector<int> counts(logits.size());
    const int n = 40000;
    for (int i = 0; i < n; ++i) ++counts[sampler.sample(logits)];
    for (size_t i = 0; i < logits.size(); ++i) {
      CHECK(probs[i] == doctest::Approx(expected[i]).epsilon(1e-5));
      // Five standard errors at most (about 0.012 for p = 0.5).
      CHECK(std::abs(counts[i] / double(n) - expected[i]) < 5 * std::sqrt(0.25 / n));
    }
  }
}

TEST_CASE("top-k keeps exactly the k most likely tokens") {
  const std::vector<float> logits = random_logits(500, 5);
  Sampler sampler(sampling(1.0f, 7, 1.0f, 1));
  std::vector<float> probs;
  sampler.distribution(logits, probs);
  CHECK(support(probs) == 7);
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  for (size_t i = 0; i < logits.size(); ++i) CHECK((probs[i] > 0) == (logits[i] >= sorted[6]));
  CHECK(std::accumulate(probs.begin(), probs.end(), 0.0) == doctest::Approx(1.0));
  for (int i = 0; i < 2000; ++i) CHECK(probs[sampler.sample(logits)] > 0);
}

TEST_CASE("top-p keeps the smallest set of most likely tokens that reaches p") {
  // Probabilities 0.5, 0.3, 0.15, 0.05.
  const std::vector<float> logits = {std::log(0.3f), std::log(0.05f), std::log(0.5f), std::log(0.15f)};
  std::vector<float> probs;
  Sampler(sampling(1.0f, 0, 0.45f)).distribution(logits, probs);
  CHECK(probs == std::vector<float>{0, 0, 1, 0});
  Sampler(sampling(1.0f, 0, 0.7f)).distribution(logits, probs);
  CHECK(probs[2] == doctest::Approx(0.625));
  CHECK(probs[0] == doctest::Approx(0.375));
  CHECK(support(probs) == 2);
  Sampler(sampling(1.0f, 0, 0.85f)).distribution(logits, probs);
  CHECK(support(probs) == 3);
  CHECK(probs[1] == 0);
}

TEST_CASE("top-p over a large, flat vocabulary matches a full sort") {
  // Flat enough that the kept set is far larger than the first partial sort.
  std::vector<float> logits = random_logits(20000, 9);
  for (float& x : logits) x *= 0.2f;
  for (float p : {0.5f, 0.9f, 0.99f}) {
    std::vector<float> probs;
    Sampler(sampling(1.0f, 0, p)).distribution(logits, probs);
    std::vector<double> full = softmax(logits, 1.0);
    std::sort(full.rbegin(), full.rend());
    size_t expected = 0;
    for (double mass = 0; mass < p; ++expected) mass += full[expected];
    CHECK(support(probs) == expected);
    CHECK(expected > 64);
  }
}

TEST_CASE("top-k and top-p together: top-p applies within the top k") {
  const std::vector<float> logits = random_logits(300, 13);
  std::vector<float> probs;
  Sampler(sampling(0.7f, 20, 0.9f)).distribution(logits, probs);
  CHECK(support(probs) <= 20);
  CHECK(support(probs) >= 1);
  CHECK(std::accumulate(probs.begin(), probs.end(), 0.0) == doctest::Approx(1.0));
}

TEST_CASE("draw never picks a zero-probability entry") {
  Sampler sampler(sampling(1.0f, 0, 1.0f, 3));
  const std::vector<float> probs = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f};
  std::vector<int> counts(probs.size());
  for (int i = 0; i < 4000; ++i) ++counts[sampler.draw(probs)];
  CHECK(counts[0] + counts[2] + counts[4] == 0);
  CHECK(counts[3] > counts[1]);
}
