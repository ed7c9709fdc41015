#include "runtime/backend.h"

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

}  // namespace runahead
