// Greedy speculative output is the plain greedy output, token for token, whatever the
// drafter: always right, always wrong, lookup, and (test_spec_models.cpp) the MTP head
// and a draft model on the real fixture models. Also at the edges: drafts longer than
// the tokens left, a stop token inside an accepted run, cancellation and deadlines
// arriving mid-verify, the end of the context.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>

#include "runtime/drafters/lookup.h"
#include "runtime/generator.h"
#include "generate_run.h"
#include "test_spec_fakes.h"

using namespace runahead;
using namespace runahead::spec_test;
using runahead::testing::greedy;
using runahead::testing::Run;
using runahead::testing::run;

namespace {

constexpr int kVocab = 24;


// 24 prompts: random ones, and ones that repeat a phrase (where lookup finds matches).
std::vector<std::vector<int32_t>> prompts() {
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> p;
    const int len = 3 + i * 2;
    if (i % 2 == 0) {
      for (int j = 0; j < len; ++j) p.push_back(int32_t(rng() % kVocab));
    } else {
      std::vector<int32_t> phrase;
      for (int j = 0; j < 4 + i % 5; ++j) phrase.push_back(int32_t(rng() % kVocab));
      while (int(p.size()) < len) p.insert(p.end(), phrase.begin(), phrase.end());
    }
    out.push_back(p);
  }
  return out;
}

int kContext = 512;

Run plain(const GenerateRequest& r, int context = kContext, GeneratorOptions options = {}) {
  MarkovBackend backend(kVocab, context);
  Generator g(backend, options);
  return run(g, r);
}

// A speculator over `backend` with the given drafters, every width as cheap as one token.
std::unique_ptr<Speculator> speculator(Backend& backend, std::vector<std::unique_ptr<Drafter>> drafters, int max_draft = 8,
                                       bool adaptive = false) {
  SpeculationOptions o;
  o.mode = drafters.empty() ? "off" : drafters.front()->name();
  o.max_draft = max_draft;
  o.adaptive = adaptive;
  return std::make_unique<Speculator>(backend, std::move(drafters), o, flat_costs());
}

std::vector<std::unique_ptr<Drafter>> one(std::unique_ptr<Drafter> d) {
  std::vector<std::unique_ptr<Drafter>> v;
  v.push_back(std::move(d));
  return v;
}

// A speculator over `backend` with one drafter, and a generator using it.
struct Speculating {
  std::unique_ptr<Speculator> spec;
  Generator generator;
  Speculating(Backend& backend, std::unique_ptr<Drafter> d, int max_draft = 8, bool adaptive = false)
      : spec(speculator(backend, one(std::move(d)), max_draft, adaptive)),
        generator(backend, GeneratorOptions{.speculator = spec.get()}) {}
};

std::vector<int32_t> joined(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

}  // namespace

TEST_CASE("greedy speculation equals plain greedy for right, wrong and lookup drafts on 24 prompts") {
  for (const bool ahead : {false, true}) {  // steps one at a time, and queued one ahead
    CAPTURE(ahead);
    g_run_ahead = ahead;
    int total_accepted = 0, total_drafted = 0;
    for (const auto& prompt : prompts()) {
      const GenerateRequest r = greedy(prompt, 40);
      const Run expected = plain(r);
      REQUIRE(expected.tokens.size() == 40);
      for (int which = 0; which < 4; ++which) {
        CAPTURE(which);
        CAPTURE(prompt.size());
        MarkovBackend backend(kVocab, kContext);
        std::unique_ptr<Drafter> d;
        if (which == 0) d = std::make_unique<KnownDrafter>(joined(prompt, expected.tokens), KnownDrafter::Right, kVocab);
        if (which == 1) d = std::make_unique<KnownDrafter>(joined(prompt, expected.tokens), KnownDrafter::Wrong, kVocab);
        if (which >= 2) d = std::make_unique<LookupDrafter>();
        Speculating spec(backend, std::move(d), 8, which == 3);
        Generator& g = spec.generator;
        const Run got = run(g, r);
        CHECK(got.tokens == expected.tokens);
        CHECK(got.result.finish == expected.result.finish);
        const SpeculationStats& s = got.result.stats.speculation;
        if (which == 0) {
          CHECK(s.accepted == s.drafted);           // an oracle is never wrong
          CHECK(got.result.stats.steps <= 40 / 9 + 1);  // ... and fills every verify
        }
        if (which == 1) CHECK(s.accepted == 0);
        total_drafted += s.drafted;
        total_accepted += s.accepted;
      }
    }
    // The lookup drafter found repeats in the repetitive prompts (or the test proves nothing).
    CHECK(total_accepted > total_drafted / 10);
  }
  g_run_ahead = false;
}

TEST_CASE("a greedy verify keeps the drafts the target agrees with and leaves the cache at them") {
  MarkovBackend backend(kVocab, kContext);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  // The target's greedy continuation, step by step.
  std::vector<int32_t> g;
  std::vector<float> logits;
  backend.forward(prompt, 1, logits);
  g.push_back(argmax(logits));
  for (int i = 0; i < 6; ++i) {
    backend.forward(std::span(&g.back(), 1), 1, logits);
    g.push_back(argmax(logits));
  }
  const int P = int(prompt.size());
  for (int wrong = 0; wrong <= 4; ++wrong) {
    CAPTURE(wrong);
    backend.truncate(P);
    std::vector<int32_t> draft(g.begin() + 1, g.begin() + 5);
    if (wrong < 4) draft[size_t(wrong)] = (draft[size_t(wrong)] + 1) % kVocab;
    const GreedyVerdict v = backend.verify_greedy(g[0], draft);
    CHECK(v.accepted == wrong);
    CHECK(v.next == g[size_t(wrong) + 1]);
    CHECK(backend.kv_len() == P + 1 + wrong);
  }
  // An empty draft is a plain greedy step.
  backend.truncate(P);
  CHECK(backend.verify_greedy(g[0], {}).next == g[1]);
  CHECK(backend.kv_len() == P + 1);
}

TEST_CASE("no verify is wider than the target's widest, and the output stays the plain one") {
  for (const bool ahead : {false, true}) {  // steps one at a time, and queued one ahead
    CAPTURE(ahead);
    g_run_ahead = ahead;
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
    const GenerateRequest r = greedy(prompt, 30);
    const Run expected = plain(r);
    MarkovBackend backend(kVocab, kContext);
    backend.verify_width = 3;
    Speculating spec(backend, std::make_unique<KnownDrafter>(joined(prompt, expected.tokens), KnownDrafter::Right, kVocab));
    Generator& g = spec.generator;
    const Run got = run(g, r);
    CHECK(got.tokens == expected.tokens);
    CHECK(got.result.stats.speculation.accepted > 0);
    for (size_t i = 1; i < backend.widths.size(); ++i) CHECK(backend.widths[i] <= 3);
  }
  g_run_ahead = false;
}

TEST_CASE("queued ahead: plain steps queue behind plain steps, drafts wait for the verdict before them") {
  // A prompt without repeats: lookup rarely drafts, so plain steps run queued one ahead.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back(int32_t((i * 7 + 3) % kVocab));
  const GenerateRequest r = greedy(prompt, 40);
  const Run expected = plain(r);
  {
    MarkovBackend backend(kVocab, kContext);
    backend.run_ahead = true;
    Speculating spec(backend, std::make_unique<LookupDrafter>(), 8, true);
    Generator& g = spec.generator;
    CHECK(run(g, r).tokens == expected.tokens);
    CHECK(backend.most_queued == 2);  // a plain step was queued while the one before was unread
    CHECK(backend.queued == 0);       // nothing left queued at the end
  }
  {
    // A drafter that always drafts: each draft is chosen from known tokens, so an oracle's are
    // kept whole, and a step is never queued behind an unread one.
    MarkovBackend backend(kVocab, kContext);
    backend.run_ahead = true;
    Speculating spec(backend, std::make_unique<KnownDrafter>(joined(prompt, expected.tokens), KnownDrafter::Right, kVocab));
    Generator& g = spec.generator;
    const Run got = run(g, r);
    CHECK(got.tokens == expected.tokens);
    CHECK(backend.most_queued == 1);
    CHECK(got.result.stats.speculation.accepted == got.result.stats.speculation.drafted);
    CHECK(got.result.stats.steps <= 40 / 9 + 1);
  }
}

TEST_CASE("drafts never run past the tokens a request may still emit, nor past the context") {
  for (const bool ahead : {false, true}) {  // steps one at a time, and queued one ahead
    CAPTURE(ahead);
    g_run_ahead = ahead;
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
    for (int max_tokens : {1, 2, 3, 5, 9}) {
      CAPTURE(max_tokens);
      const GenerateRequest r = greedy(prompt, max_tokens);
      const Run expected = plain(r);
      MarkovBackend backend(kVocab, kContext);
      Speculating spec(backend, std::make_unique<KnownDrafter>(joined(prompt, expected.tokens), KnownDrafter::Right, kVocab));
      Generator& g = spec.generator;
      const Run got = run(g, r);
      CHECK(got.tokens == expected.tokens);
      CHECK(got.result.finish == FinishReason::Length);
      // The first token comes from the prefill; each verify is at most the remaining budget wide.
      for (size_t i = 1; i < backend.widths.size(); ++i) CHECK(backend.widths[i] <= max_tokens - 1);
    }
    // The end of the context: both stop at the same token, with finish "context".
    for (int context : {8, 13, 30}) {
      CAPTURE(context);
      const GenerateRequest r = greedy(prompt, 100);
      const Run expected = plain(r, context);
      CHECK(expected.result.finish == FinishReason::Context);
      for (auto mode : {KnownDrafter::Right, KnownDrafter::Wrong}) {
        MarkovBackend backend(kVocab, context);
        Speculating spec(backend, std::make_unique<KnownDrafter>(joined(prompt, expected.tokens), mode, kVocab));
        Generator& g = spec.generator;
        const Run got = run(g, r);
        CHECK(got.tokens == expected.tokens);
        CHECK(got.result.finish == FinishReason::Context);
      }
    }
  }
  g_run_ahead = false;
}

TEST_CASE("a stop token inside an accepted run ends the output exactly where plain decoding does") {
  for (const bool ahead : {false, true}) {  // steps one at a time, and queued one ahead
    CAPTURE(ahead);
    g_run_ahead = ahead;
    int inside = 0;
    for (const auto& prompt : prompts()) {
      const Run free_run = plain(greedy(prompt, 30));
      // Stop at the token the plain output has at index 6 (its first occurrence ends it).
      GenerateRequest r = greedy(prompt, 30);
      r.stop = {free_run.tokens[6]};
      const Run expected = plain(r);
      REQUIRE(expected.result.finish == FinishReason::Stop);
      MarkovBackend backend(kVocab, kContext);
      Speculating spec(backend, std::make_unique<KnownDrafter>(joined(prompt, free_run.tokens), KnownDrafter::Right, kVocab));
      Generator& g = spec.generator;
      const Run got = run(g, r);
      CHECK(got.tokens == expected.tokens);
      CHECK(got.result.finish == FinishReason::Stop);
      // The stop token was drafted and accepted with tokens after it in the same verify.
      if (got.result.stats.speculation.accepted > int(expected.tokens.size())) ++inside;
      // The next request reuses the cache correctly although it holds tokens past the stop.
      const GenerateRequest again = greedy(joined(prompt, {1, 2}), 12);
      CHECK(run(g, again).tokens == plain(again).tokens);
    }
    CHECK(inside > 10);
  }
  g_run_ahead = false;
}

TEST_CASE("cancellation and deadlines arriving mid-verify end with a prefix of the plain output") {
  for (const bool ahead : {false, true}) {  // steps one at a time, and queued one ahead
    CAPTURE(ahead);
    g_run_ahead = ahead;
    for (const auto& prompt : prompts()) {
      const Run expected = plain(greedy(prompt, 40));
      for (int kind = 0; kind < 2; ++kind) {
        CAPTURE(kind);
        MarkovBackend backend(kVocab, kContext);
        Speculating spec(backend, std::make_unique<KnownDrafter>(joined(prompt, expected.tokens), KnownDrafter::Right, kVocab), 4);
        Generator& g = spec.generator;
        std::atomic<bool> cancel{false};
        int verifies = 0;
        GenerateRequest r = greedy(prompt, 40);
        if (kind == 0) {
          // Cancel while the second verify runs.
          backend.on_forward = [&](int width) {
            if (width > 1 && ++verifies == 2) cancel = true;
          };
        } else {
          // A hard deadline that passes during the second verify.
          r.deadline_ms = 5;
          r.hard_deadline_ms = 5;
          backend.on_forward = [&](int width) {
            if (width > 1 && ++verifies == 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          };
        }
        const Run got = run(g, r, cancel);
        CHECK(got.result.finish == (kind == 0 ? FinishReason::Cancelled : FinishReason::Deadline));
        REQUIRE(got.tokens.size() <= expected.tokens.size());
        CHECK(std::equal(got.tokens.begin(), got.tokens.end(), expected.tokens.begin()));
        CHECK(got.tokens.size() >= 2);
      }
    }
  }
  g_run_ahead = false;
}

TEST_CASE("lookup drafts from earlier requests of the session") {
  LookupDrafter lookup;
  Sampler sampler(SamplingParams{});
  const std::vector<int32_t> earlier = {5, 6, 7, 8, 9, 10, 11, 12};
  lookup.end(earlier);
  // A new request whose context ends with 7 8: the history says 9 10 11 12 follow.
  const std::vector<int32_t> context = {1, 2, 7, 8};
  const Draft d = lookup.propose(context, 3, sampler);
  CHECK(d.tokens == std::vector<int32_t>{9, 10, 11});
  CHECK(d.bucket == 2);
  // Its own context wins over the history, and the longest match wins over shorter ones.
  const std::vector<int32_t> own = {3, 7, 8, 20, 21, 4, 7, 8};
  CHECK(lookup.propose(own, 2, sampler).tokens == std::vector<int32_t>{20, 21});
  const std::vector<int32_t> longer = {9, 7, 8, 30, 6, 7, 8, 31, 9, 7, 8};
  const Draft l = lookup.propose(longer, 1, sampler);
  CHECK(l.tokens == std::vector<int32_t>{30});
  CHECK(l.bucket == 3);
  // A repeating pattern is drafted past the end of the context.
  const std::vector<int32_t> periodic = {4, 5, 6, 4, 5, 6, 4};
  CHECK(lookup.propose(periodic, 6, sampler).tokens == std::vector<int32_t>{5, 6, 4, 5, 6, 4});
  // Nothing to match: no draft.
  const std::vector<int32_t> unseen = {100, 101};
  CHECK(lookup.propose(unseen, 4, sampler).tokens.empty());
}

TEST_CASE("the lookup history stays within its bound") {
  LookupOptions o;
  o.history_tokens = 1000;
  LookupDrafter lookup(o);
  Sampler sampler(SamplingParams{});
  std::mt19937 rng(1);
  std::vector<std::vector<int32_t>> requests;
  for (int r = 0; r < 200; ++r) {
    std::vector<int32_t> t;
    for (int i = 0; i < 50; ++i) t.push_back(int32_t(rng() % 5000));
    lookup.end(t);
    requests.push_back(t);
    CHECK(lookup.describe()["history_held"].get<int64_t>() <= 1000);
  }
  // The most recent request is still there, the first one is gone.
  const auto& last = requests.back();
  const std::vector<int32_t> recent = {last[10], last[11]}, old = {requests[0][10], requests[0][11]};
  CHECK(lookup.propose(recent, 1, sampler).tokens == std::vector<int32_t>{last[12]});
  CHECK(lookup.propose(old, 1, sampler).tokens.empty());
}

TEST_CASE("adaptive depth: speculates deep when verifying is cheap and drafts are right, stops when it does not pay") {
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  const GenerateRequest r = greedy(prompt, 120);
  const Run expected = plain(r);
  auto run_with = [&](KnownDrafter::Mode mode, CostTable costs) {
    MarkovBackend backend(kVocab, kContext);
    const PricedClock clock(backend, costs);  // steps take the time the table says
    SpeculationOptions o;
    o.mode = "test";
    o.max_draft = 8;
    o.clock_ms = clock.reader();
    auto spec = std::make_unique<Speculator>(
        backend, one(std::make_unique<KnownDrafter>(joined(prompt, expected.tokens), mode, kVocab)), o, std::move(costs));
    GeneratorOptions options;
    options.speculator = spec.get();
    Generator g(backend, options);
    const Run got = run(g, r);
    CHECK(got.tokens == expected.tokens);
    return got.result.stats;
  };
  // Cheap verifies, right drafts: nearly every step drafts the most it may (after two plain
  // steps that time the plain step, and a probe of three drafting steps).
  const GenerateStats right = run_with(KnownDrafter::Right, flat_costs());
  CHECK(right.speculation.accepted == right.speculation.drafted);
  CHECK(right.steps <= 120 / 8 + 6);
  // Verifies as a CPU prices them, wrong drafts: it learns, and only now and then tries again.
  const GenerateStats wrong = run_with(KnownDrafter::Wrong, cpu_like_costs());
  CHECK(wrong.speculation.accepted == 0);
  CHECK(wrong.speculation.steps < wrong.steps / 10);
  // The same prices, right drafts: worth it on nearly every step.
  const GenerateStats right_cpu = run_with(KnownDrafter::Right, cpu_like_costs());
  CHECK(right_cpu.speculation.steps >= right_cpu.steps - 4);
  CHECK(right_cpu.steps <= 120 / 4);
  // Right drafts but each extra verified token costs as much as a whole step: never pays.
  std::vector<double> linear;
  for (int w = 1; w <= 9; ++w) linear.push_back(double(w));
  const GenerateStats costly = run_with(KnownDrafter::Right, CostTable{linear});
  CHECK(costly.speculation.steps == 0);
}
