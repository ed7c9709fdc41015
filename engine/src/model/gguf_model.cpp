#include "model/gguf_model.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "model/model_error.h"

namespace runahead {

namespace {

struct ArchName {
  const char* gguf;  // general.architecture
  const char* hf;    // config.json architectures[0]
};
constexpr ArchName kArchitectures[] = {
    {"qwen2", "Qwen2ForCausalLM"}, {"llama", "LlamaForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};

std::string gguf_architecture(const GgufFile& g) {
  const std::string arch = g.string("general.architecture");
  for (const ArchName& a : kArchitectures)
    if (arch == a.gguf) return arch;
  g.fail("general.architecture", "names architecture '" + arch + "', which is not supported",
         "one of qwen2, llama, qwen3");
}

const char* hf_architecture(const std::string& arch) {
  for (const ArchName& a : kArchitectures)
    if (arch == a.gguf) return a.hf;
  return "";
}

// Per-layer names: GGUF suffix after "blk.N." -> HF suffix after "model.layers.N.".
struct LayerName {
  const char* gguf;
  const char* hf;
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
constexpr LayerName kModelNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

int positive_int(const GgufFile& g, const std::string& key, int min = 1) {
  return int(g.integer(key, min, std::numeric_limits<int>::max()));
}

}  // namespace

GgufHyperParams gguf_hyper_params(const GgufFile& g) {
  const std::string arch = gguf_architecture(g);
  const std::string p = arch + ".";
  const int int_max = std::numeric_limits<int>::max();
  GgufHyperParams h;
  ModelConfig& c = h.config;
  c.architecture = hf_architecture(arch);
  const GgufTensor* embed = g.tensor("token_embd.weight");
  if (!embed || embed->shape.size() != 2)
    g.fail("token_embd.weight", "has no 2-D tensor 'token_embd.weight'", "the token embedding [vocab, hidden]");
  // config.json's vocab_size is the embedding's row count (the token list may be shorter).
  c.vocab_size = int(std::min<int64_t>(embed->shape[0], int_max));
  c.hidden_size = positive_int(g, p + "embedding_length");
  c.intermediate_size = positive_int(g, p + "feed_forward_length");
  c.num_layers = positive_int(g, p + "block_count");
  c.num_heads = positive_int(g, p + "attention.head_count");
  c.num_kv_heads = int(g.optional_integer(p + "attention.head_count_kv", 1, int_max).value_or(c.num_heads));
  if (c.num_heads % c.num_kv_heads != 0)
    g.fail(p + "attention.head_count_kv",
           "metadata '" + p + "attention.head_count_kv' is " + std::to_string(c.num_kv_heads) +
               ", which does not divide attention.head_count " + std::to_string(c.num_heads),
           "a divisor of " + p + "attention.head_count");
  const auto key_length = g.optional_integer(p + "attention.key_length", 1, int_max);
  if (!key_length && c.hidden_size % c.num_heads != 0)
    g.fail(p + "attention.key_length", "metadata '" + p + "attention.key_length' is missing and embedding_length is not a multiple of head_count",
           "attention.key_length, or embedding_length divisible by attention.head_count");
  c.head_dim = int(key_length.value_or(c.hidden_size / c.num_heads));
  const int64_t value_length = g.optional_integer(p + "attention.value_length", 1, int_max).value_or(c.head_dim);
  if (value_length != c.head_dim)
    g.fail(p + "attention.value_length", "metadata '" + p + "attention.value_length' is " + std::to_string(value_length) +
                                             " but key_length is " + std::to_string(c.head_dim),
           "value_length equal to key_length");
  const int64_t rope_dims = g.optional_integer(p + "rope.dimension_count", 1, int_max).value_or(c.head_dim);
  if (rope_dims != c.head_dim)
    g.fail(p + "rope.dimension_count", "metadata '" + p + "rope.dimension_count' is " + std::to_string(rope_dims) +
                                           ": partial rotary embeddings are not supported",
           "the head dimension " + std::to_string(c.head_dim));
  c.max_position_embeddings = positive_int(g, p + "context_length", kMinPositionEmbeddings);
  const double eps = g.optional_number(p + "attention.layer_norm_rms_epsilon").value_or(-1);
  if (!(eps > 0))
    g.fail(p + "attention.layer_norm_rms_epsilon", "metadata '" + p + "attention.layer_norm_rms_epsilon' is missing or not positive",
           "a positive float");
  c.rms_norm_eps = float(eps);
  const double theta = g.optional_number(p + "rope.freq_base").value_or(10000.0);
  if (!(theta > 0)) g.fail(p + "rope.freq_base", "metadata '" + p + "rope.freq_base' is not positive", "a positive float");
  c.rope_theta = float(theta);
  c.tie_word_embeddings = g.tensor("output.weight") == nullptr;
  c.qkv_bias = arch == "qwen2" || g.tensor("blk.0.attn_q.bias") != nullptr;
  switch (embed->type) {
    case kGgmlF32: c.torch_dtype = "float32"; break;
    case kGgmlF16: c.torch_dtype = "float16"; break;
    case kGgmlBF16: c.torch_dtype = "bfloat16"; break;
    default: c.torch_dtype = quant_format(*embed->quant_type()).name;
  }
  c.bos_token_id = int(g.optional_integer("tokenizer.ggml.bos_token_id", 0, int_max).value_or(-1));
  if (auto eos = g.optional_integer("tokenizer.ggml.eos_token_id", 0, int_max)) c.eos_token_ids = {int(*eos)};

  GgufRopeScaling& rs = h.rope_scaling;
  if (auto type = g.optional_string(p + "rope.scaling.type")) rs.type = *type;
  rs.factor = g.optional_number(p + "rope.scaling.factor").value_or(1.0);
  rs.original_context_length = g.optional_integer(p + "rope.scaling.original_context_length", 0, int_max).value_or(0);
  if ((rs.freq_factors = g.tensor("rope_freqs.weight"))) {
    const GgufTensor& f = *rs.freq_factors;
    if (f.type != kGgmlF32 || f.shape.size() != 1 || f.shape[0] != c.head_dim / 2)
      g.fail(f.name, "tensor 'rope_freqs.weight' is " + std::string(ggml_type_name(f.type)) + " " + shape_string(f.shape),
             "F32 [" + std::to_string(c.head_dim / 2) + "]");
    if (rs.type == "none") rs.type = "llama3";
  }
  return h;
}

ModelConfig gguf_config(const GgufFile& g) {
  GgufHyperParams h = gguf_hyper_params(g);
  const GgufRopeScaling& rs = h.rope_scaling;
  if (rs.type == "llama3" && rs.freq_factors) {
    const GgufTensor& f = *rs.freq_factors;  // F32 [head_dim / 2], checked by gguf_hyper_params
    std::vector<float> divisors(size_t(f.shape[0]));
    std::memcpy(divisors.data(), f.data, divisors.size() * sizeof(float));
    for (size_t i = 0; i < divisors.size(); ++i)
      if (!(std::isfinite(divisors[i]) && divisors[i] > 0))
        g.fail(f.name,
               "tensor 'rope_freqs.weight' has element " + std::to_string(i) + " = " + std::to_string(divisors[i]),
               "positive finite divisors of the RoPE frequencies");
    h.config.rope_scaling.type = "llama3";
    h.config.rope_scaling.freq_divisors = std::move(divisors);
  } else if (rs.type != "none") {
    const std::string field = rs.freq_factors ? "rope_freqs.weight" : "rope.scaling.type";
    g.fail(field, "uses RoPE scaling '" + rs.type + "' (" + field + "), which is not supported yet",
           "plain RoPE, or Llama 3's rope_freqs.weight without another rope.scaling.type");
  }
  return h.config;
}

std::string gguf_hf_name(const GgufFile& g, const std::string& name) {
  for (const LayerName& n : kModelNames)
    if (name == n.gguf) return n.hf;
  if (name == "rope_freqs.weight") return "";
  if (name.rfind("blk.", 0) == 0) {
    const size_t dot = name.find('.', 4);
    const std::string layer = dot == std::string::npos ? "" : name.substr(4, dot - 4);
    const bool digits = !layer.empty() && layer.size() <= 6 && layer.find_first_not_of("0123456789") == std::string::npos;
    if (digits)
      for (const LayerName& n : kLayerNames)
        if (name.compare(dot + 1, std::string::npos, n.gguf) == 0)
          return "model.layers." + std::to_string(std::stoi(layer)) + "." + n.hf;
  }
  g.fail(name, "has tensor '" + name + "', which is not one the engine knows",
         "token_embd, output_norm, output, rope_freqs or blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, "
         "attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down}");
}

std::unordered_map<std::string, GgufWeight> gguf_weights(const GgufFile& g, const ModelConfig& config) {
  const bool llama = g.string("general.architecture") == "llama";
  std::unordered_map<std::string, GgufWeight> weights;
  for (const GgufTensor& t : g.tensors()) {
    const std::string hf = gguf_hf_name(g, t.name);
    if (hf.empty()) continue;
    if (hf.rfind("model.layers.", 0) == 0 && std::stoi(hf.substr(13)) >= config.num_layers)
      g.fail(t.name, "has tensor '" + t.name + "' past block_count " + std::to_string(config.num_layers),
             "layers 0.." + std::to_string(config.num_layers - 1));
    GgufWeight w{&t, 0};
    const bool q_or_k = hf.find("self_attn.q_proj.") != std::string::npos || hf.find("self_attn.k_proj.") != std::string::npos;
    if (llama && q_or_k) w.interleaved_rope_head_dim = config.head_dim;
    weights.emplace(hf, w);
  }
  return weights;
}

}  // namespace runahead
