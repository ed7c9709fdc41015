#pragma once
// Test helper: a loaded model written as a GGUF file (test_gguf_writer.h) the way llama.cpp's
// convert_hf_to_gguf.py writes it: llama.cpp's tensor names, norms and biases in F32, the
// matrices in the asked type, a llama model's q/k rows permuted for GGML's RoPE, its llama3
// RoPE scaling as rope_freqs.weight. Names, the permutation and the frequency factors are
// spelled out here, not taken from the engine's reader.
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "model/quant_blocks.h"
#include "model/half.h"
#include "model/numerics.h"
#include "model/weights.h"
#include "test_gguf_writer.h"

namespace runahead::test {

// ggml type numbers.
enum GgmlType : uint32_t {
  kGgufF32 = 0, kGgufF16 = 1, kGgufQ4_0 = 2, kGgufQ4_1 = 3, kGgufQ5_0 = 6, kGgufQ5_1 = 7, kGgufQ8_0 = 8,
  kGgufQ4_K = 12, kGgufQ5_K = 13, kGgufQ6_K = 14, kGgufBF16 = 30
};

inline int gguf_block(uint32_t type) {
  const auto q = quant_type_of_ggml(type);
  return q ? quant_format(*q).block_elems : 1;
}

// `values` [rows, cols] encoded as `type`.
inline std::string gguf_encode(const std::vector<float>& values, int64_t cols, uint32_t type) {
  std::string out;
  if (type == kGgufF32) return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  if (type == kGgufBF16 || type == kGgufF16) {
    for (float v : values) GgufWriter::put<uint16_t>(out, type == kGgufBF16 ? f32_to_bf16(v) : f32_to_f16(v));
    return out;
  }
  const QuantType q = *quant_type_of_ggml(type);
  const size_t rb = quant_row_bytes(q, cols);
  out.resize(values.size() / size_t(cols) * rb);
  for (size_t r = 0; r < values.size() / size_t(cols); ++r)
    quantize_row(q, values.data() + r * size_t(cols), cols, reinterpret_cast<uint8_t*>(out.data()) + r * rb);
  return out;
}

// convert_hf_to_gguf's LlamaModel.permute: within each head, HF rows i (first half) and
// i + hd/2 (second half) become file rows 2i and 2i + 1.
inline std::vector<float> llama_permute(const std::vector<float>& w, int64_t rows, int64_t cols, int head_dim) {
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, i = r % head_dim, half = head_dim / 2;
    const int64_t to = head * head_dim + (i % half) * 2 + i / half;
    std::copy_n(w.begin() + r * cols, cols, out.begin() + to * cols);
  }
  return out;
}

// convert_hf_to_gguf's LlamaModel.generate_extra_tensors for rope_type llama3: the factor
// each RoPE frequency is divided by, computed in float32 as its torch tensors are.
inline std::vector<float> llama3_rope_freqs(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  const float old_context_len = float(r.original_max_positions);
  const float low_freq_wavelen = old_context_len / r.low_freq_factor;
  const float high_freq_wavelen = old_context_len / r.high_freq_factor;
  std::vector<float> rope_factors;
  for (int i = 0; i < c.head_dim; i += 2) {
    const float freq = 1.0f / std::pow(c.rope_theta, float(i) / float(c.head_dim));
    const float wavelen = 2 * std::numbers::pi_v<float> / freq;
    if (wavelen < high_freq_wavelen) {
      rope_factors.push_back(1);
    } else if (wavelen > low_freq_wavelen) {
      rope_factors.push_back(r.factor);
    } else {
      const float smooth = (old_context_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      rope_factors.push_back(1 / ((1 - smooth) / r.factor + smooth));
    }
  }
  return rope_factors;
}

// The GGUF of `w` with matrices in `type` (a matrix whose rows the type's block does not
// divide falls back to `fallback`, as llama.cpp's quantizer falls back for such tensors:
// Q8_0, or Q5_0 in a Q4_K_M file).
inline std::string gguf_of_model(const ModelWeights& w, uint32_t type, uint32_t fallback = kGgufQ8_0) {
  const ModelConfig& c = w.config;
  const std::string arch = c.architecture == "LlamaForCausalLM" ? "llama" : c.architecture == "Qwen3ForCausalLM" ? "qwen3" : "qwen2";
  GgufWriter g;
  g.str("general.architecture", arch);
  g.u32(arch + ".embedding_length", uint32_t(c.hidden_size));
  g.u32(arch + ".feed_forward_length", uint32_t(c.intermediate_size));
  g.u32(arch + ".block_count", uint32_t(c.num_layers));
  g.u32(arch + ".attention.head_count", uint32_t(c.num_heads));
  g.u32(arch + ".attention.head_count_kv", uint32_t(c.num_kv_heads));
  g.u32(arch + ".attention.key_length", uint32_t(c.head_dim));
  g.u32(arch + ".attention.value_length", uint32_t(c.head_dim));
  g.u32(arch + ".context_length", uint32_t(c.max_position_embeddings));
  g.f32(arch + ".attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  g.f32(arch + ".rope.freq_base", c.rope_theta);
  if (!c.eos_token_ids.empty()) g.u32("tokenizer.ggml.eos_token_id", uint32_t(c.eos_token_ids[0]));

  auto add = [&](const std::string& name, const Tensor& t, bool matrix, int permute_head_dim = 0) {
    std::vector<float> v = widen(t);
    const int64_t cols = t.shape.back(), rows = int64_t(v.size()) / cols;
    if (permute_head_dim)  // a bias is permuted element by element
      v = t.shape.size() == 1 ? llama_permute(v, cols, 1, permute_head_dim) : llama_permute(v, rows, cols, permute_head_dim);
    uint32_t ty = matrix ? type : kGgufF32;
    if (cols % gguf_block(ty) != 0) ty = fallback;
    std::vector<uint64_t> dims;
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) dims.push_back(uint64_t(*d));
    g.tensor(name, ty, dims, gguf_encode(v, cols, ty));
  };
  add("token_embd.weight", w.embed, true);
  static const std::pair<Role, const char*> kNames[] = {
      {Role::AttnNorm, "attn_norm.weight"}, {Role::Wq, "attn_q.weight"},       {Role::Wk, "attn_k.weight"},
      {Role::Wv, "attn_v.weight"},          {Role::Bq, "attn_q.bias"},         {Role::Bk, "attn_k.bias"},
      {Role::Bv, "attn_v.bias"},            {Role::QNorm, "attn_q_norm.weight"}, {Role::KNorm, "attn_k_norm.weight"},
      {Role::Wo, "attn_output.weight"},     {Role::MlpNorm, "ffn_norm.weight"}, {Role::WGate, "ffn_gate.weight"},
      {Role::WUp, "ffn_up.weight"},         {Role::WDown, "ffn_down.weight"}};
  for (size_t i = 0; i < w.layers.size(); ++i)
    for (const auto& [role, name] : kNames) {
      const Tensor& t = w.layers[i][role];
      if (t.empty()) continue;
      const bool qk = arch == "llama" && (role == Role::Wq || role == Role::Wk || role == Role::Bq || role == Role::Bk);
      add("blk." + std::to_string(i) + "." + name, t, t.shape.size() == 2, qk ? c.head_dim : 0);
    }
  if (c.rope_scaling.type == "llama3") {
    const std::vector<float> f = llama3_rope_freqs(c);
    g.tensor("rope_freqs.weight", kGgufF32, {f.size()}, gguf_encode(f, int64_t(f.size()), kGgufF32));
  }
  add("output_norm.weight", w.final_norm, false);
  if (w.lm_head.data != w.embed.data) add("output.weight", w.lm_head, true);
  return g.bytes();
}

}  // namespace runahead::test
