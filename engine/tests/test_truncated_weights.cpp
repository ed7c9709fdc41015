// Issue 18, a weight file truncated while mapped (a model re-downloaded in place): the engine
// must not die of SIGBUS; the request ends with a model_error naming the file and the server
// unloads the model. The CPU backend copies the matrices out of the mapping at load where
// memory allows (make_cpu_backend), and then a cut file changes nothing it reads; these cases
// read the mapping (RUNAHEAD_CPU_COPY_WEIGHTS=0, as where memory is short), and the first also
// checks that with the copy the same cut leaves generation whole.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>

#include "engine_process.h"
#include "model/weight_mappings.h"
#include "model/weights.h"
#include "model_writer.h"
#include "runtime/backend.h"
#include "runtime/generator.h"

using namespace runahead;
using namespace runahead::test;
using runahead::testing::EngineProcess;

TEST_CASE("truncated weights: a forward over a cut mapping reads zeros, and generate names the file") {
  TempDir dir;
  const json config = tiny_config();
  write_model(dir.path, config, decoder_tensors(config, "BF16"));
  const fs::path file = dir.path / "model.safetensors";
  auto weights = std::make_shared<const ModelWeights>(load_model(dir.path));
  auto copied = make_cpu_backend(weights, BackendOptions{1, 0});
  REQUIRE(copied->describe()["optimizations"]["matrices_copied_from_file"] == true);
  setenv("RUNAHEAD_CPU_COPY_WEIGHTS", "0", 1);
  auto backend = make_cpu_backend(weights, BackendOptions{1, 0});
  unsetenv("RUNAHEAD_CPU_COPY_WEIGHTS");
  Generator generator(*backend, GeneratorOptions{});
  REQUIRE(::truncate(file.c_str(), 0) == 0);

  GenerateRequest request;
  request.prompt = {3, 4, 5};
  request.max_tokens = 4;
  const std::atomic<bool> cancel{false};
  {  // the copy: every token, from memory
    Generator whole(*copied, GeneratorOptions{});
    int tokens = 0;
    whole.generate(request, [&](auto, auto) { ++tokens; }, cancel);
    CHECK(tokens == 4);
  }
  const EngineError e = error_of([&] { generator.generate(request, [](auto, auto) {}, cancel); });
  CHECK(e.code == "model_error");
  CHECK(e.file == file.string());
  CHECK(std::string(e.what()).find("changed while loaded") != std::string::npos);

  // Releasing the model forgets the fault: the next model starts clean.
  generator.rollback(0);
  backend.reset();
  copied.reset();
  weights.reset();
  CHECK_NOTHROW(check_mappings_intact());
}

TEST_CASE("truncated weights: over the protocol the request ends with model_error, the model is unloaded, the engine lives") {
  TempDir dir;
  const json config = tiny_config();
  write_model(dir.path, config, decoder_tensors(config, "BF16"));
  setenv("RUNAHEAD_CPU_COPY_WEIGHTS", "0", 1);  // the engine's CPU backend reads the mapped file at every step
  EngineProcess engine;
  unsetenv("RUNAHEAD_CPU_COPY_WEIGHTS");
  // CUDA copies the weights to the device at load.
  engine.send(json{{"type", "load"}, {"id", "l"}, {"model", dir.path.string()}, {"options", {{"backend", "cpu"}}}});
  const auto loaded = engine.read_until([](const json& m) { return m["type"] != "load_progress"; });
  REQUIRE(loaded);
  REQUIRE((*loaded)["type"] == "loaded");
  REQUIRE(::truncate((dir.path / "model.safetensors").c_str(), 0) == 0);

  engine.send(json{{"type", "generate"}, {"id", "g"}, {"prompt", {3, 4, 5}}, {"params", {{"max_tokens", 4}}}});
  const auto error = engine.read_until([](const json& m) { return m["type"] == "error" || m["type"] == "done"; });
  REQUIRE(error);
  CHECK((*error)["type"] == "error");
  CHECK((*error)["code"] == "model_error");
  CHECK((*error)["file"] == (dir.path / "model.safetensors").string());

  engine.send(json{{"type", "stats"}});
  const auto stats = engine.read_until([](const json& m) { return m["type"] == "stats"; });
  REQUIRE(stats);
  CHECK((*stats)["loaded"] == false);
}
