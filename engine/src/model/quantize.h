#pragma once
// Weights converted between storage formats after loading: dense matrices quantized to a
// block format on the CPU (options.weights "q8_0"), and block-quantized matrices widened to
// bf16 for a backend without quantized kernels (CUDA today). Norms and biases stay as they are.
#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/quant_format.h"
#include "model/weights.h"

namespace runahead {

// Every bf16/f16/f32 matrix of `w` (embedding, layers, lm_head; a tied head stays tied) in
// format t, in buffers that the result's storage owns. Throws EngineError{"bad_request"}
// naming options.weights and the tensor when a row length is not a multiple of t's block.
ModelWeights quantize_matrices(const ModelWeights& w, QuantType t);

// The tensor's values as bf16, row-major (a bf16 tensor is copied).
std::vector<uint16_t> dequantize_to_bf16(const Tensor& t);

// `w` itself when no matrix is block-quantized; else a copy whose matrices are all bf16
// (dense ones of another dtype too, so that the matrices share one dtype).
std::shared_ptr<const ModelWeights> with_bf16_matrices(std::shared_ptr<const ModelWeights> w);

}  // namespace runahead
