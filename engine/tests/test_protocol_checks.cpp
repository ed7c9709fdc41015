// The start-up self-check over the protocol: the load report's `checks` says, for every
// optimisation the backend has and every drafter, whether it is active and why; options.require
// makes an inactive one an error naming it, or with options.fallback a warning.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

#include "engine_process.h"

using nlohmann::json;
using runahead::testing::EngineProcess;
namespace fs = std::filesystem;

namespace {

const fs::path kModel = fs::path(RUNAHEAD_FIXTURES) / "models" / "qwen2-tied-bf16";

json load(EngineProcess& engine, const json& options) {
  engine.send(json{{"type", "load"}, {"id", "l"}, {"model", kModel.string()}, {"options", options}});
  const auto reply = engine.read_until([](const json& m) { return m["type"] != "load_progress"; });
  REQUIRE(reply);
  return *reply;
}

json check_named(const json& loaded, const std::string& name) {
  for (const json& c : loaded["report"]["checks"])
    if (c["name"] == name) return c;
  FAIL("no check named " << name << " in " << loaded["report"]["checks"].dump());
  return {};
}

}  // namespace

TEST_CASE("protocol checks: the load report says of each optimisation and drafter whether it is active, and why") {
  EngineProcess engine;
  const json loaded = load(engine, {{"backend", "cpu"}, {"speculation", "lookup"}});
  REQUIRE(loaded["type"] == "loaded");
  for (const json& c : loaded["report"]["checks"]) {
    CAPTURE(c.dump());
    CHECK(c["active"].is_boolean());
    CHECK(!c["why"].get<std::string>().empty());
    CHECK(c["required"] == false);
  }
  const json simd = check_named(loaded, "simd");
  CHECK(simd["why"].get<std::string>().find(loaded["report"]["optimizations"]["simd"].get<std::string>()) !=
        std::string::npos);
  CHECK(check_named(loaded, "lookup")["active"] == true);
  const json mtp = check_named(loaded, "mtp");
  CHECK(mtp["active"] == false);
  CHECK(mtp["why"] == "options.speculation is lookup");

  const json off = load(engine, {{"backend", "cpu"}, {"speculation", "off"}});
  REQUIRE(off["type"] == "loaded");
  CHECK(check_named(off, "lookup")["active"] == false);
  CHECK(check_named(off, "lookup")["why"] == "options.speculation is off");
}

TEST_CASE("protocol checks: a required optimisation that cannot be active is an error naming it, or with fallback a warning") {
  EngineProcess engine;
  // The CPU backend has no persistent step; a drafter the mode leaves out is not active either.
  for (const auto& [name, why] : {std::pair<std::string, std::string>{"persistent_step", "the cpu backend has no persistent_step"},
                                  {"mtp", "options.speculation is lookup"}}) {
    CAPTURE(name);
    const json reply = load(engine, {{"backend", "cpu"}, {"speculation", "lookup"}, {"require", {name}}});
    REQUIRE(reply["type"] == "error");
    CHECK(reply["code"] == "bad_request");
    CHECK(reply["field"] == "options.require");
    CHECK(reply["message"] == "options.require: " + name + " cannot be active: " + why);
  }
  // With fallback the model loads, and the report and its warnings say what is missing.
  const json degraded = load(engine, {{"backend", "cpu"}, {"speculation", "lookup"},
                                      {"require", {"persistent_step", "lookup"}}, {"fallback", true}});
  REQUIRE(degraded["type"] == "loaded");
  const json persistent = check_named(degraded, "persistent_step");
  CHECK(persistent["active"] == false);
  CHECK(persistent["required"] == true);
  const auto& warnings = degraded["report"]["warnings"];
  CHECK(std::count(warnings.begin(), warnings.end(),
                   "options.require: persistent_step is not active: the cpu backend has no persistent_step") == 1);
  CHECK(check_named(degraded, "lookup")["required"] == true);
  CHECK(check_named(degraded, "lookup")["active"] == true);
  // What it can run loads without a warning.
  const json fine = load(engine, {{"backend", "cpu"}, {"speculation", "lookup"}, {"require", {"lookup"}}});
  REQUIRE(fine["type"] == "loaded");
  CHECK(fine["report"]["warnings"].empty());
}

TEST_CASE("protocol checks: options.require names known optimisations, options.fallback is a boolean") {
  EngineProcess engine;
  engine.send_line(R"({"type":"hello"})");
  const auto hello = engine.read();
  REQUIRE(hello);
  CHECK((*hello)["capabilities"]["require"].size() == 14);
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"require", {"warp_speed"}}}, "options.require"},
      {{{"require", "pdl"}}, "options.require"},
      {{{"require", {1}}}, "options.require"},
      {{{"fallback", "yes"}}, "options.fallback"},
  };
  for (const auto& [options, field] : cases) {
    CAPTURE(options.dump());
    const json reply = load(engine, options);
    REQUIRE(reply["type"] == "error");
    CHECK(reply["code"] == "bad_request");
    CHECK(reply["field"] == field);
  }
  const json unknown = load(engine, {{"require", {"warp_speed"}}});
  CHECK(unknown["message"] == "options.require: unknown optimisation \"warp_speed\"");
  CHECK(unknown["expected"].get<std::string>().find("persistent_step") != std::string::npos);
}
