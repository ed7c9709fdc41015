#pragma once
// The decode step of one token as one persistent kernel: a block per multiprocessor walks
// the whole model, phase by phase (qkv, attention, o_proj, gate_up, down per layer, then
// lm_head + argmax), with a grid-wide barrier between phases. One producer warp per block
// streams the block's share of every weight matrix, in step order, into a ring of
// shared-memory stages with bulk copies; it never waits for activations, so while the
// other warps finish a phase or wait at a barrier the next phase's weights are already
// arriving. The per-op kernels (kernels.h) remain for verify steps of several tokens.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cuda/kernels.h"

namespace runahead::cuda {

// Device pointers of one layer, as the per-op kernels use them.
struct DecodeLayer {
  const void* wqkv = nullptr;       // [(heads + 2 kv_heads) * head_dim, hidden]
  const float* bqkv = nullptr;      // or null
  const void* wo = nullptr;         // [hidden, heads * head_dim]
  const void* w_gate_up = nullptr;  // [2 * intermediate, hidden]: gate rows, then up rows
  const void* w_down = nullptr;     // [hidden, intermediate]
  const float* attn_norm = nullptr;
  const float* mlp_norm = nullptr;
  // The matrices' second buffers, as the per-op kernels read them (RowMatrix::scale): F8_E4M3 an
  // f32 scale per row (model/fp8.h), Q8_0 the f16 block scales, K-quants the Q6_K rows (the
  // matrix buffer then holds the Q4_K rows before them); null otherwise.
  const void* wqkv_scale = nullptr;
  const void* wo_scale = nullptr;
  const void* w_gate_up_scale = nullptr;
  const void* w_down_scale = nullptr;
  int qkv_q6_from = 0;  // K-quants: q/k/v's first Q6_K row when it has both formats
  float* k_cache = nullptr;  // [capacity, kv_heads * head_dim]
  float* v_cache = nullptr;
};

struct DecodeStep {
  DType dtype = DType::BF16;        // the layers' matrices (Q4_K: K-quant ones, kquant.cuh)
  DType head_dtype = DType::BF16;   // lm_head's: dtype or F8_E4M3
  DType embed_dtype = DType::BF16;  // the embedding's: dtype, but bf16 for F8_E4M3
  const void* lm_head_scale = nullptr;  // lm_head's second buffer, as DecodeLayer's
  const void* embed_scale = nullptr;    // the embedding's (Q8_0 and K-quant tables)
  int layers = 0, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  float eps = 1e-6f;
  const DecodeLayer* layer = nullptr;  // device array [layers]
  const void* embed = nullptr;
  const void* lm_head = nullptr;
  const float* final_norm = nullptr;
  const float* rope_cos = nullptr;  // [capacity, head_dim / 2]
  const float* rope_sin = nullptr;
  const int32_t* token = nullptr;  // this step's input token
  const int* pos = nullptr;        // its position
  float* x = nullptr;              // [hidden]: the residual stream, then the final hidden state
  float* qkv = nullptr;            // [(heads + 2 kv_heads) * head_dim]
  float* gate_up = nullptr;        // [2 * intermediate]
  float* partial = nullptr;        // decode_step_partial_floats(...): attention partials
  float* logits = nullptr;         // [vocab], or null
  float* best = nullptr;           // [2 * blocks]
  unsigned* sync = nullptr;        // decode_step_sync_words() zeroed words
  long long* clock = nullptr;      // null, or decode_step_stamps(layers) stamps for the profile
  StepEnd end;                     // the token is the argmax of the logits
};

// Why the persistent step cannot run this model on this device ("" when it can), and the
// launch it needs.
struct DecodeStepPlan {
  std::string refused;
  int blocks = 0;
  int stages = 0;
  int stage_bytes = 0;  // of each stage of the weight ring
  size_t smem = 0;
};
DecodeStepPlan plan_decode_step(const DecodeStep& s, int device);
// For Q8_0 and K-quant layers (dtype Q8_0 or Q4_K): what the step needs of their shapes and
// formats that s lacks, or "" (it reads only dtype, head_dtype, embed_dtype and the sizes).
std::string block_step_misfit(const DecodeStep& s);

size_t decode_step_partial_floats(int heads, int head_dim);
int decode_step_sync_words();
// Stamps (SM clock of block 0): the start; for each of the 5 phases of every layer, the
// arrival at its grid barrier and the departure; the end of the lm_head phase.
int decode_step_stamps(int layers);

void decode_step(const DecodeStep& s, const DecodeStepPlan& plan, cudaStream_t stream);

}  // namespace runahead::cuda
