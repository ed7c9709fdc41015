// Parity with Hugging Face transformers on the fixture models (golden.json next to
// each): greedy continuations token for token, top-8 logits within tolerance, and
// the cache paths (prefill then decode, rollback, prefix reuse, chunked prefill)
// giving the same answers on real models.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/weights.h"
#include "runtime/backend.h"
#include "runtime/generator.h"

using namespace runahead;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  fs::path dir;
  json golden;
  std::shared_ptr<const ModelWeights> weights;
  std::unique_ptr<Backend> backend;
};

std::vector<fs::path> golden_dirs() {
  std::vector<fs::path> dirs;
  const fs::path root = fs::path(RUNAHEAD_FIXTURES) / "models";
  if (fs::is_directory(root))
    for (const auto& entry : fs::directory_iterator(root))
      if (fs::exists(entry.path() / "golden.json")) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

Fixture open(const fs::path& dir) {
  Fixture f;
  f.dir = dir;
  std::ifstream in(dir / "golden.json");
  f.golden = json::parse(in);
  f.weights = std::make_shared<const ModelWeights>(load_model(dir));
  f.backend = make_cpu_backend(f.weights, BackendOptions{});
  return f;
}

std::vector<int32_t> generate(Generator& generator, const std::vector<int32_t>& prompt, int max_tokens,
                              GenerateStats* stats = nullptr) {
  GenerateRequest request;
  request.prompt = prompt;
  request.max_tokens = max_tokens;
  std::vector<int32_t> out;
  const std::atomic<bool> never{false};
  const GenerateResult result = generator.generate(
      request, [&](std::span<const int32_t> t, std::span<const double>) { out.insert(out.end(), t.begin(), t.end()); },
      never);
  if (stats) *stats = result.stats;
  return out;
}

GeneratorOptions eos_of(const Fixture& f, int prefill_chunk = 512) {
  return GeneratorOptions{.eos_ids = f.weights->config.eos_token_ids, .prefill_chunk = prefill_chunk};
}

// Logits of every position of `prompt`, from one forward over an empty cache.
std::vector<float> all_logits(Backend& backend, const std::vector<int32_t>& prompt) {
  backend.truncate(0);
  std::vector<float> logits;
  backend.forward(prompt, static_cast<int>(prompt.size()), logits);
  return logits;
}

template <typename Check>
void for_each_fixture(Check check) {
  const auto dirs = golden_dirs();
  if (dirs.empty()) {
    MESSAGE("skipped: no golden.json under " RUNAHEAD_FIXTURES "/models");
    return;
  }
  for (const fs::path& dir : dirs) {
    CAPTURE(dir.filename().string());
    Fixture f = open(dir);
    check(f);
  }
}

}  // namespace

TEST_CASE("golden: greedy continuations match transformers token for token") {
  for_each_fixture([](Fixture& f) {
    for (const json& c : f.golden["greedy"]) {
      Generator generator(*f.backend, eos_of(f));
      const auto prompt = c["prompt"].get<std::vector<int32_t>>();
      CAPTURE(c["prompt"].dump());
      CHECK(generate(generator, prompt, c["max_new_tokens"]) == c["tokens"].get<std::vector<int32_t>>());
    }
  });
}

TEST_CASE("golden: top-8 logits match transformers within tolerance") {
  for_each_fixture([](Fixture& f) {
    const double tolerance = f.golden["tolerance"]["logit_abs"];
    const size_t vocab = static_cast<size_t>(f.weights->config.vocab_size);
    for (const json& c : f.golden["logits"]) {
      const auto prompt = c["prompt"].get<std::vector<int32_t>>();
      const std::vector<float> logits = all_logits(*f.backend, prompt);
      for (size_t i = 0; i < c["positions"].size(); ++i) {
        const size_t position = c["positions"][i];
        CAPTURE(position);
        const float* row = logits.data() + position * vocab;
        double worst = 0;
        for (const json& pair : c["top"][i]) {
          const int id = pair[0];
          worst = std::max(worst, std::abs(row[id] - pair[1].get<double>()));
        }
        CHECK(worst <= tolerance);
        // Nothing outside the golden top-8 may outrank its best by more than the tolerance.
        const float best = *std::max_element(row, row + vocab);
        CHECK(best <= c["top"][i][0][1].get<double>() + tolerance);
      }
    }
  });
}

TEST_CASE("golden: prefill then decode gives the logits of one long prefill") {
  for_each_fixture([](Fixture& f) {
    const double tolerance = f.golden["tolerance"]["logit_abs"];
    const size_t vocab = static_cast<size_t>(f.weights->config.vocab_size);
    const auto prompt = f.golden["logits"][0]["prompt"].get<std::vector<int32_t>>();
    const std::vector<float> reference = all_logits(*f.backend, prompt);
    const size_t split = prompt.size() / 2;
    f.backend->truncate(0);
    std::vector<float> logits;
    f.backend->forward(std::span(prompt).first(split), 1, logits);
    double worst = 0;
    for (size_t p = split; p < prompt.size(); ++p) {
      f.backend->forward(std::span(prompt).subspan(p, 1), 1, logits);
      for (size_t v = 0; v < vocab; ++v) worst = std::max(worst, double(std::abs(logits[v] - reference[p * vocab + v])));
    }
    CHECK(worst <= tolerance);
  });
}

TEST_CASE("golden: rollback, prefix reuse and chunked prefill give the golden tokens") {
  for_each_fixture([](Fixture& f) {
    const json& c = f.golden["greedy"][0];
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto golden = c["tokens"].get<std::vector<int32_t>>();
    REQUIRE(golden.size() > 12);
    Generator generator(*f.backend, eos_of(f));
    CHECK(generate(generator, prompt, c["max_new_tokens"]) == golden);

    // Roll back into the output and decode again.
    generator.rollback(static_cast<int>(prompt.size()) + 5);
    GenerateStats stats;
    CHECK(generate(generator, prompt, c["max_new_tokens"], &stats) == golden);
    CHECK(stats.reused_tokens == static_cast<int>(prompt.size()) - 1);

    // The prompt extended by the first ten golden tokens: reused, and the greedy
    // continuation is the rest of the golden one.
    std::vector<int32_t> extended = prompt;
    extended.insert(extended.end(), golden.begin(), golden.begin() + 10);
    const std::vector<int32_t> rest(golden.begin() + 10, golden.end());
    CHECK(generate(generator, extended, static_cast<int>(rest.size()), &stats) == rest);
    CHECK(stats.reused_tokens == static_cast<int>(extended.size()) - 1);

    // The same from a cold cache, prefilled five tokens at a time.
    Generator chunked(*f.backend, eos_of(f, 5));
    CHECK(generate(chunked, extended, static_cast<int>(rest.size()), &stats) == rest);
    CHECK(stats.reused_tokens == 0);
  });
}
