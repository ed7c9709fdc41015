// The op parity program (as ggml's test-backend-ops): every op of model/arch.h, plus the
// step's embedding and head, on random inputs of several shapes (odd sizes, head dims 64
// and 128, GQA ratios, n = 1, k+1 and prefill), run by every backend this build has and
// compared with a double-precision reference, with per-op tolerances (relative to the
// largest reference magnitude). Prints an op x backend table; exits 1 on any mismatch. A
// backend that has no implementation of an op reports it as missing, which fails too.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "model/half.h"
#include "model/numerics.h"
#include "model/quant_blocks.h"
#include "model/rope.h"
#include "parity/ops_cuda.h"

namespace runahead::parity {
namespace {

using Vec = std::vector<double>;

// A bf16 matrix or vector with its values, as the reference reads them.
struct Weight {
  std::vector<uint16_t> bits;
  Tensor t;
  double at(int64_t i) const { return bf16_to_f32(bits[size_t(i)]); }
};

Weight random_weight(std::vector<int64_t> shape, float centre, float scale, std::mt19937& rng) {
  Weight w;
  w.t.dtype = DType::BF16;
  w.t.shape = std::move(shape);
  std::uniform_real_distribution<float> u(-scale, scale);
  w.bits.resize(size_t(w.t.numel()));
  for (uint16_t& b : w.bits) b = f32_to_bf16(centre + u(rng));
  w.t.data = w.bits.data();
  return w;
}

std::vector<float> random_floats(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A block-quantized matrix, quantized from random values, with the values its blocks hold (as
// the reference reads them).
struct QuantWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  Tensor t;
};

QuantWeight random_quantized(QuantType type, int rows, int cols, float scale, std::mt19937& rng) {
  QuantWeight w;
  const std::vector<float> v = random_floats(size_t(rows) * cols, scale, rng);
  const size_t row = quant_row_bytes(type, cols);
  w.bytes.resize(row * size_t(rows));
  w.values.resize(v.size());
  for (int r = 0; r < rows; ++r) {
    quantize_row(type, v.data() + size_t(r) * cols, cols, w.bytes.data() + row * size_t(r));
    dequantize_row(type, w.bytes.data() + row * size_t(r), cols, w.values.data() + size_t(r) * cols);
  }
  w.t.dtype = dtype_of(type);
  w.t.shape = {rows, cols};
  w.t.data = w.bytes.data();
  return w;
}

// One op on one shape: the inputs, the reference's outputs, and what each backend returns.
struct Case {
  std::string op, shape;
  double tolerance;
  std::vector<double> expected;
  std::function<std::vector<float>()> cpu;
  std::function<std::vector<float>()> cuda;  // empty: this build has no CUDA implementation
  double cuda_tolerance = 0;                  // 0: the same as `tolerance`
};

// Worst |got - expected| over the largest |expected|.
double relative_error(const std::vector<float>& got, const std::vector<double>& expected) {
  if (got.size() != expected.size()) return INFINITY;
  double scale = 1e-30, worst = 0;
  for (double e : expected) scale = std::max(scale, std::fabs(e));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - expected[i]);
    worst = std::max(worst, std::isfinite(got[i]) ? d : INFINITY);
  }
  return worst / scale;
}

Vec rmsnorm(const double* x, const Weight& w, double eps, int h) {
  double ss = 0;
  for (int i = 0; i < h; ++i) ss += x[i] * x[i];
  const double scale = 1.0 / std::sqrt(ss / h + eps);
  Vec y(static_cast<size_t>(h));
  for (int i = 0; i < h; ++i) y[i] = x[i] * scale * w.at(i);
  return y;
}

// y = W x for W: [rows, cols].
template <class At> Vec linear(int64_t rows, int64_t cols, At at, const Vec& x) {
  Vec y(size_t(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) y[r] += at(r * cols + i) * x[i];
  return y;
}
Vec linear(const Weight& w, const Vec& x) {
  return linear(w.t.rows(), w.t.cols(), [&](int64_t i) { return w.at(i); }, x);
}
Vec linear(const QuantWeight& w, const Vec& x) {
  return linear(w.t.rows(), w.t.cols(), [&](int64_t i) { return double(w.values[size_t(i)]); }, x);
}

Vec as_double(const float* x, size_t n) { return Vec(x, x + n); }

struct AttnShape {
  int heads, kv_heads, head_dim, hidden;
};

ModelConfig config_of(const AttnShape& s) {
  ModelConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.hidden_size = s.hidden;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.rope_theta = 10000.0f;
  c.rms_norm_eps = 1e-6f;
  return c;
}

std::string describe(const AttnShape& s, int n, const char* extra = "") {
  char b[128];
  std::snprintf(b, sizeof b, "heads %d/%d hd %d H %d n %d%s", s.heads, s.kv_heads, s.head_dim, s.hidden, n, extra);
  return b;
}

struct Context {
  ThreadPool pool{2};
  const Kernels& kernels = select_kernels();
  std::vector<Q8Activations> xq;
  CpuContext cx() { return {pool, kernels, select_quant_kernels(), xq}; }
};

// q (or k) heads of `width` values at rows [t]: rotate_half RoPE at position p, in double.
void rope(double* v, int heads, int hd, int p, const std::vector<float>& inv_freq) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd / 2; ++i) {
      const double angle = double(p) * inv_freq[size_t(i)];
      double& a = v[h * hd + i];
      double& b = v[h * hd + i + hd / 2];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(angle) - b0 * std::sin(angle);
      b = b0 * std::cos(angle) + a0 * std::sin(angle);
    }
}

void add_qkv_cases(Context& ctx, std::vector<Case>& cases) {
  std::mt19937 rng(5);
  for (const AttnShape s : {AttnShape{4, 4, 64, 136}, AttnShape{8, 2, 128, 256}, AttnShape{6, 3, 64, 200}})
    for (int n : {1, 5, 13, 70})
      for (const bool bias : {false, true})
        for (const bool qk_norm : {false, true}) {
          if (bias && qk_norm) continue;
          const int qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim, pos0 = 3;
          const ModelConfig c = config_of(s);
          auto layer = std::make_shared<LayerWeights>();
          auto keep = std::make_shared<std::vector<Weight>>();
          keep->reserve(16);
          auto add = [&](Role r, std::vector<int64_t> shape, float centre, float scale) {
            keep->push_back(random_weight(std::move(shape), centre, scale, rng));
            (*layer)[r] = keep->back().t;
            return &keep->back();
          };
          const Weight* norm = add(Role::AttnNorm, {s.hidden}, 1.0f, 0.2f);
          const Weight* wq = add(Role::Wq, {qd, s.hidden}, 0, 0.1f);
          const Weight* wk = add(Role::Wk, {kvd, s.hidden}, 0, 0.1f);
          const Weight* wv = add(Role::Wv, {kvd, s.hidden}, 0, 0.1f);
          const Weight *bq = nullptr, *bk = nullptr, *bv = nullptr, *qn = nullptr, *kn = nullptr;
          if (bias) bq = add(Role::Bq, {qd}, 0, 0.5f), bk = add(Role::Bk, {kvd}, 0, 0.5f), bv = add(Role::Bv, {kvd}, 0, 0.5f);
          if (qk_norm) qn = add(Role::QNorm, {s.head_dim}, 1, 0.3f), kn = add(Role::KNorm, {s.head_dim}, 1, 0.3f);
          auto x = std::make_shared<std::vector<float>>(random_floats(size_t(n) * s.hidden, 1.0f, rng));

          const std::vector<float> inv_freq = rope_inv_freq(c);
          Vec expected;  // q rows, then the k and v cache rows of the new positions
          Vec ks, vs;
          for (int t = 0; t < n; ++t) {
            const Vec xt = as_double(x->data() + size_t(t) * s.hidden, size_t(s.hidden));
            const Vec h = rmsnorm(xt.data(), *norm, c.rms_norm_eps, s.hidden);
            Vec q = linear(*wq, h), k = linear(*wk, h), v = linear(*wv, h);
            for (int i = 0; bias && i < qd; ++i) q[i] += bq->at(i);
            for (int i = 0; bias && i < kvd; ++i) k[i] += bk->at(i), v[i] += bv->at(i);
            if (qk_norm) {
              for (int hh = 0; hh < s.heads; ++hh) {
                const Vec y = rmsnorm(q.data() + hh * s.head_dim, *qn, c.rms_norm_eps, s.head_dim);
                std::copy(y.begin(), y.end(), q.begin() + hh * s.head_dim);
              }
              for (int hh = 0; hh < s.kv_heads; ++hh) {
                const Vec y = rmsnorm(k.data() + hh * s.head_dim, *kn, c.rms_norm_eps, s.head_dim);
                std::copy(y.begin(), y.end(), k.begin() + hh * s.head_dim);
              }
            }
            rope(q.data(), s.heads, s.head_dim, pos0 + t, inv_freq);
            rope(k.data(), s.kv_heads, s.head_dim, pos0 + t, inv_freq);
            expected.insert(expected.end(), q.begin(), q.end());
            ks.insert(ks.end(), k.begin(), k.end());
            vs.insert(vs.end(), v.begin(), v.end());
          }
          expected.insert(expected.end(), ks.begin(), ks.end());
          expected.insert(expected.end(), vs.begin(), vs.end());

          Case k;
          k.op = "rmsnorm_qkv_rope_append";
          k.shape = describe(s, n, bias ? " bias" : qk_norm ? " q/k norm" : "");
          k.tolerance = 2e-5;
          // Past 8 tokens CUDA runs the prefill: rmsnorm to bf16, then the bf16 tensor-core GEMM.
          if (n > 8) k.cuda_tolerance = 1e-2;
          k.expected = std::move(expected);
          k.cpu = [&ctx, layer, keep, x, s, n, c, pos0] {
            const Rope rope_table(c, pos0 + n);
            const CpuLayer l = cpu_layer(*layer);
            const int qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
            std::vector<float> h(size_t(n) * s.hidden), out(size_t(n) * (qd + 2 * kvd));
            float* q = out.data();
            float* kk = q + size_t(n) * qd;
            float* v = kk + size_t(n) * kvd;
            rmsnorm_qkv_rope_append(ctx.cx(), l, {s.heads, s.kv_heads, s.head_dim}, c.rms_norm_eps, rope_table,
                                    x->data(), n, pos0, h.data(), q, kk, v);
            return out;
          };
          k.cuda = cuda_rmsnorm_qkv_rope_append(*layer, c, *x, n, pos0);
          cases.push_back(std::move(k));
        }
}

void add_attention_cases(Context& ctx, std::vector<Case>& cases) {
  std::mt19937 rng(7);
  for (const AttnShape s : {AttnShape{4, 4, 64, 0}, AttnShape{8, 2, 128, 0}, AttnShape{6, 3, 64, 0}})
    for (const auto [n, past] : {std::pair{1, 0}, std::pair{1, 37}, std::pair{5, 20}, std::pair{70, 0}, std::pair{70, 9}}) {
      const int qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim, len = past + n;
      auto q = std::make_shared<std::vector<float>>(random_floats(size_t(n) * qd, 1.0f, rng));
      auto k = std::make_shared<std::vector<float>>(random_floats(size_t(len) * kvd, 1.0f, rng));
      auto v = std::make_shared<std::vector<float>>(random_floats(size_t(len) * kvd, 1.0f, rng));
      Vec expected(size_t(n) * qd, 0.0);
      const int group = s.heads / s.kv_heads;
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < s.heads; ++h) {
          const int g = h / group, last = past + t;
          Vec score(size_t(last + 1));
          double max = -1e300, sum = 0;
          for (int p = 0; p <= last; ++p) {
            double dot = 0;
            for (int d = 0; d < s.head_dim; ++d)
              dot += double((*q)[size_t(t) * qd + h * s.head_dim + d]) * (*k)[size_t(p) * kvd + g * s.head_dim + d];
            score[p] = dot / std::sqrt(double(s.head_dim));
            max = std::max(max, score[p]);
          }
          for (double& x : score) sum += x = std::exp(x - max);
          for (int p = 0; p <= last; ++p)
            for (int d = 0; d < s.head_dim; ++d)
              expected[size_t(t) * qd + h * s.head_dim + d] += score[p] / sum * (*v)[size_t(p) * kvd + g * s.head_dim + d];
        }
      Case c;
      c.op = "attention";
      char extra[32];
      std::snprintf(extra, sizeof extra, " past %d", past);
      c.shape = describe(s, n, extra);
      c.tolerance = 2e-5;
      // Past 8 tokens CUDA runs the flash-attention prefill: Q.K and P.V in bf16 on tensor cores.
      if (n > 8) c.cuda_tolerance = 1e-2;
      c.expected = std::move(expected);
      c.cpu = [&ctx, q, k, v, s, n, past, len] {
        KVCache cache(1, len, s.kv_heads, s.head_dim);
        cache.append(0, 0, len, k->data(), v->data());
        Attention a({s.heads, s.kv_heads, s.head_dim}, ctx.pool.size(), len);
        std::vector<float> out(size_t(n) * s.heads * s.head_dim);
        a.run(ctx.pool, ctx.kernels, cache, 0, q->data(), n, past, out.data());
        return out;
      };
      c.cuda = cuda_attention(s.heads, s.kv_heads, s.head_dim, *q, *k, *v, n, past);
      cases.push_back(std::move(c));
    }
}

// x += in W^T for `w` (bf16 or block-quantized, rows x K) on n tokens of random in and x: the
// case's shape, reference and runs (its op and tolerances are the caller's).
template <class W> Case matmul_case(Context& ctx, std::shared_ptr<W> w, int n, std::mt19937& rng) {
  const int rows = int(w->t.rows()), K = int(w->t.cols());
  auto in = std::make_shared<std::vector<float>>(random_floats(size_t(n) * K, 1.0f, rng));
  auto x = std::make_shared<std::vector<float>>(random_floats(size_t(n) * rows, 1.0f, rng));
  Case c;
  for (int t = 0; t < n; ++t) {
    const Vec y = linear(*w, as_double(in->data() + size_t(t) * K, size_t(K)));
    for (int r = 0; r < rows; ++r) c.expected.push_back((*x)[size_t(t) * rows + r] + y[r]);
  }
  c.shape = "W " + std::to_string(rows) + "x" + std::to_string(K) + " n " + std::to_string(n);
  c.cpu = [&ctx, w, in, x, n, rows] {
    std::vector<float> out = *x, tmp(size_t(n) * rows);
    matmul_residual(ctx.cx(), w->t, in->data(), n, tmp.data(), out.data());
    return out;
  };
  c.cuda = cuda_matmul_residual(w->t, *in, *x, n);
  return c;
}

void add_matmul_cases(Context& ctx, std::vector<Case>& cases) {
  std::mt19937 rng(9);
  for (const auto [rows, K] : {std::pair{64, 136}, std::pair{200, 72}, std::pair{136, 1000}, std::pair{136, 256}})
    for (int n : {1, 5, 13, 70}) {
      Case c = matmul_case(ctx, std::make_shared<Weight>(random_weight({rows, K}, 0, 0.1f, rng)), n, rng);
      c.op = "matmul_residual";
      c.tolerance = 2e-5;
      // Past 8 tokens CUDA runs the prefill: the input to bf16, then the bf16 tensor-core GEMM.
      if (n > 8) c.cuda_tolerance = 1e-2;
      cases.push_back(std::move(c));
    }
}

void add_mlp_cases(Context& ctx, std::vector<Case>& cases) {
  std::mt19937 rng(11);
  for (const auto [H, I] : {std::pair{64, 136}, std::pair{200, 344}, std::pair{256, 344}})
    for (int n : {1, 5, 13, 70}) {
      auto layer = std::make_shared<LayerWeights>();
      auto keep = std::make_shared<std::vector<Weight>>();
      keep->reserve(3);
      keep->push_back(random_weight({H}, 1.0f, 0.2f, rng));
      keep->push_back(random_weight({I, H}, 0, 0.1f, rng));
      keep->push_back(random_weight({I, H}, 0, 0.1f, rng));
      (*layer)[Role::MlpNorm] = (*keep)[0].t;
      (*layer)[Role::WGate] = (*keep)[1].t;
      (*layer)[Role::WUp] = (*keep)[2].t;
      auto x = std::make_shared<std::vector<float>>(random_floats(size_t(n) * H, 1.0f, rng));
      Vec expected;
      for (int t = 0; t < n; ++t) {
        const Vec h = rmsnorm(as_double(x->data() + size_t(t) * H, size_t(H)).data(), (*keep)[0], 1e-6, H);
        const Vec g = linear((*keep)[1], h), u = linear((*keep)[2], h);
        for (int i = 0; i < I; ++i) expected.push_back(g[i] / (1 + std::exp(-g[i])) * u[i]);
      }
      Case c;
      c.op = "rmsnorm_gate_up_swiglu";
      c.shape = "H " + std::to_string(H) + " I " + std::to_string(I) + " n " + std::to_string(n);
      c.tolerance = 2e-5;
      // Past 8 tokens CUDA runs the prefill: bf16 rmsnorm, bf16 tensor-core GEMM, bf16 activations.
      if (n > 8) c.cuda_tolerance = 1e-2;
      c.expected = std::move(expected);
      c.cpu = [&ctx, layer, keep, x, n, H, I] {
        const CpuLayer l = cpu_layer(*layer);
        std::vector<float> h(size_t(n) * H), up(size_t(n) * I), act(size_t(n) * I);
        rmsnorm_gate_up_swiglu(ctx.cx(), l, 1e-6f, x->data(), n, h.data(), up.data(), act.data());
        return act;
      };
      c.cuda = cuda_rmsnorm_gate_up_swiglu(*layer, *x, n);
      cases.push_back(std::move(c));
    }
}

void add_step_end_cases(Context& ctx, std::vector<Case>& cases) {
  std::mt19937 rng(13);
  for (const auto [V, H] : {std::pair{98, 64}, std::pair{1002, 200}})
    for (int n : {1, 5, 13}) {
      auto embed = std::make_shared<Weight>(random_weight({V, H}, 0, 1.0f, rng));
      auto norm = std::make_shared<Weight>(random_weight({H}, 1.0f, 0.2f, rng));
      auto tokens = std::make_shared<std::vector<int32_t>>();
      for (int t = 0; t < n; ++t) tokens->push_back(int32_t(rng() % V));
      Vec rows, logits;
      for (int32_t tok : *tokens)
        for (int i = 0; i < H; ++i) rows.push_back(embed->at(int64_t(tok) * H + i));
      for (int t = 0; t < n; ++t) {
        const Vec y = linear(*embed, rmsnorm(rows.data() + size_t(t) * H, *norm, 1e-6, H));
        logits.insert(logits.end(), y.begin(), y.end());
      }
      const std::string shape = "V " + std::to_string(V) + " H " + std::to_string(H) + " n " + std::to_string(n);
      Case e{"embedding_lookup", shape, 0.0, rows, [embed, tokens, n, H] {
               std::vector<float> x(size_t(n) * H);
               embedding_lookup(embed->t, tokens->data(), n, x.data());
               return x;
             }, cuda_embedding_lookup(embed->t, *tokens)};
      cases.push_back(std::move(e));
      auto x = std::make_shared<std::vector<float>>(rows.begin(), rows.end());
      Case h{"rmsnorm_lm_head", shape, 2e-5, logits, [&ctx, embed, norm, x, n, H, V] {
               std::vector<float> h(size_t(n) * H), out(size_t(n) * V);
               rmsnorm_lm_head(ctx.cx(), widen(norm->t), embed->t, 1e-6f, x->data(), n, h.data(), out.data());
               return out;
             }, cuda_rmsnorm_lm_head(embed->t, norm->t, *x, n)};
      cases.push_back(std::move(h));
    }
}

// The ops that read weight matrices, on block-quantized weights (Q8_0, Q4_K, Q6_K): the CPU's
// block kernels quantize the activations to int8 (per 32 for Q8_0, per 256 for the K-quants, as
// llama.cpp does), so their tolerance is 2e-2 (0.1-1.0 % seen); CUDA reads Q8_0 as stored up
// to 17 tokens, on inputs quantized to int8 per 32 (as llama.cpp's GPU kernels: the same
// tolerance), and widens every format to bf16 beyond; here it widens the K-quants to bf16 for
// every n (their kernels on int8 inputs are checked in test_cuda_kquant.cpp).
void add_quantized_cases(Context& ctx, std::vector<Case>& cases) {
  std::mt19937 rng(17);
  for (const QuantType type : {QuantType::Q8_0, QuantType::Q4_K, QuantType::Q6_K})
    for (const auto [rows, K] : {std::pair{136, 512}, std::pair{64, 256}})
      for (int n : {1, 5, 13, 70}) {
        const std::string fmt = quant_format(type).name;
        const std::string shape = "W " + std::to_string(rows) + "x" + std::to_string(K) + " n " + std::to_string(n);
        const double cpu_tol = 2e-2, cuda_tol = type == QuantType::Q8_0 && n <= 17 ? 2e-2 : 1e-2;
        {
          Case c = matmul_case(ctx, std::make_shared<QuantWeight>(random_quantized(type, rows, K, 0.1f, rng)), n, rng);
          c.op = "matmul_residual " + fmt;
          c.tolerance = cpu_tol;
          c.cuda_tolerance = cuda_tol;
          cases.push_back(std::move(c));
        }
        {  // the MLP's input: H = K, I = rows
          auto norm = std::make_shared<Weight>(random_weight({K}, 1.0f, 0.2f, rng));
          auto gate = std::make_shared<QuantWeight>(random_quantized(type, rows, K, 0.1f, rng));
          auto upw = std::make_shared<QuantWeight>(random_quantized(type, rows, K, 0.1f, rng));
          auto layer = std::make_shared<LayerWeights>();
          (*layer)[Role::MlpNorm] = norm->t;
          (*layer)[Role::WGate] = gate->t;
          (*layer)[Role::WUp] = upw->t;
          auto x = std::make_shared<std::vector<float>>(random_floats(size_t(n) * K, 1.0f, rng));
          Vec expected;
          for (int t = 0; t < n; ++t) {
            const Vec h = rmsnorm(as_double(x->data() + size_t(t) * K, size_t(K)).data(), *norm, 1e-6, K);
            const Vec g = linear(*gate, h), u = linear(*upw, h);
            for (int i = 0; i < rows; ++i) expected.push_back(g[i] / (1 + std::exp(-g[i])) * u[i]);
          }
          Case c{"rmsnorm_gate_up_swiglu " + fmt, shape, cpu_tol, std::move(expected),
                 [&ctx, layer, norm, gate, upw, x, n, K, rows] {
                   const CpuLayer l = cpu_layer(*layer);
                   std::vector<float> h(size_t(n) * K), up(size_t(n) * rows), act(size_t(n) * rows);
                   rmsnorm_gate_up_swiglu(ctx.cx(), l, 1e-6f, x->data(), n, h.data(), up.data(), act.data());
                   return act;
                 },
                 cuda_rmsnorm_gate_up_swiglu(*layer, *x, n), cuda_tol};
          cases.push_back(std::move(c));
        }
        if (n > 13) continue;
        {  // the step's ends: the embedding rows of n tokens, then the head over them (V = rows)
          auto table = std::make_shared<QuantWeight>(random_quantized(type, rows, K, 1.0f, rng));
          auto norm = std::make_shared<Weight>(random_weight({K}, 1.0f, 0.2f, rng));
          auto tokens = std::make_shared<std::vector<int32_t>>();
          for (int t = 0; t < n; ++t) tokens->push_back(int32_t(rng() % rows));
          Vec embedded, logits;
          for (int32_t tok : *tokens)
            for (int i = 0; i < K; ++i) embedded.push_back(table->values[size_t(tok) * K + i]);
          for (int t = 0; t < n; ++t) {
            const Vec y = linear(*table, rmsnorm(embedded.data() + size_t(t) * K, *norm, 1e-6, K));
            logits.insert(logits.end(), y.begin(), y.end());
          }
          cases.push_back(Case{"embedding_lookup " + fmt, shape, 0.0, embedded, [table, tokens, n, K] {
                                 std::vector<float> x(size_t(n) * K);
                                 embedding_lookup(table->t, tokens->data(), n, x.data());
                                 return x;
                               }, cuda_embedding_lookup(table->t, *tokens), type == QuantType::Q8_0 ? 0.0 : 1e-2});
          auto x = std::make_shared<std::vector<float>>(embedded.begin(), embedded.end());
          cases.push_back(Case{"rmsnorm_lm_head " + fmt, shape, cpu_tol, logits, [&ctx, table, norm, x, n, K, rows] {
                                 std::vector<float> h(size_t(n) * K), out(size_t(n) * rows);
                                 rmsnorm_lm_head(ctx.cx(), widen(norm->t), table->t, 1e-6f, x->data(), n, h.data(),
                                                 out.data());
                                 return out;
                               }, cuda_rmsnorm_lm_head(table->t, norm->t, *x, n), cuda_tol});
        }
      }
}

}  // namespace
}  // namespace runahead::parity

int main() {
  using namespace runahead::parity;
  Context ctx;
  std::vector<Case> cases;
  add_step_end_cases(ctx, cases);
  add_qkv_cases(ctx, cases);
  add_attention_cases(ctx, cases);
  add_matmul_cases(ctx, cases);
  add_mlp_cases(ctx, cases);
  add_quantized_cases(ctx, cases);

  const bool cuda = cuda_present();
  std::printf("%-26s %-40s %-9s %-12s %-12s\n", "op", "shape", "tol", "cpu", cuda ? "cuda" : "cuda (none)");
  struct Tally { int pass = 0, fail = 0; };
  std::map<std::string, std::pair<Tally, Tally>> table;  // op -> (cpu, cuda)
  int failures = 0;
  std::vector<std::string> errors;  // CUDA runs that threw
  for (const Case& c : cases) {
    const double cpu_err = relative_error(c.cpu(), c.expected);
    const bool cpu_ok = cpu_err <= std::max(c.tolerance, 1e-7);
    (cpu_ok ? table[c.op].first.pass : table[c.op].first.fail)++;
    std::string cuda_cell = "-";
    if (cuda) {
      if (!c.cuda) {
        cuda_cell = "MISSING";
        table[c.op].second.fail++;
        ++failures;
      } else {
        char b[32];
        bool ok = false;
        try {
          const double e = relative_error(c.cuda(), c.expected);
          ok = e <= std::max(c.cuda_tolerance > 0 ? c.cuda_tolerance : c.tolerance, 1e-7);
          std::snprintf(b, sizeof b, "%.1e%s", e, ok ? "" : " FAIL");
        } catch (const std::exception& err) {  // e.g. a shape the kernel refuses: a failure, with its reason
          std::snprintf(b, sizeof b, "ERROR");
          errors.push_back(c.op + " " + c.shape + ": " + err.what());
        }
        (ok ? table[c.op].second.pass : table[c.op].second.fail)++;
        cuda_cell = b;
        failures += !ok;
      }
    }
    failures += !cpu_ok;
    std::printf("%-26s %-40s %-9.0e %.1e%-5s %-12s\n", c.op.c_str(), c.shape.c_str(), c.tolerance, cpu_err,
                cpu_ok ? "" : " FAIL", cuda_cell.c_str());
  }
  std::printf("\n%-26s %-14s %-14s\n", "op x backend", "cpu", "cuda");
  for (const auto& [op, t] : table) {
    auto cell = [&](const Tally& x) {
      return x.fail ? std::to_string(x.fail) + " FAIL of " + std::to_string(x.pass + x.fail)
                    : "ok " + std::to_string(x.pass) + "/" + std::to_string(x.pass);
    };
    std::printf("%-26s %-14s %-14s\n", op.c_str(), cell(t.first).c_str(), cuda ? cell(t.second).c_str() : "-");
  }
  for (const std::string& e : errors) std::printf("cuda error: %s\n", e.c_str());
  std::printf("%s\n", failures ? "FAILED" : "all ops agree");
  return failures ? 1 : 0;
}
