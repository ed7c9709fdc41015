#pragma once
// A GGUF file as the engine's model: ModelConfig from its metadata (model/gguf_model.h),
// every tensor the architecture binds viewed in place in the mapped file in its own format
// (F32/F16/BF16 or Q8_0/Q4_0/Q5_0/Q4_K/Q5_K/Q6_K blocks). A llama file's q/k rows, which llama.cpp's
// converter interleaves for GGML's RoPE, are copied back to Hugging Face order.
#include <filesystem>

#include "model/weights.h"

namespace runahead {

// True for a path that names a .gguf file rather than a model folder.
bool is_gguf_path(const std::filesystem::path& path);

// Throws EngineError{"model_error"} naming the file and the key or tensor.
ModelWeights load_gguf_model(const std::filesystem::path& file, const ProgressFn& progress = {});

}  // namespace runahead
