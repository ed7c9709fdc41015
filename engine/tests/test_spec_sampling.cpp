// Speculative sampling keeps the target's distribution: chi-square tests over 20,000
// samples on tiny fixed distributions, with a draft distribution that differs from the
// target's on purpose. Mis-implemented acceptance rules run through the same harness
// must fail it, so the test can tell.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>

#include "runtime/scheduler.h"
#include "generate_run.h"
#include "test_spec_fakes.h"

using namespace runahead;
using runahead::testing::sampling;
using namespace runahead::spec_test;

namespace {

constexpr int kSamples = 20000;

// The chi-square critical value for `df` degrees of freedom at p = 1e-4 (Wilson-Hilferty).
double chi2_critical(int df) {
  const double z = 3.719, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Pearson's statistic of observed counts against expected probabilities; a count where the
// probability is zero makes it infinite. `df` gets the number of cells with mass, minus one.
double chi2(const std::vector<int>& counts, const std::vector<double>& probs, int& df) {
  int n = 0;
  for (int c : counts) n += c;
  double stat = 0;
  df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probs[i] * n;
    if (expected <= 0) {
      if (counts[i] > 0) return INFINITY;
      continue;
    }
    ++df;
    stat += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return stat;
}

bool matches(const std::vector<int>& counts, const std::vector<double>& probs, double* stat_out = nullptr) {
  int df = 0;
  const double stat = chi2(counts, probs, df);
  if (stat_out) *stat_out = stat;
  return stat < chi2_critical(std::max(df, 1));
}

std::vector<float> row_of(std::initializer_list<float> logits) { return logits; }

// The distributions of the test: target logits and draft probabilities per position.
const std::vector<std::vector<float>> kTarget = {
    row_of({2.0f, 1.5f, 0.5f, 0.0f, -0.5f, 1.0f}),
    row_of({0.1f, -1.0f, 1.9f, 1.2f, 0.3f, 0.0f}),
    row_of({-0.3f, 0.8f, 0.8f, 0.1f, 1.7f, -2.0f}),
};
const std::vector<std::vector<float>> kDraft = {
    {0.05f, 0.50f, 0.10f, 0.25f, 0.05f, 0.05f},
    {0.30f, 0.30f, 0.10f, 0.10f, 0.10f, 0.10f},
    {0.10f, 0.10f, 0.50f, 0.05f, 0.05f, 0.20f},
};

using VerifyFn = std::function<Verdict(const Draft&, std::span<const float>, int, Sampler&)>;

// The first output token of one speculative step over the fixed rows, `samples` times.
// Its distribution must be the target's at position 0 whatever the drafts were.
std::vector<int> first_tokens(const VerifyFn& verify_fn, const SamplingParams& params, bool deterministic) {
  const int V = int(kTarget[0].size()), k = int(kDraft.size());
  std::vector<float> logits;
  for (const auto& r : kTarget) logits.insert(logits.end(), r.begin(), r.end());
  logits.insert(logits.end(), kTarget.back().begin(), kTarget.back().end());  // the bonus row
  Sampler sampler(params);
  std::vector<int> counts(size_t(V), 0);
  for (int s = 0; s < kSamples; ++s) {
    Draft draft;
    for (int i = 0; i < k; ++i) {
      const std::vector<float>& q = kDraft[size_t(i)];
      if (deterministic) {
        draft.tokens.push_back(int32_t(std::max_element(q.begin(), q.end()) - q.begin()));
      } else {
        draft.tokens.push_back(sampler.draw(q));
        draft.probs.insert(draft.probs.end(), q.begin(), q.end());
      }
    }
    const Verdict v = verify_fn(draft, logits, V, sampler);
    ++counts[size_t(v.accepted > 0 ? draft.tokens[0] : v.next)];
  }
  return counts;
}

std::vector<double> target_probs(const SamplingParams& params, const std::vector<float>& logits) {
  std::vector<float> p;
  Sampler(params).distribution(logits, p);
  return {p.begin(), p.end()};
}

// Wrong on purpose: accepts with min(1, q / p) instead of min(1, p / q).
Verdict swapped_ratio(const Draft& draft, std::span<const float> logits, int V, Sampler& sampler) {
  std::vector<float> p;
  sampler.distribution(logits.first(size_t(V)), p);
  const float q = draft.probs.empty() ? 1.0f : draft.probs[size_t(draft.tokens[0])];
  if (sampler.uniform() * p[size_t(draft.tokens[0])] < q) return {1, 0};
  return {0, sampler.draw(p)};
}

// Wrong on purpose: on a rejection draws again from p instead of the residual max(0, p - q).
Verdict no_residual(const Draft& draft, std::span<const float> logits, int V, Sampler& sampler) {
  std::vector<float> p;
  sampler.distribution(logits.first(size_t(V)), p);
  const float q = draft.probs.empty() ? 1.0f : draft.probs[size_t(draft.tokens[0])];
  if (sampler.uniform() * q < p[size_t(draft.tokens[0])]) return {1, 0};
  return {0, sampler.draw(p)};
}


}  // namespace

TEST_CASE("speculative sampling: the first token of a verified draft has the target's distribution") {
  for (const SamplingParams& sp : {sampling(1.0f, 0, 1.0f, 7), sampling(0.7f, 4, 1.0f, 7), sampling(1.3f, 0, 0.8f, 7)}) {
    CAPTURE(sp.temperature);
    CAPTURE(sp.top_k);
    CAPTURE(sp.top_p);
    const auto p = target_probs(sp, kTarget[0]);
    double stat = 0;
    CHECK(matches(first_tokens(verify, sp, false), p, &stat));
    CAPTURE(stat);
    CHECK(matches(first_tokens(verify, sp, true), p, &stat));

    // The drafts alone are far from the target: accepting them blindly would be caught.
    std::vector<int> drafted(p.size(), 0);
    Sampler sampler(sp);
    for (int s = 0; s < kSamples; ++s) ++drafted[size_t(sampler.draw(kDraft[0]))];
    CHECK_FALSE(matches(drafted, p));
  }
}

TEST_CASE("speculative sampling: mis-implemented acceptance rules fail the same test") {
  const SamplingParams sp = sampling(1.0f, 0, 1.0f, 7);
  const auto p = target_probs(sp, kTarget[0]);
  CHECK_FALSE(matches(first_tokens(swapped_ratio, sp, false), p));
  CHECK_FALSE(matches(first_tokens(no_residual, sp, false), p));
}

namespace {

// An order-1 Markov target over 5 tokens and a draft that samples its own, different
// order-1 chain: the joint law of the first three generated tokens must be the target's.
constexpr int kV = 5;

float target_logit(int32_t last, size_t v) { return float(std::sin(1.7 * double(last + 1) * double(v + 1)) * 1.5); }

std::vector<float> draft_q(int32_t last) {
  std::vector<float> q(kV);
  double total = 0;
  for (int v = 0; v < kV; ++v) total += q[size_t(v)] = float(1.0 + ((v + 2 * last) % kV));
  for (float& x : q) x = float(x / total);
  return q;
}

class ChainDrafter final : public Drafter {
 public:
  std::string name() const override { return "chain"; }
  Draft propose(std::span<const int32_t> context, int k, Sampler& sampler) override {
    Draft d;
    int32_t last = context.back();
    for (int i = 0; i < k; ++i) {
      const auto q = draft_q(last);
      last = sampler.draw(q);
      d.tokens.push_back(last);
      d.probs.insert(d.probs.end(), q.begin(), q.end());
    }
    return d;
  }
};

}  // namespace

TEST_CASE("speculative sampling through the scheduler: the joint law of three tokens is the target's") {
  MarkovBackend backend(kV, 64, 1, [](std::span<const int32_t> prefix, std::span<float> row) {
    for (size_t v = 0; v < row.size(); ++v) row[v] = target_logit(prefix.back(), v);
  });
  const SamplingParams sp = sampling(0.9f, 0, 1.0f, 11);
  // p(next | last) under the sampling parameters.
  std::vector<std::vector<float>> p(kV);
  for (int32_t last = 0; last < kV; ++last) {
    std::vector<float> logits(kV);
    for (size_t v = 0; v < kV; ++v) logits[v] = target_logit(last, v);
    Sampler(sp).distribution(logits, p[size_t(last)]);
  }
  const int32_t start = 2;
  std::vector<double> exact(kV * kV * kV);
  for (int a = 0; a < kV; ++a)
    for (int b = 0; b < kV; ++b)
      for (int c = 0; c < kV; ++c) exact[size_t((a * kV + b) * kV + c)] = double(p[start][a]) * p[a][b] * p[b][c];

  for (int max_draft : {1, 3}) {
    CAPTURE(max_draft);
    std::vector<std::unique_ptr<Drafter>> drafters;
    drafters.push_back(std::make_unique<ChainDrafter>());
    SpeculationOptions options;
    options.mode = "chain";
    options.max_draft = max_draft;
    options.adaptive = false;
    Speculator spec(backend, std::move(drafters), options, flat_costs());
    Sampler sampler(sp);
    std::vector<int> counts(exact.size(), 0);
    std::vector<float> logits;
    int drafted = 0, accepted = 0;
    for (int s = 0; s < kSamples; ++s) {
      backend.truncate(0);
      std::vector<int32_t> cached, out;
      const int32_t prompt[2] = {0, start};
      backend.forward(std::span(prompt).first(1), 1, logits);
      cached.push_back(prompt[0]);
      spec.begin();
      // The prompt's last token is pending: every generated token comes from a step.
      int32_t pending = start;
      while (out.size() < 3) {
        const SpecStep step = spec.step(cached, pending, sampler, int(3 - out.size()), logits);
        out.insert(out.end(), step.tokens.begin(), step.tokens.end());
        pending = out.back();
      }
      ++counts[size_t((out[0] * kV + out[1]) * kV + out[2])];
      drafted += spec.stats().drafted;
      accepted += spec.stats().accepted;
    }
    // Both outcomes of the acceptance test happened many times.
    CHECK(accepted > kSamples / 10);
    CHECK(drafted - accepted > kSamples / 10);
    double stat = 0;
    CHECK(matches(counts, exact, &stat));
    CAPTURE(stat);
  }
}
