#include "runtime/speculative.h"

#include <filesystem>
#include <iostream>

#include "model/error.h"
#include "model/gguf_weights.h"
#include "model/regular_file.h"
#include "runtime/drafters/draft_model.h"
#include "runtime/drafters/lookup.h"
#include "runtime/drafters/mtp.h"

namespace runahead {

namespace fs = std::filesystem;

const std::vector<std::string>& speculation_modes() {
  static const std::vector<std::string> modes = {"auto", "off", "lookup", "mtp", "draft"};
  return modes;
}

std::unique_ptr<Speculator> open_speculator(Backend& target, std::shared_ptr<const ModelWeights> weights,
                                            const std::string& model, const SpeculationOptions& options,
                                            const BackendFactory& make_backend, const BackendOptions& backend_options,
                                            nlohmann::json& report) {
  const std::string& mode = options.mode;
  if (std::find(speculation_modes().begin(), speculation_modes().end(), mode) == speculation_modes().end())
    throw EngineError("bad_request", "options.speculation: '" + mode + "' is not a speculation mode", {},
                      "options.speculation", "auto, off, lookup, mtp or draft");
  if (options.max_draft < 1 || options.max_draft > 32)
    throw EngineError("bad_request", "options.max_draft: " + std::to_string(options.max_draft) + " is out of range", {},
                      "options.max_draft", "an integer in [1, 32]");
  if (!options.draft_model.empty() && mode != "draft" && mode != "auto")
    throw EngineError("bad_request", "options.draft_model is given but speculation is '" + mode + "'", {},
                      "options.draft_model", "speculation 'draft' or 'auto' with a draft model");

  report = {{"mode", mode}, {"max_draft", options.max_draft}, {"drafters", nlohmann::json::array()},
            {"inactive", nlohmann::json::object()}};
  if (mode == "off") return nullptr;

  const bool folder = model.rfind("random:", 0) != 0 && !is_gguf_path(model);  // a .gguf has no MTP head or draft/
  const fs::path mtp_file = fs::path(model) / "mtp.safetensors";
  const fs::path draft_dir = !options.draft_model.empty() ? fs::path(options.draft_model) : fs::path(model) / "draft";
  std::vector<std::unique_ptr<Drafter>> drafters;

  if (mode == "lookup" || mode == "auto") drafters.push_back(std::make_unique<LookupDrafter>());

  if (mode == "mtp" || mode == "auto") {
    if (folder && has_entry(mtp_file)) {
      try {
        target.keep_all_hidden(true);  // the head reads every position's hidden state
        drafters.push_back(std::make_unique<MtpDrafter>(load_mtp(mtp_file, weights), weights, make_backend, backend_options));
      } catch (const EngineError& e) {
        // A backend that cannot run the head: an error when asked for, a warning in `auto`.
        if (mode == "mtp" || e.code == "model_error") throw;
        target.keep_all_hidden(false);
        report["inactive"]["mtp"] = e.what();
        std::cerr << "runahead-engine: warning: MTP head inactive: " << e.what() << "\n";
      }
    } else if (mode == "mtp") {
      throw EngineError("model_error", mtp_file.string() + ": speculation 'mtp' needs an MTP head and there is none",
                        mtp_file.string(), "options.speculation", "mtp.safetensors in the model folder");
    } else {
      report["inactive"]["mtp"] = "no " + mtp_file.string();
    }
  }

  if (mode == "draft" || mode == "auto") {
    const bool asked = mode == "draft" || !options.draft_model.empty();
    if (folder || !options.draft_model.empty()) {
      if (has_entry(draft_dir / "config.json") || is_gguf_path(draft_dir)) {
        drafters.push_back(std::make_unique<DraftModelDrafter>(load_draft_model(draft_dir, *weights), make_backend,
                                                               backend_options));
      } else if (asked) {
        throw EngineError("model_error", draft_dir.string() + ": speculation 'draft' needs a draft model folder and there is none",
                          draft_dir.string(), "options.draft_model", "a model folder with config.json");
      } else {
        report["inactive"]["draft"] = "no " + draft_dir.string();
      }
    } else if (asked) {
      throw EngineError("bad_request", "speculation 'draft' with random weights or a .gguf model needs options.draft_model",
                        {}, "options.draft_model", "a model folder or .gguf file");
    }
  }

  CostTable costs = measure_costs(target, options.max_draft + 1);
  auto speculator = std::make_unique<Speculator>(target, std::move(drafters), options, std::move(costs));
  nlohmann::json inactive = std::move(report["inactive"]);
  report = speculator->report();
  report["inactive"] = std::move(inactive);
  return speculator;
}

}  // namespace runahead
