#pragma once
// The weights of a decoder-only model, bound by role and shape-checked.
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/arch.h"
#include "model/config.h"
#include "model/tensor.h"

namespace runahead {

// One layer's tensors by role (model/arch.h); those its architecture or config leaves out
// (biases, q/k norms) are empty. Each keeps its own storage format.
struct LayerWeights {
  std::array<Tensor, size_t(Role::Count)> by_role;
  const Tensor& operator[](Role r) const { return by_role[size_t(r)]; }
  Tensor& operator[](Role r) { return by_role[size_t(r)]; }
};

struct ModelWeights {
  ModelConfig config;
  Tensor embed;                   // [V, H]
  std::vector<LayerWeights> layers;
  Tensor final_norm;              // [H]
  Tensor lm_head;                 // [V, H]; the same data as embed when tied
  DType dtype = DType::BF16;      // format of the embedding; dense matrices share it or one other dense
                                  // dtype, block-quantized ones (Q8_0/Q4_0/Q5_0/Q4_K/Q5_K/Q6_K) may mix
  int64_t parameters = 0;         // counted once even when tied
  size_t weight_bytes = 0;        // bytes one decode step reads (embed row excluded, lm_head included)
  std::string source;             // model folder, .gguf file, or "random:<shape>"
  std::shared_ptr<void> storage;  // keeps the mapping / random buffers alive
};

// The storage formats of the matrices (embedding, layers, lm_head), lower case, each once in
// order of first use and joined by '+': "bf16", "q8_0", "q4_k+q6_k", "bf16+q8_0".
std::string weight_formats(const ModelWeights& w);
bool has_quantized_matrix(const ModelWeights& w);

using ProgressFn = std::function<void(const std::string& stage, int64_t done, int64_t total)>;

// Loads config.json and the safetensors of `dir` (or a .gguf file: model/gguf_weights.h),
// binds every tensor the architecture needs, checks shapes. Throws EngineError naming file
// and field.
ModelWeights load_model(const std::filesystem::path& dir, const ProgressFn& progress = {});

// Names accepted by random_model: "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "qwen2.5-coder-7b".
ModelConfig shape_config(const std::string& shape);
// Random bf16 weights of a known shape, held in memory (for benchmarks without a download).
ModelWeights random_model(const std::string& shape, uint64_t seed = 1);

}  // namespace runahead
