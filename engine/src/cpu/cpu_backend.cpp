// The CPU backend: runs the ops of the model's architecture (model/arch/) for n tokens.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "cpu/ops.h"
#include "model/error.h"
#include "model/numerics.h"
#include "model/quantize.h"
#include "runtime/backend.h"
#include "runtime/cpus.h"

namespace runahead {
namespace {

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

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const ModelWeights> weights, const BackendOptions& options, bool copied)
      : w_(std::move(weights)),
        copied_(copied),
        c_(checked_config(*w_)),
        kernels_(select_kernels()),
        quant_kernels_(select_quant_kernels()),
        pool_(options.threads > 0 ? options.threads : default_threads(w_->weight_bytes)),
        capacity_(options.context_length > 0
                      ? options.context_length
                      : std::min(c_.max_position_embeddings > 0 ? c_.max_position_embeddings : 4096,
                                 4096)),
        cache_(c_.num_layers, capacity_, c_.num_kv_heads, c_.head_dim),
        rope_(c_, capacity_),
        attention_({c_.num_heads, c_.num_kv_heads, c_.head_dim}, pool_.size(), capacity_),
        final_norm_(widen(w_->final_norm)),
        step_(architecture_of(c_).step) {
    for (const LayerWeights& l : w_->layers) layers_.push_back(cpu_layer(l));
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
              {"weights_in_place", weight_formats(*w_)},
              {"matrices_copied_from_file", copied_},
              {"quantized_simd", has_quantized_matrix(*w_) ? quant_kernels_.simd : "none"},
              {"row_blocked_prefill", true},
              {"fused_qkv_and_gate_up_dispatch", true},
              {"gqa_shared_kv_reads", c_.num_heads != c_.num_kv_heads}}}};
  }

  std::vector<OptimizationCheck> self_check() const override {
    const std::string simd = kernels_.simd;
    std::vector<OptimizationCheck> checks = {
        {"simd", simd != "portable",
         simd == "portable" ? "this CPU has neither AVX2 nor AVX-512: the portable kernels run" : simd + " kernels"}};
    if (has_quantized_matrix(*w_)) {
      const std::string q = quant_kernels_.simd;
      checks.push_back({"quantized_kernels", true,
                        weight_formats(*w_) + " matrices read as stored by the " + q + " block kernels"});
    }
    return checks;
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
    embedding_lookup(w_->embed, tokens.data(), n, x_.data());
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
    act_.resize(size_t(n) * I);
    up_.resize(size_t(n) * I);
    k_.resize(size_t(n) * c_.num_kv_heads * c_.head_dim);
    v_.resize(k_.size());
    const CpuContext cx{pool_, kernels_, quant_kernels_, xq_};
    const AttentionShape shape{c_.num_heads, c_.num_kv_heads, c_.head_dim};

    for (int l = 0; l < c_.num_layers; ++l) {
      const CpuLayer& lw = layers_[l];
      for (const Op& op : step_) {
        const float* in = buffer(op.in);
        float* out = buffer(op.out);
        switch (op.kind) {
          case OpKind::RmsnormQkvRopeAppend:
            rmsnorm_qkv_rope_append(cx, lw, shape, c_.rms_norm_eps, rope_, in, n, pos0, h_.data(), out,
                                    k_.data(), v_.data());
            cache_.append(l, pos0, n, k_.data(), v_.data());
            break;
          case OpKind::Attention:
            attention_.run(pool_, kernels_, cache_, l, in, n, pos0, out);
            break;
          case OpKind::MatmulResidual:
            matmul_residual(cx, lw[op.weight], in, n, h_.data(), out);
            break;
          case OpKind::RmsnormGateUpSwiglu:
            rmsnorm_gate_up_swiglu(cx, lw, c_.rms_norm_eps, in, n, h_.data(), up_.data(), out);
            break;
        }
      }
    }
    cache_.set_len(pos0 + n);

    const float* const last = x_.data() + size_t(n - n_out) * H;
    const float* const end = x_.data() + x_.size();
    hidden_.assign(keep_all_hidden_ ? static_cast<const float*>(x_.data()) : last, end);
    logits.resize(size_t(n_out) * V);
    rmsnorm_lm_head(cx, final_norm_, w_->lm_head, c_.rms_norm_eps, last, n_out, h_.data(), logits.data());
  }

  float* buffer(Buffer b) {
    switch (b) {
      case Buffer::X: return x_.data();
      case Buffer::Q: return q_.data();
      case Buffer::Att: return att_.data();
      case Buffer::Act: return act_.data();
    }
    return nullptr;
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

  std::shared_ptr<const ModelWeights> w_;
  bool copied_;  // make_cpu_backend copied w_'s matrices out of the file's mapping
  const ModelConfig& c_;
  const Kernels& kernels_;
  const QuantKernels& quant_kernels_;
  ThreadPool pool_;
  int capacity_;
  KVCache cache_;
  Rope rope_;
  Attention attention_;
  std::vector<float> final_norm_;
  const std::vector<Op>& step_;
  std::vector<CpuLayer> layers_;
  // Activations of the current forward, [n, width].
  std::vector<float> x_, h_, q_, att_, act_, up_, k_, v_, hidden_;
  std::vector<Q8Activations> xq_;  // x quantized to int8 for the block-quantized matrices
  bool keep_all_hidden_ = false;
};

// Memory the system could give without swapping (Linux's MemAvailable; else the free pages, or 0).
size_t available_memory() {
  if (std::ifstream meminfo("/proc/meminfo"); meminfo)
    for (std::string key; meminfo >> key;) {
      size_t kb = 0;
      if (key == "MemAvailable:" && meminfo >> kb) return kb * 1024;
      meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
#ifdef _SC_AVPHYS_PAGES
  return size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
#else
  return 0;  // unknown: no copy
#endif
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const ModelWeights> weights,
                                          const BackendOptions& options) {
  // The matrices still in the file's mapping are copied (with_mapped_matrices_copied says why)
  // where memory has room for them twice over, so that the copy does not push the file's pages
  // or anything else out; RUNAHEAD_CPU_COPY_WEIGHTS=0 reads them from the mapping, to measure.
  const size_t mapped = mapped_matrix_bytes(*weights);
  const char* copy = std::getenv("RUNAHEAD_CPU_COPY_WEIGHTS");
  const bool copied = mapped > 0 && !(copy && std::string(copy) == "0") && 2 * mapped <= available_memory();
  if (copied) weights = std::make_shared<const ModelWeights>(with_mapped_matrices_copied(*weights));
  return std::make_unique<CpuBackend>(std::move(weights), options, copied);
}

}  // namespace runahead
