#pragma once
// The CPU implementation of each op of model/arch.h, and of the step's first and last ops.
// Shapes: n tokens; x: [n, H]; q: [n, heads * head_dim]; K/V rows go to the cache at
// positions pos0 .. pos0 + n - 1. `h` (and gate/up) are caller-owned scratch.
#include <array>
#include <vector>

#include "cpu/attention.h"
#include "cpu/kv_cache.h"
#include "cpu/matmul.h"
#include "cpu/rope.h"
#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"
#include "model/weights.h"

namespace runahead {

// A layer's weights as the CPU ops read them: matrices in place, in their own format; norm
// weights and biases widened to f32 once (empty when the layer has none).
struct CpuLayer {
  const LayerWeights* w = nullptr;
  std::array<std::vector<float>, size_t(Role::Count)> small;
  const Tensor& operator[](Role r) const { return (*w)[r]; }
  const std::vector<float>& f32(Role r) const { return small[size_t(r)]; }
};
CpuLayer cpu_layer(const LayerWeights& w);

// x[t, :] = embed[tokens[t], :]   embed: [V, H] (a block-quantized row is dequantized)
void embedding_lookup(const Tensor& embed, const int32_t* tokens, int n, float* x);

// h = rmsnorm(x) * attn_norm; q = h Wq^T + bq, k = h Wk^T + bk, v = h Wv^T + bv; per head
// q, k = rmsnorm(q) * q_norm, rmsnorm(k) * k_norm (when present); RoPE on q and k at pos0 + t;
// k, v: [n, kv_heads * head_dim] (the caller appends them to the cache).   h: [n, H] scratch.
void rmsnorm_qkv_rope_append(const CpuContext& cx, const CpuLayer& l, const AttentionShape& s, float eps,
                             const Rope& rope, const float* x, int n, int pos0, float* h, float* q, float* k,
                             float* v);

// x += in W^T   W: [H, K], in: [n, K], x: [n, H]; tmp: [n, H] scratch.
void matmul_residual(const CpuContext& cx, const Tensor& w, const float* in, int n, float* tmp, float* x);

// act = silu(h Wg^T) * (h Wu^T) with h = rmsnorm(x) * mlp_norm   Wg, Wu: [I, H]; act: [n, I];
// h: [n, H] and up: [n, I] scratch.
void rmsnorm_gate_up_swiglu(const CpuContext& cx, const CpuLayer& l, float eps, const float* x, int n, float* h,
                            float* up, float* act);

// logits = (rmsnorm(x) * norm) W^T   W: [V, H], logits: [n, V]; h: [n, H] scratch.
void rmsnorm_lm_head(const CpuContext& cx, const std::vector<float>& norm, const Tensor& w, float eps,
                     const float* x, int n, float* h, float* logits);

}  // namespace runahead
