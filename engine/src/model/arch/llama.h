#pragma once
// The Llama layer, which Qwen2 and Qwen3 extend.
#include <vector>

#include "model/arch.h"

namespace runahead {

// rmsnorm -> q, k, v (+ biases with attention_bias) -> RoPE -> attention -> o_proj (+x)
// -> rmsnorm -> silu(gate) * up -> down (+x)
std::vector<LayerTensor> llama_layer();
std::vector<Op> llama_step();

}  // namespace runahead
