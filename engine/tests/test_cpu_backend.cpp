// The CPU backend on a tiny random model built here: against a double-precision
// reference forward, and consistent with itself across prefill, decode, verify,
// truncate, thread counts and kernel tables.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <tuple>
#include <random>
#include <vector>

#include "model/half.h"
#include "cpu/simd/kernels.h"
#include "model/error.h"
#include "runtime/backend.h"

using namespace runahead;

namespace {

constexpr int kVocab = 61, kHidden = 48, kInter = 80, kLayers = 2, kHeads = 4, kKvHeads = 2,
              kHeadDim = 12;

struct Owned {
  std::vector<std::vector<uint16_t>> halves;
  std::vector<std::vector<float>> floats;
};

// Random tensor of `dtype`, centred on `centre` with spread `scale`, owned by `owned`.
Tensor random_tensor(Owned& owned, DType dtype, std::vector<int64_t> shape, float centre,
                     float scale, std::mt19937& rng) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> values(size_t(t.numel()));
  for (float& v : values) v = centre + u(rng);
  if (dtype == DType::F32) {
    t.data = owned.floats.emplace_back(std::move(values)).data();
    return t;
  }
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    bits[i] = dtype == DType::BF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
  t.data = owned.halves.emplace_back(std::move(bits)).data();
  return t;
}

// Qwen2 with bias, Llama without; `arch` and `rope_scaling` make Qwen3 (q/k norms) or Llama 3.
std::shared_ptr<const ModelWeights> tiny_model(DType dtype, bool bias, const std::string& arch = {},
                                               const RopeScaling& rope_scaling = {}) {
  auto owned = std::make_shared<Owned>();
  owned->halves.reserve(64);
  owned->floats.reserve(64);
  std::mt19937 rng(11);
  auto w = std::make_shared<ModelWeights>();
  ModelConfig& c = w->config;
  c.architecture = !arch.empty() ? arch : bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.rope_scaling = rope_scaling;
  c.vocab_size = kVocab;
  c.hidden_size = kHidden;
  c.intermediate_size = kInter;
  c.num_layers = kLayers;
  c.num_heads = kHeads;
  c.num_kv_heads = kKvHeads;
  c.head_dim = kHeadDim;
  c.max_position_embeddings = 64;
  c.rope_theta = 10000.0f;
  c.qkv_bias = bias;
  const int64_t q_dim = kHeads * kHeadDim, kv_dim = kKvHeads * kHeadDim;
  auto matrix = [&](int64_t out, int64_t in) {
    return random_tensor(*owned, dtype, {out, in}, 0.0f, 1.0f / std::sqrt(float(in)), rng);
  };
  auto vec = [&](int64_t n, float centre, float scale) {
    return random_tensor(*owned, dtype, {n}, centre, scale, rng);
  };
  w->embed = random_tensor(*owned, dtype, {kVocab, kHidden}, 0.0f, 1.0f, rng);
  for (int l = 0; l < kLayers; ++l) {
    LayerWeights lw;
    lw[Role::AttnNorm] = vec(kHidden, 1.0f, 0.2f);
    lw[Role::Wq] = matrix(q_dim, kHidden);
    lw[Role::Wk] = matrix(kv_dim, kHidden);
    lw[Role::Wv] = matrix(kv_dim, kHidden);
    if (bias) {
      lw[Role::Bq] = vec(q_dim, 0.0f, 0.5f);
      lw[Role::Bk] = vec(kv_dim, 0.0f, 0.5f);
      lw[Role::Bv] = vec(kv_dim, 0.0f, 0.5f);
    }
    if (c.architecture == "Qwen3ForCausalLM") {
      lw[Role::QNorm] = vec(kHeadDim, 1.0f, 0.3f);
      lw[Role::KNorm] = vec(kHeadDim, 1.0f, 0.3f);
    }
    lw[Role::Wo] = matrix(kHidden, q_dim);
    lw[Role::MlpNorm] = vec(kHidden, 1.0f, 0.2f);
    lw[Role::WGate] = matrix(kInter, kHidden);
    lw[Role::WUp] = matrix(kInter, kHidden);
    lw[Role::WDown] = matrix(kHidden, kInter);
    w->layers.push_back(lw);
  }
  w->final_norm = vec(kHidden, 1.0f, 0.2f);
  w->lm_head = matrix(kVocab, kHidden);
  w->dtype = dtype;
  w->source = "test:tiny";
  w->storage = owned;
  return w;
}

double at(const Tensor& t, int64_t i) {
  const uint16_t h = static_cast<const uint16_t*>(t.data)[i];
  switch (t.dtype) {
    case DType::F32: return static_cast<const float*>(t.data)[i];
    case DType::F16: return f16_to_f32(h);
    case DType::BF16: return bf16_to_f32(h);
  }
  return 0.0;
}

using Vec = std::vector<double>;

// W v (+ b) for W: [out, in].
Vec linear(const Tensor& w, const Vec& v, const Tensor& b = {}) {
  Vec y(size_t(w.rows()), 0.0);
  for (int64_t r = 0; r < w.rows(); ++r) {
    for (int64_t i = 0; i < w.cols(); ++i) y[r] += at(w, r * w.cols() + i) * v[i];
    if (!b.empty()) y[r] += at(b, r);
  }
  return y;
}

Vec rmsnorm(const Vec& x, const Tensor& w, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * at(w, int64_t(i));
  return y;
}

// The frequency of RoPE dimension i, with Llama 3's scaling when the config has it.
double rope_frequency(const ModelConfig& c, int i) {
  const double f = std::pow(double(c.rope_theta), -2.0 * i / kHeadDim);
  const RopeScaling& r = c.rope_scaling;
  if (r.type != "llama3") return f;
  const double wavelen = 2 * M_PI / f, old = r.original_max_positions;
  if (wavelen < old / r.high_freq_factor) return f;
  if (wavelen > old / r.low_freq_factor) return f / r.factor;
  const double smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1 - smooth) * f / r.factor + smooth * f;
}

// rotate_half RoPE of every head of v at position pos.
void rope(Vec& v, int pos, const ModelConfig& c) {
  const int half = kHeadDim / 2;
  for (size_t h = 0; h < v.size() / kHeadDim; ++h) {
    for (int i = 0; i < half; ++i) {
      const double angle = pos * rope_frequency(c, i);
      double& a = v[h * kHeadDim + i];
      double& b = v[h * kHeadDim + i + half];
      const double a0 = a, b0 = b;
      a = a0 * std::cos(angle) - b0 * std::sin(angle);
      b = b0 * std::cos(angle) + a0 * std::sin(angle);
    }
  }
}

struct Reference {
  std::vector<Vec> hidden;  // per position, before the final norm
  std::vector<Vec> logits;  // per position
};

// The textbook decoder, one token at a time, in double.
Reference reference_forward(const ModelWeights& w, const std::vector<int32_t>& tokens) {
  const ModelConfig& c = w.config;
  const int group = kHeads / kKvHeads;
  std::vector<std::vector<Vec>> keys(kLayers), values(kLayers);
  Reference out;
  for (size_t pos = 0; pos < tokens.size(); ++pos) {
    Vec x(kHidden);
    for (int i = 0; i < kHidden; ++i) x[i] = at(w.embed, int64_t(tokens[pos]) * kHidden + i);
    for (int l = 0; l < kLayers; ++l) {
      const LayerWeights& lw = w.layers[l];
      Vec h = rmsnorm(x, lw[Role::AttnNorm], c.rms_norm_eps);
      Vec q = linear(lw[Role::Wq], h, lw[Role::Bq]), k = linear(lw[Role::Wk], h, lw[Role::Bk]), v = linear(lw[Role::Wv], h, lw[Role::Bv]);
      if (!lw[Role::QNorm].empty()) {  // Qwen3: an RMSNorm over each head
        for (Vec* heads : {&q, &k})
          for (size_t h0 = 0; h0 < heads->size(); h0 += kHeadDim) {
            const Role r = heads == &q ? Role::QNorm : Role::KNorm;
            const Vec head(heads->begin() + h0, heads->begin() + h0 + kHeadDim);
            const Vec normed = rmsnorm(head, lw[r], c.rms_norm_eps);
            std::copy(normed.begin(), normed.end(), heads->begin() + h0);
          }
      }
      rope(q, int(pos), c);
      rope(k, int(pos), c);
      keys[l].push_back(k);
      values[l].push_back(v);
      Vec att(size_t(kHeads) * kHeadDim, 0.0);
      for (int head = 0; head < kHeads; ++head) {
        const int g = head / group;
        Vec scores(pos + 1);
        double max = -1e300, sum = 0.0;
        for (size_t s = 0; s <= pos; ++s) {
          double dot = 0.0;
          for (int d = 0; d < kHeadDim; ++d) dot += q[head * kHeadDim + d] * keys[l][s][g * kHeadDim + d];
          scores[s] = dot / std::sqrt(double(kHeadDim));
          max = std::max(max, scores[s]);
        }
        for (double& s : scores) sum += s = std::exp(s - max);
        for (size_t s = 0; s <= pos; ++s)
          for (int d = 0; d < kHeadDim; ++d)
            att[head * kHeadDim + d] += scores[s] / sum * values[l][s][g * kHeadDim + d];
      }
      Vec o = linear(lw[Role::Wo], att);
      for (int i = 0; i < kHidden; ++i) x[i] += o[i];
      h = rmsnorm(x, lw[Role::MlpNorm], c.rms_norm_eps);
      Vec gate = linear(lw[Role::WGate], h), up = linear(lw[Role::WUp], h);
      for (int i = 0; i < kInter; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      Vec down = linear(lw[Role::WDown], gate);
      for (int i = 0; i < kHidden; ++i) x[i] += down[i];
    }
    out.hidden.push_back(x);
    out.logits.push_back(linear(w.lm_head, rmsnorm(x, w.final_norm, c.rms_norm_eps)));
  }
  return out;
}

std::vector<int32_t> random_tokens(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, kVocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& v : t) v = id(rng);
  return t;
}

// Rows [first, first + rows) of `expected` (one vector per position) against the flat
// [rows, width] `got`, to 1e-4 of the largest magnitude.
void check_rows(const std::vector<float>& got, const std::vector<Vec>& expected, size_t first,
                size_t rows) {
  const size_t width = expected[0].size();
  REQUIRE(got.size() == rows * width);
  double scale = 0.0;
  for (size_t r = 0; r < rows; ++r)
    for (double v : expected[first + r]) scale = std::max(scale, std::fabs(v));
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < width; ++i) {
      INFO("row " << first + r << " column " << i);
      REQUIRE(std::fabs(got[r * width + i] - expected[first + r][i]) <= 1e-4 * scale);
    }
  }
}

std::unique_ptr<Backend> backend_for(std::shared_ptr<const ModelWeights> w, int threads = 2,
                                     int context = 0) {
  BackendOptions options;
  options.threads = threads;
  options.context_length = context;
  return make_cpu_backend(std::move(w), options);
}

}  // namespace

TEST_CASE("cpu backend runs Qwen3 (q/k norms) and Llama 3 (llama3 RoPE scaling) as a double reference does") {
  const std::vector<int32_t> tokens = random_tokens(40, 3);
  RopeScaling llama3;
  llama3.type = "llama3";
  llama3.factor = 8.0f;
  llama3.low_freq_factor = 1.0f;
  llama3.high_freq_factor = 4.0f;
  llama3.original_max_positions = 64;  // low, blended and high frequencies all occur at head_dim 12
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (const auto& [arch, bias, scaling] : {std::tuple{"Qwen3ForCausalLM", false, RopeScaling{}},
                                              std::tuple{"Qwen3ForCausalLM", true, RopeScaling{}},
                                              std::tuple{"LlamaForCausalLM", false, llama3}}) {
      INFO(arch << " " << dtype_name(dtype) << " bias=" << bias << " rope=" << scaling.type);
      auto w = tiny_model(dtype, bias, arch, scaling);
      const Reference ref = reference_forward(*w, tokens);
      auto b = backend_for(w);
      std::vector<float> logits;
      b->forward(std::span(tokens).first(31), 31, logits);  // prefill
      check_rows(logits, ref.logits, 0, 31);
      for (size_t i = 31; i < tokens.size(); ++i) {  // decode
        b->forward(std::span(tokens).subspan(i, 1), 1, logits);
        check_rows(logits, ref.logits, i, 1);
      }
    }
  }
}

TEST_CASE("cpu backend matches a double reference for every dtype and kernel table") {
  const std::vector<int32_t> tokens = random_tokens(23, 1);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (bool bias : {true, false}) {
      auto w = tiny_model(dtype, bias);
      const Reference ref = reference_forward(*w, tokens);
      for (const Kernels* kernels : available_kernels()) {
        INFO(std::string(dtype_name(dtype)) << " bias=" << bias << " " << std::string(kernels->simd));
        setenv("RUNAHEAD_SIMD", kernels->simd, 1);
        auto backend = backend_for(w);
        unsetenv("RUNAHEAD_SIMD");
        CHECK(backend->describe()["simd"] == kernels->simd);
        std::vector<float> logits;
        backend->forward(tokens, int(tokens.size()), logits);
        CHECK(backend->kv_len() == int(tokens.size()));
        check_rows(logits, ref.logits, 0, tokens.size());
        const auto hidden = backend->hidden();
        check_rows(std::vector<float>(hidden.begin(), hidden.end()), ref.hidden, 0, tokens.size());
      }
    }
  }
}

TEST_CASE("prefill then decode, verify and truncate reproduce one long forward") {
  const std::vector<int32_t> tokens = random_tokens(19, 2);
  const auto w = tiny_model(DType::BF16, true);
  const size_t n = tokens.size(), prefill = 11, width = kVocab;
  const std::span<const int32_t> all(tokens);

  auto whole = backend_for(w, 2);
  std::vector<float> expected;
  whole->forward(all, int(n), expected);
  auto rows = [&](size_t first, size_t count) {
    return std::vector<float>(expected.begin() + first * width, expected.begin() + (first + count) * width);
  };
  auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == doctest::Approx(b[i]).epsilon(1e-4).scale(1.0));
  };

  for (int threads : {1, 3}) {
    INFO("threads " << threads);
    auto backend = backend_for(w, threads);
    std::vector<float> logits;
    backend->forward(all.first(prefill), 2, logits);  // prefill keeps the last 2 rows
    close(logits, rows(prefill - 2, 2));
    for (size_t i = prefill; i < n; ++i) {  // decode
      backend->forward(all.subspan(i, 1), 1, logits);
      close(logits, rows(i, 1));
    }
    backend->truncate(int(prefill));  // roll back and verify the same tokens at once
    CHECK(backend->kv_len() == int(prefill));
    backend->forward(all.subspan(prefill), int(n - prefill), logits);
    close(logits, rows(prefill, n - prefill));
    backend->truncate(3);  // roll back further, then write different tokens over the old ones
    const std::vector<int32_t> other = random_tokens(4, 9);
    backend->forward(other, 1, logits);
    backend->truncate(3);
    backend->forward(all.subspan(3), int(n - 3), logits);
    close(logits, rows(3, n - 3));
  }
}

TEST_CASE("keep_all_hidden and forward_vectors (for MTP heads)") {
  const std::vector<int32_t> tokens = random_tokens(7, 4);
  const auto w = tiny_model(DType::F16, true);
  const Reference ref = reference_forward(*w, tokens);
  auto backend = backend_for(w);
  backend->keep_all_hidden(true);
  std::vector<float> logits;
  backend->forward(tokens, 1, logits);
  check_rows(logits, ref.logits, tokens.size() - 1, 1);
  const auto hidden = backend->hidden();
  check_rows(std::vector<float>(hidden.begin(), hidden.end()), ref.hidden, 0, tokens.size());

  // The embedding rows as input vectors give the same logits as the token ids.
  std::vector<float> x;
  for (int32_t t : tokens)
    for (int i = 0; i < kHidden; ++i) x.push_back(float(at(w->embed, int64_t(t) * kHidden + i)));
  backend->truncate(0);
  backend->keep_all_hidden(false);
  backend->forward_vectors(x, int(tokens.size()), logits);
  check_rows(logits, ref.logits, 0, tokens.size());
  CHECK(backend->hidden().size() == tokens.size() * kHidden);
  CHECK_THROWS_AS(backend->forward_vectors(std::span<const float>(x).first(kHidden + 1), 1, logits), EngineError);
}

TEST_CASE("cpu backend refuses what does not fit the context, and bad arguments") {
  auto backend = backend_for(tiny_model(DType::F32, false), 2, 12);
  CHECK(backend->context_length() == 12);
  std::vector<float> logits;
  backend->forward(random_tokens(9, 3), 1, logits);
  try {
    backend->forward(random_tokens(4, 4), 1, logits);
    FAIL("expected context_overflow");
  } catch (const EngineError& e) {
    CHECK(e.code == "context_overflow");
  }
  CHECK(backend->kv_len() == 9);  // the refused tokens left nothing behind
  backend->forward(random_tokens(3, 5), 1, logits);
  CHECK(backend->kv_len() == 12);
  CHECK_THROWS_AS(backend->truncate(13), EngineError);
  backend->truncate(0);
  auto odd = std::make_shared<ModelWeights>(*tiny_model(DType::F32, false));
  odd->config.num_kv_heads = 3;  // 4 heads cannot share 3 KV heads
  CHECK_THROWS_AS(backend_for(odd), EngineError);
  const std::vector<int32_t> out_of_vocab = {kVocab};
  CHECK_THROWS_AS(backend->forward(out_of_vocab, 1, logits), EngineError);
  CHECK_THROWS_AS(backend->forward(random_tokens(2, 6), 3, logits), EngineError);
}
