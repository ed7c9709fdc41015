#pragma once
// One generation at a time over one backend: prefix reuse against what the KV cache
// already holds, chunked prefill, then a decode loop whose step is the seam where a
// speculative scheduler produces several tokens per forward.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/backend.h"
#include "runtime/sampler.h"
#include "runtime/sampling.h"
#include "runtime/scheduler.h"
#include "runtime/stopping.h"

namespace runahead {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 64;
  std::vector<int32_t> stop;     // in addition to the model's eos ids
  double deadline_ms = 0;
  double hard_deadline_ms = 0;   // 0: twice deadline_ms
};

struct GenerateStats {
  int prompt_tokens = 0;
  int reused_tokens = 0;       // KV positions kept from the previous request
  double prefill_ms = 0;
  double ttft_ms = 0;          // request start to first token
  double decode_ms_per_token = 0;
  int tokens = 0;              // emitted
  double total_ms = 0;
  int steps = 0;               // decode forwards after the prefill
  int drafted = 0;
  int accepted = 0;
  double accepted_per_step = 0;  // tokens the decode steps produced, per step
  SpeculationStats speculation;  // per drafter; empty without a speculator
};

struct GenerateResult {
  FinishReason finish = FinishReason::None;
  GenerateStats stats;
};

// Receives each step's emitted tokens and the ms attributed to each.
using TokenSink = std::function<void(std::span<const int32_t> tokens, std::span<const double> ms)>;

struct GeneratorOptions {
  std::vector<int32_t> eos_ids;      // always stop, never emitted
  std::vector<int32_t> newline_ids;  // for the soft deadline
  int prefill_chunk = 512;           // tokens per prefill forward: bounds activations, lets cancel in
  Speculator* speculator = nullptr;  // not owned; null: one token per decode step
};

class Generator {
 public:
  Generator(Backend& backend, GeneratorOptions options);

  // Throws EngineError: "bad_request" (empty prompt, token id outside the vocabulary),
  // "context_overflow" (prompt longer than the context), both before any work;
  // "numeric_error" when a sampled token's logit is NaN or Inf; "model_error" when a weight
  // file was truncated while mapped (model/weight_mappings.h).
  GenerateResult generate(const GenerateRequest& request, const TokenSink& sink,
                          const std::atomic<bool>& cancel);

  // The tokens whose K/V the backend holds, in order (kv_len() of them).
  std::span<const int32_t> cached_tokens() const { return cached_; }

  // Drops the cache after its first n tokens.
  void rollback(int n);

  Backend& backend() { return backend_; }

 private:
  using Clock = std::chrono::steady_clock;

  // What one decode step produced: the candidate tokens, before the stop rules.
  struct Step {
    std::vector<int32_t> tokens;
    int drafted = 0;
    int accepted = 0;
  };

  void validate(const GenerateRequest& request) const;
  // Keeps the longest common prefix of the cache and `prompt` (leaving at least the
  // last prompt token to run) and returns its length.
  int reuse_prefix(std::span<const int32_t> prompt);
  // Runs `tokens` in chunks; the logits of the last one land in logits_.
  // Returns false if cancelled or past the hard deadline between chunks.
  bool prefill(std::span<const int32_t> tokens, const StopChecker& stop, Clock::time_point start,
               const std::atomic<bool>& cancel);
  // Runs `pending` (the last token emitted, not yet in the cache) and returns what follows:
  // one sampled token, or with a speculator the accepted drafts and the target's next token,
  // at most `budget` of them.
  Step decode_step(int32_t pending, Sampler& sampler, int budget);
  void forward(std::span<const int32_t> tokens, int n_out);

  Backend& backend_;
  GeneratorOptions options_;
  std::vector<int32_t> cached_;
  std::vector<float> logits_;
};

}  // namespace runahead
