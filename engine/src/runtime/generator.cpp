#include "runtime/generator.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/error.h"
#include "model/weight_mappings.h"

namespace runahead {

namespace {

// A non-finite logit (activations that overflowed, damaged weights) would be sampled as some
// token, or ends the request with nothing: say so instead.
int32_t checked_token(std::span<const float> row, int32_t token) {
  if (!std::isfinite(row[size_t(token)]))
    throw EngineError("numeric_error",
                      "the model computed non-finite logits (NaN or Inf); its weights or dtype may be broken", {},
                      {}, "finite logits");
  return token;
}

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

Generator::Generator(Backend& backend, GeneratorOptions options)
    : backend_(backend), options_(std::move(options)) {
  if (options_.prefill_chunk < 1) options_.prefill_chunk = 1;
  // The cache must mirror the backend from the start; a fresh backend is empty anyway.
  if (backend_.kv_len() > 0) backend_.truncate(0);
}

void Generator::rollback(int n) {
  n = std::clamp(n, 0, static_cast<int>(cached_.size()));
  backend_.truncate(n);
  cached_.resize(n);
}

void Generator::validate(const GenerateRequest& request) const {
  if (request.prompt.empty())
    throw EngineError("bad_request", "prompt: expected a non-empty array of token ids", {}, "prompt",
                      "a non-empty array of token ids");
  const int vocab = backend_.config().vocab_size;
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t id = request.prompt[i];
    if (id < 0 || id >= vocab) {
      const std::string field = "prompt[" + std::to_string(i) + "]";
      const std::string expected = "a token id in [0, " + std::to_string(vocab) + ")";
      throw EngineError("bad_request", field + ": " + std::to_string(id) + " is not " + expected, {}, field,
                        expected);
    }
  }
  const int context = backend_.context_length();
  if (static_cast<int64_t>(request.prompt.size()) > context)
    throw EngineError("context_overflow",
                      "prompt: " + std::to_string(request.prompt.size()) + " tokens do not fit the context of " +
                          std::to_string(context),
                      {}, "prompt", "at most " + std::to_string(context) + " tokens");
}

int Generator::reuse_prefix(std::span<const int32_t> prompt) {
  const auto common = std::mismatch(cached_.begin(), cached_.end(), prompt.begin(), prompt.end());
  int keep = static_cast<int>(common.first - cached_.begin());
  // The last prompt token always runs: its logits give the first new token.
  keep = std::min(keep, static_cast<int>(prompt.size()) - 1);
  if (keep < static_cast<int>(cached_.size())) rollback(keep);
  return keep;
}

void Generator::forward(std::span<const int32_t> tokens, int n_out) {
  backend_.forward(tokens, n_out, logits_);
  cached_.insert(cached_.end(), tokens.begin(), tokens.end());
}

bool Generator::prefill(std::span<const int32_t> tokens, const StopChecker& stop, Clock::time_point start,
                        const std::atomic<bool>& cancel) {
  for (size_t begin = 0; begin < tokens.size(); begin += options_.prefill_chunk) {
    if (stop.before_step(cancel.load(), ms_between(start, Clock::now())) != FinishReason::None) return false;
    const size_t n = std::min<size_t>(options_.prefill_chunk, tokens.size() - begin);
    const int pos0 = backend_.kv_len();
    const auto chunk = tokens.subspan(begin, n);
    forward(chunk, 1);  // backends give at least one logits row; the last chunk's is used
    if (options_.speculator) options_.speculator->observed(pos0, chunk);
  }
  return true;
}

Generator::Step Generator::decode_step(int32_t pending, Sampler& sampler, int budget) {
  if (options_.speculator) {
    SpecStep step = options_.speculator->step(cached_, pending, sampler, budget, logits_);
    return Step{std::move(step.tokens), step.drafted, step.accepted};
  }
  const int32_t one[1] = {pending};
  forward(one, 1);
  return Step{{checked_token(logits_, sampler.sample(logits_))}, 0, 0};
}

GenerateResult Generator::generate(const GenerateRequest& request, const TokenSink& sink,
                                   const std::atomic<bool>& cancel) {
  const auto start = Clock::now();
  validate(request);

  StopRules rules;
  rules.stop_ids = request.stop;
  rules.stop_ids.insert(rules.stop_ids.end(), options_.eos_ids.begin(), options_.eos_ids.end());
  rules.newline_ids = options_.newline_ids;
  rules.max_tokens = request.max_tokens;
  rules.deadline_ms = request.deadline_ms;
  rules.hard_deadline_ms = request.hard_deadline_ms;
  const StopChecker stop(std::move(rules));
  Sampler sampler(request.sampling);

  GenerateResult result;
  GenerateStats& stats = result.stats;
  stats.prompt_tokens = static_cast<int>(request.prompt.size());
  const auto elapsed = [&] { return ms_between(start, Clock::now()); };

  if (options_.speculator) options_.speculator->begin();
  try {
    stats.reused_tokens = reuse_prefix(request.prompt);
    const auto prefill_start = Clock::now();
    const bool prefilled =
        prefill(std::span(request.prompt).subspan(stats.reused_tokens), stop, start, cancel);
    stats.prefill_ms = ms_between(prefill_start, Clock::now());

    if (!prefilled) {
      result.finish = stop.before_step(cancel.load(), elapsed());
    } else if (request.max_tokens <= 0) {
      result.finish = FinishReason::Length;  // a prefill alone warms the cache for the next request
    } else {
      check_mappings_intact();
      std::vector<int32_t> candidates{checked_token(logits_, sampler.sample(logits_))};
      auto step_start = start;  // the first token's time is the time to first token
      double decode_ms = 0;
      int produced_by_steps = 0;
      std::vector<int32_t> out;
      std::vector<double> ms;
      // Judges the tokens a step produced, hands those of the output to the sink (the step's
      // time split between them) and says whether another step may start.
      const auto take = [&](std::span<const int32_t> tokens, double step_ms, double now_ms) {
        check_mappings_intact();  // a step over zero pages of a cut weight file emits nothing
        out.clear();
        for (int32_t token : tokens) {
          const auto verdict = stop.judge(token, stats.tokens + static_cast<int>(out.size()), now_ms);
          if (verdict.emit) out.push_back(token);
          result.finish = verdict.finish;
          if (result.finish != FinishReason::None) break;
        }
        if (!out.empty()) {
          ms.assign(out.size(), step_ms / static_cast<double>(out.size()));
          stats.tokens += static_cast<int>(out.size());
          sink(out, ms);
        }
        if (result.finish == FinishReason::None) result.finish = stop.before_step(cancel.load(), elapsed());
        return result.finish == FinishReason::None;
      };
      for (;;) {
        const auto step_end = Clock::now();
        const double now_ms = ms_between(start, step_end);
        if (stats.steps == 0) stats.ttft_ms = now_ms;
        if (!take(candidates, ms_between(step_start, step_end), now_ms)) break;
        if (backend_.kv_len() + 1 > backend_.context_length()) {
          result.finish = FinishReason::Context;
          break;
        }
        step_start = Clock::now();
        if (!options_.speculator && request.sampling.greedy()) {
          // The backend's own greedy loop, where it has one: each token is judged while the
          // next step already runs.
          int32_t input = out.back();
          const int produced = backend_.decode_greedy(input, request.max_tokens - stats.tokens, [&](int32_t token) {
            const auto now = Clock::now();
            const double step_ms = ms_between(step_start, now);
            step_start = now;
            decode_ms += step_ms;
            ++stats.steps;
            ++produced_by_steps;
            cached_.push_back(input);
            input = token;
            return take(std::span(&token, 1), step_ms, ms_between(start, now));
          });
          if (produced >= 0) {
            if (result.finish == FinishReason::None) result.finish = FinishReason::Context;  // the cache is full
            break;
          }
        }
        if (options_.speculator && request.sampling.greedy() && backend_.runs_ahead()) {
          // Speculation with each step queued before the previous one is read (CUDA): tokens
          // are judged one step late, and a step queued past a stop is dropped.
          options_.speculator->run_greedy(cached_, out.back(), request.max_tokens - stats.tokens, sampler,
                                          [&](std::span<const int32_t> tokens, int drafted, int accepted) {
                                            const auto now = Clock::now();
                                            const double step_ms = ms_between(step_start, now);
                                            step_start = now;
                                            decode_ms += step_ms;
                                            ++stats.steps;
                                            stats.drafted += drafted;
                                            stats.accepted += accepted;
                                            produced_by_steps += int(tokens.size());
                                            return take(tokens, step_ms, ms_between(start, now));
                                          });
          if (result.finish == FinishReason::None) result.finish = FinishReason::Context;  // no step fits
          break;
        }
        Step step = decode_step(out.back(), sampler, request.max_tokens - stats.tokens);
        decode_ms += ms_between(step_start, Clock::now());
        ++stats.steps;
        stats.drafted += step.drafted;
        stats.accepted += step.accepted;
        produced_by_steps += static_cast<int>(step.tokens.size());
        candidates = std::move(step.tokens);
      }
      if (produced_by_steps > 0) {
        stats.decode_ms_per_token = decode_ms / produced_by_steps;
        stats.accepted_per_step = static_cast<double>(produced_by_steps) / stats.steps;
      }
    }
  } catch (...) {
    // A forward that failed half-way leaves the backend's cache unknown: start afresh next time.
    rollback(0);
    throw;
  }
  if (options_.speculator) {
    options_.speculator->end(cached_);
    stats.speculation = options_.speculator->stats();
  }
  stats.total_ms = elapsed();
  return result;
}

}  // namespace runahead
