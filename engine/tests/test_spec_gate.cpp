// Drafts that do not pay are not drafted (issue 19): the speculator judges each drafter by the
// time its steps take against plain steps (runtime/draft_gate.h). Here time is a clock that
// counts the prices of a CPU-like cost table (PricedClock), so the tests count steps, drafted
// tokens and priced time, never the test machine's timing. Every output is still the plain one.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <random>

#include "generate_run.h"
#include "runtime/generator.h"
#include "test_spec_fakes.h"

using namespace runahead;
using namespace runahead::spec_test;
using runahead::testing::greedy;
using runahead::testing::Run;
using runahead::testing::run;

namespace {

constexpr int kVocab = 24;
constexpr int kContext = 8192;

// Drafts the known continuation (`truth`: prompt and plain output) at the positions where
// `right` says so, a wrong token elsewhere.
class ScriptedDrafter final : public Drafter {
 public:
  std::string name() const override { return "scripted"; }
  Draft propose(std::span<const int32_t> context, int k, Sampler&) override {
    Draft d;
    d.confidence = 0.9f;
    for (int i = 0; i < k; ++i) {
      const size_t at = context.size() + size_t(i);
      const int32_t token = at < truth.size() ? truth[at] : int32_t(at % kVocab);
      d.tokens.push_back(right(at) ? token : int32_t((token + 1) % kVocab));
    }
    return d;
  }
  std::vector<int32_t> truth;
  std::function<bool(size_t position)> right = [](size_t) { return true; };
};

std::vector<int32_t> random_prompt(std::mt19937& rng) {
  std::vector<int32_t> p;
  for (int i = 0; i < 16; ++i) p.push_back(int32_t(rng() % kVocab));
  return p;
}

// A session: a backend on a priced clock, the scripted drafter, a speculator over it, a generator.
struct Session {
  MarkovBackend backend{kVocab, kContext};
  PricedClock clock{backend, cpu_like_costs()};
  ScriptedDrafter* drafter = nullptr;
  std::unique_ptr<Speculator> spec;
  std::unique_ptr<Generator> generator;

  explicit Session(bool run_ahead) {
    backend.run_ahead = run_ahead;
    auto d = std::make_unique<ScriptedDrafter>();
    drafter = d.get();
    std::vector<std::unique_ptr<Drafter>> drafters;
    drafters.push_back(std::move(d));
    SpeculationOptions o;
    o.mode = "test";
    o.max_draft = 8;
    o.clock_ms = clock.reader();
    spec = std::make_unique<Speculator>(backend, std::move(drafters), o, cpu_like_costs());
    generator = std::make_unique<Generator>(backend, GeneratorOptions{.speculator = spec.get()});
  }

  struct Outcome {
    GenerateStats stats;
    double ms = 0;        // the decode steps' priced time
    double plain_ms = 0;  // what plain steps would have taken: one price unit per token after the first
  };
  // One request; the drafter's truth is the plain output, which the request must give.
  Outcome request(const std::vector<int32_t>& prompt, int tokens) {
    MarkovBackend plain_backend(kVocab, kContext);
    Generator plain(plain_backend, {});
    const Run expected = run(plain, greedy(prompt, tokens));
    drafter->truth = prompt;
    drafter->truth.insert(drafter->truth.end(), expected.tokens.begin(), expected.tokens.end());
    const size_t first = backend.widths.size();
    const Run got = run(*generator, greedy(prompt, tokens));
    CHECK(got.tokens == expected.tokens);
    Outcome o{got.result.stats, 0, double(got.tokens.size()) - 1};
    const CostTable prices = cpu_like_costs();
    // widths[first] is the prefill; each later forward is a step.
    for (size_t i = first + 1; i < backend.widths.size(); ++i)
      o.ms += prices.ms[size_t(std::min<int>(backend.widths[i], int(prices.ms.size())) - 1)];
    return o;
  }
};

}  // namespace

TEST_CASE("every draft wrong: after a few probes nothing is drafted and a step costs what a plain one does") {
  for (const bool ahead : {false, true}) {
    CAPTURE(ahead);
    Session s(ahead);
    s.drafter->right = [](size_t) { return false; };
    std::mt19937 rng(7);
    int late_steps = 0, late_verifying = 0, late_drafted = 0;
    double late_ms = 0, late_plain_ms = 0;
    for (int r = 0; r < 12; ++r) {
      const Session::Outcome o = s.request(random_prompt(rng), 120);
      CHECK(o.stats.speculation.accepted == 0);
      if (r < 2) continue;  // warm-up: the gate learns, probes back off
      late_steps += o.stats.steps;
      late_verifying += o.stats.speculation.steps;
      late_drafted += o.stats.speculation.drafted;
      late_ms += o.ms;
      late_plain_ms += o.plain_ms;
    }
    CAPTURE(late_steps);
    CAPTURE(late_verifying);
    // Only probes draft: three steps every 128 or more, as deep as the acceptance estimate says.
    CHECK(late_verifying <= 3 * (late_steps / 128 + 1));
    CHECK(late_drafted <= 2 * late_verifying);
    // The bound: at most 2 % slower than speculation off.
    CHECK(late_ms <= 1.02 * late_plain_ms);
  }
}

TEST_CASE("every draft right: it keeps drafting deep") {
  for (const bool ahead : {false, true}) {
    CAPTURE(ahead);
    Session s(ahead);
    std::mt19937 rng(8);
    for (int r = 0; r < 6; ++r) {
      const Session::Outcome o = s.request(random_prompt(rng), 120);
      CHECK(o.stats.speculation.accepted == o.stats.speculation.drafted);
      if (r == 0) continue;
      // Every step drafts but the plain step timed every 64 (the run-ahead path reads each
      // step's time one verdict late, so a short request may see one more).
      CHECK(o.stats.speculation.steps >= o.stats.steps - 2);
      CHECK(o.stats.steps <= 120 / 8 + 3);
      CHECK(o.ms < 0.3 * o.plain_ms);
    }
  }
}

TEST_CASE("drafts that turn right within a request are drafted again, and shut when they turn wrong") {
  std::mt19937 rng(9);
  const std::vector<int32_t> prompt = random_prompt(rng);
  const size_t turn = prompt.size() + 200;  // the first 200 output tokens, then the other way
  {
    Session s(false);
    s.drafter->right = [&](size_t at) { return at >= turn; };
    const Session::Outcome o = s.request(prompt, 600);
    // Shut while wrong, probed at most 128 steps after the turn, then open: most of the last
    // 400 tokens come from accepted drafts.
    CHECK(o.stats.speculation.accepted >= 200);
    CHECK(o.ms < o.plain_ms);
  }
  {
    Session s(false);
    s.drafter->right = [&](size_t at) { return at < turn; };
    const Session::Outcome o = s.request(prompt, 600);
    // Open while right; after the turn about ten wrong steps shut it (their k falling as the
    // acceptance estimate does), then only probes draft.
    const SpeculationStats& spec = o.stats.speculation;
    CHECK(spec.accepted >= 150);
    CHECK(spec.drafted - spec.accepted <= 8 * 10 + 3 * (400 / 16));
    CHECK(o.ms < o.plain_ms);
  }
}

TEST_CASE("a workload that changes between requests: the gate follows it") {
  std::mt19937 rng(10);
  Session s(false);
  bool right = false;
  s.drafter->right = [&](size_t) { return right; };
  for (int r = 0; r < 6; ++r) s.request(random_prompt(rng), 100);  // wrong: shut, probes backed off
  right = true;
  int last_accepted = 0, last_tokens = 0;
  for (int r = 0; r < 6; ++r) {
    const Session::Outcome o = s.request(random_prompt(rng), 100);
    if (r >= 3) last_accepted += o.stats.speculation.accepted, last_tokens += o.stats.tokens;
  }
  // Open again within a probe interval (at most 128 steps): the last requests are mostly drafts.
  CHECK(last_accepted >= last_tokens * 3 / 4);
  right = false;
  for (int r = 0; r < 6; ++r) {
    const Session::Outcome o = s.request(random_prompt(rng), 100);
    // The first wrong request pays for the steps that shut the gate; then only probes draft.
    CHECK(o.ms <= (r == 0 ? 1.15 : 1.02) * o.plain_ms);
    if (r > 0) CHECK(o.stats.speculation.steps <= 6);  // at most two probes of three steps
  }
}
