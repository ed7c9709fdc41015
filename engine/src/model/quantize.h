#pragma once
// Weights converted between storage formats after loading: dense matrices quantized to
// block formats on the CPU (options.weights "q8_0", "q4_k_m"), and block-quantized matrices
// widened to a dense dtype (bf16 for a backend that cannot read a format as stored; f32 for
// a test's exact reference). Norms and biases stay as they are. The rows of each matrix are
// converted on std::thread::hardware_concurrency() threads; the result does not depend on
// their number.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "model/quant_format.h"
#include "model/weights.h"

namespace runahead {

// Every bf16/f16/f32 matrix of `w` (embedding, layers, lm_head; a tied head stays tied) in
// format t, in buffers that the result's storage owns. Throws EngineError{"bad_request"}
// naming options.weights and the tensor when a row length is not a multiple of t's block.
// `progress` ("quantizing", matrices done, matrices) before the first matrix and after each.
ModelWeights quantize_matrices(const ModelWeights& w, QuantType t, const ProgressFn& progress = {});

// options.weights "q4_k_m": the bf16/f16/f32 matrices in the mix of llama.cpp's Q4_K_M
// (llama_tensor_get_type in src/llama-quant.cpp): lm_head Q6_K (a tied embedding and head:
// the shared table Q6_K); an untied embedding Q4_K; attention Wv and mlp WDown Q6_K in the
// layers q4_k_m_more_bits picks, Q4_K in the others; every other matrix Q4_K. A matrix whose
// rows are not a multiple of 256 weights (Q4_K's and Q6_K's block) is Q8_0 instead (llama.cpp
// falls back to Q5_0 for a Q4_K tensor there, Q8_0 for a Q6_K one), and one whose rows are not
// a multiple of 32 either is the bad_request of quantize_matrices. Matrices already
// block-quantized stay as they are.
// The blocks are this engine's quantize_row (scales that cover each block's range), not
// llama.cpp's error-minimising search: the same mix, not the same bytes as llama-quantize's.
ModelWeights quantize_q4_k_m(const ModelWeights& w, const ProgressFn& progress = {});

// llama.cpp's use_more_bits: whether layer `layer` of `layers` takes Q6_K for Wv and WDown in
// Q4_K_M (the first eighth, the last eighth, and every third layer between).
bool q4_k_m_more_bits(int layer, int layers);

// The format quantize_q4_k_m gives the dense matrix `t` of `w`: `head` for lm_head or a tied
// table, else `layer` (-1 for an untied embedding) and `role`.
QuantType q4_k_m_type(const ModelWeights& w, const Tensor& t, bool head, int layer, Role role);

// Whether options.weights `weights` quantizes dense matrices at load ("q8_0", "q4_k_m"), and
// `w` quantized as it says (quantize_matrices Q8_0, or quantize_q4_k_m).
bool quantizes_at_load(std::string_view weights);
ModelWeights quantize_for_option(const ModelWeights& w, std::string_view weights, const ProgressFn& progress = {});

// `w` with every matrix in the dense dtype `to` (F32, F16 or BF16; a tied head stays tied).
// F32 holds each Q8_0 weight (an int8 times an f16 scale) exactly; BF16 rounds it.
ModelWeights with_dense_matrices(const ModelWeights& w, DType to);

// `w` as the CUDA backend's fp8 options compute with, exactly, in f32 (the reference of a test
// or benchmark): each layer matrix (with `matrices`) and lm_head (with `matrices` or
// `lm_head`) replaced by its fp8 rows times their scales (model/fp8.h), quantized from the
// matrices' own values; with `matrices` the embedding rounded to bf16, as the device keeps it.
// A tied lm_head that changed is untied (config.tie_word_embeddings false).
ModelWeights with_fp8_matrices_reference(const ModelWeights& w, bool matrices, bool lm_head);

// `w` with every matrix that lies in a weight file's mapping (model/weight_mappings.h) copied
// into memory of its own, in the same format, 2 MiB-aligned and advised as huge pages on Linux
// (the CPU backend streams every matrix once a token: on the 2-core benchmark host a Q4_K_M
// 1.5B decodes ~5 % faster from such a copy than from the file's pages). A tied head stays tied;
// norms and biases stay mapped.
ModelWeights with_mapped_matrices_copied(const ModelWeights& w);
// The bytes of the matrices it would copy.
size_t mapped_matrix_bytes(const ModelWeights& w);

// `w` itself when no matrix is block-quantized; else a copy whose matrices are all bf16
// (dense ones of another dtype too, so that the matrices share one dtype).
std::shared_ptr<const ModelWeights> with_bf16_matrices(std::shared_ptr<const ModelWeights> w);

}  // namespace runahead
