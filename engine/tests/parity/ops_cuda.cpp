#include "parity/ops_cuda.h"

#ifdef RUNAHEAD_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>

#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/device_memory.h"
#include "cuda/kernels.h"
#include "model/half.h"
#include "model/numerics.h"
#include "model/rope.h"
#endif

namespace runahead::parity {

#ifndef RUNAHEAD_CUDA
bool cuda_present() { return false; }
Run cuda_embedding_lookup(const Tensor&, const std::vector<int32_t>&) { return {}; }
Run cuda_rmsnorm_lm_head(const Tensor&, const Tensor&, const std::vector<float>&, int) { return {}; }
Run cuda_rmsnorm_qkv_rope_append(const LayerWeights&, const ModelConfig&, const std::vector<float>&, int, int) {
  return {};
}
Run cuda_attention(int, int, int, const std::vector<float>&, const std::vector<float>&, const std::vector<float>&, int,
                   int) {
  return {};
}
Run cuda_matmul_residual(const Tensor&, const std::vector<float>&, const std::vector<float>&, int) { return {}; }
Run cuda_rmsnorm_gate_up_swiglu(const LayerWeights&, const std::vector<float>&, int) { return {}; }
#else
namespace {

using namespace cuda;
constexpr int kSms = 132;

std::shared_ptr<DeviceBuffer> up(const void* data, size_t bytes) {
  auto b = std::make_shared<DeviceBuffer>(bytes);
  check_cuda(cudaMemcpy(b->get(), data, bytes, cudaMemcpyHostToDevice), "parity upload");
  return b;
}
template <class T>
std::shared_ptr<DeviceBuffer> up(const std::vector<T>& v) { return up(v.data(), v.size() * sizeof(T)); }
std::shared_ptr<DeviceBuffer> up(const Tensor& t) { return up(t.data, t.nbytes()); }
std::shared_ptr<DeviceBuffer> up_rows(std::initializer_list<const Tensor*> parts) {
  std::vector<char> bytes;
  for (const Tensor* t : parts) bytes.insert(bytes.end(), (const char*)t->data, (const char*)t->data + t->nbytes());
  return up(bytes);
}
std::shared_ptr<DeviceBuffer> zeros(size_t bytes) {
  auto b = std::make_shared<DeviceBuffer>(bytes);
  check_cuda(cudaMemset(b->get(), 0, bytes), "parity memset");
  return b;
}
std::vector<float> down(const DeviceBuffer& b, size_t floats, size_t offset = 0) {
  check_cuda(cudaDeviceSynchronize(), "parity op");
  std::vector<float> out(floats);
  check_cuda(cudaMemcpy(out.data(), b.get<float>() + offset, floats * 4, cudaMemcpyDeviceToHost), "parity download");
  return out;
}
// A weight matrix (parts stacked by rows) as the CUDA backend keeps it: a dense one as stored,
// Q8_0 split on the device into its weights and block scales, any other block format widened
// to bf16 on the host (cuda_backend.cpp's make_cuda_backend).
struct DeviceMatrix {
  std::shared_ptr<DeviceBuffer> w, scale;
  DType dtype;
  int rows = 0, K = 0;
};
DeviceMatrix device_matrix(std::initializer_list<const Tensor*> parts) {
  DeviceMatrix m;
  const Tensor& first = **parts.begin();
  for (const Tensor* t : parts) m.rows += int(t->rows());
  m.K = int(first.cols());
  m.dtype = first.dtype;
  if (first.dtype == DType::Q8_0) {
    const auto blocks = up_rows(parts);
    m.w = zeros(size_t(m.rows) * m.K);
    m.scale = zeros(size_t(m.rows) * (m.K / 32) * 2);
    split_q8_0_blocks(blocks->get(), m.rows, m.K, m.w->get(), m.scale->get(), nullptr);
  } else if (is_quantized(first.dtype)) {
    std::vector<uint16_t> bits;
    for (const Tensor* t : parts)
      for (float v : widen(*t)) bits.push_back(f32_to_bf16(v));
    m.w = up(bits);
    m.dtype = DType::BF16;
  } else {
    m.w = up_rows(parts);
  }
  return m;
}
const void* scale_of(const DeviceMatrix& m) { return m.scale ? m.scale->get() : nullptr; }
// Room for the int8 inputs of n tokens of K values (a Q8_0 matrix reads them).
struct Q8Room {
  std::shared_ptr<DeviceBuffer> q, d;
  Q8Scratch get() const { return Q8Scratch{q->get<int8_t>(), d->get<float>()}; }
};
Q8Room q8_room(int n, int K) { return Q8Room{zeros(size_t(n) * K), zeros(size_t(n) * (K / 32) * 4)}; }
// The bf16 matrix a prefill GEMM reads: Q8_0 widened on the device, as the backend's prefill does.
std::shared_ptr<DeviceBuffer> prefill_bf16(const DeviceMatrix& m) {
  if (m.dtype != DType::Q8_0) return m.w;
  auto wide = zeros(size_t(m.rows) * m.K * 2);
  dequantize_q8_0_rows(m.w->get(), m.scale->get(), m.rows, m.K, wide->get(), nullptr);
  return wide;
}

// `count` bf16 values, widened.
std::vector<float> down_bf16(const DeviceBuffer& b, size_t count) {
  check_cuda(cudaDeviceSynchronize(), "parity op");
  std::vector<uint16_t> bits(count);
  check_cuda(cudaMemcpy(bits.data(), b.get(), count * 2, cudaMemcpyDeviceToHost), "parity download");
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = bf16_to_f32(bits[i]);
  return out;
}

}  // namespace

bool cuda_present() { return cuda_available(); }

Run cuda_embedding_lookup(const Tensor& embed, const std::vector<int32_t>& tokens) {
  return [&embed, tokens] {
    const int n = int(tokens.size()), H = int(embed.cols());
    const DeviceMatrix e = device_matrix({&embed});
    auto t = up(tokens), x = zeros(size_t(n) * H * 4);
    embedding_lookup(e.w->get(), e.dtype, scale_of(e), H, t->get<int32_t>(), n, x->get<float>(), nullptr);
    return down(*x, size_t(n) * H);
  };
}

Run cuda_rmsnorm_lm_head(const Tensor& w, const Tensor& norm, const std::vector<float>& x, int n) {
  return [&w, &norm, x, n] {
    const int V = int(w.rows()), H = int(w.cols());
    const DeviceMatrix wd = device_matrix({&w});
    auto nd = up(widen(norm)), xd = up(x), logits = zeros(size_t(n) * V * 4);
    auto partial = zeros(size_t(2) * n * lm_head_blocks(V, kSms) * 4), counter = zeros(sizeof(int));
    LmHead a;
    a.w = wd.w->get();
    a.dtype = wd.dtype;
    a.scale = scale_of(wd);
    a.norm = nd->get<float>();
    a.eps = 1e-6f;
    a.hidden = H;
    a.vocab = V;
    a.partial = partial->get<float>();
    a.counter = counter->get<int>();
    const Q8Room room = q8_room(n, H);
    a.q8 = room.get();
    rmsnorm_lm_head_argmax(a, xd->get<float>(), n, logits->get<float>(), StepEnd{}, kSms, nullptr);
    return down(*logits, size_t(n) * V);
  };
}

Run cuda_rmsnorm_qkv_rope_append(const LayerWeights& l, const ModelConfig& c, const std::vector<float>& x, int n,
                                 int pos0) {
  return [&l, c, x, n, pos0] {
    const int hd = c.head_dim, qd = c.num_heads * hd, kvd = c.num_kv_heads * hd, cap = pos0 + n;
    const RopeTables rope = rope_tables(c, cap);
    auto w = up_rows({&l[Role::Wq], &l[Role::Wk], &l[Role::Wv]});
    std::shared_ptr<DeviceBuffer> bias;
    if (!l[Role::Bq].empty()) {
      std::vector<float> b = widen(l[Role::Bq]), bk = widen(l[Role::Bk]), bv = widen(l[Role::Bv]);
      b.insert(b.end(), bk.begin(), bk.end());
      b.insert(b.end(), bv.begin(), bv.end());
      bias = up(b);
    }
    auto norm = up(widen(l[Role::AttnNorm])), cs = up(rope.cos), sn = up(rope.sin), xd = up(x);
    auto kc = zeros(size_t(cap) * kvd * 4), vc = zeros(size_t(cap) * kvd * 4), q = zeros(size_t(n) * qd * 4);
    auto pos = up(std::vector<int>{pos0}), qkv = zeros(size_t(n) * (qd + 2 * kvd) * 4);
    std::shared_ptr<DeviceBuffer> q_norm, k_norm;
    if (!l[Role::QNorm].empty()) q_norm = up(widen(l[Role::QNorm])), k_norm = up(widen(l[Role::KNorm]));
    QkvRope a;
    a.w = w->get();
    a.dtype = l[Role::Wq].dtype;
    a.bias = bias ? bias->get<float>() : nullptr;
    a.norm = norm->get<float>();
    if (q_norm) a.q_norm = q_norm->get<float>(), a.k_norm = k_norm->get<float>(), a.qkv = qkv->get<float>();
    a.eps = c.rms_norm_eps;
    a.rope_cos = cs->get<float>();
    a.rope_sin = sn->get<float>();
    a.hidden = c.hidden_size;
    a.heads = c.num_heads;
    a.kv_heads = c.num_kv_heads;
    a.head_dim = hd;
    a.k_cache = kc->get<float>();
    a.v_cache = vc->get<float>();
    if (n <= kMaxVecTokens) {
      rmsnorm_qkv_rope_append(a, xd->get<float>(), n, pos->get<int>(), q->get<float>(), kSms, nullptr);
    } else {  // as CudaBackend::enqueue_prefill_layers: bf16 rmsnorm, tensor-core GEMM, then bias (q/k norms) + RoPE + append
      auto h = zeros(size_t(n) * c.hidden_size * 2);
      rmsnorm_to_bf16(xd->get<float>(), a.norm, a.eps, n, c.hidden_size, h->get(), nullptr);
      gemm_bf16(h->get(), a.w, n, qd + 2 * kvd, c.hidden_size, qkv->get<float>(), false, nullptr);
      bias_rope_append(a, qkv->get<float>(), n, pos->get<int>(), q->get<float>(), nullptr);
    }
    std::vector<float> out = down(*q, size_t(n) * qd), k = down(*kc, size_t(n) * kvd, size_t(pos0) * kvd),
                       v = down(*vc, size_t(n) * kvd, size_t(pos0) * kvd);
    out.insert(out.end(), k.begin(), k.end());
    out.insert(out.end(), v.begin(), v.end());
    return out;
  };
}

Run cuda_attention(int heads, int kv_heads, int head_dim, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, int n, int past) {
  return [=] {
    const int len = past + n;
    auto qd = up(q), kd = up(k), vd = up(v), out = zeros(size_t(n) * heads * head_dim * 4);
    auto pos = up(std::vector<int>{past});
    DecodeAttention a;
    a.heads = heads;
    a.kv_heads = kv_heads;
    a.head_dim = head_dim;
    a.capacity = len;
    a.splits = std::min(attention_splits(heads, kSms), kMaxAttentionCluster);  // as the backend runs it
    a.cluster = attention_cluster_fits(a.splits);
    auto partial = zeros(attention_partial_floats(heads, head_dim, a.splits) * 4);
    auto counters = zeros(size_t(kMaxVecTokens) * heads * sizeof(int));
    a.k_cache = kd->get<float>();
    a.v_cache = vd->get<float>();
    a.partial = partial->get<float>();
    a.counters = counters->get<int>();
    if (n <= kMaxVecTokens)
      attention_decode(a, qd->get<float>(), n, pos->get<int>(), out->get<float>(), nullptr);
    else
      attention_prefill(a, qd->get<float>(), n, pos->get<int>(), out->get<float>(), nullptr);
    return down(*out, size_t(n) * heads * head_dim);
  };
}

Run cuda_matmul_residual(const Tensor& w, const std::vector<float>& in, const std::vector<float>& x, int n) {
  return [&w, in, x, n] {
    const int rows = int(w.rows()), K = int(w.cols());
    const DeviceMatrix wd = device_matrix({&w});
    auto ind = up(in), xd = up(x);
    if (n <= kMaxVecTokens) {
      matvec_residual_add(wd.w->get(), wd.dtype, scale_of(wd), rows, K, ind->get<float>(), n, xd->get<float>(),
                          q8_room(n, K).get(), kSms, nullptr);
    } else {  // as the prefill: the input to bf16, then x += in W^T on tensor cores
      auto h = zeros(size_t(n) * K * 2);
      to_bf16(ind->get<float>(), size_t(n) * K, h->get(), nullptr);
      gemm_bf16(h->get(), prefill_bf16(wd)->get(), n, rows, K, xd->get<float>(), true, nullptr);
    }
    return down(*xd, x.size());
  };
}

Run cuda_rmsnorm_gate_up_swiglu(const LayerWeights& l, const std::vector<float>& x, int n) {
  return [&l, x, n] {
    const int I = int(l[Role::WGate].rows()), H = int(l[Role::WGate].cols());
    auto norm = up(widen(l[Role::MlpNorm])), xd = up(x);
    const DeviceMatrix gu_w = device_matrix({&l[Role::WGate], &l[Role::WUp]});
    if (n > kMaxVecTokens) {  // as the prefill: bf16 rmsnorm, one [gate; up] GEMM to bf16, swiglu to bf16
      auto h = zeros(size_t(n) * H * 2), gu = zeros(size_t(n) * 2 * I * 2), act = zeros(size_t(n) * I * 2);
      rmsnorm_to_bf16(xd->get<float>(), norm->get<float>(), 1e-6f, n, H, h->get(), nullptr);
      gemm_bf16_to_bf16(h->get(), prefill_bf16(gu_w)->get(), n, 2 * I, H, gu->get(), nullptr);
      swiglu_to_bf16(gu->get(), n, I, act->get(), nullptr);
      return down_bf16(*act, size_t(n) * I);
    }
    auto act = zeros(size_t(n) * I * 4);
    rmsnorm_gate_up_swiglu(gu_w.w->get(), gu_w.dtype, scale_of(gu_w), norm->get<float>(), 1e-6f, H, I,
                           xd->get<float>(), n, act->get<float>(), q8_room(n, H).get(), kSms, nullptr);
    return down(*act, size_t(n) * I);
  };
}
#endif

}  // namespace runahead::parity
