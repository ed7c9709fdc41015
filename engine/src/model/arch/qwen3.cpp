// Qwen3 dense: Llama's layer with an RMSNorm over each q and k head (before RoPE); QKV
// biases only with attention_bias.
#include "model/arch/llama.h"

namespace runahead {

namespace {
std::vector<LayerTensor> qwen3_layer() {
  std::vector<LayerTensor> layer = llama_layer();
  layer.push_back({"self_attn.q_norm.weight", Role::QNorm, {Dim::HeadDim}});
  layer.push_back({"self_attn.k_norm.weight", Role::KNorm, {Dim::HeadDim}});
  return layer;
}
}  // namespace

extern const Architecture qwen3_architecture = {
    .hf_name = "Qwen3ForCausalLM",
    .qkv_bias_always = false,
    .default_max_positions = 32768,
    .layer = qwen3_layer(),
    .step = llama_step(),
};

}  // namespace runahead
