#include "runtime/backend.h"

#include "model/error.h"
#include "runtime/sampler.h"

namespace runahead {

GreedyVerdict Backend::verify_greedy(int32_t pending, std::span<const int32_t> draft) {
  const int pos0 = kv_len(), k = int(draft.size()), vocab = config().vocab_size;
  std::vector<int32_t> input(1, pending);
  input.insert(input.end(), draft.begin(), draft.end());
  std::vector<float> logits;
  forward(input, k + 1, logits);
  const auto row = [&](int i) { return std::span<const float>(logits).subspan(size_t(i) * size_t(vocab), size_t(vocab)); };
  GreedyVerdict v;
  while (v.accepted < k && draft[size_t(v.accepted)] == argmax(row(v.accepted))) ++v.accepted;
  v.next = argmax(row(v.accepted));
  truncate(pos0 + 1 + v.accepted);
  return v;
}

void Backend::begin_greedy_run(int32_t first) {
  run_pending_ = first;
  run_queue_.clear();
}

void Backend::enqueue_verify_greedy(std::span<const int32_t> draft) {
  if (run_queue_.size() >= 2) throw EngineError("bad_request", name() + " backend: more than two greedy steps queued");
  run_queue_.emplace_back(draft.begin(), draft.end());
}

GreedyVerdict Backend::next_verdict() {
  if (run_queue_.empty()) throw EngineError("bad_request", name() + " backend: no greedy step queued");
  const std::vector<int32_t> draft = std::move(run_queue_.front());
  run_queue_.pop_front();
  const GreedyVerdict v = verify_greedy(run_pending_, draft);
  run_pending_ = v.next;
  return v;
}

void Backend::end_greedy_run() { run_queue_.clear(); }

}  // namespace runahead
