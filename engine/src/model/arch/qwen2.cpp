// Qwen2 (the Qwen2.5-Coder family): Llama's layer, always with QKV biases.
#include "model/arch/llama.h"

namespace runahead {

extern const Architecture qwen2_architecture = {
    .hf_name = "Qwen2ForCausalLM",
    .qkv_bias_always = true,
    .default_max_positions = 32768,
    .layer = llama_layer(),
    .step = llama_step(),
};

}  // namespace runahead
