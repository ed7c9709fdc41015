// Weight formats over the protocol: options.weights "q8_0" and "q4_k_m" quantize at load, a
// .gguf file is a model, and the load report says which formats run.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

#include "code_prompts.h"
#include "engine_process.h"
#include "gguf_model_writer.h"
#include "model_writer.h"
#include "q8_0_writer.h"

using nlohmann::json;
using runahead::testing::EngineProcess;
using namespace runahead::test;

namespace {

const fs::path kModels = fs::path(RUNAHEAD_FIXTURES) / "models";

json load(EngineProcess& engine, const fs::path& model, const json& options) {
  engine.send(json{{"type", "load"}, {"id", "l"}, {"model", model.string()}, {"options", options}});
  std::vector<json> progress;
  const auto loaded = engine.read_until([](const json& m) { return m["type"] != "load_progress"; }, &progress);
  REQUIRE(loaded);
  return *loaded;
}

// The tokens of a greedy generation.
std::vector<int> generate(EngineProcess& engine, const std::vector<int>& prompt = {1, 2, 3, 4, 5}, int max_tokens = 16) {
  engine.send(json{{"type", "generate"}, {"id", "g"}, {"prompt", prompt}, {"params", {{"max_tokens", max_tokens}}}});
  std::vector<int> tokens;
  for (;;) {
    const auto m = engine.read();
    REQUIRE(m);
    if ((*m)["type"] == "tokens")
      for (int t : (*m)["tokens"]) tokens.push_back(t);
    if ((*m)["type"] == "done" || (*m)["type"] == "error") break;
  }
  return tokens;
}

}  // namespace

TEST_CASE("protocol weights: options.weights q8_0 quantizes the matrices at load, a .gguf file loads as a model") {
  EngineProcess engine;
  const json cpu = {{"backend", "cpu"}, {"speculation", "off"}};
  json quantized = cpu;
  quantized["weights"] = "q8_0";
  json loaded = load(engine, kModels / "qwen2-tied-bf16", quantized);
  REQUIRE(loaded["type"] == "loaded");
  CHECK(loaded["report"]["weights"] == "q8_0");
  CHECK(loaded["report"]["dtype"] == "q8_0");
  CHECK(generate(engine).size() == 16);

  loaded = load(engine, kModels / "qwen2-tied-bf16", cpu);
  CHECK(loaded["report"]["weights"] == "bf16");
  const size_t bf16_bytes = loaded["report"]["weight_bytes"];

  TempDir dir;
  const auto weights = runahead::load_model(kModels / "qwen2-tied-bf16");
  write_file(dir.path / "tiny.gguf", gguf_of_model(weights, kGgufQ8_0));
  loaded = load(engine, dir.path / "tiny.gguf", cpu);
  REQUIRE(loaded["type"] == "loaded");
  CHECK(loaded["report"]["weights"] == "q8_0");
  CHECK(loaded["report"]["model"] == (dir.path / "tiny.gguf").string());
  CHECK(size_t(loaded["report"]["weight_bytes"]) < bf16_bytes);
  CHECK(generate(engine).size() == 16);

  // auto speculation on a .gguf: no MTP head, no draft folder, and no error.
  loaded = load(engine, dir.path / "tiny.gguf", {{"backend", "cpu"}});
  REQUIRE(loaded["type"] == "loaded");
  CHECK(loaded["report"]["speculation"]["drafters"].size() == 1);  // lookup
}

// How the default model ships: model.safetensors, mtp.safetensors and draft/ in Q8_0 pairs.
TEST_CASE("protocol weights: a Q8_0 bundle with its MTP head and draft loads, and speculation stays lossless") {
  const fs::path model = fs::path(RUNAHEAD_FIXTURES) / ".." / ".." / "engine" / "models" / "runahead-coder";
  const std::vector<int>& prompt = code_prompts()[0];
  EngineProcess engine;
  json loaded = load(engine, model, {{"backend", "cpu"}, {"speculation", "off"}});
  REQUIRE(loaded["type"] == "loaded");
  CHECK(loaded["report"]["weights"] == "q8_0");
  CHECK(loaded["report"]["newline_tokens"] > 0);
  const std::vector<int> plain = generate(engine, prompt, 48);
  CHECK(plain.size() == 48);

  // options.weights "q8_0" on weights already in Q8_0 keeps them as they are.
  loaded = load(engine, model, {{"backend", "cpu"}, {"speculation", "off"}, {"weights", "q8_0"}});
  REQUIRE(loaded["type"] == "loaded");
  CHECK(loaded["report"]["weights"] == "q8_0");
  CHECK(generate(engine, prompt, 48) == plain);

  loaded = load(engine, model, {{"backend", "cpu"}, {"speculation", "auto"}});
  REQUIRE(loaded["type"] == "loaded");
  std::vector<std::string> drafters;
  for (const json& d : loaded["report"]["speculation"]["drafters"]) drafters.push_back(d["name"]);
  CHECK(drafters == std::vector<std::string>{"lookup", "mtp", "draft"});
  CHECK(generate(engine, prompt, 48) == plain);
}

// fp8 weights run on the CUDA backend only: asked of another backend, the load is refused
// naming the option (never a silent bf16 run), and the engine stays usable.
TEST_CASE("protocol weights: fp8 weights and lm_head are refused on the CPU backend, naming the option") {
  EngineProcess engine;
  const fs::path model = kModels / "qwen2-tied-bf16";
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"backend", "cpu"}, {"weights", "fp8"}}, "options.weights"},
      {{{"backend", "cpu"}, {"lm_head", "fp8"}}, "options.lm_head"},
      {{{"backend", "cpu"}, {"weights", "fp8"}, {"lm_head", "bf16"}}, "options.lm_head"},
  };
  for (const auto& [options, field] : cases) {
    CAPTURE(options.dump());
    const json reply = load(engine, model, options);
    REQUIRE(reply["type"] == "error");
    CHECK(reply["code"] == "bad_request");
    CHECK(reply.value("field", "") == field);
    CHECK(reply["message"].get<std::string>().find("fp8") != std::string::npos);
  }
  const json loaded = load(engine, model, {{"backend", "cpu"}, {"lm_head", "bf16"}, {"speculation", "off"}});
  CHECK(loaded["type"] == "loaded");
  CHECK(generate(engine).size() == 16);
}

// options.weights "q4_k_m": llama.cpp's Q4_K_M mix quantized at load (model/quantize.h), with
// a "quantizing" progress stage that counts the matrices; the hello lists the value, and an
// unknown value's error names it among those expected.
TEST_CASE("protocol weights: options.weights q4_k_m quantizes to the Q4_K_M mix at load and generates on the CPU") {
  TempDir dir;
  write_random_model(dir.path, k_quant_config(false, 3));

  EngineProcess engine;
  engine.send(json{{"type", "hello"}});
  const auto hello = engine.read();
  REQUIRE(hello);
  const json values = (*hello)["capabilities"]["weights"];
  CHECK(std::find(values.begin(), values.end(), "q4_k_m") != values.end());

  engine.send(json{{"type", "load"},
                   {"id", "l"},
                   {"model", dir.path.string()},
                   {"options", {{"backend", "cpu"}, {"speculation", "off"}, {"weights", "q4_k_m"}}}});
  std::vector<json> progress;
  const auto loaded = engine.read_until([](const json& m) { return m["type"] != "load_progress"; }, &progress);
  REQUIRE(loaded);
  REQUIRE((*loaded)["type"] == "loaded");
  CHECK((*loaded)["report"]["weights"] == "q4_k+q6_k");
  CHECK((*loaded)["report"]["dtype"] == "q4_k");
  json last;
  for (const json& p : progress)
    if (p["stage"] == "quantizing") last = p;
  REQUIRE(last.is_object());
  CHECK(last["done"] == last["total"]);
  CHECK(last["total"] == 2 + 3 * 7);  // embedding, lm_head, 7 matrices a layer
  CHECK(generate(engine).size() == 16);

  engine.send(json{{"type", "load"}, {"id", "x"}, {"model", dir.path.string()}, {"options", {{"weights", "q4_k_s"}}}});
  const auto refused = engine.read_until([](const json& m) { return m["type"] != "load_progress"; });
  REQUIRE(refused);
  CHECK((*refused)["type"] == "error");
  CHECK((*refused)["code"] == "bad_request");
  CHECK((*refused)["field"] == "options.weights");
  CHECK((*refused)["expected"].get<std::string>().find("\"q4_k_m\"") != std::string::npos);
}
