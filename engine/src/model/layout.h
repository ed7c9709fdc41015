#pragma once
// The tensors a model binds: Hugging Face name, shape from the config, and where each one
// goes in ModelWeights. The layer's tensors come from its architecture (model/arch/);
// loading, random weights and drafter heads share this list.
#include <functional>
#include <string>
#include <vector>

#include "model/weights.h"

namespace runahead {

struct TensorSlot {
  enum Kind { Matrix, Norm, Bias };
  std::string name;             // e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // what config.json implies
  Kind kind;
  Tensor* dst;                  // member of the ModelWeights the slots were made for
  int group;                    // 0: embedding, 1..L: layer, L+1: final norm and head
};

// The slots of one layer's tensors named `prefix` + the architecture's name ("model.layers.3.").
std::vector<TensorSlot> layer_slots(const ModelConfig& c, const std::string& prefix, LayerWeights& l, int group);

// The slots of w.config's architecture; resizes w.layers. lm_head is a slot only when untied.
std::vector<TensorSlot> tensor_slots(ModelWeights& w);

// Backends run the dense matrices in one dtype (block-quantized ones may mix): throws
// model_error naming the first matrix in another dense dtype than the first dense matrix.
void check_matrix_dtypes(const std::vector<TensorSlot>& slots,
                         const std::function<std::string(const std::string&)>& file_of);

// The bytes a decode step reads: every layer tensor, the final norm and the lm_head (one
// embedding row is not counted; a tied table counts once, as the head).
size_t decode_bytes(const ModelWeights& w);

// After every slot is filled: ties lm_head to embed if asked, sets dtype, parameters, weight_bytes.
void finish_weights(ModelWeights& w, const std::vector<TensorSlot>& slots);

}  // namespace runahead
