#pragma once
// Test helper: writes tiny Hugging Face model folders (config.json + safetensors) into a
// temporary directory. Tensor names and shapes are spelled out here, independently of
// the engine's own list, so a wrong name or shape in the engine fails the tests.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "model/error.h"

namespace runahead::test {

namespace fs = std::filesystem;
using nlohmann::json;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "runahead-test-XXXXXX").string();
    path = ::mkdtemp(templ.data());
  }
  ~TempDir() { fs::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors spelling: "BF16", "F16", "F32"
  std::vector<int64_t> shape;
};

inline size_t spec_dtype_size(const std::string& dtype) { return dtype == "F32" ? 4 : 2; }

inline size_t spec_bytes(const TensorSpec& t) {
  size_t n = spec_dtype_size(t.dtype);
  for (int64_t d : t.shape) n *= size_t(d);
  return n;
}

// Byte j of the k-th tensor of a file: lets tests check that views point at the right bytes.
// Bit 6 is always clear, so no bf16, f16 or f32 value has an all-ones exponent (NaN, Inf):
// the loader refuses those.
inline uint8_t pattern_byte(size_t k, size_t j) { return uint8_t(k * 31 + j * 7 + 1) & 0xBF; }

// A safetensors file from a raw header string and data section (for malformed files).
inline std::string safetensors_raw(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xFF);
  return out + header + data;
}

// A valid safetensors file: tensors laid out in order, header padded to 8 bytes as
// the reference writer does.
inline std::string safetensors_file(const std::vector<TensorSpec>& tensors, const json& metadata = nullptr) {
  json header = json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string data;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const size_t begin = data.size(), n = spec_bytes(tensors[k]);
    for (size_t j = 0; j < n; ++j) data.push_back(char(pattern_byte(k, j)));
    header[tensors[k].name] = {{"dtype", tensors[k].dtype},
                               {"shape", tensors[k].shape},
                               {"data_offsets", {begin, begin + n}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return safetensors_raw(text, data);
}

inline void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// A small but complete config: 2 layers, GQA (4 heads, 2 kv heads), head_dim 4.
inline json tiny_config(const std::string& architecture = "Qwen2ForCausalLM") {
  return {{"architectures", {architecture}},
          {"vocab_size", 32},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},
          {"tie_word_embeddings", true},
          {"torch_dtype", "bfloat16"},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"hidden_act", "silu"}};
}

// The Hugging Face tensors of a Qwen2 / Llama model with this config.
inline std::vector<TensorSpec> decoder_tensors(const json& c, const std::string& dtype) {
  const int64_t H = c["hidden_size"], I = c["intermediate_size"], V = c["vocab_size"];
  const int64_t nh = c["num_attention_heads"], nkv = c.value("num_key_value_heads", nh);
  const int64_t hd = c.value("head_dim", H / nh);
  const bool bias = c["architectures"][0] == "Qwen2ForCausalLM" || c.value("attention_bias", false);
  std::vector<TensorSpec> t = {{"model.embed_tokens.weight", dtype, {V, H}}};
  for (int i = 0; i < int(c["num_hidden_layers"]); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", dtype, {H}});
    t.push_back({p + "self_attn.q_proj.weight", dtype, {nh * hd, H}});
    t.push_back({p + "self_attn.k_proj.weight", dtype, {nkv * hd, H}});
    t.push_back({p + "self_attn.v_proj.weight", dtype, {nkv * hd, H}});
    if (bias) {
      t.push_back({p + "self_attn.q_proj.bias", dtype, {nh * hd}});
      t.push_back({p + "self_attn.k_proj.bias", dtype, {nkv * hd}});
      t.push_back({p + "self_attn.v_proj.bias", dtype, {nkv * hd}});
    }
    if (c["architectures"][0] == "Qwen3ForCausalLM") {  // per-head q/k norms
      t.push_back({p + "self_attn.q_norm.weight", dtype, {hd}});
      t.push_back({p + "self_attn.k_norm.weight", dtype, {hd}});
    }
    t.push_back({p + "self_attn.o_proj.weight", dtype, {H, nh * hd}});
    t.push_back({p + "post_attention_layernorm.weight", dtype, {H}});
    t.push_back({p + "mlp.gate_proj.weight", dtype, {I, H}});
    t.push_back({p + "mlp.up_proj.weight", dtype, {I, H}});
    t.push_back({p + "mlp.down_proj.weight", dtype, {H, I}});
  }
  t.push_back({"model.norm.weight", dtype, {H}});
  if (!c.value("tie_word_embeddings", false)) t.push_back({"lm_head.weight", dtype, {V, H}});
  return t;
}

// config.json + model.safetensors in `dir`.
inline void write_model(const fs::path& dir, const json& config, const std::vector<TensorSpec>& tensors) {
  write_file(dir / "config.json", config.dump(2));
  write_file(dir / "model.safetensors", safetensors_file(tensors));
}

// A random f32 model whose rows are whole Q4_K blocks (hidden 256, intermediate 512, head_dim
// 64: every matrix's rows are 256 or 512 weights), with `layers` layers.
inline json k_quant_config(bool tied, int layers) {
  json c = tiny_config("Qwen2ForCausalLM");
  c["vocab_size"] = 512;
  c["hidden_size"] = 256;
  c["intermediate_size"] = 512;
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = 4;
  c["num_key_value_heads"] = 2;
  c["max_position_embeddings"] = 512;
  c["tie_word_embeddings"] = tied;
  c["torch_dtype"] = "float32";
  return c;
}

// config.json + model.safetensors in `dir`: the tensors of decoder_tensors(config) in F32 with
// random values of a trained model's scale (matrices uniform in +-1/sqrt(in), the embedding
// in +-1, norm weights 1 +- 0.1, biases +- 0.1), the same for the same seed.
inline void write_random_model(const fs::path& dir, const json& config, uint32_t seed = 1) {
  std::vector<TensorSpec> tensors = decoder_tensors(config, "F32");
  std::mt19937 rng(seed);
  json header = json::object();
  std::string data;
  for (const TensorSpec& t : tensors) {
    const bool matrix = t.shape.size() == 2, norm = !matrix && t.name.find("bias") == std::string::npos;
    const float scale = t.name == "model.embed_tokens.weight" ? 1.0f : matrix ? 1.0f / std::sqrt(float(t.shape[1])) : 0.1f;
    std::uniform_real_distribution<float> u(-scale, scale);
    const size_t begin = data.size(), n = spec_bytes(t) / 4;
    for (size_t i = 0; i < n; ++i) {
      const float v = (norm ? 1.0f : 0.0f) + u(rng);
      data.append(reinterpret_cast<const char*>(&v), 4);
    }
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  write_file(dir / "config.json", config.dump(2));
  write_file(dir / "model.safetensors", safetensors_raw(text, data));
}

// The EngineError that `f` throws; fails the test if it throws nothing.
template <class F>
EngineError error_of(F&& f) {
  try {
    f();
  } catch (const EngineError& e) {
    return e;
  }
  FAIL("expected an EngineError");
  return EngineError("", "");
}

}  // namespace runahead::test
