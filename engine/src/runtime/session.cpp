#include "runtime/session.h"

#include <cctype>
#include <filesystem>
#include <iostream>

#include "model/error.h"
#include "runtime/newline_tokens.h"
#include "runtime/speculative.h"

#ifdef RUNAHEAD_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace runahead {

namespace {

constexpr std::string_view kRandomPrefix = "random:";

// The backend `requested` names on this machine ("auto": CUDA when built and a device is
// usable, else the CPU), checked before any loading work starts.
std::string resolve_backend(const std::string& requested) {
  if (requested == "cpu") return "cpu";
#ifdef RUNAHEAD_CUDA
  if (requested == "auto") return cuda_available() ? "cuda" : "cpu";
  if (requested == "cuda") {
    if (!cuda_available())
      throw EngineError("bad_request", "options.backend: no usable CUDA device on this machine", {},
                        "options.backend", "\"auto\" or \"cpu\" without a GPU");
    return "cuda";
  }
#else
  if (requested == "auto") return "cpu";
  if (requested == "cuda")
    throw EngineError("bad_request", "options.backend: this build has no CUDA backend", {}, "options.backend",
                      "\"auto\" or \"cpu\"");
#endif
  throw EngineError("bad_request", "options.backend: unknown backend \"" + requested + "\"", {},
                    "options.backend", "\"auto\", \"cpu\" or \"cuda\"");
}

BackendFactory backend_factory([[maybe_unused]] const std::string& backend) {
#ifdef RUNAHEAD_CUDA
  if (backend == "cuda")
    return [](std::shared_ptr<const ModelWeights> weights, const BackendOptions& options) -> std::unique_ptr<Backend> {
      return make_cuda_backend(std::move(weights), options);
    };
#endif
  return make_cpu_backend;
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<int32_t> newline_tokens_for(const std::string& model, const LoadOptions& options) {
  if (options.newline_tokens) return *options.newline_tokens;
  if (model.starts_with(kRandomPrefix)) return {};
  const auto tokenizer = std::filesystem::path(model) / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer)) {
    std::cerr << "runahead-engine: " << tokenizer.string()
              << " not found: the soft deadline cannot end at a newline, only the hard deadline applies\n";
    return {};
  }
  return newline_tokens_from_tokenizer(tokenizer);
}

}  // namespace

const std::vector<std::string>& built_backends() {
#ifdef RUNAHEAD_CUDA
  static const std::vector<std::string> backends = {"cpu", "cuda"};
#else
  static const std::vector<std::string> backends = {"cpu"};
#endif
  return backends;
}

std::unique_ptr<Session> Session::open(const std::string& model, const LoadOptions& options,
                                       const ProgressFn& progress) {
  const BackendFactory make_backend = backend_factory(resolve_backend(options.backend));

  auto session = std::unique_ptr<Session>(new Session());
  session->model_ = model;
  session->weights_ = std::make_shared<const ModelWeights>(
      model.starts_with(kRandomPrefix) ? random_model(model.substr(kRandomPrefix.size()))
                                       : load_model(model, progress));
  const ModelConfig& config = session->weights_->config;
  const std::vector<int32_t> newline_ids = newline_tokens_for(model, options);

  const BackendOptions backend_options{options.threads, options.context_length};
  session->backend_ = make_backend(session->weights_, backend_options);
  nlohmann::json speculation;
  session->speculator_ = open_speculator(*session->backend_, session->weights_, model, options.speculation,
                                         make_backend, backend_options, speculation);
  session->generator_ = std::make_unique<Generator>(
      *session->backend_, GeneratorOptions{.eos_ids = config.eos_token_ids,
                                           .newline_ids = newline_ids,
                                           .speculator = session->speculator_.get()});

  const nlohmann::json described = session->backend_->describe();
  nlohmann::json optimizations = described.is_object() ? described.value("optimizations", nlohmann::json::object())
                                                       : nlohmann::json::object();
  optimizations["prefix_reuse"] = true;
  const ModelWeights& w = *session->weights_;
  session->report_ = {
      {"architecture", config.architecture},
      {"model", model},
      {"parameters", w.parameters},
      {"weight_bytes", w.weight_bytes},
      {"dtype", lowercase(dtype_name(w.dtype))},
      {"backend", session->backend_->name()},
      {"threads", described.is_object() ? described.value("threads", options.threads) : options.threads},
      {"context_length", session->backend_->context_length()},
      {"vocab_size", config.vocab_size},
      {"layers", config.num_layers},
      {"newline_tokens", newline_ids.size()},
      {"optimizations", optimizations},
      {"speculation", speculation},
  };
  return session;
}

}  // namespace runahead
