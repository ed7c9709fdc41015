#include <doctest/doctest.h>

#include "model/config.h"
#include "model_writer.h"

using namespace runahead;
using namespace runahead::test;

TEST_CASE("config: a Qwen2 config.json loads with GQA, derived head_dim and tied embeddings") {
  TempDir dir;
  write_file(dir.path / "config.json", tiny_config().dump());
  const ModelConfig c = load_config(dir.path);
  CHECK(c.architecture == "Qwen2ForCausalLM");
  CHECK(c.vocab_size == 32);
  CHECK(c.hidden_size == 16);
  CHECK(c.intermediate_size == 24);
  CHECK(c.num_layers == 2);
  CHECK(c.num_heads == 4);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.head_dim == 4);
  CHECK(c.max_position_embeddings == 128);
  CHECK(c.rope_theta == doctest::Approx(1e6));
  CHECK(c.rms_norm_eps == doctest::Approx(1e-6));
  CHECK(c.tie_word_embeddings);
  CHECK(c.qkv_bias);  // Qwen2 always has QKV biases
  CHECK(c.torch_dtype == "bfloat16");
  CHECK(c.bos_token_id == 1);
  CHECK(c.eos_token_ids == std::vector<int>{2});
}

TEST_CASE("config: Llama defaults rope_theta to 10000 and has QKV bias only with attention_bias") {
  json j = tiny_config("LlamaForCausalLM");
  j.erase("rope_theta");
  j.erase("num_key_value_heads");
  j.erase("max_position_embeddings");
  ModelConfig c = parse_config(j, "config.json");
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK(c.rope_theta == doctest::Approx(10000));
  CHECK_FALSE(c.qkv_bias);
  CHECK(c.num_kv_heads == c.num_heads);
  CHECK(c.max_position_embeddings == 2048);
  j["attention_bias"] = true;
  CHECK(parse_config(j, "config.json").qkv_bias);
}

TEST_CASE("config: explicit head_dim wins, eos_token_id may be a list, null fields are unset") {
  json j = tiny_config();
  j["head_dim"] = 8;
  j["eos_token_id"] = {30, 31};
  j["bos_token_id"] = nullptr;
  j["rope_scaling"] = nullptr;
  const ModelConfig c = parse_config(j, "config.json");
  CHECK(c.head_dim == 8);
  CHECK(c.eos_token_ids == std::vector<int>{30, 31});
  CHECK(c.bos_token_id == -1);
  j["rope_scaling"] = {{"rope_type", "default"}};
  CHECK_NOTHROW(parse_config(j, "config.json"));
}

TEST_CASE("config: transformers 5 configs: rope_parameters, dtype and layer_types") {
  json j = tiny_config();
  j.erase("rope_theta");
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  j["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  j["layer_types"] = {"full_attention", "full_attention"};
  const ModelConfig c = parse_config(j, "config.json");
  CHECK(c.rope_theta == doctest::Approx(1e6));
  CHECK(c.torch_dtype == "float16");

  j["rope_parameters"]["rope_type"] = "yarn";
  EngineError e = error_of([&] { parse_config(j, "c"); });
  CHECK(e.field == "rope_parameters");
  CHECK(std::string(e.what()).find("yarn") != std::string::npos);
  j["rope_parameters"] = {{"rope_theta", "big"}, {"rope_type", "default"}};
  CHECK(error_of([&] { parse_config(j, "c"); }).field == "rope_parameters.rope_theta");
  j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
  j["layer_types"] = {"full_attention", "sliding_attention"};
  CHECK(error_of([&] { parse_config(j, "c"); }).field == "layer_types");
}

TEST_CASE("config: a folder without config.json is a model_error naming the file") {
  TempDir dir;
  const EngineError e = error_of([&] { load_config(dir.path); });
  CHECK(e.code == "model_error");
  CHECK(e.file == (dir.path / "config.json").string());
  CHECK(std::string(e.what()).find("config.json") != std::string::npos);
  CHECK_FALSE(e.expected.empty());
}

TEST_CASE("config: a config.json that is not JSON names the file") {
  TempDir dir;
  write_file(dir.path / "config.json", "{\"architectures\": [");
  const EngineError e = error_of([&] { load_config(dir.path); });
  CHECK(e.code == "model_error");
  CHECK(e.file == (dir.path / "config.json").string());
  CHECK(std::string(e.what()).find("not valid JSON") != std::string::npos);
}

TEST_CASE("config: an unsupported architecture is named, with the supported ones") {
  json j = tiny_config("MistralForCausalLM");
  const EngineError e = error_of([&] { parse_config(j, "/m/config.json"); });
  CHECK(e.code == "model_error");
  CHECK(e.file == "/m/config.json");
  CHECK(e.field == "architectures");
  const std::string msg = e.what();
  CHECK(msg.find("MistralForCausalLM") != std::string::npos);
  for (const auto& name : supported_architectures()) CHECK(msg.find(name) != std::string::npos);
}

TEST_CASE("config: each required field, when missing, is named") {
  for (const char* field : {"architectures", "vocab_size", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads"}) {
    CAPTURE(field);
    json j = tiny_config();
    j.erase(field);
    const EngineError e = error_of([&] { parse_config(j, "/m/config.json"); });
    CHECK(e.code == "model_error");
    CHECK(e.file == "/m/config.json");
    CHECK(e.field == field);
    CHECK(std::string(e.what()).find(field) != std::string::npos);
    CHECK(std::string(e.what()).find("missing") != std::string::npos);
    CHECK_FALSE(e.expected.empty());
  }
}

TEST_CASE("config: a field of the wrong type names the field and the expected type") {
  struct Case {
    const char* field;
    json value;
    const char* expected;
  };
  for (const Case& c : {Case{"hidden_size", "896", "integer"}, Case{"num_hidden_layers", 2.5, "integer"},
                        Case{"vocab_size", -5, "integer >= 1"}, Case{"tie_word_embeddings", "yes", "true or false"},
                        Case{"rope_theta", "big", "positive number"}, Case{"eos_token_id", "</s>", "integer"},
                        Case{"architectures", "Qwen2ForCausalLM", "list"}}) {
    CAPTURE(c.field);
    json j = tiny_config();
    j[c.field] = c.value;
    const EngineError e = error_of([&] { parse_config(j, "/m/config.json"); });
    CHECK(e.code == "model_error");
    CHECK(e.field == c.field);
    CHECK(e.expected.find(c.expected) != std::string::npos);
  }
}

TEST_CASE("config: shapes that cannot be computed are refused") {
  json j = tiny_config();
  j["num_key_value_heads"] = 3;  // 4 heads cannot be grouped in 3
  CHECK(error_of([&] { parse_config(j, "c"); }).field == "num_key_value_heads");
  j = tiny_config();
  j["num_attention_heads"] = 5;  // 16 / 5 is not a head_dim
  j["num_key_value_heads"] = 5;
  CHECK(error_of([&] { parse_config(j, "c"); }).field == "head_dim");
}

TEST_CASE("config: options that would change the computation are refused, not ignored") {
  json j = tiny_config();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  EngineError e = error_of([&] { parse_config(j, "c"); });
  CHECK(e.field == "rope_scaling");
  CHECK(std::string(e.what()).find("yarn") != std::string::npos);
  j = tiny_config();
  j["use_sliding_window"] = true;
  CHECK(error_of([&] { parse_config(j, "c"); }).field == "use_sliding_window");
  j = tiny_config();
  j["hidden_act"] = "gelu";
  CHECK(error_of([&] { parse_config(j, "c"); }).field == "hidden_act");
}

TEST_CASE("config: Llama 3.1's llama3 RoPE scaling is read, its fields are required") {
  json j = tiny_config("LlamaForCausalLM");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const ModelConfig c = parse_config(j, "config.json");
  CHECK(c.rope_scaling.type == "llama3");
  CHECK(c.rope_scaling.factor == doctest::Approx(8));
  CHECK(c.rope_scaling.high_freq_factor == doctest::Approx(4));
  CHECK(c.rope_scaling.original_max_positions == 8192);
  j["rope_scaling"].erase("low_freq_factor");
  CHECK(error_of([&] { parse_config(j, "c"); }).field == "rope_scaling.low_freq_factor");
}

TEST_CASE("config: Qwen3 loads, with QKV biases only when attention_bias says so") {
  json j = tiny_config("Qwen3ForCausalLM");
  j["head_dim"] = 8;
  ModelConfig c = parse_config(j, "config.json");
  CHECK(c.architecture == "Qwen3ForCausalLM");
  CHECK_FALSE(c.qkv_bias);
  CHECK(c.head_dim == 8);
  j["attention_bias"] = true;
  CHECK(parse_config(j, "config.json").qkv_bias);
}
