#include "model/layout.h"

namespace runahead {

std::vector<TensorSlot> tensor_slots(ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q_dim = int64_t(c.num_heads) * c.head_dim, kv_dim = int64_t(c.num_kv_heads) * c.head_dim;
  w.layers.assign(c.num_layers, LayerWeights{});

  std::vector<TensorSlot> slots;
  slots.push_back({"model.embed_tokens.weight", {V, H}, TensorSlot::Matrix, &w.embed, 0});
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto add = [&](const std::string& name, std::vector<int64_t> shape, TensorSlot::Kind kind, Tensor* dst) {
      slots.push_back({p + name, std::move(shape), kind, dst, i + 1});
    };
    add("input_layernorm.weight", {H}, TensorSlot::Norm, &l.attn_norm);
    add("self_attn.q_proj.weight", {q_dim, H}, TensorSlot::Matrix, &l.wq);
    add("self_attn.k_proj.weight", {kv_dim, H}, TensorSlot::Matrix, &l.wk);
    add("self_attn.v_proj.weight", {kv_dim, H}, TensorSlot::Matrix, &l.wv);
    if (c.qkv_bias) {
      add("self_attn.q_proj.bias", {q_dim}, TensorSlot::Bias, &l.bq);
      add("self_attn.k_proj.bias", {kv_dim}, TensorSlot::Bias, &l.bk);
      add("self_attn.v_proj.bias", {kv_dim}, TensorSlot::Bias, &l.bv);
    }
    add("self_attn.o_proj.weight", {H, q_dim}, TensorSlot::Matrix, &l.wo);
    add("post_attention_layernorm.weight", {H}, TensorSlot::Norm, &l.mlp_norm);
    add("mlp.gate_proj.weight", {I, H}, TensorSlot::Matrix, &l.w_gate);
    add("mlp.up_proj.weight", {I, H}, TensorSlot::Matrix, &l.w_up);
    add("mlp.down_proj.weight", {H, I}, TensorSlot::Matrix, &l.w_down);
  }
  const int last = c.num_layers + 1;
  slots.push_back({"model.norm.weight", {H}, TensorSlot::Norm, &w.final_norm, last});
  if (!c.tie_word_embeddings) slots.push_back({"lm_head.weight", {V, H}, TensorSlot::Matrix, &w.lm_head, last});
  return slots;
}

void finish_weights(ModelWeights& w, const std::vector<TensorSlot>& slots) {
  if (w.config.tie_word_embeddings) w.lm_head = w.embed;
  w.dtype = w.embed.dtype;
  w.parameters = 0;
  w.weight_bytes = 0;
  for (const TensorSlot& s : slots) {
    w.parameters += s.dst->numel();
    w.weight_bytes += s.dst->nbytes();
  }
  // A decode step reads one embedding row, not the table, unless the table is also the lm_head.
  if (!w.config.tie_word_embeddings) w.weight_bytes -= w.embed.nbytes();
}

}  // namespace runahead
