#include "model/layout.h"

namespace runahead {

std::vector<TensorSlot> layer_slots(const ModelConfig& c, const std::string& prefix, LayerWeights& l, int group) {
  std::vector<TensorSlot> slots;
  for (BoundSpec& t : layer_tensors(architecture_of(c), c)) {
    const TensorSlot::Kind kind = t.shape.size() == 2                          ? TensorSlot::Matrix
                                  : t.role == Role::Bq || t.role == Role::Bk || t.role == Role::Bv ? TensorSlot::Bias
                                                                                                   : TensorSlot::Norm;
    slots.push_back({prefix + t.name, std::move(t.shape), kind, &l[t.role], group});
  }
  return slots;
}

std::vector<TensorSlot> tensor_slots(ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  w.layers.assign(c.num_layers, LayerWeights{});

  std::vector<TensorSlot> slots;
  slots.push_back({"model.embed_tokens.weight", {V, H}, TensorSlot::Matrix, &w.embed, 0});
  for (int i = 0; i < c.num_layers; ++i) {
    std::vector<TensorSlot> layer = layer_slots(c, "model.layers." + std::to_string(i) + ".", w.layers[i], i + 1);
    slots.insert(slots.end(), layer.begin(), layer.end());
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
