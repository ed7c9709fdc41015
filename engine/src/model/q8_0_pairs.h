#pragma once
// Quantized safetensors (MODEL_FORMAT.md, "Q8_0 weights in safetensors"): a weight `X.weight`
// stored as I8 [out, in] with a companion `X.weight_scale` F16 [out, in / 32] is Q8_0 with
// blocks of 32 along each row (w = scale * q). The loader joins each pair into one Q8_0
// tensor `X.weight` in ggml's block layout, so the kernels read it as they read GGUF's.
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tensor.h"

namespace runahead {

inline constexpr const char* kWeightScaleSuffix = "_scale";  // "X.weight" + "_scale"

// Replaces every I8 + weight_scale pair of `tensors` by its Q8_0 tensor, whose blocks are
// appended to `buffers` (the caller keeps them alive as long as the tensors). Throws
// model_error naming the tensor and its file (file_of(name)) for an I8 tensor without its
// scale, a scale without an I8 weight, a scale that is not F16 [out, in / 32], or an I8
// weight that is not 2-D with rows a multiple of 32.
void join_q8_0_pairs(std::unordered_map<std::string, Tensor>& tensors,
                     const std::function<std::string(const std::string&)>& file_of,
                     std::vector<std::vector<uint8_t>>& buffers);

}  // namespace runahead
