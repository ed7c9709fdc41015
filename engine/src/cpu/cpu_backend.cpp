// The CPU backend: a Qwen2 / Llama decoder step you can read top to bottom in forward().
#include <algorithm>
#include <string>

#include "cpu/attention.h"
#include "cpu/half.h"
#include "cpu/kv_cache.h"
#include "cpu/matmul.h"
#include "cpu/rmsnorm.h"
#include "cpu/rope.h"
#include "cpu/simd/kernels.h"
#include "cpu/swiglu.h"
#include "cpu/thread_pool.h"
#include "model/error.h"
#include "runtime/backend.h"

namespace runahead {
namespace {

// Widens a small tensor (norm weight, bias, embedding row) to f32: dst[i] = src[offset + i].
void widen(const Tensor& src, int64_t offset, int64_t count, float* dst) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = offset + i;
    switch (src.dtype) {
      case DType::F32: dst[i] = static_cast<const float*>(src.data)[j]; break;
      case DType::F16: dst[i] = f16_to_f32(static_cast<const uint16_t*>(src.data)[j]); break;
      case DType::BF16: dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src.data)[j]); break;
    }
  }
}

std::vector<float> widen(const Tensor& src) {
  std::vector<float> out(src.empty() ? 0 : src.numel());
  widen(src, 0, int64_t(out.size()), out.data());
  return out;
}

// y[t, :] += b   for y: [n, b.size()]; nothing when there is no bias.
void add_bias(const std::vector<float>& b, int n, float* y) {
  for (int t = 0; t < n; ++t)
    for (size_t i = 0; i < b.size(); ++i) y[t * b.size() + i] += b[i];
}

// The config, once its attention shape is one this backend can run.
const ModelConfig& checked_config(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  if (c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0) {
    throw EngineError("model_error",
                      "cpu backend: " + std::to_string(c.num_heads) + " heads over " +
                          std::to_string(c.num_kv_heads) + " KV heads of dimension " +
                          std::to_string(c.head_dim),
                      w.source, "num_key_value_heads", "KV heads dividing the heads, and an even head_dim");
  }
  return c;
}

struct SmallLayerWeights {
  std::vector<float> attn_norm, mlp_norm, bq, bk, bv;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const ModelWeights> weights, const BackendOptions& options)
      : w_(std::move(weights)),
        c_(checked_config(*w_)),
        kernels_(select_kernels()),
        pool_(options.threads > 0 ? options.threads : default_threads()),
        capacity_(options.context_length > 0
                      ? options.context_length
                      : std::min(c_.max_position_embeddings > 0 ? c_.max_position_embeddings : 4096,
                                 4096)),
        cache_(c_.num_layers, capacity_, c_.num_kv_heads * c_.head_dim),
        rope_(c_.head_dim, c_.rope_theta, capacity_),
        attention_({c_.num_heads, c_.num_kv_heads, c_.head_dim}, pool_.size(), capacity_),
        final_norm_(widen(w_->final_norm)) {
    for (const LayerWeights& l : w_->layers) {
      small_.push_back({widen(l.attn_norm), widen(l.mlp_norm), widen(l.bq), widen(l.bk), widen(l.bv)});
    }
  }

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return c_; }
  int context_length() const override { return capacity_; }
  int kv_len() const override { return cache_.len(); }
  std::span<const float> hidden() const override { return hidden_; }

  nlohmann::json describe() const override {
    return {{"backend", "cpu"},
            {"threads", pool_.size()},
            {"simd", kernels_.simd},
            {"optimizations",
             {{"simd", kernels_.simd},
              {"threads", pool_.size()},
              {"weights_in_place", dtype_name(w_->dtype)},
              {"row_blocked_prefill", true},
              {"fused_qkv_and_gate_up_dispatch", true},
              {"gqa_shared_kv_reads", c_.num_heads != c_.num_kv_heads}}}};
  }

  void truncate(int n) override {
    if (n < 0 || n > cache_.len()) {
      throw EngineError("bad_request",
                        "truncate(" + std::to_string(n) + ") with " +
                            std::to_string(cache_.len()) + " positions in the KV cache",
                        {}, "n", "0 <= n <= kv_len");
    }
    cache_.set_len(n);
  }

  void keep_all_hidden(bool all) override { keep_all_hidden_ = all; }

  void forward(std::span<const int32_t> tokens, int n_out, std::vector<float>& logits) override {
    const int n = int(tokens.size()), H = c_.hidden_size;
    check(n, n_out);
    for (int32_t t : tokens) {
      if (t < 0 || t >= c_.vocab_size) {
        throw EngineError("bad_request", "token id " + std::to_string(t) + " is outside the vocabulary",
                          {}, "tokens", "ids in [0, " + std::to_string(c_.vocab_size) + ")");
      }
    }
    x_.resize(size_t(n) * H);
    for (int t = 0; t < n; ++t) widen(w_->embed, int64_t(tokens[t]) * H, H, &x_[size_t(t) * H]);
    run(n, n_out, logits);
  }

  void forward_vectors(std::span<const float> x, int n_out, std::vector<float>& logits) override {
    const size_t H = size_t(c_.hidden_size);
    if (x.size() % H != 0) {
      throw EngineError("bad_request", "input vectors of " + std::to_string(x.size()) + " floats",
                        {}, "x", "a multiple of hidden_size = " + std::to_string(H));
    }
    check(int(x.size() / H), n_out);
    x_.assign(x.begin(), x.end());
    run(int(x.size() / H), n_out, logits);
  }

 private:
  // The decoder over the n input vectors in x_ at positions [kv_len, kv_len + n).
  void run(int n, int n_out, std::vector<float>& logits) {
    const int pos0 = cache_.len();
    const int H = c_.hidden_size, I = c_.intermediate_size, V = c_.vocab_size;
    const int q_dim = c_.num_heads * c_.head_dim;
    h_.resize(size_t(n) * H);
    q_.resize(size_t(n) * q_dim);
    att_.resize(size_t(n) * q_dim);
    gate_.resize(size_t(n) * I);
    up_.resize(size_t(n) * I);

    for (int l = 0; l < c_.num_layers; ++l) {
      const LayerWeights& lw = w_->layers[l];
      const SmallLayerWeights& sw = small_[l];
      // K and V are written straight into the cache rows of the new positions.
      float* k = cache_.k(l, pos0);
      float* v = cache_.v(l, pos0);

      rmsnorm(pool_, x_.data(), sw.attn_norm.data(), c_.rms_norm_eps, n, H, h_.data());
      const MatmulJob qkv[] = {{&lw.wq, q_.data()}, {&lw.wk, k}, {&lw.wv, v}};
      matmul(pool_, kernels_, qkv, h_.data(), n);
      add_bias(sw.bq, n, q_.data());
      add_bias(sw.bk, n, k);
      add_bias(sw.bv, n, v);
      rope_.apply(pool_, q_.data(), n, c_.num_heads, pos0);
      rope_.apply(pool_, k, n, c_.num_kv_heads, pos0);
      attention_.run(pool_, kernels_, cache_, l, q_.data(), n, pos0, att_.data());
      residual(lw.wo, att_.data(), n);

      rmsnorm(pool_, x_.data(), sw.mlp_norm.data(), c_.rms_norm_eps, n, H, h_.data());
      const MatmulJob gate_up[] = {{&lw.w_gate, gate_.data()}, {&lw.w_up, up_.data()}};
      matmul(pool_, kernels_, gate_up, h_.data(), n);
      swiglu(pool_, kernels_, gate_.data(), up_.data(), int64_t(n) * I);
      residual(lw.w_down, gate_.data(), n);
    }
    cache_.set_len(pos0 + n);

    const float* const last = x_.data() + size_t(n - n_out) * H;
    const float* const end = x_.data() + x_.size();
    hidden_.assign(keep_all_hidden_ ? static_cast<const float*>(x_.data()) : last, end);
    rmsnorm(pool_, last, final_norm_.data(), c_.rms_norm_eps, n_out, H, h_.data());
    logits.resize(size_t(n_out) * V);
    const MatmulJob head[] = {{&w_->lm_head, logits.data()}};
    matmul(pool_, kernels_, head, h_.data(), n_out);
  }

  void check(int n, int n_out) const {
    if (n == 0 || n_out < 1 || n_out > n) {
      throw EngineError("bad_request",
                        "forward of " + std::to_string(n) + " tokens asking for " +
                            std::to_string(n_out) + " logit rows",
                        {}, "n_out", "1 <= n_out <= number of tokens");
    }
    if (cache_.len() + n > capacity_) {
      throw EngineError("context_overflow",
                        std::to_string(cache_.len()) + " positions in the KV cache + " +
                            std::to_string(n) + " new tokens exceed the context of " +
                            std::to_string(capacity_),
                        {}, "tokens", "at most " + std::to_string(capacity_ - cache_.len()) + " tokens");
    }
  }

  // x += in W^T   for in: [n, W.cols()], x: [n, hidden].
  void residual(const Tensor& w, const float* in, int n) {
    h_.resize(size_t(n) * c_.hidden_size);
    const MatmulJob job[] = {{&w, h_.data()}};
    matmul(pool_, kernels_, job, in, n);
    for (size_t i = 0; i < x_.size(); ++i) x_[i] += h_[i];
  }

  std::shared_ptr<const ModelWeights> w_;
  const ModelConfig& c_;
  const Kernels& kernels_;
  ThreadPool pool_;
  int capacity_;
  KVCache cache_;
  Rope rope_;
  Attention attention_;
  std::vector<float> final_norm_;
  std::vector<SmallLayerWeights> small_;
  // Activations of the current forward, [n, width].
  std::vector<float> x_, h_, q_, att_, gate_, up_, hidden_;
  bool keep_all_hidden_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const ModelWeights> weights,
                                          const BackendOptions& options) {
  return std::make_unique<CpuBackend>(std::move(weights), options);
}

}  // namespace runahead
