#pragma once
// A smaller model with the target's tokenizer drafts autoregressively on a backend and
// KV cache of its own, which catch up with the target's context at each proposal.
#include <filesystem>
#include <memory>
#include <vector>

#include "runtime/drafters/model_drafter.h"

namespace runahead {

// Loads the model folder (or .gguf file) `dir` as a draft for `target`. Throws EngineError{"model_error"}
// when it cannot load or does not share the target's vocabulary (vocab_size, tokenizer.json).
std::shared_ptr<const ModelWeights> load_draft_model(const std::filesystem::path& dir, const ModelWeights& target);

class DraftModelDrafter final : public Drafter {
 public:
  DraftModelDrafter(std::shared_ptr<const ModelWeights> weights, const BackendFactory& make_backend,
                    const BackendOptions& options);

  std::string name() const override { return "draft"; }
  nlohmann::json describe() const override;
  Draft propose(std::span<const int32_t> context, int k, Sampler& sampler) override;

 private:
  void forward(std::span<const int32_t> tokens);

  std::shared_ptr<const ModelWeights> weights_;
  std::unique_ptr<Backend> backend_;
  std::vector<int32_t> cached_;  // what its KV cache holds
  std::vector<float> logits_;
};

}  // namespace runahead
