#pragma once
// Test doubles for speculation: a backend whose next-token distribution is a pure
// function of the last few tokens (so truncation and re-forwarding must give the same
// rows), drafters that are always right or always wrong, and a decode loop.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/error.h"
#include "runtime/backend.h"
#include "runtime/drafter.h"
#include "runtime/scheduler.h"

namespace runahead::spec_test {

inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// What MarkovBackend::run_ahead starts as: tests of the generator set it to run each case
// both ways (steps one at a time, and queued one ahead as on CUDA).
inline bool g_run_ahead = false;

// Logits over `vocab` from a hash of the last `order` tokens of the prefix.
class MarkovBackend final : public Backend {
 public:
  static constexpr int kHidden = 8;
  using RowFn = std::function<void(std::span<const int32_t> prefix, std::span<float> row)>;

  MarkovBackend(int vocab, int context, int order = 2, RowFn row = {}) : context_(context), order_(order), row_(std::move(row)) {
    config_.architecture = "MarkovForCausalLM";
    config_.vocab_size = vocab;
    config_.hidden_size = kHidden;
    config_.max_position_embeddings = context;
  }

  std::string name() const override { return "markov"; }
  nlohmann::json describe() const override { return {}; }
  const ModelConfig& config() const override { return config_; }
  int context_length() const override { return context_; }
  int kv_len() const override { return int(kv_.size()); }
  std::span<const float> hidden() const override { return hidden_; }
  void keep_all_hidden(bool all) override { all_hidden_ = all; }

  void forward(std::span<const int32_t> tokens, int n_out, std::vector<float>& logits) override {
    if (on_forward) on_forward(int(tokens.size()));
    const int n = int(tokens.size());
    if (n == 0 || n_out < 1 || n_out > n) throw EngineError("bad_request", "markov forward: bad n_out");
    if (kv_len() + n > context_) throw EngineError("context_overflow", "markov forward past the context");
    widths.push_back(n);
    kv_.insert(kv_.end(), tokens.begin(), tokens.end());
    const size_t V = size_t(config_.vocab_size);
    logits.assign(size_t(n_out) * V, 0.0f);
    for (int i = 0; i < n_out; ++i) row(std::span(kv_).first(kv_.size() - size_t(n_out - 1 - i)), std::span(logits).subspan(size_t(i) * V, V));
    const int rows = all_hidden_ ? n : n_out;
    hidden_.clear();
    for (int i = 0; i < rows; ++i) {
      const size_t upto = kv_.size() - size_t(rows - 1 - i);
      const uint64_t h = hash(std::span(kv_).first(upto));
      for (int d = 0; d < kHidden; ++d) hidden_.push_back(float(mix(h + d) >> 40) / float(1 << 24) - 0.5f);
    }
  }

  void truncate(int n) override {
    if (n < 0 || n > kv_len()) throw EngineError("bad_request", "markov truncate past kv_len");
    kv_.resize(size_t(n));
  }

  void row(std::span<const int32_t> prefix, std::span<float> out) const {
    if (row_) return row_(prefix, out);
    const uint64_t h = hash(prefix);
    for (size_t v = 0; v < out.size(); ++v) out[v] = float(mix(h ^ (v * 0x9E3779B97F4A7C15ull)) >> 40) / float(1 << 24) * 8.0f - 4.0f;
  }

  int max_verify_width() const override { return verify_width; }
  // Claims to run greedy steps ahead, so the generator takes the run-ahead path (the base
  // class runs each queued step when its verdict is read).
  bool runs_ahead() const override { return run_ahead; }
  void begin_greedy_run(int32_t first) override {
    queued = 0;
    Backend::begin_greedy_run(first);
  }
  void enqueue_verify_greedy(std::span<const int32_t> draft) override {
    most_queued = std::max(most_queued, ++queued);
    Backend::enqueue_verify_greedy(draft);
  }
  GreedyVerdict next_verdict() override {
    --queued;
    return Backend::next_verdict();
  }

  std::function<void(int width)> on_forward;
  std::vector<int> widths;
  int verify_width = 0;  // what max_verify_width() says (0: no limit)
  bool run_ahead = g_run_ahead;
  int queued = 0, most_queued = 0;  // greedy steps queued and unread: now, and at most

 private:
  uint64_t hash(std::span<const int32_t> prefix) const {
    uint64_t h = 0x1234;
    const size_t from = prefix.size() > size_t(order_) ? prefix.size() - size_t(order_) : 0;
    for (size_t i = from; i < prefix.size(); ++i) h = mix(h ^ uint64_t(prefix[i]));
    return h;
  }

  ModelConfig config_;
  int context_, order_;
  RowFn row_;
  bool all_hidden_ = false;
  std::vector<int32_t> kv_;
  std::vector<float> hidden_;
};

// Drafts the known continuation (`truth` = prompt + the plain output), or something else.
class KnownDrafter final : public Drafter {
 public:
  enum Mode { Right, Wrong };
  KnownDrafter(std::vector<int32_t> truth, Mode mode, int vocab) : truth_(std::move(truth)), mode_(mode), vocab_(vocab) {}
  std::string name() const override { return mode_ == Right ? "oracle" : "wrong"; }
  Draft propose(std::span<const int32_t> context, int k, Sampler&) override {
    Draft d;
    d.confidence = 0.9f;
    for (int i = 0; i < k; ++i) {
      const size_t at = context.size() + size_t(i);
      // Past the known output an oracle keeps going with arbitrary tokens: they must be rejected.
      const int32_t right = at < truth_.size() ? truth_[at] : int32_t(at % size_t(vocab_));
      d.tokens.push_back(mode_ == Right ? right : int32_t((right + 1) % vocab_));
    }
    return d;
  }

 private:
  std::vector<int32_t> truth_;
  Mode mode_;
  int vocab_;
};

// Every verify width costs what a plain step costs: speculation always pays.
inline CostTable flat_costs(int widths = 33) { return CostTable{std::vector<double>(size_t(widths), 1.0)}; }

// Verifies as a CPU prices them: one more token +20 %, then +10 % each.
inline CostTable cpu_like_costs() {
  std::vector<double> ms = {1.0};
  for (int w = 2; w <= 9; ++w) ms.push_back(1.1 + 0.1 * (w - 1));
  return CostTable{ms};
}

// Time as a backend priced by `costs` takes it: each forward of width w adds costs.ms[w - 1] ms
// (the last entry for wider ones). A speculator whose clock_ms reads it judges its drafts by
// these prices, never by how fast the test machine happens to run.
class PricedClock {
 public:
  PricedClock(MarkovBackend& backend, CostTable costs) : costs_(std::move(costs)) {
    backend.on_forward = [this](int width) { ms += costs_.ms[size_t(std::min<int>(width, int(costs_.ms.size())) - 1)]; };
  }
  PricedClock(const PricedClock&) = delete;
  std::function<double()> reader() const {
    return [this] { return ms; };
  }
  double ms = 0;

 private:
  CostTable costs_;
};

}  // namespace runahead::spec_test
