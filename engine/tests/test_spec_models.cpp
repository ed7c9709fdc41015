// Speculation on the real fixture models (test/fixtures/models) and the CPU backend:
// greedy output with the lookup drafter, a random MTP head written here, the draft model
// qwen2-untied-f16 drafting for qwen2-tied-bf16 (both vocab 512), and `auto` equals plain
// greedy output on 24 prompts. Plus the refusals: a draft of another vocabulary, a
// requested drafter whose files are missing.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "model/error.h"
#include "model/weights.h"
#include "runtime/backend.h"
#include "runtime/generator.h"
#include "runtime/speculative.h"
#include "generate_run.h"
#include "model_writer.h"

using namespace runahead;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(RUNAHEAD_FIXTURES) / "models";

using test::TempDir;

// A safetensors file of f32 tensors with random values (norm weights near 1).
void write_random_safetensors(const fs::path& file, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                              uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  nlohmann::json header = {{"__metadata__", {{"format", "runahead-mtp"}, {"version", "1"}}}};
  std::string data;
  for (const auto& [name, shape] : tensors) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool norm = shape.size() == 1 && name.find("bias") == std::string::npos;
    const float scale = shape.size() == 2 ? 1.0f / std::sqrt(float(shape[1])) : 0.1f;
    std::uniform_real_distribution<float> u(-scale, scale);
    const size_t begin = data.size();
    for (int64_t i = 0; i < n; ++i) {
      const float v = (norm ? 1.0f : 0.0f) + u(rng);
      data.append(reinterpret_cast<const char*>(&v), 4);
    }
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xFF);
  std::ofstream(file, std::ios::binary) << out << text << data;
}

// An MTP head of MODEL_FORMAT.md's layout for `c`, random, with intermediate size I.
void write_random_mtp(const fs::path& file, const ModelConfig& c, int64_t I, uint64_t seed) {
  const int64_t H = c.hidden_size, q = int64_t(c.num_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {
      {"mtp.enorm.weight", {H}},
      {"mtp.hnorm.weight", {H}},
      {"mtp.eh_proj.weight", {H, 2 * H}},
      {"mtp.layer.input_layernorm.weight", {H}},
      {"mtp.layer.self_attn.q_proj.weight", {q, H}},
      {"mtp.layer.self_attn.k_proj.weight", {kv, H}},
      {"mtp.layer.self_attn.v_proj.weight", {kv, H}},
      {"mtp.layer.self_attn.o_proj.weight", {H, q}},
      {"mtp.layer.post_attention_layernorm.weight", {H}},
      {"mtp.layer.mlp.gate_proj.weight", {I, H}},
      {"mtp.layer.mlp.up_proj.weight", {I, H}},
      {"mtp.layer.mlp.down_proj.weight", {H, I}},
      {"mtp.final_norm.weight", {H}},
  };
  if (c.qkv_bias) {
    t.push_back({"mtp.layer.self_attn.q_proj.bias", {q}});
    t.push_back({"mtp.layer.self_attn.k_proj.bias", {kv}});
    t.push_back({"mtp.layer.self_attn.v_proj.bias", {kv}});
  }
  write_random_safetensors(file, t, seed);
}

// A model folder that links the fixture's files, so an MTP head or a draft can be added.
fs::path model_copy(const TempDir& dir, const std::string& fixture) {
  const fs::path folder = dir.path / fixture;
  fs::create_directories(folder);
  for (const auto& e : fs::directory_iterator(kModels / fixture)) fs::create_symlink(e.path(), folder / e.path().filename());
  return folder;
}

std::vector<std::vector<int32_t>> prompts(int vocab) {
  std::vector<std::vector<int32_t>> out;
  std::ifstream golden(kModels / "qwen2-tied-bf16" / "golden.json");
  for (const auto& g : nlohmann::json::parse(golden)["greedy"]) out.push_back(g["prompt"].get<std::vector<int32_t>>());
  std::mt19937 rng(3);
  while (out.size() < 24) {
    std::vector<int32_t> p;
    const size_t len = 4 + out.size() * 3;
    // Half random, half a phrase repeated with small changes (code-like repetition).
    std::vector<int32_t> phrase;
    for (int j = 0; j < 7; ++j) phrase.push_back(int32_t(rng() % uint32_t(vocab)));
    while (p.size() < len) {
      if (out.size() % 2) p.push_back(int32_t(rng() % uint32_t(vocab)));
      else {
        p.insert(p.end(), phrase.begin(), phrase.end());
        phrase[rng() % phrase.size()] = int32_t(rng() % uint32_t(vocab));
      }
    }
    out.push_back(p);
  }
  return out;
}

struct Engine {
  std::shared_ptr<const ModelWeights> weights;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Speculator> speculator;
  std::unique_ptr<Generator> generator;
  nlohmann::json report;

  Engine(const fs::path& model, SpeculationOptions options) {
    weights = std::make_shared<const ModelWeights>(load_model(model));
    const BackendOptions bo{2, 512};
    backend = make_cpu_backend(weights, bo);
    speculator = open_speculator(*backend, weights, model.string(), options, make_cpu_backend, bo, report);
    GeneratorOptions go;
    go.eos_ids = weights->config.eos_token_ids;
    go.speculator = speculator.get();
    generator = std::make_unique<Generator>(*backend, go);
  }

  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int max_tokens, GenerateResult* result = nullptr) {
    testing::Run r = testing::run(*generator, testing::greedy(prompt, max_tokens));
    if (result) *result = r.result;
    return r.tokens;
  }
};

SpeculationOptions mode(const std::string& m, const std::string& draft = {}) {
  SpeculationOptions o;
  o.mode = m;
  o.draft_model = draft;
  return o;
}

}  // namespace

TEST_CASE("greedy speculation on the fixture models equals plain greedy: lookup, mtp, draft, auto") {
  TempDir dir;
  const fs::path target = model_copy(dir, "qwen2-tied-bf16");
  const ModelWeights target_weights = load_model(target);
  write_random_mtp(target / "mtp.safetensors", target_weights.config, 96, 1);
  fs::create_directory_symlink(kModels / "qwen2-untied-f16", target / "draft");

  Engine plain(target, mode("off"));
  CHECK(plain.speculator == nullptr);
  const auto all = prompts(target_weights.config.vocab_size);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : all) expected.push_back(plain.greedy(p, 32));

  for (const std::string m : {"lookup", "mtp", "draft", "auto"}) {
    CAPTURE(m);
    for (bool adaptive : {false, true}) {
      CAPTURE(adaptive);
      SpeculationOptions o = mode(m);
      o.adaptive = adaptive;
      Engine spec(target, o);
      REQUIRE(spec.speculator != nullptr);
      int drafted = 0, accepted = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        CAPTURE(i);
        GenerateResult r;
        CHECK(spec.greedy(all[i], 32, &r) == expected[i]);
        drafted += r.stats.speculation.drafted;
        accepted += r.stats.speculation.accepted;
        CHECK(r.stats.speculation.accepted <= r.stats.speculation.drafted);
      }
      const std::string summary = m + (adaptive ? " adaptive" : " fixed") + ": drafted " + std::to_string(drafted) +
                                  ", accepted " + std::to_string(accepted) + ", cost " + spec.report["cost"].dump();
      MESSAGE(summary);
      if (!adaptive) CHECK(drafted > 0);  // the drafter drafted, so the equality above tested something
    }
  }
}

TEST_CASE("the MTP head keeps in step across requests that reuse the cache") {
  TempDir dir;
  const fs::path target = model_copy(dir, "llama-f32");
  const ModelWeights w = load_model(target);
  write_random_mtp(target / "mtp.safetensors", w.config, 64, 2);
  Engine plain(target, mode("off"));
  SpeculationOptions o = mode("mtp");
  o.adaptive = false;
  Engine spec(target, o);
  std::vector<int32_t> prompt = {5, 9, 200, 31, 77, 4, 4, 18};
  for (int round = 0; round < 6; ++round) {
    CAPTURE(round);
    CHECK(spec.greedy(prompt, 20) == plain.greedy(prompt, 20));
    // The next prompt keeps most of this one (as typing does), then differs.
    prompt.resize(prompt.size() - 2);
    for (int j = 0; j < 5; ++j) prompt.push_back(int32_t((round * 37 + j * 11) % 512));
  }
}

TEST_CASE("a requested drafter that cannot be active is refused with a clear error") {
  TempDir dir;
  const fs::path target = model_copy(dir, "qwen2-tied-bf16");
  auto weights = std::make_shared<const ModelWeights>(load_model(target));
  auto backend = make_cpu_backend(weights, {1, 256});
  nlohmann::json report;
  auto open = [&](SpeculationOptions o) { return open_speculator(*backend, weights, target.string(), o, make_cpu_backend, {1, 256}, report); };

  try {
    open(mode("mtp"));
    FAIL("mtp without mtp.safetensors was accepted");
  } catch (const EngineError& e) {
    CHECK(e.code == "model_error");
    CHECK(std::string(e.what()).find("mtp.safetensors") != std::string::npos);
  }
  try {
    open(mode("draft"));
    FAIL("draft without a draft folder was accepted");
  } catch (const EngineError& e) {
    CHECK(e.code == "model_error");
    CHECK(e.field == "options.draft_model");
  }
  try {
    open(mode("sometimes"));
    FAIL("an unknown mode was accepted");
  } catch (const EngineError& e) {
    CHECK(e.code == "bad_request");
    CHECK(e.field == "options.speculation");
  }

  // A draft model of another vocabulary.
  const fs::path other = dir.path / "other";
  fs::create_directories(other);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kModels / "qwen2-untied-f16" / "config.json"));
  config["vocab_size"] = 256;
  std::ofstream(other / "config.json") << config.dump();
  try {
    open(mode("draft", other.string()));
    FAIL("a draft of another vocabulary was accepted");
  } catch (const EngineError& e) {
    CHECK(e.code == "model_error");
    CHECK(e.field == "vocab_size");
    CHECK(std::string(e.what()).find("256") != std::string::npos);
  }

  // auto without the files: lookup only, and the report says why the others are off.
  auto spec = open(mode("auto"));
  REQUIRE(spec != nullptr);
  CHECK(report["drafters"].size() == 1);
  CHECK(report["drafters"][0]["name"] == "lookup");
  CHECK(report["inactive"].contains("mtp"));
  CHECK(report["inactive"].contains("draft"));
  CHECK(report["cost"]["verify_ms"].size() == 9);
}

namespace {

// The CPU backend without the two things an MTP head needs (as a backend that lacks them).
class PlainBackend final : public Backend {
 public:
  explicit PlainBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "plain"; }
  nlohmann::json describe() const override { return inner_->describe(); }
  const ModelConfig& config() const override { return inner_->config(); }
  int context_length() const override { return inner_->context_length(); }
  int kv_len() const override { return inner_->kv_len(); }
  void forward(std::span<const int32_t> t, int n_out, std::vector<float>& logits) override { inner_->forward(t, n_out, logits); }
  std::span<const float> hidden() const override { return inner_->hidden(); }
  void truncate(int n) override { inner_->truncate(n); }

 private:
  std::unique_ptr<Backend> inner_;
};

std::unique_ptr<Backend> make_plain_backend(std::shared_ptr<const ModelWeights> w, const BackendOptions& o) {
  return std::make_unique<PlainBackend>(make_cpu_backend(std::move(w), o));
}

}  // namespace

TEST_CASE("an MTP head the backend cannot run: an error when asked for, a warning in auto") {
  TempDir dir;
  const fs::path target = model_copy(dir, "qwen2-tied-bf16");
  auto weights = std::make_shared<const ModelWeights>(load_model(target));
  write_random_mtp(target / "mtp.safetensors", weights->config, 96, 3);
  auto backend = make_plain_backend(weights, {1, 256});
  nlohmann::json report;
  try {
    open_speculator(*backend, weights, target.string(), mode("mtp"), make_plain_backend, {1, 256}, report);
    FAIL("mtp on a backend without forward_vectors was accepted");
  } catch (const EngineError& e) {
    CHECK(e.code == "bad_request");
  }
  auto spec = open_speculator(*backend, weights, target.string(), mode("auto"), make_plain_backend, {1, 256}, report);
  REQUIRE(spec != nullptr);
  CHECK(report["drafters"].size() == 1);
  CHECK(report["inactive"]["mtp"].get<std::string>().find("plain backend") != std::string::npos);
}
