// The CUDA backend's step loop as the engine runs it (Session, Generator, Speculator): what
// the start-up self-check finds, and how often the host waits for the device per step.
#ifdef RUNAHEAD_CUDA
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "code_prompts.h"
#include "cuda_test_util.h"
#include "runtime/session.h"

using namespace runahead;
using namespace runahead::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kEmbedded = fs::path(RUNAHEAD_FIXTURES) / ".." / ".." / "engine" / "models" / "runahead-coder";

const nlohmann::json& check_named(const Session& s, const std::string& name) {
  for (const auto& c : s.report()["checks"])
    if (c["name"] == name) return c;
  FAIL("no check named " << name);
  static const nlohmann::json none;
  return none;
}

std::unique_ptr<Session> open_cuda(const std::string& speculation, std::vector<std::string> require = {},
                                   int max_draft = 8) {
  LoadOptions o;
  o.backend = "cuda";
  o.speculation.mode = speculation;
  o.speculation.max_draft = max_draft;
  o.require = std::move(require);
  return Session::open(kEmbedded.string(), o);
}

// A prompt whose continuation repeats what came before (real code, twice), so lookup drafts.
std::vector<int32_t> repeating_prompt() {
  std::vector<int32_t> p;
  for (int round = 0; round < 2; ++round)
    for (const auto& code : test::code_prompts()) p.insert(p.end(), code.begin(), code.end());
  return p;
}

struct Waited {
  HostWaits waits;
  GenerateStats stats;
  std::vector<int32_t> tokens;
};

Waited generate(Session& s, int max_tokens) {
  GenerateRequest r;
  r.prompt = repeating_prompt();
  r.max_tokens = max_tokens;
  const std::atomic<bool> cancel{false};
  std::vector<int32_t> tokens;
  const HostWaits before = s.backend().host_waits();
  const GenerateResult result = s.generator().generate(
      r, [&](std::span<const int32_t> t, auto) { tokens.insert(tokens.end(), t.begin(), t.end()); }, cancel);
  const HostWaits after = s.backend().host_waits();
  return {{after.all - before.all, after.drained - before.drained}, result.stats, tokens};
}

}  // namespace

TEST_CASE("cuda steps: the self-check finds the step graphs, PDL edges, the persistent step and device verify") {
  if (!have_device()) return;
  const auto s = open_cuda("auto");
  for (const char* name : {"step_graphs", "pdl", "device_greedy_verify", "device_sampling", "lookup", "draft"}) {
    CAPTURE(name);
    CHECK(check_named(*s, name)["active"] == true);
  }
  MESSAGE("pdl: " << check_named(*s, "pdl")["why"].get<std::string>());
  MESSAGE("persistent_step: " << check_named(*s, "persistent_step")["why"].get<std::string>());
  MESSAGE("mtp: " << check_named(*s, "mtp")["why"].get<std::string>());
  CHECK(check_named(*s, "pdl")["why"].get<std::string>().find("programmatic") != std::string::npos);
  // Off unless asked for; asked for, on.
  CHECK(check_named(*s, "run_ahead")["active"] == false);
  CHECK(check_named(*s, "fp8_lm_head")["active"] == false);
  const auto asked = open_cuda("off", {"run_ahead", "persistent_step", "pdl", "step_graphs"});
  CHECK(check_named(*asked, "run_ahead")["active"] == true);
  CHECK(check_named(*asked, "persistent_step")["active"] == true);
  for (const auto& w : asked->report()["warnings"]) CHECK(w.get<std::string>().rfind("options.require", 0) != 0);
  // The MTP head does not run on CUDA: required, the load says so by name.
  try {
    open_cuda("auto", {"mtp"});
    FAIL("an MTP head required on CUDA loaded");
  } catch (const EngineError& e) {
    CHECK(e.code == "bad_request");
    CHECK(std::string(e.what()).find("options.require: mtp cannot be active") == 0);
  }
}

TEST_CASE("cuda steps: a plain decode step never leaves the device idle waiting for the host and a speculative step at most once") {
  if (!have_device()) return;
  const int tokens = 200;
  long long per_request = 0;  // drained waits of a request that are not per step: the prefill, the loop's start and end
  std::vector<int32_t> plain;   // the greedy tokens without speculation
  {
    const auto s = open_cuda("off");
    generate(*s, 8);  // graphs captured, the cache warm
    const Waited shorter = generate(*s, tokens / 2);
    const Waited w = generate(*s, tokens);
    MESSAGE("speculation off: " << w.stats.steps << " steps, " << w.waits.all << " waits, " << w.waits.drained
                                << " with the device drained (" << shorter.waits.drained << " for " << shorter.stats.steps
                                << " steps)");
    REQUIRE(w.stats.steps >= tokens - 1);
    // Each step is read while the next one runs: twice the steps, no more drained waits (the
    // loop's last wait drains or not as the stop falls, so one either way).
    CHECK(w.waits.drained <= shorter.waits.drained + 1);
    CHECK(w.waits.all >= w.stats.steps);
    per_request = w.waits.drained;
    plain = w.tokens;
  }
  // Lossless: the widest verify steps (16 drafts) give the same greedy tokens.
  for (const int max_draft : {8, 16}) {
    CAPTURE(max_draft);
    const auto s = open_cuda("lookup", {}, max_draft);
    generate(*s, 8);
    const Waited w = generate(*s, tokens);
    MESSAGE("speculation lookup: " << w.stats.steps << " steps (" << w.stats.accepted_per_step
                                   << " tokens a step), " << w.waits.all << " waits, " << w.waits.drained
                                   << " with the device drained");
    REQUIRE(w.stats.steps > 0);
    CHECK(w.stats.accepted_per_step > 1.5);
    // Each verdict is read before the next draft is chosen: one drained wait per step, no more.
    CHECK(w.waits.drained <= w.stats.steps + per_request);
    CHECK(w.tokens == plain);
  }
}
#endif
