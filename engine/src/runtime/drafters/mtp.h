#pragma once
// The MTP head of engine/MODEL_FORMAT.md as a drafter: one decoder layer that reads the
// target's final hidden state h_t and the embedding of token t+1 and predicts token t+2,
// chained by feeding its own output back as h_t. Its layer runs on a backend of its own
// (a one-layer model sharing the target's embedding and lm_head), with its own KV cache
// holding one entry per position of the target's context.
#include <filesystem>
#include <memory>
#include <vector>

#include "runtime/drafters/model_drafter.h"

namespace runahead {

// mtp.safetensors bound to the target it was trained for: the layer as a one-layer model
// (embed, final_norm = the head's, lm_head = the target's), plus the input stage.
struct MtpWeights {
  std::shared_ptr<const ModelWeights> layer;
  std::vector<float> enorm, hnorm;  // [H]
  std::vector<float> eh_proj;       // [H, 2H], widened to f32
};

// Throws EngineError{"model_error"} naming the file and tensor on any mismatch.
MtpWeights load_mtp(const std::filesystem::path& file, std::shared_ptr<const ModelWeights> target);

class MtpDrafter final : public Drafter {
 public:
  MtpDrafter(MtpWeights weights, std::shared_ptr<const ModelWeights> target, const BackendFactory& make_backend,
             const BackendOptions& options);

  std::string name() const override { return "mtp"; }
  nlohmann::json describe() const override;
  bool wants_hidden() const override { return true; }
  void observe(int pos0, std::span<const int32_t> tokens, std::span<const float> hidden) override;
  Draft propose(std::span<const int32_t> context, int k, Sampler& sampler) override;

 private:
  // x = eh_proj(concat(enorm(emb(token)), hnorm(h)))   for x, h: [H].
  void input(int32_t token, const float* h, float* x);

  MtpWeights w_;
  std::shared_ptr<const ModelWeights> target_;
  std::unique_ptr<Backend> layer_;  // KV entry i: target position i + 1 (RoPE is relative)
  int hidden_size_;
  std::vector<float> rows_;             // the target's h at every position it holds, [positions, H]
  std::vector<int32_t> entry_tokens_;   // the context the committed entries were made from
  std::vector<float> x_, logits_, h_, eh_;
};

}  // namespace runahead
