#pragma once
// The model-free drafter: finds the last n tokens (n = 4..1, longest first) earlier in
// the request's own context and in a session-wide history of earlier requests, and
// proposes what followed them there. Code repeats itself, so this is often right.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/drafter.h"

namespace runahead {

// Where each n-gram (n = 1..max_n) of a token sequence occurred: a hash of the n-gram
// maps to the positions right after its most recent occurrences. Positions are absolute
// and only grow; when the sequence exceeds `capacity` its oldest half is dropped.
class NgramIndex {
 public:
  static constexpr int kSlots = 4;  // occurrences remembered per n-gram
  static constexpr int32_t kSeparator = -1;  // between requests: no n-gram spans it

  NgramIndex(int max_n, size_t capacity) : max_n_(max_n), capacity_(capacity) {}

  void append(std::span<const int32_t> tokens);
  void clear();
  int64_t begin() const { return base_; }
  int64_t end() const { return base_ + int64_t(tokens_.size()); }
  int32_t at(int64_t pos) const { return tokens_[size_t(pos - base_)]; }
  std::span<const int32_t> tokens() const { return tokens_; }

  // Positions p < end() where `key` ended (tokens [p - n, p) == key), most recent first.
  void find(std::span<const int32_t> key, std::vector<int64_t>& out) const;
  size_t entries() const { return map_.size(); }

 private:
  struct Slot {
    int64_t pos[kSlots];
    uint32_t count = 0;  // occurrences seen, including those no longer in pos
  };
  static uint64_t hash(std::span<const int32_t> key);
  void index_position(int64_t p);  // n-grams that end right before position p
  void compact();

  int max_n_;
  size_t capacity_;
  int64_t base_ = 0;
  std::vector<int32_t> tokens_;
  std::unordered_map<uint64_t, Slot> map_;
};

struct LookupOptions {
  int max_ngram = 4;
  int min_ngram = 1;
  // Session history kept, in tokens. Each position indexes up to max_ngram n-grams (~70 bytes
  // each), so 64K tokens hold the index near 10-20 MB: a bound reached within ~30 completions,
  // after which memory stays flat (with 1M tokens the reliability bench saw engine RSS grow
  // 7-14 % per window under speculation auto, 1-2 % with it off).
  size_t history_tokens = size_t(1) << 16;
};

class LookupDrafter final : public Drafter {
 public:
  explicit LookupDrafter(LookupOptions options = {});

  std::string name() const override { return "lookup"; }
  nlohmann::json describe() const override;
  bool drafts_for_free() const override { return true; }
  Draft propose(std::span<const int32_t> context, int k, Sampler& sampler) override;
  void end(std::span<const int32_t> all_tokens) override;

 private:
  // A candidate continuation: the index it lives in and where it starts.
  struct Candidate {
    const NgramIndex* index;
    int64_t pos;
    double weight;
  };
  // Brings the request index to `context` (extends it, or rebuilds it on a new request).
  void sync(std::span<const int32_t> context);
  // The candidates for the longest matching suffix; returns its length (0: none).
  int match(std::span<const int32_t> context, std::vector<Candidate>& out);
  Draft walk(int n, std::vector<Candidate> candidates, int k) const;

  LookupOptions options_;
  NgramIndex request_;   // the current request's context
  NgramIndex history_;   // earlier requests, separated
  std::vector<int64_t> found_;
};

}  // namespace runahead
