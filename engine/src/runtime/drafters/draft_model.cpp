#include "runtime/drafters/draft_model.h"

#include <algorithm>
#include <chrono>
#include "model/gguf_weights.h"
#include "model/model_error.h"
#include "model/regular_file.h"

namespace runahead {

namespace {

constexpr int kChunk = 512;  // catch-up forwards, as the target's prefill

}  // namespace

std::shared_ptr<const ModelWeights> load_draft_model(const std::filesystem::path& dir, const ModelWeights& target) {
  const std::string vocab_problem = "a draft model with the target's tokenizer";
  if (is_gguf_path(dir)) {
    auto draft = std::make_shared<ModelWeights>(load_model(dir));  // mapped, not read: the check below is cheap
    if (draft->config.vocab_size != target.config.vocab_size)
      model_error(dir.string(), "token_embd.weight",
                  "the draft model's vocabulary has " + std::to_string(draft->config.vocab_size) +
                      " rows but the target's has " + std::to_string(target.config.vocab_size),
                  vocab_problem);
    return draft;
  }
  // The vocabulary first: a wrong draft is refused before its weights are mapped.
  const ModelConfig draft_config = load_config(dir);
  const std::string config = (dir / "config.json").string();
  if (draft_config.vocab_size != target.config.vocab_size)
    model_error(config, "vocab_size",
                "the draft model's vocab_size is " + std::to_string(draft_config.vocab_size) + " but the target's is " +
                    std::to_string(target.config.vocab_size),
                vocab_problem);
  const std::filesystem::path mine = dir / "tokenizer.json", theirs = std::filesystem::path(target.source) / "tokenizer.json";
  const std::string tokenizer = "a Hugging Face tokenizer.json";
  if (has_entry(mine) && has_entry(theirs) && read_whole_file(mine, tokenizer) != read_whole_file(theirs, tokenizer))
    model_error(mine.string(), "tokenizer.json", "the draft model's tokenizer.json differs from the target's (" + theirs.string() + ")",
                vocab_problem);
  return std::make_shared<ModelWeights>(load_model(dir));
}

DraftModelDrafter::DraftModelDrafter(std::shared_ptr<const ModelWeights> weights, const BackendFactory& make_backend,
                                     const BackendOptions& options)
    : weights_(std::move(weights)), backend_(make_backend(weights_, options)) {}

nlohmann::json DraftModelDrafter::describe() const {
  return {{"name", name()},
          {"model", weights_->source},
          {"architecture", weights_->config.architecture},
          {"parameters", weights_->parameters},
          {"layers", weights_->config.num_layers},
          {"backend", backend_->name()}};
}

void DraftModelDrafter::forward(std::span<const int32_t> tokens) {
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    const auto chunk = tokens.subspan(begin, std::min<size_t>(kChunk, tokens.size() - begin));
    backend_->forward(chunk, 1, logits_);
    cached_.insert(cached_.end(), chunk.begin(), chunk.end());
  }
}

Draft DraftModelDrafter::propose(std::span<const int32_t> context, int k, Sampler& sampler) {
  const int L = int(context.size());
  k = std::min(k, backend_->context_length() - L + 1);
  if (L == 0 || k <= 0) return {};
  // Catch up: keep what still matches (at least the last context token runs again, for its logits).
  const auto common = std::mismatch(cached_.begin(), cached_.end(), context.begin(), context.end());
  const int keep = std::min(int(common.first - cached_.begin()), L - 1);
  backend_->truncate(keep);
  cached_.resize(size_t(keep));
  const auto start = std::chrono::steady_clock::now();
  const auto behind = context.subspan(size_t(keep));
  Draft draft;
  if (sampler.params().greedy()) {
    // The backend's own greedy loop, where it has one (CUDA: each token picked on the device
    // and fed to the next step, read a step late): k tokens without a logits row on the host.
    // It has no probabilities, so the draft is not cut where the drafter is unsure; the
    // scheduler's depth from the acceptance it measured does that job.
    if (behind.size() > 1) forward(behind.first(behind.size() - 1));
    draft.catch_up_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const int produced = backend_->decode_greedy(behind.back(), k, [&](int32_t token) {
      draft.tokens.push_back(token);
      return true;
    });
    if (produced >= 0) {
      cached_.push_back(behind.back());
      cached_.insert(cached_.end(), draft.tokens.begin(), draft.tokens.end() - (draft.tokens.empty() ? 0 : 1));
      draft.confidence = 1.0f;
      return draft;
    }
    forward(behind.last(1));  // no such loop: the step below, with logits
  } else {
    forward(behind);
  }

  // All but one of the tokens it was behind were catching up, not drafting.
  if (behind.size() > 1 && !sampler.params().greedy())
    draft.catch_up_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() *
                        double(behind.size() - 1) / double(behind.size());
  draft.confidence = pick_draft_token(logits_, sampler, draft);
  while (int(draft.tokens.size()) < k) {
    forward(std::span(draft.tokens).last(1));
    // Only a deterministic draft may be cut by what it drew: a sampled one must stay a draw from q.
    if (pick_draft_token(logits_, sampler, draft) < kMinDraftProb && sampler.params().greedy()) {
      draft.tokens.pop_back();
      break;
    }
  }
  return draft;
}

}  // namespace runahead
