#include "runtime/stopping.h"

#include <algorithm>

namespace runahead {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Deadline: return "deadline";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Context: return "context";
  }
  return "none";
}

StopChecker::StopChecker(StopRules rules) : rules_(std::move(rules)) {
  std::sort(rules_.stop_ids.begin(), rules_.stop_ids.end());
  std::sort(rules_.newline_ids.begin(), rules_.newline_ids.end());
  if (rules_.hard_deadline_ms <= 0) rules_.hard_deadline_ms = 2 * rules_.deadline_ms;
}

bool StopChecker::contains(const std::vector<int32_t>& sorted, int32_t token) {
  return std::binary_search(sorted.begin(), sorted.end(), token);
}

StopChecker::Verdict StopChecker::judge(int32_t token, int emitted, double elapsed_ms) const {
  if (contains(rules_.stop_ids, token)) return {false, FinishReason::Stop};
  if (emitted + 1 >= rules_.max_tokens) return {true, FinishReason::Length};
  const bool past_deadline = rules_.deadline_ms > 0 && elapsed_ms >= rules_.deadline_ms;
  if (past_deadline && contains(rules_.newline_ids, token)) return {true, FinishReason::Deadline};
  return {true, FinishReason::None};
}

FinishReason StopChecker::before_step(bool cancelled, double elapsed_ms) const {
  if (cancelled) return FinishReason::Cancelled;
  if (rules_.hard_deadline_ms > 0 && elapsed_ms >= rules_.hard_deadline_ms) return FinishReason::Deadline;
  return FinishReason::None;
}

}  // namespace runahead
