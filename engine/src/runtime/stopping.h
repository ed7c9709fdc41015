#pragma once
// When a generation ends. All rules are decided here, one token at a time, so a step
// that yields several tokens (speculation) stops at exactly the same token as one
// that yields one.
#include <cstdint>
#include <span>
#include <vector>

namespace runahead {

enum class FinishReason { None, Stop, Length, Deadline, Cancelled, Context };

// The protocol's spelling: "stop", "length", "deadline", "cancelled", "context".
const char* finish_reason_name(FinishReason reason);

struct StopRules {
  std::vector<int32_t> stop_ids;     // the request's stop ids and the model's eos ids
  std::vector<int32_t> newline_ids;  // tokens whose text contains a newline
  int max_tokens = 64;
  double deadline_ms = 0;            // 0: none; after it, end at the first newline token
  double hard_deadline_ms = 0;       // 0: twice deadline_ms (none when that is 0 too)
};

class StopChecker {
 public:
  explicit StopChecker(StopRules rules);

  struct Verdict {
    bool emit;            // the token is part of the output
    FinishReason finish;  // None: go on
  };
  // Judges the next token of the output; `emitted` tokens came before it and the
  // step that produced it ended `elapsed_ms` after the request started.
  Verdict judge(int32_t token, int emitted, double elapsed_ms) const;

  // Whether another step may start: cancellation and the hard deadline.
  FinishReason before_step(bool cancelled, double elapsed_ms) const;

  int max_tokens() const { return rules_.max_tokens; }

 private:
  static bool contains(const std::vector<int32_t>& sorted, int32_t token);
  StopRules rules_;  // id lists sorted
};

}  // namespace runahead
