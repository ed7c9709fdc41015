#pragma once
// Whether a drafter's drafts pay, judged from the time steps really take (issue 19). The cost
// table timed at load and the acceptance a drafter earned pick k, but on a CPU a 2-token verify
// timed at 1.35x a plain step in one load and 1.61x in the next, so a choice made from them
// alone swings with timing noise. A gate per drafter compares the measured time of the steps it
// drafted (drafting, catch-up and verify) with what plain steps, measured meanwhile, would have
// taken for the tokens they gave, and shuts the drafter when it does not pay: with every gate
// shut a step is the plain step and nothing is drafted. A shut drafter is probed again now and
// then (a few steps, as deep as its acceptance estimate says), after twice as many steps each
// time a probe fails, and
// never so often that probing costs more than about 1 % of the plain time. Hysteresis: a probe
// opens the gate only when its steps cost at most 0.97x plain per token; an open gate shuts when
// its recent steps cost more than plain.
#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

namespace runahead {

class DraftGates {
 public:
  explicit DraftGates(size_t drafters = 0) : gates_(drafters) {}

  // Whether drafter d may draft on the next step (open, or probing).
  bool open(size_t d) const { return gates_[d].state != State::Shut; }
  // While probing, a drafter drafts only where no open one would: its steps are measured.
  bool probing(size_t d) const { return gates_[d].state == State::Probing; }
  // No gate is open, or the plain step's time needs a fresh measurement: the next step is plain.
  bool plain_next() const;

  // A step took `ms` and gave `tokens`; `drafter` is the drafter whose draft it verified (or
  // whose proposal it waited for), -1 for a plain step. `draft_ms` of it went to drafting, the
  // rest to a verify expected to cost `verify_ratio` plain steps (the cost table's ratio): a
  // verify or plain step timed far above what is expected of it counts as that bound, so
  // that a busy machine, which only ever adds time, does not favour either side.
  void record(int drafter, double ms, int tokens, double verify_ratio = 1.0, double draft_ms = 0.0);

  // The plain step's measured time (0: none yet) and, per drafter, its state and cost ratio.
  nlohmann::json to_json() const;

 private:
  enum class State { Probing, Open, Shut };
  static constexpr int kFirstBackoff = 4;  // steps from a failed probe to the next, at first (the 1 % rule sets longer waits where probes cost)
  struct Gate {
    State state = State::Probing;
    // Decayed sums over the steps it drafted: their time, and what plain steps would have
    // taken for their tokens (the plain step's time then, times the tokens).
    double cost = 0, plain = 0;
    int steps = 0;  // steps drafted since the state began
    int wait = 0;   // while shut: steps until it is probed again
    int backoff = kFirstBackoff;  // the wait after the next failed probe
  };
  void shut(Gate& g);

  std::vector<Gate> gates_;
  double plain_ms_ = 0;  // a plain step's time, a moving average
  int plain_samples_ = 0;
  int since_plain_ = 0;  // steps since the last plain one
};

}  // namespace runahead
