// The generator against a fake backend: prefix reuse, rollback, every stop rule,
// deadlines, cancellation, chunked prefill, input checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <numeric>
#include <thread>

#include "fake_backend.h"
#include "generate_run.h"
#include "runtime/generator.h"

using namespace runahead;
using runahead::testing::counting_logits;
using runahead::testing::FakeBackend;
using runahead::testing::greedy;
using runahead::testing::Run;
using runahead::testing::run;

namespace {


std::vector<int32_t> iota_prompt(int n, int32_t first = 3) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), first);
  return p;
}

// A greedy request of 100 tokens after an 8-token prompt, cancelled once `n` tokens are out.
Run cancelled_after(Generator& generator, size_t n) {
  Run r;
  std::atomic<bool> cancel{false};
  r.result = generator.generate(
      greedy(iota_prompt(8), 100),
      [&](std::span<const int32_t> tokens, std::span<const double>) {
        r.tokens.insert(r.tokens.end(), tokens.begin(), tokens.end());
        if (r.tokens.size() == n) cancel = true;
      },
      cancel);
  return r;
}

// The tokens a generator that never saw any other request produces.
std::vector<int32_t> cold(const GenerateRequest& request, int vocab = 97, int context = 256) {
  FakeBackend backend(vocab, context);
  Generator generator(backend, {});
  return run(generator, request).tokens;
}

}  // namespace

TEST_CASE("a cold generation runs the whole prompt in one forward and reports its stats") {
  FakeBackend backend(97, 256);
  Generator generator(backend, {});
  const Run r = run(generator, greedy(iota_prompt(20), 10));
  CHECK(r.tokens.size() == 10);
  CHECK(r.result.finish == FinishReason::Length);
  CHECK(r.result.stats.prompt_tokens == 20);
  CHECK(r.result.stats.reused_tokens == 0);
  CHECK(r.result.stats.tokens == 10);
  CHECK(r.result.stats.steps == 9);  // the first token comes from the prefill
  CHECK(r.result.stats.accepted_per_step == doctest::Approx(1.0));
  CHECK(backend.forward_sizes.front() == 20);
  // The cache holds the prompt and every output token but the last, which never ran.
  CHECK(generator.cached_tokens().size() == 29);
  CHECK(backend.kv_len() == 29);
}

TEST_CASE("prefix reuse keeps the common prefix, prefills only the rest, and changes nothing") {
  FakeBackend backend(97, 256);
  Generator generator(backend, {});
  const std::vector<int32_t> first_prompt = iota_prompt(20);
  const Run first = run(generator, greedy(first_prompt, 10));

  // The next request continues the first one's output, then diverges.
  std::vector<int32_t> prompt = first_prompt;
  prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.begin() + 5);
  prompt.push_back((first.tokens[5] + 1) % 97);
  prompt.push_back(11);
  const int forwarded_before = backend.forwarded_tokens;
  const Run second = run(generator, greedy(prompt, 12));

  CHECK(second.result.stats.reused_tokens == 25);
  CHECK(backend.forward_sizes[backend.forward_sizes.size() - second.result.stats.steps - 1] == 2);
  CHECK(backend.forwarded_tokens - forwarded_before == 2 + second.result.stats.steps);
  CHECK(second.tokens == cold(greedy(prompt, 12)));
}

TEST_CASE("a prompt that is wholly cached re-runs its last token") {
  FakeBackend backend(97, 256);
  Generator generator(backend, {});
  const GenerateRequest request = greedy(iota_prompt(16), 8);
  const Run first = run(generator, request);
  const Run again = run(generator, request);
  CHECK(again.result.stats.reused_tokens == 15);
  CHECK(again.tokens == first.tokens);

  // A shorter prompt that is a prefix of the cache.
  const GenerateRequest shorter = greedy(iota_prompt(9), 8);
  const Run short_run = run(generator, shorter);
  CHECK(short_run.result.stats.reused_tokens == 8);
  CHECK(short_run.tokens == cold(shorter));
}

TEST_CASE("rollback drops the cache's tail and a re-decode gives the same tokens") {
  FakeBackend backend(97, 256);
  Generator generator(backend, {});
  const GenerateRequest request = greedy(iota_prompt(12), 10);
  const Run first = run(generator, request);
  generator.rollback(7);
  CHECK(backend.kv_len() == 7);
  CHECK(generator.cached_tokens().size() == 7);
  const Run again = run(generator, request);
  CHECK(again.result.stats.reused_tokens == 7);
  CHECK(again.tokens == first.tokens);
}

TEST_CASE("chunked prefill gives the same tokens as one forward") {
  FakeBackend backend(97, 256);
  Generator generator(backend, GeneratorOptions{.prefill_chunk = 4});
  const GenerateRequest request = greedy(iota_prompt(10), 6);
  const Run r = run(generator, request);
  CHECK(std::vector<int>(backend.forward_sizes.begin(), backend.forward_sizes.begin() + 3) ==
        std::vector<int>{4, 4, 2});
  CHECK(r.tokens == cold(request));
}

TEST_CASE("stop ids and eos ids end the generation and are not emitted") {
  FakeBackend backend(50, 256, counting_logits);
  Generator generator(backend, GeneratorOptions{.eos_ids = {40}});

  GenerateRequest request = greedy({5}, 30);
  request.stop = {9};
  Run r = run(generator, request);
  CHECK(r.tokens == std::vector<int32_t>{6, 7, 8});
  CHECK(r.result.finish == FinishReason::Stop);
  CHECK(r.result.stats.tokens == 3);

  r = run(generator, greedy({35}, 30));
  CHECK(r.tokens == std::vector<int32_t>{36, 37, 38, 39});
  CHECK(r.result.finish == FinishReason::Stop);

  // A stop token as the very first token: nothing is emitted.
  r = run(generator, greedy({39}, 30));
  CHECK(r.tokens.empty());
  CHECK(r.result.finish == FinishReason::Stop);
}

TEST_CASE("max_tokens ends with finish length, zero only prefills") {
  FakeBackend backend(50, 256, counting_logits);
  Generator generator(backend, {});
  Run r = run(generator, greedy({1}, 4));
  CHECK(r.tokens == std::vector<int32_t>{2, 3, 4, 5});
  CHECK(r.result.finish == FinishReason::Length);

  r = run(generator, greedy({10, 11, 12}, 0));
  CHECK(r.tokens.empty());
  CHECK(r.result.finish == FinishReason::Length);
  CHECK(backend.kv_len() == 3);
}

TEST_CASE("a full KV cache ends with finish context, a prompt over the context is refused before any work") {
  FakeBackend backend(97, 16);
  Generator generator(backend, {});
  Run r = run(generator, greedy(iota_prompt(10), 100));
  CHECK(r.result.finish == FinishReason::Context);
  CHECK(r.tokens.size() == 7);  // 6 more positions, and the last token needs none
  CHECK(backend.kv_len() == 16);

  r = run(generator, greedy(iota_prompt(16), 100));
  CHECK(r.tokens.size() == 1);
  CHECK(r.result.finish == FinishReason::Context);

  const int calls = static_cast<int>(backend.forward_sizes.size());
  try {
    run(generator, greedy(iota_prompt(17), 100));
    FAIL("expected context_overflow");
  } catch (const EngineError& e) {
    CHECK(e.code == "context_overflow");
    CHECK(e.field == "prompt");
  }
  CHECK(static_cast<int>(backend.forward_sizes.size()) == calls);
}

TEST_CASE("bad prompts are bad requests naming the field") {
  FakeBackend backend(97, 64);
  Generator generator(backend, {});
  try {
    run(generator, greedy({1, 2, 97}, 4));
    FAIL("expected bad_request");
  } catch (const EngineError& e) {
    CHECK(e.code == "bad_request");
    CHECK(e.field == "prompt[2]");
  }
  try {
    run(generator, greedy({}, 4));
    FAIL("expected bad_request");
  } catch (const EngineError& e) {
    CHECK(e.code == "bad_request");
    CHECK(e.field == "prompt");
  }
  CHECK(backend.forward_sizes.empty());
}

TEST_CASE("after the soft deadline the generation ends right after the first newline token") {
  FakeBackend backend(64, 256, counting_logits);
  backend.step_delay = std::chrono::milliseconds(5);
  // Every forward takes 5 ms, so by token 10 (50 ms) the 22 ms deadline has passed.
  Generator generator(backend, GeneratorOptions{.newline_ids = {10, 20, 30}});
  GenerateRequest request = greedy({0}, 1000);
  request.deadline_ms = 22;
  request.hard_deadline_ms = 10000;
  const Run r = run(generator, request);
  CHECK(r.result.finish == FinishReason::Deadline);
  CHECK(r.tokens == iota_prompt(10, 1));
}

TEST_CASE("the hard deadline (default twice the soft one) stops without a newline") {
  FakeBackend backend(64, 512, counting_logits);
  backend.step_delay = std::chrono::milliseconds(5);
  Generator generator(backend, {});
  GenerateRequest request = greedy({0}, 1000);
  request.deadline_ms = 22;
  const Run r = run(generator, request);
  CHECK(r.result.finish == FinishReason::Deadline);
  CHECK(r.result.stats.total_ms >= 44);
  CHECK(!r.tokens.empty());
  // Each token cost at least one 5 ms forward, all of them before the stop.
  CHECK(r.tokens.size() * 5.0 <= r.result.stats.total_ms);
}

TEST_CASE("cancellation is acknowledged within one step") {
  FakeBackend backend(97, 256);
  Generator generator(backend, {});
  const Run r = cancelled_after(generator, 3);
  CHECK(r.result.finish == FinishReason::Cancelled);
  CHECK(r.tokens.size() == 3);
  CHECK(r.result.stats.tokens == 3);
}

TEST_CASE("cancellation from another thread stops a running generation") {
  FakeBackend backend(97, 4096);
  backend.step_delay = std::chrono::milliseconds(2);
  Generator generator(backend, {});
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    cancel = true;
  });
  const Run r = run(generator, greedy(iota_prompt(8), 3000), cancel);
  canceller.join();
  CHECK(r.result.finish == FinishReason::Cancelled);
  CHECK(r.tokens.size() < 3000);
  // The cache still mirrors the backend, so the next request can reuse it.
  CHECK(generator.cached_tokens().size() == static_cast<size_t>(backend.kv_len()));
}

TEST_CASE("a generation cancelled before it starts does no work") {
  FakeBackend backend(97, 256);
  Generator generator(backend, {});
  const std::atomic<bool> cancel{true};
  const Run r = run(generator, greedy(iota_prompt(8), 10), cancel);
  CHECK(r.result.finish == FinishReason::Cancelled);
  CHECK(r.tokens.empty());
  CHECK(backend.forward_sizes.empty());
}

TEST_CASE("the first token's time is the time to first token, ms are positive") {
  FakeBackend backend(97, 256);
  backend.step_delay = std::chrono::milliseconds(3);
  Generator generator(backend, {});
  const Run r = run(generator, greedy(iota_prompt(8), 5));
  REQUIRE(r.ms.size() == 5);
  CHECK(r.ms[0] == doctest::Approx(r.result.stats.ttft_ms).epsilon(0.01));
  for (double ms : r.ms) CHECK(ms >= 3.0);
  CHECK(r.result.stats.decode_ms_per_token >= 3.0);
  CHECK(r.result.stats.prefill_ms >= 3.0);
}

TEST_CASE("sampling with a seed is reproducible across prefix reuse, and the seed matters") {
  FakeBackend backend(97, 512);
  Generator generator(backend, {});
  GenerateRequest request = greedy(iota_prompt(8), 40);
  request.sampling.temperature = 1.0f;
  request.sampling.seed = 7;
  const Run a = run(generator, request);
  const Run b = run(generator, request);  // this one reuses the cache
  CHECK(b.result.stats.reused_tokens == 7);
  CHECK(a.tokens == b.tokens);
  request.sampling.seed = 8;
  const Run c = run(generator, request);
  CHECK(a.tokens != c.tokens);
}

TEST_CASE("a backend error resets the cache instead of leaving it out of step") {
  int calls = 0;
  FakeBackend backend(97, 256, [&](std::span<const int32_t> context, std::span<float> row) {
    if (++calls == 4) throw EngineError("internal", "injected failure");
    runahead::testing::hashed_logits(context, row);
  });
  Generator generator(backend, {});
  CHECK_THROWS_AS(run(generator, greedy(iota_prompt(8), 10)), EngineError);
  CHECK(backend.kv_len() == 0);
  CHECK(generator.cached_tokens().empty());
  const Run r = run(generator, greedy(iota_prompt(8), 10));
  CHECK(r.tokens == cold(greedy(iota_prompt(8), 10)));
}

namespace {

// A backend with its own greedy loop that, like the CUDA one, runs step k + 1 before it
// hands over token k, and rolls the extra step back when told to stop.
class LoopingBackend : public FakeBackend {
 public:
  using FakeBackend::FakeBackend;
  int decode_greedy(int32_t first, int max_tokens, const std::function<bool(int32_t)>& on_token) override {
    ++loops;
    max_tokens = std::min(max_tokens, context_length() - kv_len());
    const int start = kv_len();
    std::vector<float> logits;
    std::vector<int32_t> produced;
    int32_t input = first;
    const auto step = [&] {
      forward(std::span(&input, 1), 1, logits);
      input = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      produced.push_back(input);
    };
    if (max_tokens > 0) step();
    int emitted = 0;
    while (emitted < int(produced.size())) {
      if (int(produced.size()) < max_tokens) step();
      if (!on_token(produced[emitted++])) break;
    }
    truncate(start + emitted);
    return emitted;
  }
  int loops = 0;
};

}  // namespace

TEST_CASE("a backend's own greedy loop gives what stepping with forward gives: tokens, finish, stats, cache") {
  struct Case {
    int vocab, context;
    FakeBackend::LogitsFn logits;
    std::vector<GenerateRequest> requests;  // run in order on one generator: prefix reuse too
  };
  GenerateRequest stopped = greedy({5}, 30);
  stopped.stop = {9};
  const std::vector<Case> cases = {
      {97, 256, runahead::testing::hashed_logits, {greedy(iota_prompt(20), 10), greedy(iota_prompt(25), 12)}},
      {50, 256, counting_logits, {stopped, greedy({35}, 30), greedy({1}, 4), greedy({39}, 30)}},
      {97, 16, runahead::testing::hashed_logits, {greedy(iota_prompt(10), 100), greedy(iota_prompt(16), 100)}},
  };
  for (const Case& c : cases) {
    FakeBackend plain(c.vocab, c.context, c.logits);
    LoopingBackend looping(c.vocab, c.context, c.logits);
    Generator by_forward(plain, GeneratorOptions{.eos_ids = {40}});
    Generator by_loop(looping, GeneratorOptions{.eos_ids = {40}});
    for (const GenerateRequest& request : c.requests) {
      const Run a = run(by_forward, request), b = run(by_loop, request);
      CHECK(b.tokens == a.tokens);
      CHECK(b.result.finish == a.result.finish);
      CHECK(b.result.stats.tokens == a.result.stats.tokens);
      CHECK(b.result.stats.steps == a.result.stats.steps);
      CHECK(b.result.stats.reused_tokens == a.result.stats.reused_tokens);
      const auto cache = [](const Generator& g) { return std::vector<int32_t>(g.cached_tokens().begin(), g.cached_tokens().end()); };
      CHECK(cache(by_loop) == cache(by_forward));
      CHECK(looping.kv_len() == plain.kv_len());
    }
  }
}

TEST_CASE("a backend's own greedy loop stops within one token of a cancel, sampling does not use it") {
  LoopingBackend backend(97, 256);
  Generator generator(backend, {});
  const Run r = cancelled_after(generator, 3);
  CHECK(backend.loops == 1);
  CHECK(r.result.finish == FinishReason::Cancelled);
  CHECK(r.tokens.size() == 3);
  CHECK(backend.kv_len() == 8 + 2);  // the prompt and the inputs of tokens 2 and 3

  GenerateRequest sampled = greedy(iota_prompt(8), 5);
  sampled.sampling = runahead::testing::sampling(0.8f, 0, 1.0f, 7);
  run(generator, sampled);
  CHECK(backend.loops == 1);
}
