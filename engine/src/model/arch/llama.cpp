// Llama (2, 3, and 3.x with "llama3" RoPE scaling): a pre-norm decoder with a SwiGLU MLP.
#include "model/arch/llama.h"

namespace runahead {

std::vector<LayerTensor> llama_layer() {
  return {{"input_layernorm.weight", Role::AttnNorm, {Dim::Hidden}},
          {"self_attn.q_proj.weight", Role::Wq, {Dim::QDim, Dim::Hidden}},
          {"self_attn.k_proj.weight", Role::Wk, {Dim::KvDim, Dim::Hidden}},
          {"self_attn.v_proj.weight", Role::Wv, {Dim::KvDim, Dim::Hidden}},
          {"self_attn.q_proj.bias", Role::Bq, {Dim::QDim}, LayerTensor::IfQkvBias},
          {"self_attn.k_proj.bias", Role::Bk, {Dim::KvDim}, LayerTensor::IfQkvBias},
          {"self_attn.v_proj.bias", Role::Bv, {Dim::KvDim}, LayerTensor::IfQkvBias},
          {"self_attn.o_proj.weight", Role::Wo, {Dim::Hidden, Dim::QDim}},
          {"post_attention_layernorm.weight", Role::MlpNorm, {Dim::Hidden}},
          {"mlp.gate_proj.weight", Role::WGate, {Dim::Intermediate, Dim::Hidden}},
          {"mlp.up_proj.weight", Role::WUp, {Dim::Intermediate, Dim::Hidden}},
          {"mlp.down_proj.weight", Role::WDown, {Dim::Hidden, Dim::Intermediate}}};
}

std::vector<Op> llama_step() {
  return {{OpKind::RmsnormQkvRopeAppend, Buffer::X, Buffer::Q},
          {OpKind::Attention, Buffer::Q, Buffer::Att},
          {OpKind::MatmulResidual, Buffer::Att, Buffer::X, Role::Wo},
          {OpKind::RmsnormGateUpSwiglu, Buffer::X, Buffer::Act},
          {OpKind::MatmulResidual, Buffer::Act, Buffer::X, Role::WDown}};
}

extern const Architecture llama_architecture = {
    .hf_name = "LlamaForCausalLM",
    .qkv_bias_always = false,
    .default_max_positions = 2048,
    .layer = llama_layer(),
    .step = llama_step(),
};

}  // namespace runahead
