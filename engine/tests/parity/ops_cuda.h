#pragma once
// The CUDA side of the op parity program: each returns a run of the op on the device with
// the given inputs (outputs laid out as the CPU case's), or an empty function where this
// build has no CUDA or the CUDA backend has no implementation of that op.
#include <functional>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace runahead::parity {

using Run = std::function<std::vector<float>()>;

bool cuda_present();
Run cuda_embedding_lookup(const Tensor& embed, const std::vector<int32_t>& tokens);
Run cuda_rmsnorm_lm_head(const Tensor& w, const Tensor& norm, const std::vector<float>& x, int n);
Run cuda_rmsnorm_qkv_rope_append(const LayerWeights& l, const ModelConfig& c, const std::vector<float>& x, int n,
                                 int pos0);
Run cuda_attention(int heads, int kv_heads, int head_dim, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, int n, int past);
Run cuda_matmul_residual(const Tensor& w, const std::vector<float>& in, const std::vector<float>& x, int n);
Run cuda_rmsnorm_gate_up_swiglu(const LayerWeights& l, const std::vector<float>& x, int n);

}  // namespace runahead::parity
