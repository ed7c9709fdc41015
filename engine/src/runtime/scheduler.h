#pragma once
// The speculative decode step: draft k tokens, verify them in one forward of the target
// over [pending, d1..dk], keep the longest prefix that verification allows plus the
// target's own next token, and roll the KV cache back past it. Lossless: greedy output
// is the target's greedy output token for token, sampled output has the target's
// distribution. k is chosen each step from the measured cost of a verify of width k+1
// and the acceptance each drafter has earned; whether a drafter drafts at all is judged
// from the time its steps really took against plain steps (runtime/draft_gate.h), so
// where drafts do not pay nothing is drafted and each step is the plain step.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/backend.h"
#include "runtime/draft_gate.h"
#include "runtime/drafter.h"
#include "runtime/sampler.h"

namespace runahead {

struct SpeculationOptions {
  std::string mode = "auto";  // off | auto | lookup | mtp | draft
  int max_draft = 8;          // most tokens drafted in one step (k)
  std::string draft_model;    // a model folder; empty: <model>/draft when present
  bool adaptive = true;       // false: always draft max_draft with the first drafter that can (tests)
  std::function<double()> clock_ms;  // what the step times are read from; empty: the steady clock (tests bring their own)
};

// Time of one target forward of width w (w = 1..max_draft+1) as measured at load.
struct CostTable {
  std::vector<double> ms;  // ms[w - 1]
  // t(w) / t(1); widths past the table grow linearly from its last two entries.
  double ratio(int width) const;
  nlohmann::json to_json() const;
};

// Times forwards of widths 1..max_width over a short context (the fastest of `reps` rounds,
// within about a quarter of a second), then empties the KV cache.
CostTable measure_costs(Backend& target, int max_width, int reps = 7);

struct DrafterCounts {
  int steps = 0;     // steps that verified a draft of this drafter
  int drafted = 0;
  int accepted = 0;
};

struct SpeculationStats {
  std::string drafter;  // the mode: "auto", "lookup", ...
  int steps = 0;
  int drafted = 0;
  int accepted = 0;
  std::map<std::string, DrafterCounts> by_drafter;
  nlohmann::json gates;  // as the request left them: the plain step's time, each drafter's gate
  nlohmann::json to_json() const;
};

// The outcome of checking a draft against the target's rows.
struct Verdict {
  int accepted = 0;  // drafted tokens kept
  int32_t next = 0;  // the target's token after them (a correction or the bonus token)
};

// Greedy: keeps drafted tokens while each equals the argmax of the row before it.
// Sampling: keeps d_i with probability min(1, p(d_i) / q(d_i)); on a rejection draws
// from normalised max(0, p - q); when all are kept, draws the bonus token from p.
// p is sampler.distribution() of each row; q is draft.probs, or one-hot when empty.
// `logits`: [draft.tokens.size() + 1, vocab].
Verdict verify(const Draft& draft, std::span<const float> logits, int vocab, Sampler& sampler);

struct SpecStep {
  std::vector<int32_t> tokens;  // accepted drafts, then the target's next token
  int drafted = 0;
  int accepted = 0;
};

class Speculator {
 public:
  // Drafters in order of preference on equal expected gain. None: every step is plain.
  Speculator(Backend& target, std::vector<std::unique_ptr<Drafter>> drafters,
             SpeculationOptions options, CostTable costs);

  // A request starts: clears the request's statistics.
  void begin();
  // The target ran `tokens` from position pos0 and keeps them (a prefill chunk): passes
  // their hidden states to the drafters that want them.
  void observed(int pos0, std::span<const int32_t> tokens);
  // One decode step. `cached` mirrors the target's KV cache and grows by what it keeps;
  // `pending` is the last token emitted, not yet in the cache. At most `budget` tokens
  // come back (the tokens the request may still emit). `logits` is scratch.
  SpecStep step(std::vector<int32_t>& cached, int32_t pending, Sampler& sampler, int budget,
                std::vector<float>& logits);
  // The request ended; `all_tokens` is what it left in the cache.
  void end(std::span<const int32_t> all_tokens);

  // Greedy decoding with the target's steps queued ahead of the host (Backend::
  // enqueue_verify_greedy, issue 19's host run-ahead): while a plain step runs, the next plain
  // step is already queued (its input is the token the first leaves on the device), so the
  // GPU does not wait for the host between them; a step with a draft is chosen after the
  // verdict before it, from the tokens known. From `pending` (emitted, not yet in the cache),
  // hands each step's tokens (accepted drafts, then the target's token) to on_step, one step
  // late, until it returns false or no step fits the context or `budget`; a step queued past
  // the stop is dropped. `cached` grows by what the cache keeps.
  using StepSink = std::function<bool(std::span<const int32_t> tokens, int drafted, int accepted)>;
  void run_greedy(std::vector<int32_t>& cached, int32_t pending, int budget, Sampler& sampler, const StepSink& on_step);

  const SpeculationStats& stats() const { return stats_; }
  // For `loaded`: mode, max_draft, the drafters and the cost table.
  nlohmann::json report() const;

 private:
  // Acceptance of one kind of draft, as a decaying count of hits over trials (a trial is
  // a drafted token up to and including the first rejected one).
  struct Acceptance {
    double hits = 0, trials = 0;
    double alpha(double prior) const { return (hits + 2 * prior) / (trials + 2); }
  };
  struct Choice {
    int drafter = -1;
    int k = 0;
    double gain = 1.0;  // expected tokens per unit of plain-step time
    Draft draft;        // already drafted (free drafters) or empty
  };
  struct DrafterState {
    std::unique_ptr<Drafter> drafter;
    std::map<int, Acceptance> acceptance;  // by Draft::bucket
    // Measured cost of drafting, per drafted token: the median of recent proposals, so a
    // first proposal that catches up with a new prompt does not count as the usual cost.
    std::vector<double> ms_per_token;
    double draft_ms() const;
  };

  // A step queued by run_greedy: its drafter (-1: a plain step) and draft.
  struct Queued {
    int drafter = -1;
    int bucket = 0;
    std::vector<int32_t> draft;
  };

  // What a step's time went to, for the gates.
  struct StepCost {
    int asked = -1;       // the drafter whose draft it verified or whose proposal it waited for
    int width = 1;        // tokens verified
    double draft_ms = 0;  // time spent choosing and drafting
  };
  // The step itself, untimed.
  SpecStep decode(std::vector<int32_t>& cached, int32_t pending, Sampler& sampler, int budget,
                  std::vector<float>& logits, StepCost& cost);
  // No drafter is asked: every gate is shut, or the plain step needs timing.
  bool plain_only() const { return options_.adaptive && gates_.plain_next(); }
  double now_ms() const;
  // The k in [0, k_max] with the most expected tokens per unit of time; gain 1 at k = 0.
  std::pair<int, double> best_depth(double alpha, double draft_ratio, int k_max) const;
  Choice choose(std::span<const int32_t> context, int k_max, Sampler& sampler);
  // The chosen drafter's tokens: the free drafters' are in the choice; a model drafter is asked
  // now, and what that cost per token is recorded.
  Draft drafted(Choice& choice, std::span<const int32_t> context, Sampler& sampler);
  void fade();
  // Counts a verified draft in the statistics and in its drafter's acceptance.
  void record(int drafter, int bucket, int k, int accepted);
  void feed(int pos0, std::span<const int32_t> tokens, std::span<const float> hidden);
  SpecStep plain_step(std::vector<int32_t>& cached, int32_t pending, Sampler& sampler,
                      std::vector<float>& logits);

  Backend& target_;
  std::vector<DrafterState> drafters_;
  SpeculationOptions options_;
  CostTable costs_;
  bool wants_hidden_ = false;
  SpeculationStats stats_;
  DraftGates gates_;
  std::vector<int32_t> context_, input_;
};

}  // namespace runahead
