#pragma once
// A GGUF file read as a model: its hyper-parameters as the ModelConfig that the same model's
// config.json gives, and its tensors under their Hugging Face names. Architectures: qwen2,
// llama, qwen3 (general.architecture); anything else is refused by name.
#include <string>
#include <unordered_map>
#include <vector>

#include "model/config.h"
#include "model/gguf.h"

namespace runahead {

// RoPE scaling as the file states it. "none": plain RoPE. "llama3": the file carries
// rope_freqs.weight, the per-frequency divisors that convert_hf_to_gguf.py computes from a
// Llama 3.1 config's rope_scaling (factor, low/high_freq_factor, original context).
// "linear", "yarn", ...: {arch}.rope.scaling.type with its factor and original context.
struct GgufRopeScaling {
  std::string type = "none";
  double factor = 1.0;
  int64_t original_context_length = 0;
  const GgufTensor* freq_factors = nullptr;  // rope_freqs.weight, [head_dim / 2] F32
};

struct GgufHyperParams {
  ModelConfig config;
  GgufRopeScaling rope_scaling;
};

// One weight under its Hugging Face name.
struct GgufWeight {
  const GgufTensor* tensor = nullptr;
  // llama.cpp's converter reorders the rows of a llama model's q/k projections (and their
  // biases) for GGML's interleaved RoPE; when this is > 0 the rows are in that order, with
  // this head_dim, and gguf_row_of_hf_row maps an HF row to its row in the file. 0: HF order.
  int interleaved_rope_head_dim = 0;
};

// Every key read is named in errors. Throws model_error for an unsupported architecture.
GgufHyperParams gguf_hyper_params(const GgufFile& g);
// As gguf_hyper_params, with rope_freqs.weight's divisors as the config's llama3 RoPE
// scaling; refuses any other RoPE scaling (config.json's parse_config refuses a scaled
// rope_type other than llama3 the same way).
ModelConfig gguf_config(const GgufFile& g);

// The Hugging Face name of a GGUF tensor name ("blk.3.ffn_down.weight" ->
// "model.layers.3.mlp.down_proj.weight"), or "" for one without (rope_freqs.weight).
// Throws model_error naming the tensor when the name is not one of the known patterns.
std::string gguf_hf_name(const GgufFile& g, const std::string& gguf_name);

// All weights by Hugging Face name. lm_head.weight is absent when output.weight is (tied:
// config.tie_word_embeddings is then true).
std::unordered_map<std::string, GgufWeight> gguf_weights(const GgufFile& g, const ModelConfig& config);

// The row of the file that holds HF row `hf_row` of a q/k projection with GGML's
// interleaved RoPE order: within each head, HF rows [0, hd/2) and [hd/2, hd) interleave.
inline int64_t gguf_row_of_hf_row(int64_t hf_row, int head_dim) {
  const int64_t head = hf_row / head_dim, r = hf_row % head_dim, half = head_dim / 2;
  return head * head_dim + (r % half) * 2 + r / half;
}

}  // namespace runahead
