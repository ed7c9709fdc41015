#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "model/safetensors.h"
#include "model/weights.h"
#include "model_writer.h"

using namespace runahead;
using namespace runahead::test;

namespace {

int64_t numel(const TensorSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

int64_t total_params(const std::vector<TensorSpec>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += numel(t);
  return n;
}

// Checks that `t` is a view of the k-th tensor written by safetensors_file.
void check_view(const Tensor& t, const std::vector<TensorSpec>& written) {
  size_t k = 0;
  while (k < written.size() && written[k].name != t.name) ++k;
  REQUIRE_MESSAGE(k < written.size(), t.name);
  CHECK(t.shape == written[k].shape);
  const auto* p = static_cast<const uint8_t*>(t.data);
  bool same = true;
  for (size_t j = 0; j < t.nbytes(); ++j) same &= p[j] == pattern_byte(k, j);
  CHECK_MESSAGE(same, t.name);
}

EngineError load_error(const fs::path& dir) {
  EngineError e = error_of([&] { load_model(dir); });
  CHECK(e.code == "model_error");
  CHECK_FALSE(e.expected.empty());
  return e;
}

}  // namespace

TEST_CASE("weights: a tiny tied Qwen2 model binds every tensor and reports progress") {
  TempDir dir;
  const json config = tiny_config();
  const auto written = decoder_tensors(config, "BF16");
  write_model(dir.path, config, written);

  std::vector<std::tuple<std::string, int64_t, int64_t>> calls;
  const ModelWeights w = load_model(dir.path, [&](const std::string& s, int64_t d, int64_t t) {
    calls.emplace_back(s, d, t);
  });
  CHECK(w.config.architecture == "Qwen2ForCausalLM");
  CHECK(w.dtype == DType::BF16);
  CHECK(w.source == dir.path.string());
  REQUIRE(w.layers.size() == 2);
  check_view(w.embed, written);
  check_view(w.final_norm, written);
  for (const LayerWeights& l : w.layers)
    for (Role r : {Role::AttnNorm, Role::Wq, Role::Wk, Role::Wv, Role::Bq, Role::Bk, Role::Bv, Role::Wo,
                   Role::MlpNorm, Role::WGate, Role::WUp, Role::WDown})
      check_view(l[r], written);
  CHECK(w.layers[1][Role::Wk].name == "model.layers.1.self_attn.k_proj.weight");
  CHECK(w.layers[0][Role::Wq].shape == std::vector<int64_t>{16, 16});
  CHECK(w.layers[0][Role::Wk].shape == std::vector<int64_t>{8, 16});  // 2 kv heads x head_dim 4
  CHECK(w.lm_head.data == w.embed.data);
  CHECK(w.parameters == total_params(written));
  // Tied: the embedding table is read as the lm_head, so every byte counts.
  CHECK(w.weight_bytes == size_t(total_params(written)) * 2);

  REQUIRE(calls.size() >= 3);
  CHECK(std::get<0>(calls.front()) == "mapping");
  CHECK(std::get<0>(calls.back()) == "binding");
  CHECK(std::get<1>(calls.back()) == std::get<2>(calls.back()));
}

TEST_CASE("weights: untied Llama in f16 without attention bias, weight_bytes leaves out the embedding") {
  TempDir dir;
  json config = tiny_config("LlamaForCausalLM");
  config["tie_word_embeddings"] = false;
  const auto written = decoder_tensors(config, "F16");
  write_model(dir.path, config, written);
  const ModelWeights w = load_model(dir.path);
  CHECK(w.dtype == DType::F16);
  CHECK(w.layers[0][Role::Bq].empty());
  check_view(w.lm_head, written);
  CHECK(w.lm_head.data != w.embed.data);
  CHECK(w.parameters == total_params(written));
  CHECK(w.weight_bytes == size_t(total_params(written) - 32 * 16) * 2);
}

TEST_CASE("weights: f32 weights, a Llama with attention_bias, and explicit head_dim load") {
  TempDir dir;
  json config = tiny_config("LlamaForCausalLM");
  config["attention_bias"] = true;
  config["head_dim"] = 8;
  const auto written = decoder_tensors(config, "F32");
  write_model(dir.path, config, written);
  const ModelWeights w = load_model(dir.path);
  CHECK(w.dtype == DType::F32);
  CHECK(w.layers[0][Role::Wq].shape == std::vector<int64_t>{32, 16});  // 4 heads x head_dim 8
  check_view(w.layers[0][Role::Bv], written);
}

TEST_CASE("weights: a sharded model binds across shards and keeps the mappings alive") {
  TempDir dir;
  const json config = tiny_config();
  const auto written = decoder_tensors(config, "BF16");
  const size_t half = written.size() / 2;
  const std::vector<TensorSpec> first(written.begin(), written.begin() + half), second(written.begin() + half, written.end());
  write_file(dir.path / "config.json", config.dump());
  write_file(dir.path / "model-00001-of-00002.safetensors", safetensors_file(first));
  write_file(dir.path / "model-00002-of-00002.safetensors", safetensors_file(second));
  json map = json::object();
  for (const auto& t : first) map[t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : second) map[t.name] = "model-00002-of-00002.safetensors";
  write_file(dir.path / "model.safetensors.index.json", json{{"weight_map", map}}.dump());
  const ModelWeights w = load_model(dir.path);
  CHECK(w.parameters == total_params(written));
  // Bytes still match the second shard's pattern (views index tensors within their own file).
  const auto* p = static_cast<const uint8_t*>(w.final_norm.data);
  CHECK(p[0] == pattern_byte(second.size() - 1, 0));
}

TEST_CASE("weights: a tensor of the wrong shape names tensor, shapes and file") {
  TempDir dir;
  const json config = tiny_config();
  auto written = decoder_tensors(config, "BF16");
  for (auto& t : written)
    if (t.name == "model.layers.1.mlp.down_proj.weight") t.shape = {24, 16};  // transposed
  write_model(dir.path, config, written);
  const EngineError e = load_error(dir.path);
  CHECK(e.field == "model.layers.1.mlp.down_proj.weight");
  CHECK(e.file == (dir.path / "model.safetensors").string());
  CHECK(std::string(e.what()).find("[24, 16]") != std::string::npos);
  CHECK(e.expected.find("[16, 24]") != std::string::npos);
}

TEST_CASE("weights: a config whose shapes disagree with the file is caught") {
  TempDir dir;
  json config = tiny_config();
  const auto written = decoder_tensors(config, "BF16");
  config["num_key_value_heads"] = 4;  // the file has 2 kv heads
  write_model(dir.path, config, written);
  CHECK(load_error(dir.path).field == "model.layers.0.self_attn.k_proj.weight");
}

TEST_CASE("weights: a missing tensor is named") {
  TempDir dir;
  json config = tiny_config();
  auto written = decoder_tensors(config, "BF16");
  std::erase_if(written, [](const TensorSpec& t) { return t.name == "model.layers.0.self_attn.q_proj.bias"; });
  write_model(dir.path, config, written);
  EngineError e = load_error(dir.path);
  CHECK(e.field == "model.layers.0.self_attn.q_proj.bias");
  CHECK(std::string(e.what()).find("missing") != std::string::npos);

  config["tie_word_embeddings"] = false;  // untied needs lm_head.weight, which the file lacks
  write_model(dir.path, config, decoder_tensors(tiny_config(), "BF16"));
  e = load_error(dir.path);
  CHECK(e.field == "lm_head.weight");
}

TEST_CASE("weights: matrices in mixed dtypes are refused, norms may differ") {
  TempDir dir;
  const json config = tiny_config();
  auto written = decoder_tensors(config, "BF16");
  for (auto& t : written)
    if (t.name.ends_with("layernorm.weight")) t.dtype = "F32";
  write_model(dir.path, config, written);
  CHECK(load_model(dir.path).dtype == DType::BF16);
  for (auto& t : written)
    if (t.name == "model.layers.1.mlp.up_proj.weight") t.dtype = "F16";
  write_model(dir.path, config, written);
  CHECK(load_error(dir.path).field == "model.layers.1.mlp.up_proj.weight");
}

TEST_CASE("weights: shape_config knows the Qwen2.5-Coder shapes and lists them for an unknown one") {
  const ModelConfig small = shape_config("qwen2.5-coder-0.5b");
  CHECK(small.hidden_size == 896);
  CHECK(small.head_dim == 64);
  CHECK(small.num_kv_heads == 2);
  CHECK(small.tie_word_embeddings);
  const ModelConfig mid = shape_config("qwen2.5-coder-1.5b");
  CHECK(mid.head_dim == 128);
  CHECK(mid.num_layers == 28);
  const ModelConfig big = shape_config("qwen2.5-coder-7b");
  CHECK(big.vocab_size == 152064);
  CHECK(big.num_kv_heads == 4);
  CHECK_FALSE(big.tie_word_embeddings);
  CHECK(big.rope_theta == doctest::Approx(1e6));
  const EngineError e = error_of([] { shape_config("qwen2.5-coder-3b"); });
  CHECK(e.code == "model_error");
  CHECK(std::string(e.what()).find("qwen2.5-coder-3b") != std::string::npos);
  CHECK(std::string(e.what()).find("qwen2.5-coder-7b") != std::string::npos);
}

TEST_CASE("weights: random 0.5B weights have the published parameter count, sane values, and follow the seed") {
  const ModelWeights w = random_model("qwen2.5-coder-0.5b", 7);
  CHECK(w.parameters == 494032768);  // Qwen2.5-0.5B, as Hugging Face reports it
  CHECK(w.weight_bytes == 988065536);
  CHECK(w.dtype == DType::BF16);
  CHECK(w.source == "random:qwen2.5-coder-0.5b");
  CHECK(w.lm_head.data == w.embed.data);
  REQUIRE(w.layers.size() == 24);
  CHECK(w.layers[23][Role::WDown].shape == std::vector<int64_t>{896, 4864});
  auto value = [](const Tensor& t, int64_t i) {
    uint32_t bits = uint32_t(static_cast<const uint16_t*>(t.data)[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  CHECK(value(w.layers[5][Role::MlpNorm], 100) == 1.0f);
  double sum = 0, sq = 0;
  const int64_t n = w.layers[3][Role::WUp].numel();
  for (int64_t i = 0; i < n; ++i) sum += value(w.layers[3][Role::WUp], i), sq += value(w.layers[3][Role::WUp], i) * value(w.layers[3][Role::WUp], i);
  CHECK(std::abs(sum / n) < 1e-3);
  CHECK(std::sqrt(sq / n) == doctest::Approx(0.02).epsilon(0.05));
  // Two tensors do not share their random values.
  CHECK(std::memcmp(w.layers[0][Role::Wq].data, w.layers[1][Role::Wq].data, 64) != 0);

  // The same seed gives the same weights; another seed other weights.
  auto gate = [](const ModelWeights& m) {
    const auto* p = static_cast<const uint8_t*>(m.layers[10][Role::WGate].data);
    return std::vector<uint8_t>(p, p + m.layers[10][Role::WGate].nbytes());
  };
  const std::vector<uint8_t> seven = gate(w);
  CHECK(seven == gate(random_model("qwen2.5-coder-0.5b", 7)));
  CHECK(seven != gate(random_model("qwen2.5-coder-0.5b", 8)));
}

TEST_CASE("weights: every model folder in test/fixtures/models loads with plausible numbers") {
  const fs::path root = fs::path(RUNAHEAD_FIXTURES) / "models";
  if (!fs::is_directory(root)) {
    MESSAGE("no " << root.string() << "; skipped");
    return;
  }
  std::vector<fs::path> folders;
  for (const auto& entry : fs::directory_iterator(root))
    for (const fs::path& dir : {entry.path(), entry.path() / "draft"})
      if (fs::exists(dir / "config.json")) folders.push_back(dir);
  for (const fs::path& dir : folders) {
    CAPTURE(dir.string());
    const ModelWeights w = load_model(dir);
    const auto& archs = supported_architectures();
    CHECK(std::find(archs.begin(), archs.end(), w.config.architecture) != archs.end());
    const std::map<std::string, DType> declared = {
        {"bfloat16", DType::BF16}, {"float16", DType::F16}, {"float32", DType::F32}};
    if (declared.count(w.config.torch_dtype)) CHECK(w.dtype == declared.at(w.config.torch_dtype));
    const auto store = WeightStore::open(dir);
    int64_t stored = 0;
    for (const auto& [name, t] : store->tensors()) stored += t.numel();
    // save_pretrained writes exactly the parameters (a tied lm_head is not written again).
    CHECK(w.parameters == stored);
    CHECK(w.weight_bytes <= store->total_bytes());
    CHECK(w.weight_bytes >= w.lm_head.nbytes());
  }
}
