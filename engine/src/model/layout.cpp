#include "model/layout.h"

#include <algorithm>
#include <cctype>

#include "model/model_error.h"

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

namespace {

template <class F>
void for_each_matrix(const ModelWeights& w, F&& f) {
  f(w.embed);
  for (const LayerWeights& l : w.layers)
    for (const Tensor& t : l.by_role)
      if (t.shape.size() == 2) f(t);
  f(w.lm_head);
}

}  // namespace

std::string weight_formats(const ModelWeights& w) {
  std::vector<DType> seen;
  for_each_matrix(w, [&](const Tensor& t) {
    if (!t.empty() && std::find(seen.begin(), seen.end(), t.dtype) == seen.end()) seen.push_back(t.dtype);
  });
  std::string out;
  for (DType d : seen) {
    std::string name = dtype_name(d);
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    out += (out.empty() ? "" : "+") + name;
  }
  return out;
}

bool has_quantized_matrix(const ModelWeights& w) {
  bool any = false;
  for_each_matrix(w, [&](const Tensor& t) { any |= !t.empty() && is_quantized(t.dtype); });
  return any;
}

void finish_weights(ModelWeights& w, const std::vector<TensorSlot>& slots) {
  if (w.config.tie_word_embeddings) w.lm_head = w.embed;
  w.dtype = w.embed.dtype;
  w.parameters = 0;
  for (const TensorSlot& s : slots) w.parameters += s.dst->numel();
  w.weight_bytes = decode_bytes(w);
}

void check_matrix_dtypes(const std::vector<TensorSlot>& slots,
                         const std::function<std::string(const std::string&)>& file_of) {
  const TensorSlot* first = nullptr;
  for (const TensorSlot& s : slots) {
    if (s.kind != TensorSlot::Matrix || is_quantized(s.dst->dtype)) continue;
    if (!first) first = &s;
    if (s.dst->dtype != first->dst->dtype)
      model_error(file_of(s.name), s.name,
                  "tensor '" + s.name + "' is " + dtype_name(s.dst->dtype) + " but '" + first->name + "' is " +
                      dtype_name(first->dst->dtype),
                  "the dense weight matrices in one dtype (block-quantized ones may differ)");
  }
}

size_t decode_bytes(const ModelWeights& w) {
  size_t bytes = w.final_norm.nbytes() + w.lm_head.nbytes();
  for (const LayerWeights& l : w.layers)
    for (const Tensor& t : l.by_role)
      if (!t.empty()) bytes += t.nbytes();
  return bytes;
}

}  // namespace runahead
