// The CUDA backend: each op against a double-precision reference, whole models against the
// transformers goldens and the CPU backend. Skipped, with a message, without a CUDA device.
#ifdef RUNAHEAD_CUDA
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/half.h"
#include "model/quantize.h"
#include "cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "model_compare.h"
#include "cuda/device_memory.h"
#include "cuda/kernels.h"
#include "model/weights.h"

using namespace runahead;
using namespace runahead::cuda;
using namespace runahead::testing;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// max |a - b| / max(1, max |b|)
double rel_error(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double err = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(std::isfinite(a[i]));
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / scale;
}

std::vector<double> rmsnorm_ref(const std::vector<float>& x, int t, int H, const std::vector<float>& g) {
  double ss = 0;
  for (int i = 0; i < H; ++i) ss += double(x[t * H + i]) * x[t * H + i];
  const double inv = 1.0 / std::sqrt(ss / H + 1e-6);
  std::vector<double> h(H);
  for (int i = 0; i < H; ++i) h[i] = x[t * H + i] * inv * g[i];
  return h;
}

double dot(const float* w, const std::vector<double>& h) {
  double s = 0;
  for (size_t i = 0; i < h.size(); ++i) s += double(w[i]) * h[i];
  return s;
}

// Attention of head h for the query at position p over cache rows [0, p].
std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, int heads, int kv_heads, int hd, int t, int h, int p) {
  const int kvd = kv_heads * hd, g = h / (heads / kv_heads);
  std::vector<double> s(p + 1);
  double m = -1e300;
  for (int j = 0; j <= p; ++j) {
    double d = 0;
    for (int e = 0; e < hd; ++e) d += double(q[(t * heads + h) * hd + e]) * k[j * kvd + g * hd + e];
    s[j] = d / std::sqrt(double(hd));
    m = std::max(m, s[j]);
  }
  double z = 0;
  for (double& x : s) z += x = std::exp(x - m);
  std::vector<double> out(hd, 0.0);
  for (int j = 0; j <= p; ++j)
    for (int e = 0; e < hd; ++e) out[e] += s[j] / z * v[j * kvd + g * hd + e];
  return out;
}

// Every head of tokens t < n, token t at position p0 + t: [n, heads * hd].
std::vector<double> attention_refs(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int heads, int kv_heads, int hd, int n, int p0) {
  std::vector<double> ref(size_t(n) * heads * hd);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h) {
      const auto o = attention_ref(q, k, v, heads, kv_heads, hd, t, h, p0 + t);
      for (int e = 0; e < hd; ++e) ref[(size_t(t) * heads + h) * hd + e] = o[e];
    }
  return ref;
}

// A decode attention over the caches k, v with `splits` splits (in a cluster or not), its
// partials and zeroed counters held here.
struct AttentionRun {
  DecodeAttention att;
  DeviceBuffer partial, counters;
};
AttentionRun attention_run(int heads, int kv_heads, int hd, int cap, int splits, bool cluster, const DeviceBuffer& k,
                           const DeviceBuffer& v) {
  AttentionRun r{{}, DeviceBuffer(attention_partial_floats(heads, hd, splits) * 4),
                 to_device(std::vector<int>(kMaxVecTokens * heads, 0))};
  r.att.heads = heads, r.att.kv_heads = kv_heads, r.att.head_dim = hd, r.att.capacity = cap, r.att.splits = splits;
  r.att.cluster = cluster;
  r.att.k_cache = k.get<float>();
  r.att.v_cache = v.get<float>();
  r.att.partial = r.partial.get<float>();
  r.att.counters = r.counters.get<int>();
  return r;
}

}  // namespace

TEST_CASE("cuda ops: rmsnorm_qkv_rope_append, attention, residual, gate_up_swiglu, lm_head_argmax") {
  if (!have_device()) return;
  std::mt19937 rng(7);
  const int H = 64, heads = 4, kv_heads = 2, hd = 16, I = 96, V = 202, cap = 80;
  const int qd = heads * hd, kvd = kv_heads * hd, rows = qd + 2 * kvd;
  for (int n : {1, 3, 5, 9, 17}) {
    CAPTURE(n);
    const int p0 = 37;
    auto x = random_floats(size_t(n) * H, rng);
    auto norm = random_floats(H, rng);
    auto bias = random_floats(rows, rng, 0.1f);
    Bf16Matrix w = random_bf16(size_t(rows) * H, rng);
    std::vector<float> cos_t(cap * hd / 2), sin_t(cap * hd / 2);
    for (size_t i = 0; i < cos_t.size(); ++i) cos_t[i] = std::cos(0.01f * i), sin_t[i] = std::sin(0.01f * i);
    // The cache already holds p0 random positions.
    auto k_cache = random_floats(size_t(cap) * kvd, rng), v_cache = random_floats(size_t(cap) * kvd, rng);
    DeviceBuffer dx = to_device(x), dnorm = to_device(norm), dbias = to_device(bias), dw = to_device(w.bits),
                 dcos = to_device(cos_t), dsin = to_device(sin_t), dk = to_device(k_cache), dv = to_device(v_cache),
                 dpos = to_device(std::vector<int>{p0}), dq(size_t(n) * qd * 4);
    QkvRope a;
    a.w = dw.get();
    a.bias = dbias.get<float>();
    a.norm = dnorm.get<float>();
    a.rope_cos = dcos.get<float>();
    a.rope_sin = dsin.get<float>();
    a.hidden = H, a.heads = heads, a.kv_heads = kv_heads, a.head_dim = hd;
    a.k_cache = dk.get<float>();
    a.v_cache = dv.get<float>();
    rmsnorm_qkv_rope_append(a, dx.get<float>(), n, dpos.get<int>(), dq.get<float>(), sms(), nullptr);
    auto q = to_host<float>(dq, size_t(n) * qd);
    auto k_after = to_host<float>(dk, k_cache.size()), v_after = to_host<float>(dv, v_cache.size());
    std::vector<double> q_ref(q.size());
    std::vector<float> k_got, v_got;
    std::vector<double> k_ref, v_ref;
    for (int t = 0; t < n; ++t) {
      const auto h = rmsnorm_ref(x, t, H, norm);
      std::vector<double> y(rows);
      for (int r = 0; r < rows; ++r) y[r] = dot(&w.values[size_t(r) * H], h) + bias[r];
      const int p = p0 + t;
      for (int head = 0; head < heads + kv_heads; ++head)
        for (int i = 0; i < hd / 2; ++i) {
          const double c = cos_t[p * hd / 2 + i], s = sin_t[p * hd / 2 + i];
          const double a0 = y[head * hd + i], a1 = y[head * hd + i + hd / 2];
          y[head * hd + i] = a0 * c - a1 * s;
          y[head * hd + i + hd / 2] = a1 * c + a0 * s;
        }
      for (int i = 0; i < qd; ++i) q_ref[t * qd + i] = y[i];
      for (int i = 0; i < kvd; ++i) {
        k_ref.push_back(y[qd + i]), k_got.push_back(k_after[size_t(p) * kvd + i]);
        v_ref.push_back(y[qd + kvd + i]), v_got.push_back(v_after[size_t(p) * kvd + i]);
      }
    }
    CHECK(rel_error(q, q_ref) < 1e-5);
    CHECK(rel_error(k_got, k_ref) < 1e-5);
    CHECK(rel_error(v_got, v_ref) < 1e-5);

    // Attention over the cache as the projection left it, decode and prefill kernels.
    // Each split count merged through global memory, and in a cluster where one runs.
    // In a cluster: the partials loaded from the other blocks, or pushed into block 0 (and
    // counted there in bytes).
    struct Merge {
      int splits;
      bool cluster;
      bool push;
      bool counted;
    };
    for (const auto& [splits, cluster, push, counted] :
         {Merge{1, false, false, false}, {3, false, false, false}, {16, false, false, false}, {3, true, false, false},
          {16, true, false, false}, {3, true, true, false}, {16, true, true, false}, {3, true, true, true},
          {16, true, true, true}}) {
      CAPTURE(splits);
      CAPTURE(cluster);
      CAPTURE(push);
      CAPTURE(counted);
      if (cluster && !rings_run_here()) continue;  // clusters: Hopper on
      if (cluster) REQUIRE(attention_cluster_fits(splits));
      if (cluster) REQUIRE(attention_cluster_fits(splits, push, counted));
      AttentionRun run = attention_run(heads, kv_heads, hd, cap, splits, cluster, dk, dv);
      run.att.push = push;
      run.att.counted = counted;
      const DecodeAttention& att = run.att;
      DeviceBuffer dout(size_t(n) * qd * 4);
      const std::vector<double> ref = attention_refs(q, k_after, v_after, heads, kv_heads, hd, n, p0);
      attention_decode(att, dq.get<float>(), n, dpos.get<int>(), dout.get<float>(), nullptr);
      CHECK(rel_error(to_host<float>(dout, ref.size()), ref) < 1e-5);
      attention_decode(att, dq.get<float>(), n, dpos.get<int>(), dout.get<float>(), nullptr);  // counters reset
      CHECK(rel_error(to_host<float>(dout, ref.size()), ref) < 1e-5);
      attention_prefill(att, dq.get<float>(), n, dpos.get<int>(), dout.get<float>(), nullptr);
      CHECK(rel_error(to_host<float>(dout, ref.size()), ref) < 1e-5);
    }

    // x += in Wo^T
    {
      Bf16Matrix wo = random_bf16(size_t(H) * qd, rng);
      auto in = random_floats(size_t(n) * qd, rng);
      DeviceBuffer dwo = to_device(wo.bits), din = to_device(in), dres = to_device(x);
      matvec_residual_add(dwo.get(), DType::BF16, nullptr, H, qd, din.get<float>(), n, dres.get<float>(), Q8Scratch{}, sms(), nullptr);
      std::vector<double> ref(size_t(n) * H);
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < H; ++r) {
          double s = x[t * H + r];
          for (int k = 0; k < qd; ++k) s += double(wo.values[size_t(r) * qd + k]) * in[t * qd + k];
          ref[t * H + r] = s;
        }
      CHECK(rel_error(to_host<float>(dres, ref.size()), ref) < 1e-5);
    }
    // act = silu(h Wg^T) * (h Wu^T)
    {
      Bf16Matrix wgu = random_bf16(size_t(2) * I * H, rng);
      DeviceBuffer dwgu = to_device(wgu.bits), dact(size_t(n) * I * 4);
      rmsnorm_gate_up_swiglu(dwgu.get(), DType::BF16, nullptr, dnorm.get<float>(), 1e-6f, H, I, dx.get<float>(), n, dact.get<float>(), Q8Scratch{}, sms(), nullptr);
      std::vector<double> ref(size_t(n) * I);
      for (int t = 0; t < n; ++t) {
        const auto h = rmsnorm_ref(x, t, H, norm);
        for (int j = 0; j < I; ++j) {
          const double g = dot(&wgu.values[size_t(j) * H], h), u = dot(&wgu.values[size_t(I + j) * H], h);
          ref[t * I + j] = g / (1 + std::exp(-g)) * u;
        }
      }
      CHECK(rel_error(to_host<float>(dact, ref.size()), ref) < 1e-5);
    }
    // logits = rmsnorm(x) W^T, argmax per row, and the step's end.
    {
      Bf16Matrix wh = random_bf16(size_t(V) * H, rng);
      DeviceBuffer dwh = to_device(wh.bits), dlogits(size_t(n) * V * 4),
          partial(size_t(2) * kMaxVecTokens * lm_head_blocks(V, sms()) * 4), counter = to_device(std::vector<int>{0}),
          dtokens(kMaxVecTokens * 4), dnext(4);
      LmHead head;
      head.w = dwh.get();
      head.norm = dnorm.get<float>();
      head.hidden = H, head.vocab = V;
      head.partial = partial.get<float>();
      head.counter = counter.get<int>();
      StepEnd end;
      end.pos = dpos.get<int>();
      end.advance = n;
      end.out = dtokens.get<int32_t>();
      end.next = dnext.get<int32_t>();
      rmsnorm_lm_head_argmax(head, dx.get<float>(), n, dlogits.get<float>(), end, sms(), nullptr);
      std::vector<double> ref(size_t(n) * V);
      std::vector<int32_t> best(n);
      for (int t = 0; t < n; ++t) {
        const auto h = rmsnorm_ref(x, t, H, norm);
        for (int r = 0; r < V; ++r) ref[t * V + r] = dot(&wh.values[size_t(r) * H], h);
        best[t] = int32_t(std::max_element(ref.begin() + t * V, ref.begin() + (t + 1) * V) - ref.begin() - t * V);
      }
      CHECK(rel_error(to_host<float>(dlogits, ref.size()), ref) < 1e-5);
      CHECK(to_host<int32_t>(dtokens, n) == best);
      CHECK(to_host<int32_t>(dnext, 1)[0] == best[n - 1]);
      CHECK(to_host<int>(dpos, 1)[0] == p0 + n);
      CHECK(to_host<int>(counter, 1)[0] == 0);
    }
  }
}

// A 7B's grouping (7 query heads a kv head, head_dim 128) over 600 cached positions: several
// rounds of cached rows a block at 1 and 5 splits, each block's one batch at 32; both block
// sizes; the int8 outputs for o_proj the same bits as quantize_inputs_q8's.
TEST_CASE("cuda ops: decode attention over long contexts with grouped query heads") {
  if (!have_device()) return;
  std::mt19937 rng(11);
  const int heads = 14, kv_heads = 2, hd = 128, cap = 640, p0 = 600, n = 3;
  const int qd = heads * hd, kvd = kv_heads * hd;
  auto q = random_floats(size_t(n) * qd, rng), k = random_floats(size_t(cap) * kvd, rng),
       v = random_floats(size_t(cap) * kvd, rng);
  DeviceBuffer dq = to_device(q), dk = to_device(k), dv = to_device(v), dpos = to_device(std::vector<int>{p0});
  const std::vector<double> ref = attention_refs(q, k, v, heads, kv_heads, hd, n, p0);
  struct Merge {
    int splits;
    bool cluster;
    bool push;     // DecodeAttention::push
    bool counted;  // DecodeAttention::counted
    bool by_warp;  // DecodeAttention::weigh_by_warp
  };
  for (const auto& [splits, cluster, push, counted, by_warp] :
       {Merge{1, false, false, false, false}, {5, false, false, false, false}, {32, false, false, false, false},
        {5, true, false, false, false}, {16, true, false, false, false}, {5, true, true, false, false},
        {16, true, true, false, false}, {5, true, true, true, false}, {16, true, true, true, false},
        {5, true, true, true, true}, {16, true, true, true, true},
        // 9: the 7B's split count under the one-wave candidate (NOTES v57), a cluster past the portable 8
        {9, true, true, true, true}}) {
    CAPTURE(splits);
    CAPTURE(cluster);
    CAPTURE(push);
    CAPTURE(counted);
    CAPTURE(by_warp);
    if (cluster && !rings_run_here()) continue;
    if (cluster) REQUIRE(attention_cluster_fits(splits));
    if (cluster) REQUIRE(attention_cluster_fits(splits, push, counted));
    AttentionRun run = attention_run(heads, kv_heads, hd, cap, splits, cluster, dk, dv);
    DecodeAttention& att = run.att;
    att.push = push;
    att.counted = counted;
    att.weigh_by_warp = by_warp;
    DeviceBuffer dout(size_t(n) * qd * 4), q8(size_t(n) * qd), d8(size_t(n) * qd / 32 * 4), q8_ref(size_t(n) * qd),
        d8_ref(size_t(n) * qd / 32 * 4);
    att.q8 = Q8Scratch{q8.get<int8_t>(), d8.get<float>()};
    for (int round = 0; round < 2; ++round) {  // the second after the counters' reset
      attention_decode(att, dq.get<float>(), n, dpos.get<int>(), dout.get<float>(), nullptr);
      CHECK(rel_error(to_host<float>(dout, ref.size()), ref) < 1e-5);
    }
    quantize_inputs_q8(dout.get<float>(), nullptr, n, qd, Q8Scratch{q8_ref.get<int8_t>(), d8_ref.get<float>()}, nullptr);
    CHECK(to_host<int8_t>(q8, size_t(n) * qd) == to_host<int8_t>(q8_ref, size_t(n) * qd));
    CHECK(to_host<float>(d8, size_t(n) * qd / 32) == to_host<float>(d8_ref, size_t(n) * qd / 32));
  }
}

TEST_CASE("cuda ops: embedding_lookup and matvec in f16 and f32") {
  if (!have_device()) return;
  std::mt19937 rng(3);
  const int H = 64, V = 50, K = 96, n = 3;
  auto table = random_floats(size_t(V) * H, rng);
  std::vector<uint16_t> table16(table.size());
  for (size_t i = 0; i < table.size(); ++i) table16[i] = f32_to_f16(table[i]), table[i] = f16_to_f32(table16[i]);
  const std::vector<int32_t> tokens = {7, 0, 49};
  DeviceBuffer dtable = to_device(table16), dtok = to_device(tokens), dx(size_t(n) * H * 4);
  embedding_lookup(dtable.get(), DType::F16, nullptr, H, dtok.get<int32_t>(), n, dx.get<float>(), nullptr);
  auto x = to_host<float>(dx, size_t(n) * H);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < H; ++i) REQUIRE(x[t * H + i] == table[tokens[t] * H + i]);

  auto w = random_floats(size_t(H) * K, rng);
  auto in = random_floats(size_t(n) * K, rng);
  std::vector<double> ref(size_t(n) * H);
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < H; ++r) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(w[r * K + k]) * in[t * K + k];
      ref[t * H + r] = s;
    }
  DeviceBuffer dw = to_device(w), din = to_device(in), dres = to_device(std::vector<float>(size_t(n) * H, 0.0f));
  matvec_residual_add(dw.get(), DType::F32, nullptr, H, K, din.get<float>(), n, dres.get<float>(), Q8Scratch{}, sms(), nullptr);
  CHECK(rel_error(to_host<float>(dres, ref.size()), ref) < 1e-5);
}

TEST_CASE("cuda ops: sample_token keeps top-k / top-p support and follows the distribution") {
  if (!have_device()) return;
  const int V = 1000;
  std::vector<float> logits(V, -5.0f);
  logits[10] = 2.0f, logits[500] = 1.0f, logits[999] = 0.5f, logits[3] = 1.0f;
  DeviceBuffer dl = to_device(logits), dstate(sizeof(SamplingState)), dpos = to_device(std::vector<int>{0}),
               dout(4);
  auto draw_counts = [&](SamplingState s, int draws) {
    check_cuda(cudaMemcpy(dstate.get(), &s, sizeof(s), cudaMemcpyHostToDevice), "state");
    std::vector<int> counts(V, 0);
    StepEnd end;
    end.out = dout.get<int32_t>();
    for (int i = 0; i < draws; ++i) {
      sample_token(dl.get<float>(), V, dstate.get<SamplingState>(), end, nullptr);
      const int32_t t = to_host<int32_t>(dout, 1)[0];
      REQUIRE(t >= 0);
      REQUIRE(t < V);
      ++counts[t];
    }
    return counts;
  };
  CHECK(draw_counts({1.0f, 1, 1.0f, 42, 0}, 20)[10] == 20);
  auto top2 = draw_counts({1.0f, 3, 1.0f, 42, 0}, 300);  // 10, 500 and 3 (tied at 1.0)
  CHECK(top2[10] + top2[500] + top2[3] == 300);
  CHECK(top2[10] > top2[500]);
  // At temperature 1 token 10 has e^2 / (e^2 + 2e + e^0.5 + 996 e^-5) = 0.349.
  auto nucleus = draw_counts({1.0f, 0, 0.3f, 42, 0}, 100);  // p(10) alone reaches 0.3
  CHECK(nucleus[10] == 100);
  auto all = draw_counts({1.0f, 0, 1.0f, 7, 0}, 2000);
  CHECK(std::abs(all[10] / 2000.0 - 0.349) < 0.04);
}

namespace {

const fs::path kModels = fs::path(RUNAHEAD_FIXTURES) / "models";

std::shared_ptr<const ModelWeights> fixture(const std::string& name) {
  return std::make_shared<const ModelWeights>(load_model(kModels / name));
}

int32_t argmax_of(const std::vector<float>& v, size_t row, size_t width) {
  return int32_t(std::max_element(v.begin() + row * width, v.begin() + (row + 1) * width) - v.begin() - row * width);
}

// The fixture's transformers golden on `cuda`: greedy continuations token for token (the device
// loop, and forward() step by step with the CPU backend alongside), and the top-8 logits of
// its long prompt within the golden's tolerance. The prompt goes in chunks shorter than the
// tensor-core prefill takes (bf16 activations, checked against the CPU in the tests below) so
// the f32 path is what meets the golden's tolerance.
void check_golden(const std::string& name, CudaBackend& cuda, Backend& cpu) {
  std::ifstream golden_file(kModels / name / "golden.json");
  const json golden = json::parse(golden_file);
  const double tol = golden["tolerance"]["logit_abs"].get<double>();
  const int V = cuda.config().vocab_size;

  for (const json& g : golden["greedy"]) {
    const auto prompt = g["prompt"].get<std::vector<int32_t>>();
    const auto expected = g["tokens"].get<std::vector<int32_t>>();
    const int max_new = g["max_new_tokens"].get<int>();
    // transformers stops at an end-of-sequence token and leaves it out of the golden.
    const auto& eos = cuda.config().eos_token_ids;
    const auto is_eos = [&](int32_t t) { return std::find(eos.begin(), eos.end(), t) != eos.end(); };
    cuda.truncate(0);
    std::vector<float> logits;
    cuda.forward(prompt, 1, logits);
    std::vector<int32_t> got = {argmax_of(logits, 0, V)};
    bool stopped = false;
    cuda.decode(got[0], max_new - 1, SamplingParams{}, [&](int32_t t) {
      if (is_eos(t)) return !(stopped = true);
      got.push_back(t);
      return true;
    });
    CHECK(got == expected);
    // The cache holds the prompt and every token fed: all produced but the last (the end token, when it stopped).
    CHECK(cuda.kv_len() == int(prompt.size() + got.size() - (stopped ? 0 : 1)));

    // The CPU backend, token by token, and the CUDA backend's plain forward agree.
    cpu.truncate(0);
    cuda.truncate(0);
    std::vector<float> cpu_logits, cuda_logits;
    cpu.forward(prompt, 1, cpu_logits);
    cuda.forward(prompt, 1, cuda_logits);
    std::vector<int32_t> cpu_tokens, cuda_tokens;
    for (int i = 0; i < max_new; ++i) {
      const int32_t a = argmax_of(cpu_logits, 0, V), b = argmax_of(cuda_logits, 0, V);
      CHECK(a == b);
      if (is_eos(a) || is_eos(b)) break;
      cpu_tokens.push_back(a), cuda_tokens.push_back(b);
      cpu.forward(std::span<const int32_t>(&a, 1), 1, cpu_logits);
      cuda.forward(std::span<const int32_t>(&b, 1), 1, cuda_logits);
    }
    CHECK(cuda_tokens == cpu_tokens);
    CHECK(cuda_tokens == expected);
  }

  constexpr int kChunk = 48;  // below the tensor-core prefill's 64 tokens
  for (const json& l : golden["logits"]) {
    const auto prompt = l["prompt"].get<std::vector<int32_t>>();
    const auto positions = l["positions"].get<std::vector<int>>();
    const int n = int(prompt.size());
    cuda.truncate(0);
    std::vector<float> logits, part;
    for (int done = 0; done < n; done += kChunk) {
      const int count = std::min(kChunk, n - done);
      cuda.forward(std::span<const int32_t>(prompt).subspan(size_t(done), size_t(count)), count, part);
      logits.insert(logits.end(), part.begin(), part.end());
    }
    double worst = 0;
    for (size_t i = 0; i < positions.size(); ++i)
      for (const json& pair : l["top"][i])
        worst = std::max(worst, std::abs(logits[size_t(positions[i]) * V + pair[0].get<int>()] -
                                         pair[1].get<double>()));
    MESSAGE(name << ": largest |logit - golden| over the top-8 = " << worst << " (tolerance " << tol << ")");
    CHECK(worst <= tol);
    // Speculative verification: rerunning the last 5 positions after a rollback gives the same rows.
    cuda.truncate(n - 5);
    std::vector<float> again;
    cuda.forward(std::span<const int32_t>(prompt).subspan(n - 5), 5, again);
    double diff = 0;
    for (size_t i = 0; i < again.size(); ++i) diff = std::max(diff, double(std::abs(again[i] - logits[size_t(n - 5) * V + i])));
    CHECK(diff < 1e-4);
  }
}

// The CUDA and CPU backends on one prompt long enough for the tensor-core prefill (bf16
// activations): the last 8 rows of logits within 2 % of the largest, then one decode step on
// the f32 path from the cache the prefill left.
void check_prefill_near_cpu(std::shared_ptr<const ModelWeights> weights, int prompt_tokens) {
  auto cuda = make_cuda_backend(weights, BackendOptions{});
  auto cpu = make_cpu_backend(weights, BackendOptions{});
  const int V = weights->config.vocab_size;
  std::mt19937 rng(11);
  const std::vector<int32_t> prompt = random_tokens(size_t(prompt_tokens), V, rng);
  std::vector<float> a, b;
  cpu->forward(prompt, 8, a);
  cuda->forward(prompt, 8, b);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i]))), scale = std::max(scale, double(std::abs(a[i])));
  // bf16 activations on this path: about 2^-9 relative per rounding.
  MESSAGE("tensor-core prefill: largest |logit difference| " << worst << " of logits up to " << scale);
  CHECK(worst <= 0.02 * scale);
  // Decoding continues from the cache the prefill left, on the f32 path.
  const int32_t next = argmax_of(b, 7, V);
  cpu->forward(std::span<const int32_t>(&next, 1), 1, a);
  cuda->forward(std::span<const int32_t>(&next, 1), 1, b);
  worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  CHECK(worst <= 0.02 * scale);
}

}  // namespace

TEST_CASE("cuda backend: fixtures match the transformers goldens and the CPU backend") {
  if (!have_device()) return;
  // Both single-token decode paths: the persistent kernel (1) and a kernel per op (0).
  for (const char* persistent : {"1", "0"})
  for (const char* name : {"qwen2-tied-bf16", "qwen2-untied-f16", "llama-f32", "llama3-scaled-f32"}) {
    CAPTURE(name);
    CAPTURE(persistent);
    auto weights = fixture(name);
    setenv("RUNAHEAD_CUDA_PERSISTENT", persistent, 1);
    auto cuda = make_cuda_backend(weights, BackendOptions{});
    unsetenv("RUNAHEAD_CUDA_PERSISTENT");
    const std::string path = cuda->describe()["optimizations"]["decode_step"].get<std::string>();
    MESSAGE(name << ": " << path);
    CHECK(path.rfind(persistent[0] == '1' ? "one persistent kernel" : "a kernel per op", 0) == 0);
    auto cpu = make_cpu_backend(weights, BackendOptions{});
    check_golden(name, *cuda, *cpu);
  }
}

// Qwen3's per-head q/k RMSNorm: the kernel-per-op path (the persistent kernel declines it, by
// name), on the golden, and its tensor-core prefill against the CPU.
TEST_CASE("cuda backend: qwen3 (q/k norms) matches the transformers golden and the CPU backend") {
  if (!have_device()) return;
  auto weights = fixture("qwen3-tiny-bf16");
  setenv("RUNAHEAD_CUDA_PERSISTENT", "1", 1);
  auto cuda = make_cuda_backend(weights, BackendOptions{});
  unsetenv("RUNAHEAD_CUDA_PERSISTENT");
  const std::string path = cuda->describe()["optimizations"]["decode_step"].get<std::string>();
  MESSAGE("qwen3-tiny-bf16: " << path);
  CHECK(path.rfind("a kernel per op (persistent kernel off: needs a layer without per-head q/k RMSNorm", 0) == 0);
  auto cpu = make_cpu_backend(weights, BackendOptions{});
  check_golden("qwen3-tiny-bf16", *cuda, *cpu);
  check_prefill_near_cpu(weights, 300);
}

namespace {

// Greedy verify on the device against the CPU's argmax: from one prompt, drafts of every
// width the device path takes (1..kMaxVecTokens = 17 tokens in the step), right up to a wrong token at each
// place, keep what the CPU's greedy continuation says, leave the cache at that length, and
// decoding from there continues the CPU's tokens.
void check_device_verify(std::shared_ptr<const ModelWeights> weights) {
  auto cuda = make_cuda_backend(weights, BackendOptions{});
  auto cpu = make_cpu_backend(weights, BackendOptions{});
  const int V = weights->config.vocab_size;
  REQUIRE(cuda->max_verify_width() == cuda::kMaxVecTokens);
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = random_tokens(40, V, rng);
  // The CPU's greedy continuation: g[0] follows the prompt, g[i + 1] follows g[i].
  std::vector<int32_t> g;
  std::vector<float> logits;
  cpu->forward(prompt, 1, logits);
  g.push_back(argmax_of(logits, 0, V));
  for (int i = 0; i < cuda::kMaxVecTokens; ++i) {
    cpu->forward(std::span<const int32_t>(&g.back(), 1), 1, logits);
    g.push_back(argmax_of(logits, 0, V));
  }
  const int P = int(prompt.size());
  cuda->forward(prompt, 1, logits);
  for (int width = 1; width <= cuda::kMaxVecTokens; ++width) {
    for (int wrong = 0; wrong <= width - 1; ++wrong) {  // wrong == width - 1: the whole draft is right
      CAPTURE(width);
      CAPTURE(wrong);
      std::vector<int32_t> draft(g.begin() + 1, g.begin() + width);
      if (wrong < width - 1) draft[size_t(wrong)] = (draft[size_t(wrong)] + 1) % V;
      const GreedyVerdict v = cuda->verify_greedy(g[0], draft);
      CHECK(v.accepted == wrong);
      CHECK(v.next == g[size_t(wrong) + 1]);
      CHECK(cuda->kv_len() == P + 1 + v.accepted);
      cuda->truncate(P);
    }
  }
  // After a partly accepted verify the cache and the device's next token are right.
  const std::vector<int32_t> draft = {g[1], g[2], (g[3] + 1) % V, g[4]};
  const GreedyVerdict v = cuda->verify_greedy(g[0], draft);
  REQUIRE(v.accepted == 2);
  std::vector<int32_t> more = {v.next};
  cuda->decode(v.next, 6, SamplingParams{}, [&](int32_t t) {
    more.push_back(t);
    return true;
  });
  CHECK(more == std::vector<int32_t>(g.begin() + 3, g.begin() + 10));
  // Queued one ahead: the second step's pending token is the first step's own token, on the
  // device; its draft was guessed before the first was read.
  cuda->truncate(P);
  cuda->begin_greedy_run(g[0]);
  const std::vector<int32_t> a = {g[1], g[2]}, b = {g[4], (g[5] + 1) % V};
  cuda->enqueue_verify_greedy(a);
  cuda->enqueue_verify_greedy(b);  // assumes a is kept whole and g[3] follows it
  const GreedyVerdict va = cuda->next_verdict();
  CHECK(va.accepted == 2);
  CHECK(va.next == g[3]);
  const GreedyVerdict vb = cuda->next_verdict();
  CHECK(vb.accepted == 1);
  CHECK(vb.next == g[5]);
  CHECK(cuda->kv_len() == P + 5);
  // A step queued past the end (a stop) is dropped: the cache keeps what was read.
  const std::vector<int32_t> c = {g[6]};
  cuda->enqueue_verify_greedy(c);
  cuda->end_greedy_run();
  CHECK(cuda->kv_len() == P + 5);
  std::vector<int32_t> after = {g[5]};
  cuda->decode(g[5], 4, SamplingParams{}, [&](int32_t t) {
    after.push_back(t);
    return true;
  });
  CHECK(after == std::vector<int32_t>(g.begin() + 5, g.begin() + 10));
  // A wrong guess: the first step keeps one draft, so the second verifies its draft after g[2]
  // (not after g[3] as guessed) and keeps nothing, losslessly.
  cuda->truncate(P);
  cuda->begin_greedy_run(g[0]);
  const std::vector<int32_t> a2 = {g[1], (g[2] + 1) % V}, b2 = {g[4]};
  cuda->enqueue_verify_greedy(a2);
  cuda->enqueue_verify_greedy(b2);
  CHECK(cuda->next_verdict().accepted == 1);
  const GreedyVerdict vb2 = cuda->next_verdict();
  CHECK(vb2.accepted == int(g[4] == g[3]));
  CHECK(vb2.next == (g[4] == g[3] ? g[4] : g[3]));
  CHECK(cuda->kv_len() == P + 2 + 1 + vb2.accepted);
  cuda->end_greedy_run();
  // Wider than one pass: forward() and the host, with the same verdict.
  cuda->truncate(P);
  const std::vector<int32_t> wide(g.begin() + 1, g.begin() + 12);
  const GreedyVerdict w = cuda->verify_greedy(g[0], wide);
  CHECK(w.accepted == 11);
  CHECK(w.next == g[12]);
  CHECK(cuda->kv_len() == P + 12);
}

}  // namespace

TEST_CASE("cuda backend: greedy verify on the device keeps what the CPU's argmax keeps") {
  if (!have_device()) return;
  for (const char* persistent : {"1", "0"})
    for (const char* name : {"qwen2-tied-bf16", "llama-f32", "qwen3-tiny-bf16"}) {
      CAPTURE(name);
      CAPTURE(persistent);
      setenv("RUNAHEAD_CUDA_PERSISTENT", persistent, 1);
      check_device_verify(fixture(name));
      unsetenv("RUNAHEAD_CUDA_PERSISTENT");
    }
}

// The persistent kernel's shared-memory limit belongs to the process: a second model's plan
// (a draft model, an MTP layer) of other widths must leave the first one's launches valid
// (a smaller plan once cut them to "invalid argument": speculation auto on the embedded model).
TEST_CASE("cuda backend: a second model's persistent step leaves the first model's launches valid") {
  if (!have_device()) return;
  auto big_weights = with_bf16_matrices(test::load_shared(test::kEmbeddedModel));
  setenv("RUNAHEAD_CUDA_PERSISTENT", "1", 1);
  auto big = make_cuda_backend(big_weights, BackendOptions{});
  auto small = make_cuda_backend(fixture("qwen2-tied-bf16"), BackendOptions{});
  unsetenv("RUNAHEAD_CUDA_PERSISTENT");
  REQUIRE(big->describe()["optimizations"]["decode_step"].get<std::string>().rfind("one persistent kernel", 0) == 0);
  REQUIRE(small->describe()["optimizations"]["decode_step"].get<std::string>().rfind("one persistent kernel", 0) == 0);
  auto cpu = make_cpu_backend(big_weights, BackendOptions{});
  const std::vector<int32_t> prompt = {12, 400, 9, 77, 3051, 18};
  const int V = big_weights->config.vocab_size;
  std::vector<float> logits;
  cpu->forward(prompt, 1, logits);
  std::vector<int32_t> expected = {argmax_of(logits, 0, V)};
  for (int i = 0; i < 8; ++i) {
    cpu->forward(std::span<const int32_t>(&expected.back(), 1), 1, logits);
    expected.push_back(argmax_of(logits, 0, V));
  }
  big->forward(prompt, 1, logits);
  std::vector<int32_t> got = {argmax_of(logits, 0, V)};
  CHECK_NOTHROW(big->decode(got[0], 8, SamplingParams{}, [&](int32_t t) {
    got.push_back(t);
    return true;
  }));
  CHECK(got == expected);
}

TEST_CASE("cuda backend: the tensor-core prefill path stays close to the CPU backend") {
  if (!have_device()) return;
  check_prefill_near_cpu(fixture("qwen2-tied-bf16"), 300);
}

namespace {

// A random bf16 model whose hidden (136) and intermediate (200) sizes are multiples of 8 but
// not of 32: the prefill GEMMs end in a partial K tile. Qwen2 (qkv biases) or Qwen3 (q/k norms).
std::shared_ptr<const ModelWeights> odd_width_model(const std::string& arch) {
  constexpr int H = 136, I = 200, heads = 2, kv_heads = 1, hd = 64, V = 256, layers = 2;
  auto w = std::make_shared<ModelWeights>();
  auto bits = std::make_shared<std::vector<std::vector<uint16_t>>>();
  bits->reserve(64);
  std::mt19937 rng(21);
  auto tensor = [&](std::vector<int64_t> shape, float centre, float scale) {
    Tensor t;
    t.dtype = DType::BF16;
    t.shape = std::move(shape);
    const Bf16Matrix m = random_bf16(size_t(t.numel()), rng, scale);
    std::vector<uint16_t>& b = bits->emplace_back(m.bits);
    for (size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(centre + m.values[i]);
    t.data = b.data();
    return t;
  };
  ModelConfig& c = w->config;
  c.architecture = arch;
  c.vocab_size = V, c.hidden_size = H, c.intermediate_size = I, c.num_layers = layers;
  c.num_heads = heads, c.num_kv_heads = kv_heads, c.head_dim = hd, c.max_position_embeddings = 512;
  c.qkv_bias = arch == "Qwen2ForCausalLM";
  c.tie_word_embeddings = true;
  const float in_h = 1.0f / std::sqrt(float(H));
  w->embed = tensor({V, H}, 0.0f, 1.0f);
  for (int l = 0; l < layers; ++l) {
    LayerWeights lw;
    lw[Role::AttnNorm] = tensor({H}, 1.0f, 0.2f);
    lw[Role::Wq] = tensor({heads * hd, H}, 0.0f, in_h);
    lw[Role::Wk] = tensor({kv_heads * hd, H}, 0.0f, in_h);
    lw[Role::Wv] = tensor({kv_heads * hd, H}, 0.0f, in_h);
    if (c.qkv_bias) {
      lw[Role::Bq] = tensor({heads * hd}, 0.0f, 0.5f);
      lw[Role::Bk] = tensor({kv_heads * hd}, 0.0f, 0.5f);
      lw[Role::Bv] = tensor({kv_heads * hd}, 0.0f, 0.5f);
    } else {
      lw[Role::QNorm] = tensor({hd}, 1.0f, 0.3f);
      lw[Role::KNorm] = tensor({hd}, 1.0f, 0.3f);
    }
    lw[Role::Wo] = tensor({H, heads * hd}, 0.0f, 1.0f / std::sqrt(float(heads * hd)));
    lw[Role::MlpNorm] = tensor({H}, 1.0f, 0.2f);
    lw[Role::WGate] = tensor({I, H}, 0.0f, in_h);
    lw[Role::WUp] = tensor({I, H}, 0.0f, in_h);
    lw[Role::WDown] = tensor({H, I}, 0.0f, 1.0f / std::sqrt(float(I)));
    w->layers.push_back(lw);
  }
  w->final_norm = tensor({H}, 1.0f, 0.2f);
  w->lm_head = w->embed;
  w->dtype = DType::BF16;
  w->source = "test:odd-width-" + arch;
  w->storage = bits;
  return w;
}

}  // namespace

// The backend's load check asks for widths divisible by 8; the tensor-core prefill must then
// serve them too (it once needed K % 32 == 0 and threw on prompts of 64 tokens or more).
TEST_CASE("cuda backend: widths not multiples of 32 prefill on tensor cores and decode as the CPU") {
  if (!have_device()) return;
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    CAPTURE(arch);
    auto weights = odd_width_model(arch);
    check_prefill_near_cpu(weights, 100);
    // Greedy decoding on the device after a tensor-core prefill; the CPU, fed the same tokens,
    // finds each one its argmax or within the prefill's tolerance of it (bf16 may flip a near tie).
    auto cuda = make_cuda_backend(weights, BackendOptions{});
    auto cpu = make_cpu_backend(weights, BackendOptions{});
    const int V = weights->config.vocab_size;
    std::mt19937 rng(5);
    const std::vector<int32_t> prompt = random_tokens(80, V, rng);
    std::vector<float> a, b;
    cpu->forward(prompt, 1, a);
    cuda->forward(prompt, 1, b);
    std::vector<int32_t> cuda_tokens = {argmax_of(b, 0, V)};
    cuda->decode(cuda_tokens[0], 11, SamplingParams{}, [&](int32_t t) {
      cuda_tokens.push_back(t);
      return true;
    });
    REQUIRE(cuda_tokens.size() == 12);
    int argmax_equal = 0;
    for (int32_t t : cuda_tokens) {
      const float best = *std::max_element(a.begin(), a.end()), scale = std::max(best, -*std::min_element(a.begin(), a.end()));
      CHECK(a[size_t(t)] >= best - 0.02f * scale);
      argmax_equal += argmax_of(a, 0, V) == t;
      cpu->forward(std::span<const int32_t>(&t, 1), 1, a);
    }
    MESSAGE(arch << ": " << argmax_equal << " of 12 device tokens are the CPU's argmax, the rest within 2 %");
  }
}

TEST_CASE("cuda backend: sampled decoding on the device") {
  if (!have_device()) return;
  auto weights = fixture("qwen2-tied-bf16");
  auto cuda = make_cuda_backend(weights, BackendOptions{});
  const std::vector<int32_t> prompt = {473, 290, 79, 72, 270};
  std::vector<float> logits;
  cuda->forward(prompt, 1, logits);
  SamplingParams greedy_like{1.0f, 1, 1.0f, 9};
  std::vector<int32_t> sampled, greedy;
  cuda->decode(100, 12, greedy_like, [&](int32_t t) { sampled.push_back(t); return true; });
  cuda->truncate(int(prompt.size()));
  cuda->decode(100, 12, SamplingParams{}, [&](int32_t t) { greedy.push_back(t); return true; });
  CHECK(sampled == greedy);  // top_k = 1 is greedy
  cuda->truncate(int(prompt.size()));
  std::vector<int32_t> warm;
  const int n = cuda->decode(100, 20, SamplingParams{0.8f, 40, 0.9f, 1}, [&](int32_t t) {
    warm.push_back(t);
    return warm.size() < 6;  // stopping early leaves the cache consistent
  });
  CHECK(n == 6);
  CHECK(cuda->kv_len() == int(prompt.size()) + 6);
  for (int32_t t : warm) CHECK((t >= 0 && t < weights->config.vocab_size));
}
#endif  // RUNAHEAD_CUDA
