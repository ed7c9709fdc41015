// Speculation where every draft is wrong, against speculation off (issue 19: `auto` is never
// slower than `off`; target <= 1.02x). A drafter that proposes random tokens, confidently and on
// every step (as lookup does on a confident match), runs through the adaptive scheduler with the
// cost table timed at load; its gate should shut it after a few steps so that the steps are plain
// ones. The prompts are real FIM tasks (node test/bench/speculation.mjs --prompts-out FILE);
// each one runs with every variant in turn, in an order that rotates, round after round, so a
// machine that gets busier slows all alike. Speculation off runs twice, on two backends: how far
// apart those two are is the noise of the machine. A benchmark: it reports, never fails on speed.
//
//   speculation-gate-bench --prompts FILE [--model DIR] [--rounds 3] [--max-tokens 64] [--threads 0]
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/weights.h"
#include "runtime/backend.h"
#include "runtime/generator.h"
#include "runtime/scheduler.h"

using namespace runahead;

namespace {

// Random tokens, with the confidence of a long lookup match: each is right about once in a vocabulary.
class WrongDrafter final : public Drafter {
 public:
  explicit WrongDrafter(int vocab) : vocab_(vocab) {}
  std::string name() const override { return "wrong"; }
  bool drafts_for_free() const override { return true; }
  Draft propose(std::span<const int32_t>, int k, Sampler&) override {
    Draft d;
    d.confidence = 0.9f;
    for (int i = 0; i < k; ++i) d.tokens.push_back(int32_t(rng_() % uint32_t(vocab_)));
    return d;
  }

 private:
  int vocab_;
  std::mt19937 rng_{19};
};

struct Totals {
  double ms = 0;
  int tokens = 0, steps = 0, verifying = 0, drafted = 0, accepted = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model = "engine/models/runahead-coder", prompts_file;  // run from the repository root
  int rounds = 3, max_tokens = 64, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    else if (a == "--prompts") prompts_file = argv[i + 1];
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--max-tokens") max_tokens = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
  }
  std::ifstream in(prompts_file);
  if (prompts_file.empty() || !in) {
    std::fprintf(stderr, "usage: speculation-gate-bench --prompts FILE (node test/bench/speculation.mjs --prompts-out FILE) [--model DIR] [--rounds 3] [--max-tokens 64] [--threads 0]\n");
    return 2;
  }
  const auto prompts = nlohmann::json::parse(in).get<std::vector<std::vector<int32_t>>>();
  const auto weights = std::make_shared<const ModelWeights>(load_model(model));
  const BackendEntry* cpu = find_backend("cpu");
  const BackendOptions options{threads, 0};

  auto off_backend = cpu->make(weights, options), off2_backend = cpu->make(weights, options);
  Generator off(*off_backend, GeneratorOptions{.eos_ids = weights->config.eos_token_ids});
  Generator off2(*off2_backend, GeneratorOptions{.eos_ids = weights->config.eos_token_ids});
  auto wrong_backend = cpu->make(weights, options);
  std::vector<std::unique_ptr<Drafter>> drafters;
  drafters.push_back(std::make_unique<WrongDrafter>(weights->config.vocab_size));
  SpeculationOptions spec_options;
  spec_options.mode = "wrong";
  Speculator speculator(*wrong_backend, std::move(drafters), spec_options, measure_costs(*wrong_backend, spec_options.max_draft + 1));
  Generator wrong(*wrong_backend, GeneratorOptions{.eos_ids = weights->config.eos_token_ids, .speculator = &speculator});
  std::printf("model %s; %zu prompts; max_tokens %d; greedy; cost table %s\n", model.c_str(), prompts.size(), max_tokens,
              speculator.report()["cost"]["ratio"].dump().c_str());

  const std::atomic<bool> never{false};
  const auto add = [&](Generator& g, const std::vector<int32_t>& prompt, Totals& t) {
    GenerateRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    const GenerateResult res = g.generate(r, [](std::span<const int32_t>, std::span<const double>) {}, never);
    const int produced = int(std::lround(res.stats.accepted_per_step * res.stats.steps));
    t.ms += res.stats.decode_ms_per_token * produced;
    t.tokens += produced;
    t.steps += res.stats.steps;
    t.verifying += res.stats.speculation.steps;
    t.drafted += res.stats.speculation.drafted;
    t.accepted += res.stats.speculation.accepted;
  };
  Generator* variants[3] = {&off, &off2, &wrong};
  std::vector<double> ratios, noise;
  for (int round = 0; round < rounds; ++round) {
    Totals t[3];
    for (size_t p = 0; p < prompts.size(); ++p)
      for (size_t j = 0; j < 3; ++j) {
        const size_t v = (p + j) % 3;
        add(*variants[v], prompts[p], t[v]);
      }
    const double off_ms = (t[0].ms + t[1].ms) / (t[0].tokens + t[1].tokens), wrong_ms = t[2].ms / t[2].tokens;
    const Totals& b = t[2];
    ratios.push_back(wrong_ms / off_ms);
    noise.push_back((t[1].ms / t[1].tokens) / (t[0].ms / t[0].tokens));
    std::printf("round %d: off %.3f ms/token (its two runs %.3fx apart); wrong drafts %.3f ms/token (%.3fx off), "
                "%.3f tokens/step, %d of %d steps verified a draft, %d drafted, %d accepted\n",
                round + 1, off_ms, noise.back(), wrong_ms, ratios.back(), double(b.tokens) / b.steps, b.verifying,
                b.steps, b.drafted, b.accepted);
    std::fflush(stdout);
  }
  std::sort(ratios.begin(), ratios.end());
  std::sort(noise.begin(), noise.end());
  std::printf("median over %d rounds: wrong drafts %.3fx the ms/token of off (target <= 1.02); off against itself %.3fx\n",
              rounds, ratios[ratios.size() / 2], noise[noise.size() / 2]);
  return 0;
}
