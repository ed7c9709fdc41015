#pragma once
// Builds the speculator that load's options ask for: which drafters, from which files.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/drafters/model_drafter.h"
#include "runtime/scheduler.h"

namespace runahead {

// The modes `speculation` accepts.
const std::vector<std::string>& speculation_modes();

// Drafters for options.mode over `target` (loaded from `model`, a folder or "random:..."):
//   off: none (nullptr); lookup: the n-gram lookup; mtp: the MTP head of
//   <model>/mtp.safetensors; draft: the model in options.draft_model or <model>/draft;
//   auto: lookup, plus the MTP head and the draft model when the folder has them.
// Measures the cost table on `target` (which it leaves empty). A drafter that was asked for
// and cannot be active throws EngineError ("bad_request" for options or a backend that cannot
// run it, "model_error" for files); in `auto`, an MTP head the backend cannot run is left out
// with a warning. `report` gets what is active, what is not and why, and the cost table.
std::unique_ptr<Speculator> open_speculator(Backend& target, std::shared_ptr<const ModelWeights> weights,
                                            const std::string& model, const SpeculationOptions& options,
                                            const BackendFactory& make_backend, const BackendOptions& backend_options,
                                            nlohmann::json& report);

}  // namespace runahead
