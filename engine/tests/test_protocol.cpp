// PROTOCOL.md v1 as a client sees it: the real engine over pipes, every bad input
// answered with a structured error, and the engine still alive after each.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine_process.h"
#ifdef RUNAHEAD_CUDA
#include "cuda/cuda_backend.h"
#endif

using nlohmann::json;
using runahead::testing::EngineProcess;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(RUNAHEAD_FIXTURES) / "models";

// The engine answers a ping with its id: it is alive and its reader is not stuck.
void check_alive(EngineProcess& engine) {
  static int next = 1000;
  const int id = ++next;
  REQUIRE(engine.send(json{{"type", "ping"}, {"id", id}}));
  const auto pong = engine.read_until([&](const json& m) { return m.value("type", "") == "pong"; });
  REQUIRE(pong);
  CHECK((*pong)["id"] == id);
}

json next_error(EngineProcess& engine) {
  const auto m = engine.read_until([](const json& m) { return m.value("type", "") == "error"; });
  REQUIRE(m);
  return *m;
}

json load_request(const std::string& id, const fs::path& model) {
  return {{"type", "load"}, {"id", id}, {"model", model.string()}};
}

// The first fixture model, or empty when fixtures are absent.
fs::path fixture_model() {
  const fs::path m = kModels / "qwen2-untied-f16";
  return fs::exists(m / "config.json") ? m : fs::path();
}

json load_fixture(EngineProcess& engine) {
  engine.send(load_request("l", fixture_model()));
  const auto loaded = engine.read_until([](const json& m) { return m["type"] != "load_progress"; });
  REQUIRE(loaded);
  REQUIRE((*loaded)["type"] == "loaded");
  return *loaded;
}

struct Generation {
  std::vector<int> tokens;
  json done;
};

Generation collect(EngineProcess& engine, const json& id) {
  Generation g;
  for (;;) {
    const auto m = engine.read();
    REQUIRE(m);
    if ((*m)["type"] == "tokens" && (*m)["id"] == id) {
      CHECK((*m)["ms"].size() == (*m)["tokens"].size());
      for (int t : (*m)["tokens"]) g.tokens.push_back(t);
    } else if ((*m)["type"] == "done" && (*m)["id"] == id) {
      g.done = *m;
      return g;
    } else {
      FAIL("unexpected message " << m->dump());
    }
  }
}

}  // namespace

TEST_CASE("protocol: hello reports version 1 and the line limit") {
  EngineProcess engine;
  engine.send_line(R"({"type":"hello"})");
  const auto hello = engine.read();
  REQUIRE(hello);
  CHECK((*hello)["type"] == "hello");
  CHECK((*hello)["protocol"] == 1);
  CHECK((*hello)["capabilities"]["max_line_bytes"] == 4 * 1024 * 1024);
  const json backends = (*hello)["capabilities"]["backends"];
  CHECK(std::find(backends.begin(), backends.end(), "cpu") != backends.end());
}

TEST_CASE("protocol: generate before load is not_loaded, stats say not loaded") {
  EngineProcess engine;
  engine.send_line(R"({"type":"generate","id":"g1","prompt":[1,2,3]})");
  const json e = next_error(engine);
  CHECK(e["code"] == "not_loaded");
  CHECK(e["id"] == "g1");
  engine.send_line(R"({"type":"stats"})");
  const auto stats = engine.read();
  REQUIRE(stats);
  CHECK((*stats)["loaded"] == false);
  CHECK((*stats)["rss_bytes"].get<int64_t>() > 0);
  check_alive(engine);
}

TEST_CASE("protocol: cancel of an unknown id is unknown_request") {
  EngineProcess engine;
  engine.send_line(R"({"type":"cancel","id":"nope"})");
  const json e = next_error(engine);
  CHECK(e["code"] == "unknown_request");
  CHECK(e["id"] == "nope");
  check_alive(engine);
}

TEST_CASE("protocol: malformed JSON is bad_json and the engine goes on") {
  EngineProcess engine;
  for (const char* line : {"{", "not json", R"({"type":"ping",})", "[1,2", "\xff\xfe{}"}) {
    engine.send_line(line);
    CHECK(next_error(engine)["code"] == "bad_json");
    check_alive(engine);
  }
}

TEST_CASE("protocol: fields of the wrong type are bad_request naming the field") {
  EngineProcess engine;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"generate","id":1,"prompt":"def f():"})", "prompt"},
      {R"({"type":"generate","id":1,"prompt":[1,2],"params":{"max_tokens":"64"}})", "params.max_tokens"},
      {R"({"type":"generate","id":1,"prompt":[1,-2]})", "prompt[1]"},
      {R"({"type":"generate","id":1,"prompt":[1,2.5]})", "prompt[1]"},
      {R"({"type":"generate","id":1,"prompt":[1],"params":{"temperature":-1}})", "params.temperature"},
      {R"({"type":"generate","id":1,"prompt":[1],"params":{"top_p":0}})", "params.top_p"},
      {R"({"type":"generate","id":1,"prompt":[1],"params":{"stop":[true]}})", "params.stop[0]"},
      {R"({"type":"generate","id":1,"prompt":[1],"params":[]})", "params"},
      {R"({"type":"generate","prompt":[1]})", "id"},
      {R"({"type":"generate","id":{},"prompt":[1]})", "id"},
      {R"({"type":"load","id":1,"model":7})", "model"},
      {R"({"type":"load","id":1,"model":"x","options":{"threads":"2"}})", "options.threads"},
      {R"({"type":"load","id":1,"model":"x","options":{"backend":"tpu"}})", "options.backend"},
      {R"({"type":"load","id":1,"model":"x","options":{"speculation":"magic"}})", "options.speculation"},
      {R"({"type":"load","id":1,"model":"x","options":{"max_draft":0}})", "options.max_draft"},
      {R"({"type":"load","id":1,"model":"x","options":{"weights":"q4_0"}})", "options.weights"},
      {R"({"type":"load","id":1,"model":"x","options":{"lm_head":"int4"}})", "options.lm_head"},
      {R"({"type":"load","id":1,"model":"x","options":{"newline_tokens":[1,"x"]}})", "options.newline_tokens[1]"},
      {R"({"type":"launch","id":1})", "type"},
      {R"({"id":1})", "type"},
      {R"({"type":5})", "type"},
  };
  for (const auto& [line, field] : cases) {
    CAPTURE(line);
    engine.send_line(line);
    const json e = next_error(engine);
    CHECK(e["code"] == "bad_request");
    CHECK(e.value("field", "") == field);
    CHECK(e.contains("expected"));
  }
  engine.send_line("[1,2,3]");
  CHECK(next_error(engine)["code"] == "bad_request");
  check_alive(engine);
}

TEST_CASE("protocol: a 10 MB line is skipped with line_too_long") {
  EngineProcess engine;
  std::string huge = R"({"type":"generate","id":"big","prompt":[)";
  while (huge.size() < 10 * 1024 * 1024) huge += "1,";
  huge += "1]}";
  REQUIRE(engine.send_line(huge));
  const json e = next_error(engine);
  CHECK(e["code"] == "line_too_long");
  CHECK(!e.contains("id"));
  check_alive(engine);
}

TEST_CASE("protocol: a model folder that cannot load is model_error with file and field") {
  const fs::path dir = fs::temp_directory_path() / ("runahead-protocol-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "empty");
  fs::create_directories(dir / "gpt2");
  std::ofstream(dir / "gpt2" / "config.json")
      << R"({"architectures":["GPT2LMHeadModel"],"vocab_size":512,"hidden_size":64,"num_hidden_layers":2,)"
         R"("num_attention_heads":4,"intermediate_size":128})";

  EngineProcess engine;
  engine.send(load_request("missing", dir / "empty"));
  json e = next_error(engine);
  CHECK(e["code"] == "model_error");
  CHECK(e["id"] == "missing");
  CHECK(e["file"] == (dir / "empty" / "config.json").string());
  check_alive(engine);

  engine.send(load_request("arch", dir / "gpt2"));
  e = next_error(engine);
  CHECK(e["code"] == "model_error");
  CHECK(e["file"] == (dir / "gpt2" / "config.json").string());
  CHECK(e["field"] == "architectures");
  CHECK(e.contains("expected"));
  check_alive(engine);

  engine.send_line(R"({"type":"hello"})");
  const auto hello = engine.read_until([](const json& m) { return m["type"] == "hello"; });
  REQUIRE(hello);
  const json backends = (*hello)["capabilities"]["backends"];
  if (std::find(backends.begin(), backends.end(), "cuda") == backends.end()) {
    engine.send_line(R"({"type":"load","id":"c","model":"random:qwen2.5-coder-0.5b","options":{"backend":"cuda"}})");
    e = next_error(engine);
    CHECK(e["code"] == "bad_request");
    CHECK(e["field"] == "options.backend");
    CHECK(e["message"].get<std::string>().find("no CUDA backend") != std::string::npos);
    check_alive(engine);
  }
  fs::remove_all(dir);
}

TEST_CASE("protocol: shutdown says bye and exits 0, so does end of input") {
  {
    EngineProcess engine;
    engine.send_line(R"({"type":"shutdown"})");
    const auto bye = engine.read();
    REQUIRE(bye);
    CHECK((*bye)["type"] == "bye");
    CHECK(engine.wait_exit(10) == 0);
  }
  {
    EngineProcess engine;
    engine.close_stdin();
    const auto bye = engine.read();
    REQUIRE(bye);
    CHECK((*bye)["type"] == "bye");
    CHECK(engine.wait_exit(10) == 0);
  }
}

TEST_CASE("protocol: load, generate, prefix reuse, cancel, busy, stats, unload on a fixture model") {
  if (fixture_model().empty()) {
    MESSAGE("skipped: no fixture model under " << kModels.string());
    return;
  }
  EngineProcess engine;

  // Two loads in one write: the second arrives while the first is queued or running.
  engine.send_raw(load_request("l1", fixture_model()).dump() + "\n" + load_request("l2", fixture_model()).dump() + "\n");
  std::vector<json> before;
  const auto busy = engine.read_until([](const json& m) { return m["type"] == "error"; }, &before);
  REQUIRE(busy);
  CHECK((*busy)["code"] == "busy");
  CHECK((*busy)["id"] == "l2");
  std::vector<json> progress;
  auto loaded = engine.read_until([](const json& m) { return m["type"] != "load_progress"; }, &progress);
  REQUIRE(loaded);
  REQUIRE((*loaded)["type"] == "loaded");
  progress.insert(progress.begin(), before.begin(), before.end());
  CHECK(!progress.empty());
  const json report = (*loaded)["report"];
  CHECK(report["architecture"] == "Qwen2ForCausalLM");
  CHECK(report["vocab_size"] == 512);
#ifdef RUNAHEAD_CUDA
  CHECK(report["backend"] == (runahead::cuda_available() ? "cuda" : "cpu"));  // auto: CUDA where a device is usable
#else
  CHECK(report["backend"] == "cpu");
#endif
  CHECK(report["optimizations"]["prefix_reuse"] == true);

  // The golden greedy continuation, through the protocol.
  std::ifstream golden_file(fixture_model() / "golden.json");
  const json golden = json::parse(golden_file)["greedy"][0];
  engine.send(json{{"type", "generate"},
                   {"id", "g1"},
                   {"prompt", golden["prompt"]},
                   {"params", {{"max_tokens", golden["max_new_tokens"]}}}});
  Generation g = collect(engine, "g1");
  CHECK(g.tokens == golden["tokens"].get<std::vector<int>>());
  CHECK(g.done["stats"]["tokens"] == g.tokens.size());
  CHECK(g.done["stats"]["reused_tokens"] == 0);

  // The same prompt again reuses all of it but its last token and gives the same tokens.
  engine.send(json{{"type", "generate"}, {"id", "g2"}, {"prompt", golden["prompt"]},
                   {"params", {{"max_tokens", golden["max_new_tokens"]}}}});
  Generation again = collect(engine, "g2");
  CHECK(again.tokens == g.tokens);
  CHECK(again.done["stats"]["reused_tokens"] == golden["prompt"].size() - 1);

  // A generation cancelled right after it is sent (queued or running) ends cancelled.
  engine.send_raw(json{{"type", "generate"}, {"id", 77}, {"prompt", {1, 2, 3}}, {"params", {{"max_tokens", 1500}}}}.dump() +
                  "\n" + R"({"type":"cancel","id":77})" + "\n");
  Generation cancelled = collect(engine, 77);
  CHECK(cancelled.done["finish_reason"] == "cancelled");
  CHECK(cancelled.tokens.size() < 1500);

  // A prompt longer than the context.
  engine.send(json{{"type", "generate"}, {"id", "long"}, {"prompt", std::vector<int>(report["context_length"].get<int>() + 1, 5)}});
  json e = next_error(engine);
  CHECK(e["code"] == "context_overflow");
  CHECK(e["id"] == "long");

  engine.send_line(R"({"type":"stats"})");
  const auto stats = engine.read();
  REQUIRE(stats);
  CHECK((*stats)["loaded"] == true);
  CHECK((*stats)["requests"] == 4);  // generate requests received
  CHECK((*stats)["tokens_generated"].get<int>() >= 2 * static_cast<int>(g.tokens.size()));

  engine.send_line(R"({"type":"unload","id":"u"})");
  const auto unloaded = engine.read();
  REQUIRE(unloaded);
  CHECK((*unloaded)["type"] == "unloaded");
  engine.send_line(R"({"type":"generate","id":"after","prompt":[1]})");
  CHECK(next_error(engine)["code"] == "not_loaded");
  check_alive(engine);
}
