#pragma once
// A deterministic toy backend for testing everything above the Backend interface.
// Its "model" is a function of every token in its KV cache, so a wrong prefix reuse
// or a stale cache after rollback changes the output.
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "model/error.h"
#include "runtime/backend.h"

namespace runahead::testing {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Logits in [-4, 4) from a hash of the whole context and the vocabulary id.
inline void hashed_logits(std::span<const int32_t> context, std::span<float> row) {
  uint64_t h = 0x1234;
  for (int32_t t : context) h = splitmix64(h ^ static_cast<uint64_t>(t));
  for (size_t v = 0; v < row.size(); ++v)
    row[v] = static_cast<float>(splitmix64(h ^ (v * 0x9E3779B97F4A7C15ull)) >> 40) / float(1 << 24) * 8.0f - 4.0f;
}

// The next token is the last one plus 1 (mod vocab), by a wide margin.
inline void counting_logits(std::span<const int32_t> context, std::span<float> row) {
  std::fill(row.begin(), row.end(), 0.0f);
  row[(static_cast<size_t>(context.back()) + 1) % row.size()] = 10.0f;
}

class FakeBackend : public Backend {
 public:
  using LogitsFn = std::function<void(std::span<const int32_t> context, std::span<float> row)>;

  FakeBackend(int vocab, int context, LogitsFn logits = hashed_logits) : context_(context), logits_(std::move(logits)) {
    config_.architecture = "FakeForCausalLM";
    config_.vocab_size = vocab;
    config_.max_position_embeddings = context;
  }

  std::string name() const override { return "fake"; }
  nlohmann::json describe() const override { return {{"threads", 1}}; }
  const ModelConfig& config() const override { return config_; }
  int context_length() const override { return context_; }
  int kv_len() const override { return static_cast<int>(kv_.size()); }
  std::span<const float> hidden() const override { return {}; }

  void forward(std::span<const int32_t> tokens, int n_out, std::vector<float>& logits) override {
    const int n = static_cast<int>(tokens.size());
    if (n == 0 || n_out < 1 || n_out > n) throw EngineError("bad_request", "fake forward: bad n_out");
    if (kv_len() + n > context_) throw EngineError("context_overflow", "fake forward past the context");
    if (step_delay.count() > 0) std::this_thread::sleep_for(step_delay);
    forward_sizes.push_back(n);
    forwarded_tokens += n;
    kv_.insert(kv_.end(), tokens.begin(), tokens.end());
    const size_t vocab = static_cast<size_t>(config_.vocab_size);
    logits.assign(static_cast<size_t>(n_out) * vocab, 0.0f);
    for (int i = 0; i < n_out; ++i) {
      const size_t upto = kv_.size() - static_cast<size_t>(n_out - 1 - i);
      logits_(std::span(kv_).first(upto), std::span(logits).subspan(i * vocab, vocab));
    }
  }

  void truncate(int n) override {
    if (n < 0 || n > kv_len()) throw EngineError("bad_request", "fake truncate past kv_len");
    kv_.resize(static_cast<size_t>(n));
  }

  std::span<const int32_t> kv() const { return kv_; }

  std::vector<int> forward_sizes;   // tokens per forward call, in order
  int forwarded_tokens = 0;
  std::chrono::milliseconds step_delay{0};

 private:
  ModelConfig config_;
  int context_;
  LogitsFn logits_;
  std::vector<int32_t> kv_;
};

}  // namespace runahead::testing
