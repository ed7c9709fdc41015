#include "runtime/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>

#include "model/error.h"

namespace runahead {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A model drafter that has earned nothing yet is trusted this much.
constexpr double kModelPrior = 0.6;
// Every step, what a drafter learned fades by this factor when it is not used, so one
// that stopped paying is tried again after a while.
constexpr double kFade = 0.99;
// Weight of the newest verification in a drafter's acceptance estimate.
constexpr double kDecay = 0.9;
// What choose() counts a probe as: more than a plain step, less than any draft expected to pay.
constexpr double kProbeGain = 1.0 + 1e-9;

}  // namespace

double CostTable::ratio(int width) const {
  if (ms.empty() || ms[0] <= 0) return 1.0 + 0.05 * (width - 1);  // unmeasured: nearly flat
  if (width <= int(ms.size())) return ms[size_t(width - 1)] / ms[0];
  const double last = ms.back(), slope = ms.size() > 1 ? std::max(0.0, last - ms[ms.size() - 2]) : 0.0;
  return (last + slope * double(width - int(ms.size()))) / ms[0];
}

nlohmann::json CostTable::to_json() const {
  nlohmann::json widths = nlohmann::json::array(), ratios = nlohmann::json::array();
  for (size_t w = 1; w <= ms.size(); ++w) {
    widths.push_back(std::round(ms[w - 1] * 1000) / 1000);
    ratios.push_back(std::round(ratio(int(w)) * 1000) / 1000);
  }
  return {{"verify_ms", widths}, {"ratio", ratios}};
}

CostTable measure_costs(Backend& target, int max_width, int reps) {
  CostTable table;
  const int context = std::min(16, target.context_length() - max_width);
  if (context < 1 || max_width < 1) return table;
  target.truncate(0);
  std::vector<int32_t> tokens(size_t(context + max_width));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919) % size_t(target.config().vocab_size));
  std::vector<float> logits;
  target.forward(std::span(tokens).first(size_t(context)), 1, logits);
  // What a greedy step costs: a verify of w tokens (sampled steps add their logits' way to the host).
  auto time = [&](int w) {
    const auto start = Clock::now();
    target.verify_greedy(tokens[size_t(context)], std::span(tokens).subspan(size_t(context) + 1, size_t(w - 1)));
    const double ms = ms_since(start);
    target.truncate(context);
    return ms;
  };
  time(1);  // warms up
  // Widths in rounds, the ends first, the fastest run of each kept: a busy machine only
  // ever adds time. `reps` rounds, fewer when they do not fit in a quarter of a second
  // (a large model on a CPU), but both ends at least three times; widths left out are
  // interpolated.
  std::vector<int> order = {1, max_width};
  for (int w = 2; w < max_width; ++w) order.push_back(w);
  table.ms.assign(size_t(max_width), INFINITY);
  const auto begin = Clock::now();
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < order.size(); ++i) {
      if ((r >= 3 || i >= 2) && ms_since(begin) > 250) break;
      const int w = order[i];
      table.ms[size_t(w - 1)] = std::min(table.ms[size_t(w - 1)], time(w));
    }
  }
  for (int w = 2; w < max_width; ++w) {
    if (std::isfinite(table.ms[size_t(w - 1)])) continue;
    int lo = w - 1, hi = w + 1;
    while (!std::isfinite(table.ms[size_t(hi - 1)])) ++hi;
    table.ms[size_t(w - 1)] = table.ms[size_t(lo - 1)] + (table.ms[size_t(hi - 1)] - table.ms[size_t(lo - 1)]) / (hi - lo);
  }
  // A wider verify never costs less than a narrower one.
  for (size_t w = 1; w < table.ms.size(); ++w) table.ms[w] = std::max(table.ms[w], table.ms[w - 1]);
  target.truncate(0);
  return table;
}

nlohmann::json SpeculationStats::to_json() const {
  auto counts = [](int steps, int drafted, int accepted) {
    return nlohmann::json{{"steps", steps},
                          {"drafted", drafted},
                          {"accepted", accepted},
                          // tokens a verifying step yields: the accepted drafts and the target's own
                          {"accepted_per_step", steps ? std::round(1000.0 * (accepted + steps) / steps) / 1000 : 0.0}};
  };
  nlohmann::json by = nlohmann::json::object();
  for (const auto& [name, c] : by_drafter) by[name] = counts(c.steps, c.drafted, c.accepted);
  nlohmann::json j = counts(steps, drafted, accepted);
  j["drafter"] = drafter;
  j["by_drafter"] = by;
  if (!gates.is_null()) j["gates"] = gates;
  return j;
}

Verdict verify(const Draft& draft, std::span<const float> logits, int vocab, Sampler& sampler) {
  const int k = int(draft.tokens.size());
  auto row = [&](int i) { return logits.subspan(size_t(i) * size_t(vocab), size_t(vocab)); };
  Verdict v;
  if (sampler.params().greedy()) {
    while (v.accepted < k && draft.tokens[size_t(v.accepted)] == argmax(row(v.accepted))) ++v.accepted;
    v.next = argmax(row(v.accepted));
    return v;
  }
  std::vector<float> p;
  for (; v.accepted < k; ++v.accepted) {
    const int i = v.accepted;
    const int32_t d = draft.tokens[size_t(i)];
    sampler.distribution(row(i), p);
    const float* q = draft.probs.empty() ? nullptr : draft.probs.data() + size_t(i) * size_t(vocab);
    const double qd = q ? q[d] : 1.0;
    if (qd > 0 && sampler.uniform() * qd < p[size_t(d)]) continue;  // u < p/q
    // Rejected: the residual max(0, p - q) carries exactly the mass the draft lacked.
    double mass = 0;
    for (int t = 0; t < vocab; ++t) {
      const float qt = q ? q[t] : (t == d ? 1.0f : 0.0f);
      p[size_t(t)] = std::max(0.0f, p[size_t(t)] - qt);
      mass += p[size_t(t)];
    }
    if (mass <= 0) sampler.distribution(row(i), p);  // p == q up to rounding
    v.next = sampler.draw(p);
    return v;
  }
  v.next = sampler.sample(row(k));
  return v;
}

Speculator::Speculator(Backend& target, std::vector<std::unique_ptr<Drafter>> drafters,
                       SpeculationOptions options, CostTable costs)
    : target_(target), options_(std::move(options)), costs_(std::move(costs)) {
  for (auto& d : drafters) {
    wants_hidden_ = wants_hidden_ || d->wants_hidden();
    drafters_.push_back({std::move(d), {}, {}});
  }
  gates_ = DraftGates(drafters_.size());
  if (wants_hidden_) target_.keep_all_hidden(true);
  stats_.drafter = options_.mode;
}

double Speculator::now_ms() const {
  if (options_.clock_ms) return options_.clock_ms();
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

void Speculator::begin() {
  stats_ = SpeculationStats{};
  stats_.drafter = options_.mode;
}

void Speculator::feed(int pos0, std::span<const int32_t> tokens, std::span<const float> hidden) {
  for (DrafterState& d : drafters_)
    d.drafter->observe(pos0, tokens, d.drafter->wants_hidden() ? hidden : std::span<const float>{});
}

void Speculator::observed(int pos0, std::span<const int32_t> tokens) {
  if (drafters_.empty()) return;
  std::span<const float> hidden;
  if (wants_hidden_) {
    // The rows of a forward are its last ones: the kept tokens are all of it here.
    hidden = target_.hidden();
    hidden = hidden.last(tokens.size() * size_t(target_.config().hidden_size));
  }
  feed(pos0, tokens, hidden);
}

void Speculator::end(std::span<const int32_t> all_tokens) {
  for (DrafterState& d : drafters_) d.drafter->end(all_tokens);
  if (options_.adaptive && !drafters_.empty()) stats_.gates = gates_.to_json();
}

double Speculator::DrafterState::draft_ms() const {
  if (ms_per_token.empty()) return 0.0;
  std::vector<double> sorted = ms_per_token;
  std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(sorted.size() / 2), sorted.end());
  return sorted[sorted.size() / 2];
}

std::pair<int, double> Speculator::best_depth(double alpha, double draft_ratio, int k_max) const {
  int best_k = 0;
  double best_gain = 1.0, expected = 1.0, term = 1.0;
  for (int k = 1; k <= k_max; ++k) {
    term *= alpha;
    expected += term;  // E[tokens] = 1 + a + a^2 + ... + a^k under a constant acceptance rate
    const double gain = expected / (costs_.ratio(k + 1) + k * draft_ratio);
    if (gain > best_gain * 1.02) {  // a 2% edge, so noise in the table does not buy a verify
      best_gain = gain;
      best_k = k;
    }
  }
  return {best_k, best_gain};
}

Speculator::Choice Speculator::choose(std::span<const int32_t> context, int k_max, Sampler& sampler) {
  Choice best;
  if (!options_.adaptive) {
    for (size_t i = 0; i < drafters_.size(); ++i) {
      Draft draft = drafters_[i].drafter->propose(context, k_max, sampler);
      if (!draft.tokens.empty()) return {int(i), int(draft.tokens.size()), 0.0, std::move(draft)};
    }
    return best;
  }
  const double step_ms = costs_.ms.empty() ? 0.0 : costs_.ms[0];
  for (size_t i = 0; i < drafters_.size(); ++i) {
    if (!gates_.open(i)) continue;
    DrafterState& d = drafters_[i];
    const double draft_ratio = step_ms > 0 ? d.draft_ms() / step_ms : 0.0;
    // A probed drafter drafts as deep as its estimate says (on a CPU the first drafted token
    // costs the most: one token deep would judge it too harshly), and only where no open
    // drafter expects a gain: the probe is there to measure it.
    const auto depth = [&](double alpha, int most) {
      const std::pair<int, double> best_k = best_depth(alpha, draft_ratio, most);
      if (gates_.probing(i) && best_k.first > 0) return std::pair<int, double>(best_k.first, kProbeGain);
      return best_k;
    };
    if (d.drafter->drafts_for_free()) {
      Draft draft = d.drafter->propose(context, k_max, sampler);
      if (draft.tokens.empty()) continue;
      const auto [k, gain] = depth(d.acceptance[draft.bucket].alpha(draft.confidence), int(draft.tokens.size()));
      if (k > 0 && gain > best.gain) {
        draft.tokens.resize(size_t(k));
        best = {int(i), k, gain, std::move(draft)};
      }
    } else {
      const auto [k, gain] = depth(d.acceptance[0].alpha(kModelPrior), k_max);
      if (k > 0 && gain > best.gain) best = {int(i), k, gain, {}};
    }
  }
  return best;
}

SpecStep Speculator::plain_step(std::vector<int32_t>& cached, int32_t pending, Sampler& sampler,
                                std::vector<float>& logits) {
  const int pos0 = target_.kv_len();
  const int32_t one[1] = {pending};
  int32_t next;
  if (sampler.params().greedy()) {
    next = target_.verify_greedy(pending, {}).next;  // the argmax where it was computed
  } else {
    target_.forward(one, 1, logits);
    next = sampler.sample(logits);
  }
  cached.push_back(pending);
  observed(pos0, one);
  return {{next}, 0, 0};
}

void Speculator::fade() {
  for (DrafterState& d : drafters_)
    for (auto& [bucket, a] : d.acceptance) a.hits *= kFade, a.trials *= kFade;
}

Draft Speculator::drafted(Choice& choice, std::span<const int32_t> context, Sampler& sampler) {
  if (!choice.draft.tokens.empty()) return std::move(choice.draft);
  DrafterState& d = drafters_[size_t(choice.drafter)];
  const auto start = Clock::now();
  Draft draft = d.drafter->propose(context, choice.k, sampler);
  if (draft.tokens.empty()) return draft;
  constexpr size_t kRecent = 15;
  if (d.ms_per_token.size() == kRecent) d.ms_per_token.erase(d.ms_per_token.begin());
  d.ms_per_token.push_back(std::max(0.0, ms_since(start) - draft.catch_up_ms) / double(draft.tokens.size()));
  return draft;
}

void Speculator::record(int drafter, int bucket, int k, int accepted) {
  DrafterState& d = drafters_[size_t(drafter)];
  Acceptance& a = d.acceptance[bucket];
  a.hits = kDecay * a.hits + accepted;
  a.trials = kDecay * a.trials + accepted + (accepted < k ? 1 : 0);
  ++stats_.steps;
  stats_.drafted += k;
  stats_.accepted += accepted;
  DrafterCounts& c = stats_.by_drafter[d.drafter->name()];
  ++c.steps;
  c.drafted += k;
  c.accepted += accepted;
}

SpecStep Speculator::step(std::vector<int32_t>& cached, int32_t pending, Sampler& sampler, int budget,
                          std::vector<float>& logits) {
  const double start = now_ms();
  StepCost cost;
  SpecStep out = decode(cached, pending, sampler, budget, logits, cost);
  gates_.record(cost.asked, now_ms() - start, int(out.tokens.size()), costs_.ratio(cost.width), cost.draft_ms);
  return out;
}

SpecStep Speculator::decode(std::vector<int32_t>& cached, int32_t pending, Sampler& sampler, int budget,
                            std::vector<float>& logits, StepCost& cost) {
  const int pos0 = target_.kv_len();
  // Drafts past what the request may still emit, or past the context, are wasted work.
  int k_max = std::min({options_.max_draft, budget - 1, target_.context_length() - pos0 - 1});
  if (target_.max_verify_width() > 0) k_max = std::min(k_max, target_.max_verify_width() - 1);
  fade();
  if (drafters_.empty() || k_max <= 0 || plain_only()) return plain_step(cached, pending, sampler, logits);

  const double drafting = now_ms();
  context_.assign(cached.begin(), cached.end());
  context_.push_back(pending);
  Choice choice = choose(context_, k_max, sampler);
  if (choice.drafter < 0) return plain_step(cached, pending, sampler, logits);
  if (!drafters_[size_t(choice.drafter)].drafter->drafts_for_free()) cost.asked = choice.drafter;  // its time counts even if it gives nothing
  const Draft draft = drafted(choice, context_, sampler);
  cost.draft_ms = now_ms() - drafting;
  if (draft.tokens.empty()) return plain_step(cached, pending, sampler, logits);
  const int k = int(draft.tokens.size());
  cost.asked = choice.drafter;
  cost.width = k + 1;

  input_.assign(1, pending);
  input_.insert(input_.end(), draft.tokens.begin(), draft.tokens.end());
  Verdict v;
  if (sampler.params().greedy()) {
    // Compared and rolled back where the rows were computed (on the device for CUDA).
    const GreedyVerdict g = target_.verify_greedy(pending, draft.tokens);
    v = {g.accepted, g.next};
  } else {
    target_.forward(input_, k + 1, logits);
    v = verify(draft, logits, target_.config().vocab_size, sampler);
    target_.truncate(pos0 + 1 + v.accepted);
  }
  const int keep = 1 + v.accepted;
  cached.insert(cached.end(), input_.begin(), input_.begin() + keep);
  std::span<const float> hidden;
  if (wants_hidden_) hidden = target_.hidden().first(size_t(keep) * size_t(target_.config().hidden_size));
  feed(pos0, std::span(input_).first(size_t(keep)), hidden);
  record(choice.drafter, draft.bucket, k, v.accepted);

  SpecStep out{{draft.tokens.begin(), draft.tokens.begin() + v.accepted}, k, v.accepted};
  out.tokens.push_back(v.next);
  return out;
}

void Speculator::run_greedy(std::vector<int32_t>& cached, int32_t pending, int budget, Sampler& sampler,
                            const StepSink& on_step) {
  const int capacity = target_.context_length();
  int k_limit = options_.max_draft;
  if (target_.max_verify_width() > 0) k_limit = std::min(k_limit, target_.max_verify_width() - 1);
  std::deque<Queued> queue;
  context_.assign(cached.begin(), cached.end());
  context_.push_back(pending);  // what the host knows: the cache, then the pending token
  int emitted = 0;

  // Queues a step, if one fits: each queued step counted at its most (its whole draft and its
  // own token) against the context and the budget. Behind a queued, unread step only a plain
  // step is queued, and only when no drafter would draft: a draft chosen before the step
  // before is read would be chosen from a guess (measured on an H200: guessed drafts lost more
  // than the idle GPU they saved), so then the step waits for that verdict.
  const auto enqueue = [&] {
    int positions = target_.kv_len(), out = emitted;  // kv_len counts the steps already read
    for (const Queued& q : queue) positions += 1 + int(q.draft.size()), out += 1 + int(q.draft.size());
    const int k_max = std::min({k_limit, capacity - positions - 1, budget - out - 1});
    if (k_max < 0) return false;
    Queued q;
    const bool may_draft = !drafters_.empty() && k_max > 0 && !plain_only();
    if (!queue.empty()) {
      if (!queue.back().draft.empty()) return false;
      // The step before is plain: the drafter's first token would stand for its unknown token.
      if (may_draft && choose(context_, k_max + 1, sampler).drafter >= 0) return false;
      fade();
    } else if (fade(); may_draft) {
      Choice choice = choose(context_, k_max, sampler);
      if (choice.drafter >= 0) {
        Draft draft = drafted(choice, context_, sampler);
        if (!draft.tokens.empty()) {
          q.drafter = choice.drafter;
          q.bucket = draft.bucket;
          q.draft.assign(draft.tokens.begin(), draft.tokens.begin() + std::min<int>(int(draft.tokens.size()), k_max));
        }
      }
    }
    target_.enqueue_verify_greedy(q.draft);
    queue.push_back(std::move(q));
    return true;
  };

  target_.begin_greedy_run(pending);
  double last_read = now_ms();  // steps run ahead: each is timed from the verdict before it
  try {
    if (enqueue()) {
      for (;;) {
        if (queue.size() < 2) enqueue();  // the next step runs while this one is read
        const Queued step = std::move(queue.front());
        queue.pop_front();
        const int pos0 = target_.kv_len();
        const GreedyVerdict v = target_.next_verdict();
        const int keep = 1 + v.accepted;
        const double read = now_ms();
        gates_.record(step.drafter, read - last_read, keep, costs_.ratio(1 + int(step.draft.size())));
        last_read = read;
        const std::span<const int32_t> kept_drafts(step.draft.data(), size_t(v.accepted));
        const size_t kept_from = cached.size();
        cached.push_back(context_.back());
        cached.insert(cached.end(), kept_drafts.begin(), kept_drafts.end());
        std::span<const float> hidden;
        if (wants_hidden_) hidden = target_.hidden().first(size_t(keep) * size_t(target_.config().hidden_size));
        feed(pos0, std::span<const int32_t>(cached).subspan(kept_from), hidden);
        if (step.drafter >= 0) record(step.drafter, step.bucket, int(step.draft.size()), v.accepted);
        context_.insert(context_.end(), kept_drafts.begin(), kept_drafts.end());
        context_.push_back(v.next);
        std::vector<int32_t> tokens(kept_drafts.begin(), kept_drafts.end());
        tokens.push_back(v.next);
        emitted += int(tokens.size());
        if (!on_step(tokens, int(step.draft.size()), v.accepted)) break;
        if (queue.empty() && !enqueue()) break;  // no step fits the context (or the budget)
      }
    }
  } catch (...) {
    target_.end_greedy_run();
    throw;
  }
  target_.end_greedy_run();  // a step still queued is dropped: its tokens are never streamed
}

nlohmann::json Speculator::report() const {
  nlohmann::json drafters = nlohmann::json::array();
  for (const DrafterState& d : drafters_) drafters.push_back(d.drafter->describe());
  return {{"mode", options_.mode},
          {"max_draft", options_.max_draft},
          {"adaptive_depth", options_.adaptive},
          {"drafters", drafters},
          {"cost", costs_.to_json()}};
}

}  // namespace runahead
