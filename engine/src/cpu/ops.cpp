#include "cpu/ops.h"

#include "cpu/matmul.h"
#include "cpu/rmsnorm.h"
#include "cpu/swiglu.h"
#include "model/numerics.h"

namespace runahead {

namespace {

// y[t, :] += b   for y: [n, b.size()]; nothing when there is no bias.
void add_bias(const std::vector<float>& b, int n, float* y) {
  for (int t = 0; t < n; ++t)
    for (size_t i = 0; i < b.size(); ++i) y[t * b.size() + i] += b[i];
}

}  // namespace

CpuLayer cpu_layer(const LayerWeights& w) {
  CpuLayer l;
  l.w = &w;
  for (size_t r = 0; r < size_t(Role::Count); ++r)
    if (w.by_role[r].shape.size() == 1) l.small[r] = widen(w.by_role[r]);
  return l;
}

void embedding_lookup(const Tensor& embed, const int32_t* tokens, int n, float* x) {
  const int64_t H = embed.cols();
  for (int t = 0; t < n; ++t) widen(embed, int64_t(tokens[t]) * H, H, x + t * H);
}

void rmsnorm_qkv_rope_append(const CpuContext& cx, const CpuLayer& l, const AttentionShape& s, float eps,
                             const Rope& rope, const float* x, int n, int pos0, float* h, float* q, float* k,
                             float* v) {
  const int H = int(l[Role::Wq].cols());
  rmsnorm(cx.pool, x, l.f32(Role::AttnNorm).data(), eps, n, H, h);
  const MatmulJob qkv[] = {{&l[Role::Wq], q}, {&l[Role::Wk], k}, {&l[Role::Wv], v}};
  matmul(cx, qkv, h, n);
  add_bias(l.f32(Role::Bq), n, q);
  add_bias(l.f32(Role::Bk), n, k);
  add_bias(l.f32(Role::Bv), n, v);
  if (!l.f32(Role::QNorm).empty()) {
    rmsnorm(cx.pool, q, l.f32(Role::QNorm).data(), eps, n * s.heads, s.head_dim, q);
    rmsnorm(cx.pool, k, l.f32(Role::KNorm).data(), eps, n * s.kv_heads, s.head_dim, k);
  }
  rope.apply(cx.pool, q, n, s.heads, pos0);
  rope.apply(cx.pool, k, n, s.kv_heads, pos0);
}

void matmul_residual(const CpuContext& cx, const Tensor& w, const float* in, int n, float* tmp, float* x) {
  const MatmulJob job[] = {{&w, tmp}};
  matmul(cx, job, in, n);
  const size_t count = size_t(n) * size_t(w.rows());
  for (size_t i = 0; i < count; ++i) x[i] += tmp[i];
}

void rmsnorm_gate_up_swiglu(const CpuContext& cx, const CpuLayer& l, float eps, const float* x, int n, float* h,
                            float* up, float* act) {
  const int H = int(l[Role::WGate].cols());
  rmsnorm(cx.pool, x, l.f32(Role::MlpNorm).data(), eps, n, H, h);
  const MatmulJob gate_up[] = {{&l[Role::WGate], act}, {&l[Role::WUp], up}};
  matmul(cx, gate_up, h, n);
  swiglu(cx.pool, cx.kernels, act, up, int64_t(n) * l[Role::WGate].rows());
}

void rmsnorm_lm_head(const CpuContext& cx, const std::vector<float>& norm, const Tensor& w, float eps,
                     const float* x, int n, float* h, float* logits) {
  rmsnorm(cx.pool, x, norm.data(), eps, n, int(w.cols()), h);
  const MatmulJob head[] = {{&w, logits}};
  matmul(cx, head, h, n);
}

}  // namespace runahead
