#include <doctest/doctest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/error.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model_writer.h"
#include "test_gguf_writer.h"

using namespace runahead;
using namespace runahead::test;

namespace {

constexpr uint32_t kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14;

// A parsed file with the bytes its views point into.
struct Parsed {
  std::shared_ptr<const std::string> bytes;
  std::unique_ptr<GgufFile> file;
  const GgufFile* operator->() const { return file.get(); }
  const GgufFile& operator*() const { return *file; }
};

Parsed parse(std::string s) {
  auto bytes = std::make_shared<const std::string>(std::move(s));
  auto file = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), "m.gguf");
  return {bytes, std::move(file)};
}

// The message of the model_error that parsing `s` throws ("" when it parses).
std::string refusal(const std::string& s) {
  const std::vector<uint8_t> bytes(s.begin(), s.end());  // exact size: reads past it are caught by ASan
  try {
    GgufFile::parse(bytes.data(), bytes.size(), "m.gguf");
  } catch (const EngineError& e) {
    REQUIRE(e.code == "model_error");
    REQUIRE(e.file == "m.gguf");
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A Qwen2-shaped model: 2 layers, hidden 64, 4 heads of 16, 2 kv heads, intermediate 256.
GgufWriter qwen2_file(bool tied = true, const std::string& arch = "qwen2") {
  GgufWriter w;
  w.str("general.architecture", arch);
  w.u32(arch + ".block_count", 2);
  w.u32(arch + ".context_length", 32768);
  w.u32(arch + ".embedding_length", 64);
  w.u32(arch + ".feed_forward_length", 256);
  w.u32(arch + ".attention.head_count", 4);
  w.u32(arch + ".attention.head_count_kv", 2);
  w.f32(arch + ".rope.freq_base", 1000000.0f);
  w.f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.u32("tokenizer.ggml.bos_token_id", 99);
  w.u32("tokenizer.ggml.eos_token_id", 99);
  auto f32 = [&](const std::string& name, std::vector<uint64_t> dims) {
    uint64_t n = 4;
    for (uint64_t d : dims) n *= d;
    w.tensor(name, kGgmlF32, dims, gguf_pattern(n, int(w.tensors.size())));
  };
  f32("token_embd.weight", {64, 100});
  f32("output_norm.weight", {64});
  if (!tied) f32("output.weight", {64, 100});
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    f32(b + "attn_norm.weight", {64});
    f32(b + "attn_q.weight", {64, 64});
    f32(b + "attn_k.weight", {64, 32});
    f32(b + "attn_v.weight", {64, 32});
    if (arch != "llama" && arch != "qwen3") {
      f32(b + "attn_q.bias", {64});
      f32(b + "attn_k.bias", {32});
      f32(b + "attn_v.bias", {32});
    }
    f32(b + "attn_output.weight", {64, 64});
    f32(b + "ffn_norm.weight", {64});
    f32(b + "ffn_gate.weight", {64, 256});
    f32(b + "ffn_up.weight", {64, 256});
    f32(b + "ffn_down.weight", {256, 64});
  }
  return w;
}

}  // namespace

TEST_CASE("gguf: metadata of every value type reads back") {
  GgufWriter w;
  w.scalar<uint8_t>("u8", GgufWriter::U8, 200);
  w.scalar<int8_t>("i8", GgufWriter::I8, -100);
  w.scalar<uint16_t>("u16", GgufWriter::U16, 60000);
  w.scalar<int16_t>("i16", GgufWriter::I16, -30000);
  w.u32("u32", 4000000000u);
  w.i32("i32", -2000000000);
  w.f32("f32", 0.25f);
  w.scalar<uint8_t>("bool", GgufWriter::BOOL, 1);
  w.str("str", "héllo");
  w.scalar<uint64_t>("u64", GgufWriter::U64, 1ull << 40);
  w.scalar<int64_t>("i64", GgufWriter::I64, -(1ll << 40));
  w.scalar<double>("f64", GgufWriter::F64, -1.5);
  w.strings("strs", {"a", "", "ccc"});
  w.i32s("ints", {3, -4, 5});
  std::string nested;  // [[1, 2], []] as arrays of uint8
  GgufWriter::put<uint32_t>(nested, GgufWriter::ARRAY);
  GgufWriter::put<uint64_t>(nested, 2);
  GgufWriter::put<uint32_t>(nested, GgufWriter::U8);
  GgufWriter::put<uint64_t>(nested, 2);
  nested += "\x01\x02";
  GgufWriter::put<uint32_t>(nested, GgufWriter::U8);
  GgufWriter::put<uint64_t>(nested, 0);
  w.raw("nested", GgufWriter::ARRAY, nested);
  std::string floats;
  GgufWriter::put<uint32_t>(floats, GgufWriter::F32);
  GgufWriter::put<uint64_t>(floats, 2);
  GgufWriter::put<float>(floats, 0.5f);
  GgufWriter::put<float>(floats, -2.0f);
  w.raw("floats", GgufWriter::ARRAY, floats);

  for (uint32_t version : {2u, 3u}) {
    w.version = version;
    const auto g = parse(w.bytes());
    CHECK(g->version() == version);
    CHECK(g->metadata().size() == 16);
    CHECK(g->integer("u8", 0, 255) == 200);
    CHECK(g->integer("i8", -128, 127) == -100);
    CHECK(g->integer("u16", 0, 1 << 20) == 60000);
    CHECK(g->integer("i16", -40000, 0) == -30000);
    CHECK(g->integer("u32", 0, 1ll << 40) == 4000000000ll);
    CHECK(g->integer("i32", -(1ll << 40), 0) == -2000000000ll);
    CHECK(*g->optional_number("f32") == 0.25);
    CHECK(g->find("bool")->u == 1);
    CHECK(g->string("str") == "héllo");
    CHECK(g->integer("u64", 0, 1ll << 50) == (1ll << 40));
    CHECK(g->integer("i64", -(1ll << 50), 0) == -(1ll << 40));
    CHECK(*g->optional_number("f64") == -1.5);
    CHECK(g->strings("strs") == std::vector<std::string_view>{"a", "", "ccc"});
    CHECK(g->integers("ints") == std::vector<int64_t>{3, -4, 5});
    CHECK(g->numbers("floats") == std::vector<double>{0.5, -2.0});
    CHECK(g->find("nested")->count == 2);
    CHECK(g->find("nested")->elem_type == GgufValueType::Array);
    CHECK_FALSE(g->find("absent"));
    CHECK_FALSE(g->optional_integer("absent", 0, 1));
  }
  const auto g = parse(w.bytes());
  CHECK_THROWS_WITH_AS(g->integer("u8", 0, 100), doctest::Contains("'u8' is 200"), EngineError);
  CHECK_THROWS_WITH_AS(g->string("u32"), doctest::Contains("'u32' is a uint32"), EngineError);
  CHECK_THROWS_WITH_AS(g->strings("ints"), doctest::Contains("array of int32"), EngineError);
  CHECK_THROWS_WITH_AS(g->integer("absent", 0, 1), doctest::Contains("'absent' is missing"), EngineError);
}

TEST_CASE("gguf: tensor infos of every supported type, shapes outermost first, data aligned") {
  GgufWriter w;
  w.u32("general.alignment", 64);
  w.alignment = 64;
  w.tensor("f32", kGgmlF32, {3, 2}, gguf_pattern(24, 1));
  w.tensor("f16", kGgmlF16, {5}, gguf_pattern(10, 2));
  w.tensor("bf16", kGgmlBF16, {4, 1, 2}, gguf_pattern(16, 3));
  w.tensor("q8_0", kQ8_0, {64, 3}, gguf_pattern(2 * 34 * 3, 4));
  w.tensor("q4_k", kQ4_K, {512, 1}, gguf_pattern(2 * 144, 5));
  w.tensor("q6_k", kQ6_K, {256, 2}, gguf_pattern(2 * 210, 6));
  w.tensor("q4_0", kQ4_0, {64, 2}, gguf_pattern(2 * 2 * 18, 7));
  w.tensor("q5_0", kQ5_0, {896, 1}, gguf_pattern(28 * 22, 8));  // Qwen2.5-0.5B's width: not whole Q4_K blocks
  w.tensor("q5_k", kQ5_K, {256, 3}, gguf_pattern(3 * 176, 9));
  w.tensor("q4_1", kQ4_1, {64, 3}, gguf_pattern(3 * 2 * 20, 10));
  w.tensor("q5_1", kQ5_1, {96, 1}, gguf_pattern(3 * 24, 11));
  const auto g = parse(w.bytes());
  CHECK(g->alignment() == 64);
  CHECK(g->data_offset() % 64 == 0);
  REQUIRE(g->tensors().size() == 11);
  const auto* base = reinterpret_cast<const uint8_t*>(g.bytes->data());
  for (size_t k = 0; k < 11; ++k) {
    const GgufTensor& t = g->tensors()[k];
    CHECK(t.offset % 64 == 0);
    CHECK(t.nbytes == w.tensors[k].data.size());
    CHECK(std::string(reinterpret_cast<const char*>(t.data), t.nbytes) == w.tensors[k].data);
    CHECK(t.data == base + g->data_offset() + t.offset);
    CHECK(g->tensor(t.name) == &t);
  }
  CHECK(g->tensor("f32")->shape == std::vector<int64_t>{2, 3});
  CHECK(g->tensor("bf16")->shape == std::vector<int64_t>{2, 1, 4});
  CHECK(*g->tensor("f16")->dense_dtype() == DType::F16);
  CHECK(*g->tensor("bf16")->dense_dtype() == DType::BF16);
  CHECK(*g->tensor("q8_0")->quant_type() == QuantType::Q8_0);
  CHECK(*g->tensor("q4_k")->quant_type() == QuantType::Q4_K);
  CHECK(*g->tensor("q6_k")->quant_type() == QuantType::Q6_K);
  CHECK(g->tensor("q4_0")->view("a").dtype == DType::Q4_0);
  CHECK(g->tensor("q5_0")->view("b").dtype == DType::Q5_0);
  CHECK(g->tensor("q5_k")->view("c").dtype == DType::Q5_K);
  CHECK(g->tensor("q4_1")->view("d").dtype == DType::Q4_1);
  CHECK(g->tensor("q5_1")->view("e").dtype == DType::Q5_1);
  CHECK_FALSE(g->tensor("q6_k")->dense_dtype());
  const Tensor dense = g->tensor("f32")->view("x");
  CHECK(dense.name == "x");
  CHECK(dense.nbytes() == 24);
  const Tensor q4 = g->tensor("q4_k")->view("y");
  CHECK(q4.dtype == DType::Q4_K);
  CHECK(q4.nbytes() == g->tensor("q4_k")->nbytes);
}

TEST_CASE("gguf: open maps a file, a missing file and a directory are model errors naming it") {
  TempDir dir;
  const std::string bytes = qwen2_file().bytes();
  std::ofstream(dir.path / "m.gguf", std::ios::binary) << bytes;
  const auto g = GgufFile::open(dir.path / "m.gguf");
  CHECK(g->string("general.architecture") == "qwen2");
  CHECK(g->tensors().size() == 2 + 2 * 12);
  CHECK_THROWS_WITH_AS(GgufFile::open(dir.path / "absent.gguf"), doctest::Contains("absent.gguf"), EngineError);
  CHECK_THROWS_WITH_AS(GgufFile::open(dir.path), doctest::Contains("GGUF"), EngineError);
}

TEST_CASE("gguf: malformed files are model errors naming the key or tensor") {
  const std::string valid = qwen2_file().bytes();
  CHECK(refusal(valid) == "");
  CHECK(contains(refusal("GGML" + valid.substr(4)), "GGUF magic"));
  for (uint32_t v : {1u, 4u, 0xFFFFFFFFu}) {
    GgufWriter w = qwen2_file();
    w.version = v;
    CHECK(contains(refusal(w.bytes()), "GGUF version " + std::to_string(v)));
  }
  SUBCASE("every truncation") {
    // Cut everywhere in the header and infos, and in the data section at a few places.
    GgufWriter w = qwen2_file();
    const auto g = parse(valid);
    for (size_t n = 0; n < valid.size(); n += n < g->data_offset() + 8 ? 1 : 509) {
      const std::string why = refusal(valid.substr(0, n));
      INFO("cut at " << n);
      CHECK(why != "");
    }
  }
  auto with = [](auto change) {
    GgufWriter w = qwen2_file();
    change(w);
    return refusal(w.bytes());
  };
  std::string huge_count;
  GgufWriter::put<uint32_t>(huge_count, GgufWriter::STRING);
  GgufWriter::put<uint64_t>(huge_count, 1ull << 61);
  CHECK(contains(with([&](GgufWriter& w) { w.raw("tokenizer.ggml.tokens", GgufWriter::ARRAY, huge_count); }),
                 "'tokenizer.ggml.tokens' declares 2305843009213693952 string elements"));
  std::string huge_string;
  GgufWriter::put<uint64_t>(huge_string, ~0ull);
  CHECK(contains(with([&](GgufWriter& w) { w.raw("general.name", GgufWriter::STRING, huge_string); }),
                 "string value of 'general.name'"));
  CHECK(contains(with([&](GgufWriter& w) { w.raw("x.y", 13, ""); }), "'x.y' has value type 13"));
  CHECK(contains(with([&](GgufWriter& w) { w.scalar<uint8_t>("b", GgufWriter::BOOL, 7); }), "'b' is a bool of value 7"));
  CHECK(contains(with([&](GgufWriter& w) { w.u32("qwen2.block_count", 3); }), "'qwen2.block_count' appears twice"));
  CHECK(contains(with([&](GgufWriter& w) { w.u32("general.alignment", 48); }), "general.alignment"));
  CHECK(contains(with([&](GgufWriter& w) { w.f32("general.alignment", 32); }), "general.alignment"));
  CHECK(contains(with([&](GgufWriter& w) { w.tensors[2].type = kQ8_1; }),
                 "tensor 'blk.0.attn_norm.weight' has type Q8_1 (9), which is not supported"));
  CHECK(contains(with([&](GgufWriter& w) { w.tensors[2].type = 1000; }), "type unknown (1000)"));
  CHECK(contains(with([&](GgufWriter& w) { w.tensors[2].dims = {0}; }), "'blk.0.attn_norm.weight' has dimensions"));
  CHECK(contains(with([&](GgufWriter& w) { w.tensors[2].dims = {1ull << 32, 1ull << 32}; }), "overflows"));
  CHECK(contains(with([&](GgufWriter& w) { w.tensors[2].dims = {1, 1, 1, 1, 1}; }), "has 5 dimensions"));
  CHECK(contains(with([&](GgufWriter& w) { w.tensors[2].dims = {1ull << 40}; }), "runs past the end"));
  CHECK(contains(with([&](GgufWriter& w) { w.tensors[3].name = w.tensors[2].name; }),
                 "tensor 'blk.0.attn_norm.weight' appears twice"));
  CHECK(contains(with([&](GgufWriter& w) { w.tensors[2].name = std::string(64, 'x'); }), "a name of 64 bytes"));
  CHECK(contains(with([&](GgufWriter& w) {
                   w.tensors[2].type = kQ8_0;
                   w.tensors[2].dims = {48};
                 }),
                 "rows of 48 elements"));
  {
    GgufWriter w = qwen2_file();
    std::vector<uint64_t> offsets;
    uint64_t at = 0;
    for (const auto& t : w.tensors) offsets.push_back(at), at += (t.data.size() + 31) / 32 * 32;
    offsets[5] += 4;
    CHECK(contains(refusal(w.bytes(offsets)), "offset " + std::to_string(offsets[5]) + ", not a multiple of the alignment 32"));
    offsets[5] = offsets[4];
    CHECK(contains(refusal(w.bytes(offsets)), "overlaps tensor"));
  }
}

TEST_CASE("gguf: qwen2 hyper-parameters equal those of the same model's config.json") {
  const auto g = parse(qwen2_file().bytes());
  const ModelConfig c = gguf_config(*g);
  const ModelConfig j = parse_config(json{{"architectures", {"Qwen2ForCausalLM"}},
                                          {"vocab_size", 100},
                                          {"hidden_size", 64},
                                          {"intermediate_size", 256},
                                          {"num_hidden_layers", 2},
                                          {"num_attention_heads", 4},
                                          {"num_key_value_heads", 2},
                                          {"max_position_embeddings", 32768},
                                          {"rms_norm_eps", 1e-6},
                                          {"rope_theta", 1000000.0},
                                          {"tie_word_embeddings", true},
                                          {"torch_dtype", "float32"},
                                          {"bos_token_id", 99},
                                          {"eos_token_id", 99}},
                                     "config.json");
  CHECK(c.architecture == j.architecture);
  CHECK(c.vocab_size == j.vocab_size);
  CHECK(c.hidden_size == j.hidden_size);
  CHECK(c.intermediate_size == j.intermediate_size);
  CHECK(c.num_layers == j.num_layers);
  CHECK(c.num_heads == j.num_heads);
  CHECK(c.num_kv_heads == j.num_kv_heads);
  CHECK(c.head_dim == j.head_dim);
  CHECK(c.max_position_embeddings == j.max_position_embeddings);
  CHECK(c.rms_norm_eps == j.rms_norm_eps);
  CHECK(c.rope_theta == j.rope_theta);
  CHECK(c.tie_word_embeddings == j.tie_word_embeddings);
  CHECK(c.qkv_bias == j.qkv_bias);
  CHECK(c.torch_dtype == j.torch_dtype);
  CHECK(c.bos_token_id == j.bos_token_id);
  CHECK(c.eos_token_ids == j.eos_token_ids);
}

TEST_CASE("gguf: llama and qwen3 hyper-parameters, RoPE scaling and unknown architectures are named") {
  SUBCASE("llama: no biases, untied, q/k rows in interleaved RoPE order") {
    const auto g = parse(qwen2_file(false, "llama").bytes());
    const ModelConfig c = gguf_config(*g);
    CHECK(c.architecture == "LlamaForCausalLM");
    CHECK_FALSE(c.qkv_bias);
    CHECK_FALSE(c.tie_word_embeddings);
    const auto w = gguf_weights(*g, c);
    CHECK(w.at("lm_head.weight").tensor == g->tensor("output.weight"));
    CHECK(w.at("model.layers.1.self_attn.q_proj.weight").interleaved_rope_head_dim == 16);
    CHECK(w.at("model.layers.1.self_attn.k_proj.weight").interleaved_rope_head_dim == 16);
    CHECK(w.at("model.layers.1.self_attn.v_proj.weight").interleaved_rope_head_dim == 0);
  }
  SUBCASE("qwen3: head_dim from attention.key_length") {
    GgufWriter w = qwen2_file(true, "qwen3");
    w.u32("qwen3.attention.key_length", 32);
    w.u32("qwen3.attention.value_length", 32);
    w.u32("qwen3.rope.dimension_count", 32);
    const ModelConfig c = gguf_config(*parse(w.bytes()));
    CHECK(c.architecture == "Qwen3ForCausalLM");
    CHECK(c.head_dim == 32);
    CHECK_FALSE(c.qkv_bias);
  }
  SUBCASE("Llama 3 rope_freqs.weight: the divisors of the RoPE frequencies") {
    const std::vector<float> divisors = {1, 1, 1.5f, 2.75f, 8, 8, 8, 8};
    auto with_freqs = [&](uint32_t type, std::vector<uint64_t> dims, std::vector<float> values) {
      GgufWriter w = qwen2_file(false, "llama");
      std::string bytes;
      for (float v : values)  // an F16 file holds 1.0 in each: its type is refused before its values are read
        type == kGgmlF32 ? GgufWriter::put<float>(bytes, v) : GgufWriter::put<uint16_t>(bytes, 0x3C00);
      w.tensor("rope_freqs.weight", type, std::move(dims), bytes);
      return parse(w.bytes());
    };
    const auto g = with_freqs(kGgmlF32, {8}, divisors);
    const GgufHyperParams h = gguf_hyper_params(*g);
    CHECK(h.rope_scaling.type == "llama3");
    CHECK(h.rope_scaling.freq_factors == g->tensor("rope_freqs.weight"));
    const ModelConfig c = gguf_config(*g);
    CHECK(c.rope_scaling.type == "llama3");
    CHECK(c.rope_scaling.freq_divisors == divisors);
    CHECK(gguf_weights(*g, h.config).size() == 3 + 2 * 9);
    auto refusal_of = [](const Parsed& p) { return error_of([&] { gguf_config(*p); }); };
    const EngineError f16 = refusal_of(with_freqs(kGgmlF16, {8}, divisors));
    CHECK(f16.field == "rope_freqs.weight");
    CHECK(contains(f16.what(), "tensor 'rope_freqs.weight' is F16 [8]"));
    CHECK(f16.expected == "F32 [8]");
    const EngineError shape = refusal_of(with_freqs(kGgmlF32, {16}, std::vector<float>(16, 1.0f)));
    CHECK(shape.field == "rope_freqs.weight");
    CHECK(contains(shape.what(), "is F32 [16]"));
    std::vector<float> zero = divisors;
    zero[5] = 0;
    const EngineError bad = refusal_of(with_freqs(kGgmlF32, {8}, zero));
    CHECK(bad.field == "rope_freqs.weight");
    CHECK(contains(bad.what(), "element 5"));
    GgufWriter linear = qwen2_file(false, "llama");
    linear.str("llama.rope.scaling.type", "linear");
    linear.tensor("rope_freqs.weight", kGgmlF32, {8}, std::string(32, '\0'));
    CHECK(contains(refusal_of(parse(linear.bytes())).what(), "RoPE scaling 'linear'"));
  }
  SUBCASE("linear scaling keys") {
    GgufWriter w = qwen2_file();
    w.str("qwen2.rope.scaling.type", "linear");
    w.f32("qwen2.rope.scaling.factor", 4.0f);
    w.u32("qwen2.rope.scaling.original_context_length", 8192);
    const auto g = parse(w.bytes());
    const GgufHyperParams h = gguf_hyper_params(*g);
    CHECK(h.rope_scaling.type == "linear");
    CHECK(h.rope_scaling.factor == 4.0);
    CHECK(h.rope_scaling.original_context_length == 8192);
    CHECK_THROWS_WITH_AS(gguf_config(*g), doctest::Contains("RoPE scaling 'linear'"), EngineError);
  }
  SUBCASE("errors name the key") {
    auto refusal_of = [](GgufWriter w) {
      try {
        gguf_config(*parse(w.bytes()));
      } catch (const EngineError& e) {
        return std::string(e.what()) + " [" + e.field + "]";
      }
      return std::string();
    };
    CHECK(contains(refusal_of(qwen2_file(true, "gemma")), "architecture 'gemma', which is not supported"));
    GgufWriter w = qwen2_file();
    w.u32("qwen2.attention.head_count_kv", 3);  // a second value for the key: parse refuses
    CHECK(contains(refusal_of(w), "appears twice"));
    GgufWriter odd;
    odd.str("general.architecture", "qwen2");
    odd.tensor("token_embd.weight", kGgmlF32, {4, 4}, gguf_pattern(64));
    CHECK(contains(refusal_of(odd), "[qwen2.embedding_length]"));
    GgufWriter eps = qwen2_file();
    eps.kv.clear(), eps.n_kv = 0;
    eps.str("general.architecture", "qwen2");
    for (const char* k : {"block_count", "embedding_length", "feed_forward_length", "attention.head_count"})
      eps.u32(std::string("qwen2.") + k, 64);
    eps.u32("qwen2.context_length", 64);
    CHECK(contains(refusal_of(eps), "[qwen2.attention.layer_norm_rms_epsilon]"));
  }
}

TEST_CASE("gguf: tensor names map to Hugging Face names, tied when output.weight is absent") {
  const auto g = parse(qwen2_file().bytes());
  const ModelConfig c = gguf_config(*g);
  CHECK(c.tie_word_embeddings);
  const auto w = gguf_weights(*g, c);
  std::set<std::string> names;
  for (const auto& [name, weight] : w) names.insert(name);
  std::set<std::string> expected = {"model.embed_tokens.weight", "model.norm.weight"};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* s : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                          "self_attn.v_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.bias",
                          "self_attn.v_proj.bias", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                          "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      expected.insert(p + s);
  }
  CHECK(names == expected);
  CHECK(w.at("model.layers.1.mlp.down_proj.weight").tensor == g->tensor("blk.1.ffn_down.weight"));
  CHECK(w.at("model.layers.1.mlp.down_proj.weight").tensor->shape == std::vector<int64_t>{64, 256});
  CHECK(w.at("model.layers.0.self_attn.q_proj.weight").interleaved_rope_head_dim == 0);
  CHECK(gguf_hf_name(*g, "blk.12.attn_k_norm.weight") == "model.layers.12.self_attn.k_norm.weight");
  CHECK_THROWS_WITH_AS(gguf_hf_name(*g, "blk.x.attn_q.weight"), doctest::Contains("'blk.x.attn_q.weight'"), EngineError);
  CHECK_THROWS_WITH_AS(gguf_hf_name(*g, "blk.0.ffn_gate_exps.weight"), doctest::Contains("not one the engine knows"),
                       EngineError);
  GgufWriter extra = qwen2_file();
  extra.tensor("blk.2.attn_norm.weight", kGgmlF32, {64}, gguf_pattern(256));
  const auto g2 = parse(extra.bytes());
  CHECK_THROWS_WITH_AS(gguf_weights(*g2, c), doctest::Contains("past block_count 2"), EngineError);
}

TEST_CASE("gguf: the interleaved RoPE row order undoes convert_hf_to_gguf's permute") {
  // convert_hf_to_gguf.py: w.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2): file row
  // (h, i, j) = HF row (h, j, i), for i < hd/2 and j in {0, 1}.
  const int hd = 8, heads = 3;
  std::vector<int64_t> file_of_hf(heads * hd);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd / 2; ++i)
      for (int j = 0; j < 2; ++j) file_of_hf[h * hd + j * (hd / 2) + i] = h * hd + i * 2 + j;
  for (int r = 0; r < heads * hd; ++r) CHECK(gguf_row_of_hf_row(r, hd) == file_of_hf[r]);
}
