#pragma once
// A loaded model ready to generate: weights, backend, generator, and the report the
// protocol's `loaded` message and the demo print. Shared by `serve` and `demo`.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/weights.h"
#include "runtime/backend.h"
#include "runtime/generator.h"
#include "runtime/scheduler.h"

namespace runahead {

struct LoadOptions {
  std::string backend = "auto";  // "auto" | "cpu" | "cuda"
  int threads = 0;
  int context_length = 0;
  std::optional<std::vector<int32_t>> newline_tokens;  // absent: from the folder's tokenizer.json
  SpeculationOptions speculation;
  // weight_options(): "auto" as stored, "q8_0" dense matrices quantized at load (any backend),
  // "q4_k_m" likewise in llama.cpp's Q4_K_M mix of Q4_K and Q6_K (model/quantize.h), "fp8"
  // every matrix but the embedding as fp8 e4m3 on the device (CUDA only).
  std::string weights = "auto";
  // lm_head_options(): "auto" (fp8 with weights "fp8", else as the weights) | "bf16" (as the
  // weights: not quantized) | "fp8" (CUDA only).
  std::string lm_head = "auto";
  // optimization_names(): each must be active after the load (the self-check in the report's
  // `checks`); one that is not is a bad_request naming it, or with `fallback` a warning (the
  // server then shows degraded). Asking for an optimisation that is off by default turns it on.
  std::vector<std::string> require;
  bool fallback = false;
};

// The optimisations options.require may name.
const std::vector<std::string>& optimization_names();

// The values of options.weights and options.lm_head.
const std::vector<std::string>& weight_options();
const std::vector<std::string>& lm_head_options();

// The backends compiled into this engine ("cpu", and "cuda" when built with CUDA).
const std::vector<std::string>& built_backends();

class Session {
 public:
  // `model` is a model folder or "random:<shape>". Throws EngineError: "model_error"
  // from the loader, "bad_request" (field options.backend) for a backend this build lacks,
  // either of them from open_speculator for a speculation mode that cannot be active, and
  // for memory that cannot be allocated (bad_request naming options.context_length when it
  // was given). A context above the model's maximum and more threads than usable CPUs are
  // capped, with a line in the report's `warnings`.
  static std::unique_ptr<Session> open(const std::string& model, const LoadOptions& options,
                                       const ProgressFn& progress = {});

  Generator& generator() { return *generator_; }
  const Backend& backend() const { return *backend_; }
  const ModelWeights& weights() const { return *weights_; }
  const std::string& model() const { return model_; }
  const nlohmann::json& report() const { return report_; }

 private:
  static std::unique_ptr<Session> open_checked(const std::string& model, const LoadOptions& options,
                                               const ProgressFn& progress, int& context);

  std::string model_;
  std::shared_ptr<const ModelWeights> weights_;
  // Declared in the order they depend on each other, so they are destroyed in reverse.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Speculator> speculator_;  // null when speculation is off
  std::unique_ptr<Generator> generator_;
  nlohmann::json report_;
};

}  // namespace runahead
