// Issue 18, the protocol's hard limits: unknown keys refused by name, a bounded queue
// (queue_full), a cancel that crosses its generation's done ignored, prompts that cannot fit
// refused before they queue, and non-finite logits ending a request with numeric_error.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "engine_process.h"
#include "fake_backend.h"
#include "model_writer.h"
#include "protocol/requests.h"
#include "protocol/server.h"

using namespace runahead;
using namespace runahead::test;
using runahead::testing::EngineProcess;

namespace {

RequestError request_error(const std::string& line) {
  try {
    parse_request(line);
  } catch (const RequestError& e) {
    return e;
  }
  FAIL("expected a RequestError for " << line);
  return RequestError(EngineError("", ""), nullptr);
}

// Loads a model folder; returns the loaded message.
json load(EngineProcess& engine, const fs::path& dir, const json& options = json::object()) {
  engine.send(json{{"type", "load"}, {"id", "l"}, {"model", dir.string()}, {"options", options}});
  const auto m = engine.read_until([](const json& m) { return m["type"] != "load_progress"; });
  REQUIRE(m);
  REQUIRE_MESSAGE((*m)["type"] == "loaded", m->dump());
  return *m;
}

json generate(const std::string& id, std::vector<int> prompt, int max_tokens) {
  return {{"type", "generate"}, {"id", id}, {"prompt", prompt}, {"params", {{"max_tokens", max_tokens}}}};
}

}  // namespace

TEST_CASE("protocol limits: a model or draft path with a NUL byte is bad_request naming the field") {
  RequestError e = request_error(R"({"type":"load","id":1,"model":"/tmp/m\u0000/../etc"})");
  CHECK(e.code == "bad_request");
  CHECK(e.field == "model");
  CHECK(std::string(e.what()).find("NUL") != std::string::npos);
  e = request_error(R"({"type":"load","id":1,"model":"/tmp/m","options":{"draft_model":"d\u0000"}})");
  CHECK(e.field == "options.draft_model");
}

TEST_CASE("protocol limits: unknown keys in options, params or the request are bad_request naming the key") {
  RequestError e = request_error(R"({"type":"load","id":1,"model":"m","options":{"speculaton":"off"}})");
  CHECK(e.code == "bad_request");
  CHECK(e.field == "options.speculaton");
  CHECK(e.id == 1);
  CHECK(std::string(e.what()).find("unknown option; known: backend, threads, context_length") != std::string::npos);

  e = request_error(R"({"type":"generate","id":"g","prompt":[1],"params":{"max_token":3}})");
  CHECK(e.field == "params.max_token");
  e = request_error(R"({"type":"generate","id":"g","prompt":[1],"parms":{}})");
  CHECK(e.field == "parms");
  e = request_error(R"({"type":"cancel","id":"g","force":true})");
  CHECK(e.field == "force");
  CHECK_NOTHROW(parse_request(R"({"type":"load","id":1,"model":"m","options":{"backend":"cpu","threads":0,)"
                              R"("context_length":0,"speculation":"off","max_draft":8,"adaptive_depth":true}})"));
}

TEST_CASE("protocol limits: a cancel for a generation that just ended is ignored, one never seen is unknown_request") {
  TempDir dir;
  const json config = tiny_config();
  write_model(dir.path, config, decoder_tensors(config, "BF16"));
  EngineProcess engine;
  load(engine, dir.path, {{"speculation", "off"}});
  engine.send(generate("g1", {3, 4}, 2));
  REQUIRE(engine.read_until([](const json& m) { return m["type"] == "done" || m["type"] == "error"; }));
  engine.send(json{{"type", "cancel"}, {"id", "g1"}});
  engine.send(json{{"type", "ping"}, {"id", "p"}});
  const auto next = engine.read();
  REQUIRE(next);
  CHECK_MESSAGE((*next)["type"] == "pong", next->dump());  // nothing about g1 came first

  engine.send(json{{"type", "cancel"}, {"id", "never"}});
  const auto error = engine.read();
  REQUIRE(error);
  CHECK((*error)["code"] == "unknown_request");
}

TEST_CASE("protocol limits: a prompt longer than the loaded context is refused before it queues") {
  TempDir dir;
  const json config = tiny_config();  // max_position_embeddings 128
  write_model(dir.path, config, decoder_tensors(config, "BF16"));
  EngineProcess engine;
  load(engine, dir.path, {{"speculation", "off"}});
  engine.send(generate("long", std::vector<int>(200, 3), 1));
  const auto m = engine.read();
  REQUIRE(m);
  CHECK((*m)["code"] == "context_overflow");
  CHECK((*m)["id"] == "long");
}

TEST_CASE("protocol limits: more than 8 queued generations is queue_full, at once, the queued ones still finish") {
  TempDir dir;
  json config = tiny_config();
  // Large enough that the first generation still runs while the reader takes the other lines.
  config["hidden_size"] = 512;
  config["intermediate_size"] = 1024;
  config["num_attention_heads"] = 8;
  config["num_key_value_heads"] = 4;
  config["vocab_size"] = 1024;
  config["max_position_embeddings"] = 4096;
  config.erase("eos_token_id");
  write_model(dir.path, config, decoder_tensors(config, "BF16"));
  EngineProcess engine;
  load(engine, dir.path, {{"speculation", "off"}, {"threads", 1}});

  engine.send(generate("running", {3, 4}, 4000));
  REQUIRE(engine.read_until([](const json& m) { return m["type"] == "tokens"; }));  // it left the queue
  std::string lines;
  for (size_t i = 0; i < kMaxQueuedGenerations + 1; ++i)
    lines += generate("q" + std::to_string(i), {3, 4}, 1).dump() + "\n";
  REQUIRE(engine.send_raw(lines));
  const auto refused = engine.read_until([](const json& m) { return m["type"] == "error"; });
  REQUIRE(refused);
  CHECK((*refused)["code"] == "queue_full");
  CHECK((*refused)["id"] == "q" + std::to_string(kMaxQueuedGenerations));

  engine.send(json{{"type", "cancel"}, {"id", "running"}});
  int done = 0;
  while (done < int(kMaxQueuedGenerations) + 1) {
    const auto m = engine.read_until([](const json& m) { return m["type"] == "done" || m["type"] == "error"; });
    REQUIRE(m);
    CHECK_MESSAGE((*m)["type"] == "done", m->dump());
    ++done;
  }
}

TEST_CASE("protocol limits: non-finite logits end the request with numeric_error, not an empty done") {
  runahead::testing::FakeBackend backend(16, 64, [](std::span<const int32_t>, std::span<float> row) {
    std::fill(row.begin(), row.end(), std::numeric_limits<float>::quiet_NaN());
  });
  Generator generator(backend, GeneratorOptions{});
  GenerateRequest request;
  request.prompt = {1, 2};
  const std::atomic<bool> cancel{false};
  const EngineError e = error_of([&] { generator.generate(request, [](auto, auto) {}, cancel); });
  CHECK(e.code == "numeric_error");
}
