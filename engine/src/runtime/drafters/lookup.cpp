#include "runtime/drafters/lookup.h"

#include <algorithm>

namespace runahead {

uint64_t NgramIndex::hash(std::span<const int32_t> key) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ key.size();
  for (int32_t t : key) {
    h ^= uint32_t(t);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return h;
}

void NgramIndex::clear() {
  base_ = 0;
  tokens_.clear();
  map_.clear();
}

void NgramIndex::index_position(int64_t p) {
  if (at(p) == kSeparator) return;  // nothing to propose from here
  for (int n = 1; n <= max_n_ && p - n >= base_; ++n) {
    if (at(p - n) == kSeparator) break;
    const auto key = std::span(tokens_).subspan(size_t(p - n - base_), size_t(n));
    Slot& slot = map_[hash(key)];
    std::copy_backward(slot.pos, slot.pos + kSlots - 1, slot.pos + kSlots);
    slot.pos[0] = p;
    ++slot.count;
  }
}

void NgramIndex::append(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    tokens_.push_back(t);
    index_position(end() - 1);
  }
  if (tokens_.size() > capacity_) compact();
}

void NgramIndex::compact() {
  const size_t drop = tokens_.size() / 2;
  tokens_.erase(tokens_.begin(), tokens_.begin() + std::ptrdiff_t(drop));
  base_ += int64_t(drop);
  map_.clear();
  for (int64_t p = base_ + 1; p < end(); ++p) index_position(p);
}

void NgramIndex::find(std::span<const int32_t> key, std::vector<int64_t>& out) const {
  const auto it = map_.find(hash(key));
  if (it == map_.end()) return;
  const int64_t n = int64_t(key.size());
  const int kept = int(std::min<uint32_t>(it->second.count, kSlots));
  for (int i = 0; i < kept; ++i) {
    const int64_t p = it->second.pos[i];
    if (p - n < base_ || p >= end()) continue;  // dropped by compaction
    // A hash collision or a stale slot: check the tokens themselves.
    if (std::equal(key.begin(), key.end(), tokens_.begin() + std::ptrdiff_t(p - n - base_)))
      out.push_back(p);
  }
}

LookupDrafter::LookupDrafter(LookupOptions options)
    : options_(options),
      request_(options.max_ngram, size_t(1) << 30),
      history_(options.max_ngram, options.history_tokens) {}

nlohmann::json LookupDrafter::describe() const {
  return {{"name", name()},
          {"ngram", {options_.min_ngram, options_.max_ngram}},
          {"history_tokens", options_.history_tokens},
          {"history_held", history_.end() - history_.begin()}};
}

void LookupDrafter::sync(std::span<const int32_t> context) {
  const auto seen = request_.tokens();
  const bool extends = seen.size() <= context.size() &&
                       std::equal(seen.begin(), seen.end(), context.begin());
  if (!extends) request_.clear();
  request_.append(context.subspan(request_.tokens().size()));
}

int LookupDrafter::match(std::span<const int32_t> context, std::vector<Candidate>& out) {
  sync(context);
  for (int n = std::min<int>(options_.max_ngram, int(context.size())); n >= options_.min_ngram; --n) {
    const auto key = context.subspan(context.size() - size_t(n));
    out.clear();
    // The request's own context weighs twice what history does; within each, recency ranks.
    for (const auto& [index, weight] : {std::pair{&request_, 2.0}, std::pair{&history_, 1.0}}) {
      found_.clear();
      index->find(key, found_);
      for (size_t rank = 0; rank < found_.size(); ++rank)
        out.push_back({index, found_[rank], weight / double(1 + rank)});
    }
    if (!out.empty()) return n;
  }
  return 0;
}

Draft LookupDrafter::walk(int n, std::vector<Candidate> alive, int k) const {
  // How much a match of each length has been right, before the scheduler learns better.
  static constexpr float kPrior[] = {0.0f, 0.25f, 0.45f, 0.6f, 0.7f};
  Draft draft;
  draft.bucket = n;
  // The request's sequence goes on into the draft itself, so a repeating pattern can be
  // drafted past the end of the context.
  auto next = [&](const Candidate& c) -> int32_t {
    if (c.pos < c.index->end()) return c.index->at(c.pos);
    if (c.index != &request_) return NgramIndex::kSeparator;
    const int64_t i = c.pos - c.index->end();
    return i < int64_t(draft.tokens.size()) ? draft.tokens[size_t(i)] : NgramIndex::kSeparator;
  };
  std::vector<std::pair<int32_t, double>> tally;
  while (int(draft.tokens.size()) < k) {
    tally.clear();
    double total = 0;
    for (const Candidate& c : alive) {
      const int32_t t = next(c);
      if (t == NgramIndex::kSeparator) continue;
      auto it = std::find_if(tally.begin(), tally.end(), [&](const auto& e) { return e.first == t; });
      if (it == tally.end()) tally.push_back({t, c.weight});
      else it->second += c.weight;
      total += c.weight;
    }
    if (tally.empty()) break;
    // The heaviest continuation; the most recent one on ties (candidates come newest first).
    const auto best = *std::max_element(tally.begin(), tally.end(),
                                        [](const auto& a, const auto& b) { return a.second < b.second; });
    if (draft.tokens.empty())
      draft.confidence = kPrior[std::min(n, 4)] * float(best.second / total);
    std::erase_if(alive, [&](const Candidate& c) { return next(c) != best.first; });
    draft.tokens.push_back(best.first);
    for (Candidate& c : alive) ++c.pos;
  }
  return draft;
}

Draft LookupDrafter::propose(std::span<const int32_t> context, int k, Sampler& sampler) {
  (void)sampler;  // deterministic: q is one-hot
  std::vector<Candidate> candidates;
  const int n = match(context, candidates);
  if (n == 0 || k <= 0) return {};
  return walk(n, std::move(candidates), k);
}

void LookupDrafter::end(std::span<const int32_t> all_tokens) {
  history_.append(all_tokens);
  const int32_t separator[1] = {NgramIndex::kSeparator};
  history_.append(separator);
}

}  // namespace runahead
