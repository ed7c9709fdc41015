#pragma once
// Weights converted between storage formats after loading: dense matrices quantized to a
// block format on the CPU (options.weights "q8_0"), and block-quantized matrices widened to
// a dense dtype (bf16 for a backend without quantized kernels, CUDA today; f32 for a test's
// exact reference). Norms and biases stay as they are.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/quant_format.h"
#include "model/weights.h"

namespace runahead {

// Every bf16/f16/f32 matrix of `w` (embedding, layers, lm_head; a tied head stays tied) in
// format t, in buffers that the result's storage owns. Throws EngineError{"bad_request"}
// naming options.weights and the tensor when a row length is not a multiple of t's block.
ModelWeights quantize_matrices(const ModelWeights& w, QuantType t);

// `w` with every matrix in the dense dtype `to` (F32, F16 or BF16; a tied head stays tied).
// F32 holds each Q8_0 weight (an int8 times an f16 scale) exactly; BF16 rounds it.
ModelWeights with_dense_matrices(const ModelWeights& w, DType to);

// `w` as the CUDA backend's fp8 options compute with, exactly, in f32 (the reference of a test
// or benchmark): each layer matrix (with `matrices`) and lm_head (with `matrices` or
// `lm_head`) replaced by its fp8 rows times their scales (model/fp8.h), quantized from the
// matrices' own values; with `matrices` the embedding rounded to bf16, as the device keeps it.
// A tied lm_head that changed is untied (config.tie_word_embeddings false).
ModelWeights with_fp8_matrices_reference(const ModelWeights& w, bool matrices, bool lm_head);

// `w` itself when no matrix is block-quantized; else a copy whose matrices are all bf16
// (dense ones of another dtype too, so that the matrices share one dtype).
std::shared_ptr<const ModelWeights> with_bf16_matrices(std::shared_ptr<const ModelWeights> w);

}  // namespace runahead
