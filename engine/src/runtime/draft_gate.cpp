#include "runtime/draft_gate.h"

#include <algorithm>
#include <cmath>

namespace runahead {

namespace {

constexpr double kPlainDecay = 0.9;  // weight of the older plain-step times
constexpr double kDecay = 0.8;       // weight of a drafter's older steps
// A step timed above this many times what is expected of it counts as this many: a busy machine
// only ever adds time (a plain step timed too slow would make every draft look worth it, a verify
// timed too slow would shut a drafter that pays).
constexpr double kOutlier = 1.5;
constexpr int kJudgeAfter = 3;       // steps a drafter drafts before its gate is judged
constexpr double kOpenAtMost = 0.97; // a probe opens the gate at this cost ratio or less
constexpr double kShutAbove = 1.0;   // an open gate shuts above this one
constexpr int kMaxBackoff = 128;
constexpr double kProbeShare = 0.01; // the share of plain time that failed probes may lose
constexpr int kLongestWait = 100000;
constexpr int kPlainEvery = 64;      // the plain step is timed at least this often

}  // namespace

bool DraftGates::plain_next() const {
  if (plain_samples_ < 2 || since_plain_ >= kPlainEvery) return true;
  return std::none_of(gates_.begin(), gates_.end(), [](const Gate& g) { return g.state != State::Shut; });
}

void DraftGates::shut(Gate& g) {
  // Waits at least `backoff` steps, and long enough that what this probe lost is a small
  // share of the plain time until the next one (a draft model's catch-up on a long prompt).
  const double lost = std::max(0.0, g.cost - g.plain);
  g.state = State::Shut;
  g.wait = int(std::min<double>(kLongestWait, std::max<double>(g.backoff, std::ceil(lost / (kProbeShare * plain_ms_)))));
  g.backoff = std::min(2 * g.backoff, kMaxBackoff);
}

void DraftGates::record(int drafter, double ms, int tokens, double verify_ratio, double draft_ms) {
  for (Gate& g : gates_) {
    if (g.state == State::Shut && --g.wait <= 0) {
      const int backoff = g.backoff;
      g = Gate{};
      g.backoff = backoff;
    }
  }
  if (drafter < 0) {
    if (plain_samples_ >= 4) ms = std::min(ms, kOutlier * plain_ms_);
    plain_ms_ = plain_samples_ == 0 ? ms : kPlainDecay * plain_ms_ + (1 - kPlainDecay) * ms;
    ++plain_samples_;
    since_plain_ = 0;
    return;
  }
  ++since_plain_;
  Gate& g = gates_[size_t(drafter)];
  // A step queued (run ahead) before its gate shut, or one before any plain step was timed.
  if (g.state == State::Shut || plain_samples_ == 0) return;
  if (plain_samples_ >= 4) ms = draft_ms + std::min(ms - draft_ms, kOutlier * verify_ratio * plain_ms_);
  g.cost = kDecay * g.cost + ms;
  g.plain = kDecay * g.plain + double(tokens) * plain_ms_;
  if (++g.steps < kJudgeAfter) return;
  const double ratio = g.cost / g.plain;
  if (g.state == State::Probing) {
    if (ratio <= kOpenAtMost) {
      g.state = State::Open;
      g.backoff = kFirstBackoff;
    } else {
      shut(g);
    }
  } else if (ratio > kShutAbove) {
    g.backoff = kFirstBackoff;  // it paid until now: the work changed, so look again soon
    shut(g);
  }
}

nlohmann::json DraftGates::to_json() const {
  nlohmann::json drafters = nlohmann::json::array();
  for (const Gate& g : gates_) {
    const char* state = g.state == State::Open ? "open" : g.state == State::Shut ? "shut" : "probing";
    nlohmann::json j = {{"state", state}};
    if (g.plain > 0) j["cost_ratio"] = std::round(1000 * g.cost / g.plain) / 1000;
    drafters.push_back(j);
  }
  return {{"plain_ms", std::round(1000 * plain_ms_) / 1000}, {"drafters", drafters}};
}

}  // namespace runahead
