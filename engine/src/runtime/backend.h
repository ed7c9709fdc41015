#pragma once
// What a backend (CPU, CUDA) offers the scheduler: a forward over new tokens that
// appends to its own KV cache, and rollback of that cache. Everything above this
// interface (prefix reuse, sampling, stopping, speculation) is backend-independent.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/error.h"
#include "model/weights.h"

namespace runahead {

struct BackendOptions {
  int threads = 0;         // 0: one per physical core
  int context_length = 0;  // 0: min(model's max_position_embeddings, 4096)
  // CUDA only (the session refuses them for another backend): every weight matrix but the
  // embedding (`weights: fp8`), or lm_head alone (`lm_head: fp8`), as fp8 e4m3 with a scale
  // per row, quantized at load (model/fp8.h).
  bool fp8_matrices = false;
  bool fp8_lm_head = false;
  // Optimisations the load requires (LoadOptions::require): one that is off unless asked for
  // (the CUDA backend's run_ahead; persistent_step where timing would leave it off) turns on.
  std::vector<std::string> require;
};

// One optimisation as the load found it (the start-up self-check): active or not, and why.
struct OptimizationCheck {
  std::string name;
  bool active = false;
  std::string why;
  // Inactive because the backend cannot do it (block formats it cannot read as stored, run
  // widened), not by choice: the load reports `why` as a warning.
  bool warn = false;
};

// The host's blocking waits on the device since the backend was made: all of them (stream or
// event synchronisation, blocking copies), and those that left the device with nothing queued,
// idle until the host queues more ("drained").
struct HostWaits {
  long long all = 0;
  long long drained = 0;
};

// What a greedy verify kept: `accepted` drafted tokens, then the target's own `next`.
struct GreedyVerdict {
  int accepted = 0;
  int32_t next = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;                    // "cpu", "cuda"
  virtual nlohmann::json describe() const = 0;             // threads, simd, active optimisations
  // Each optimisation this backend has, checked at load as it really runs (session.cpp adds the
  // drafters' and judges what options.require asked for).
  virtual std::vector<OptimizationCheck> self_check() const { return {}; }
  virtual HostWaits host_waits() const { return {}; }
  virtual const ModelConfig& config() const = 0;
  virtual int context_length() const = 0;                  // KV capacity in positions
  virtual int kv_len() const = 0;                          // positions now in the KV cache

  // Runs tokens at positions [kv_len(), kv_len() + n), appends their K/V, and writes
  // the logits of the last `n_out` of them to `logits` as [n_out, vocab] row-major.
  // n = 1 is a decode step, n = k+1 verifies k drafted tokens, large n is prefill.
  // Throws EngineError{"context_overflow"} if kv_len() + n > context_length().
  virtual void forward(std::span<const int32_t> tokens, int n_out, std::vector<float>& logits) = 0;

  // The final hidden states (after the last layer, before the final norm) of the
  // last `n_out` tokens of the most recent forward, [n_out, hidden]. Used by MTP heads.
  virtual std::span<const float> hidden() const = 0;

  // Rolls the KV cache back to its first n positions (n <= kv_len()).
  virtual void truncate(int n) = 0;

  // Greedy verification of a draft, the step of greedy speculation: runs [pending, draft...]
  // at the end of the cache, keeps the longest prefix of `draft` whose every token is the
  // argmax of the row before it, and rolls the cache back past it, so the cache ends holding
  // `pending` and the accepted drafts. `next` is the argmax after them (a correction, or the
  // bonus token when all were accepted). An empty draft is a plain greedy step.
  // This version runs forward() and picks on the host (hidden() then holds the rows of all
  // the step's tokens); the CUDA backend picks, compares and rolls back on the device and
  // only the verdict crosses to the host (its hidden() is not updated).
  virtual GreedyVerdict verify_greedy(int32_t pending, std::span<const int32_t> draft);
  // The widest step (1 + draft tokens) verify_greedy runs in one pass; 0: no limit.
  virtual int max_verify_width() const { return 0; }

  // Greedy verify steps queued ahead of their results (issue 19's host run-ahead). A run
  // starts from `first`, the pending token; each queued step takes as its pending token the
  // `next` its predecessor left (where it was computed: on the device for CUDA) and verifies
  // `draft` after it, so the host can queue step n+1 before step n's verdict is read (the
  // scheduler queues plain steps so: runtime/scheduler.h run_greedy). next_verdict() waits for the oldest queued
  // step and gives its verdict; kv_len() counts the steps whose verdicts were read. At most
  // two steps are queued. end_greedy_run() drops the steps still queued (their cache entries
  // rolled back). runs_ahead(): whether queued steps really run while the host works (CUDA);
  // this version runs each one inside next_verdict(), with verify_greedy().
  virtual bool runs_ahead() const { return false; }
  virtual void begin_greedy_run(int32_t first);
  virtual void enqueue_verify_greedy(std::span<const int32_t> draft);
  virtual GreedyVerdict next_verdict();
  virtual void end_greedy_run();

  // Greedy decoding in a loop of the backend's own that keeps each step's token where it was
  // computed (CUDA: on the device, read by the host a step late): feeds `first`, then each
  // token it produced, handing every new token to on_token until on_token returns false or
  // max_tokens are out. Returns how many it produced (the cache then holds `first` and all of
  // them but the last), or -1 when the backend has no such loop and the caller steps with
  // forward().
  virtual int decode_greedy(int32_t first, int max_tokens, const std::function<bool(int32_t)>& on_token) {
    (void)first, (void)max_tokens, (void)on_token;
    return -1;
  }

  // Speculation with an MTP head (runtime/drafters/mtp.*) needs two more things; a
  // backend without them refuses, and the head is reported inactive.
  // hidden() keeps the rows of every token of a forward, not only the last n_out.
  virtual void keep_all_hidden(bool all) {
    if (all) throw EngineError("bad_request", name() + " backend: hidden states of every position are not available");
  }
  // As forward(), over input vectors x: [n, hidden] in place of token embeddings.
  virtual void forward_vectors(std::span<const float> x, int n_out, std::vector<float>& logits) {
    (void)x, (void)n_out, (void)logits;
    throw EngineError("bad_request", name() + " backend: a forward over input vectors is not available");
  }

 private:
  int32_t run_pending_ = 0;                      // the greedy run's next pending token
  std::deque<std::vector<int32_t>> run_queue_;  // its queued drafts, not yet run
};

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const ModelWeights> weights,
                                          const BackendOptions& options);

// The backends this build has, by name: "cpu", then "cuda" where CMake found CUDA (its entry is
// defined in cuda/cuda_backend.cpp). runtime/ reaches a backend only through this table.
struct BackendEntry {
  const char* name;
  bool (*usable)();  // the device it needs is present on this machine
  std::unique_ptr<Backend> (*make)(std::shared_ptr<const ModelWeights> weights, const BackendOptions& options);
  int (*bench)(int argc, char** argv);  // its `runahead-engine bench` (engine/bench/backends/)
};
const std::vector<BackendEntry>& backend_entries();
// The entry named `name`, or null when this build has none.
const BackendEntry* find_backend(std::string_view name);

}  // namespace runahead
