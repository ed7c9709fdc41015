#include "runtime/session.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>

#include <unistd.h>

#include "runtime/cpus.h"
#include "model/error.h"
#include "model/gguf_weights.h"
#include "model/quantize.h"
#include "model/regular_file.h"
#include "model/weight_mappings.h"
#include "runtime/newline_tokens.h"
#include "runtime/speculative.h"

namespace runahead {

namespace {

constexpr std::string_view kRandomPrefix = "random:";
constexpr int kDefaultContext = 4096;

// The backend `requested` names on this machine ("auto": CUDA when built and a device is
// usable, else the CPU), checked before any loading work starts.
std::string resolve_backend(const std::string& requested) {
  if (requested == "cpu") return "cpu";
  const BackendEntry* cuda = find_backend("cuda");
  if (requested == "auto") return cuda && cuda->usable() ? "cuda" : "cpu";
  if (requested == "cuda") {
    if (!cuda)
      throw EngineError("bad_request", "options.backend: this build has no CUDA backend", {}, "options.backend",
                        "\"auto\" or \"cpu\"");
    if (!cuda->usable())
      throw EngineError("bad_request", "options.backend: no usable CUDA device on this machine", {},
                        "options.backend", "\"auto\" or \"cpu\" without a GPU");
    return "cuda";
  }
  throw EngineError("bad_request", "options.backend: unknown backend \"" + requested + "\"", {},
                    "options.backend", "\"auto\", \"cpu\" or \"cuda\"");
}

BackendFactory backend_factory(const std::string& backend) { return find_backend(backend)->make; }

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<int32_t> newline_tokens_for(const std::string& model, const LoadOptions& options, int vocab_size) {
  if (options.newline_tokens) return *options.newline_tokens;
  if (model.starts_with(kRandomPrefix)) return {};
  if (is_gguf_path(model)) return newline_tokens_from_gguf(model, vocab_size);
  const auto tokenizer = std::filesystem::path(model) / "tokenizer.json";
  if (!has_entry(tokenizer)) {
    std::cerr << "runahead-engine: " << tokenizer.string()
              << " not found: the soft deadline cannot end at a newline, only the hard deadline applies\n";
    return {};
  }
  return newline_tokens_from_tokenizer(tokenizer, vocab_size);
}

// The KV capacity: 0 asks for min(model maximum, 4096); more than the model's maximum is
// capped to it (positions past it were never trained), with a warning.
int context_for(const ModelConfig& config, int requested, std::vector<std::string>& warnings) {
  const int model_max = config.max_position_embeddings;
  if (requested == 0) return std::min(model_max, kDefaultContext);
  if (requested <= model_max) return requested;
  warnings.push_back("options.context_length " + std::to_string(requested) +
                     " is above the model's max_position_embeddings; capped to " + std::to_string(model_max));
  return model_max;
}

// More threads than CPUs to run them on only take turns (1024 threads cost 1000x per token).
int threads_for(int requested, std::vector<std::string>& warnings) {
  const int cpus = usable_cpus();
  if (requested <= cpus) return requested;
  warnings.push_back("options.threads " + std::to_string(requested) + " is more than the " + std::to_string(cpus) +
                     " CPUs this process may run on; capped to " + std::to_string(cpus));
  return cpus;
}

// The CPU backend's KV cache is f32 in host memory: a context that cannot fit is refused
// before it is allocated, naming the option.
void check_kv_fits(const ModelConfig& config, int context) {
  const unsigned __int128 bytes = static_cast<unsigned __int128>(2) * uint64_t(config.num_layers) * uint64_t(context) *
                                  uint64_t(config.num_kv_heads) * uint64_t(config.head_dim) * sizeof(float);
  const uint64_t memory = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
  if (bytes > memory)
    throw EngineError("bad_request",
                      "options.context_length: a KV cache of " + std::to_string(context) + " positions needs " +
                          (bytes > UINT64_MAX ? std::string("more than 2^64") : std::to_string(uint64_t(bytes))) +
                          " bytes, more than this machine's " + std::to_string(memory),
                      {}, "options.context_length", "a context whose KV cache fits in memory");
}

// An allocation that failed while loading, as an error naming what asked for the memory.
EngineError out_of_memory(const std::string& model, const LoadOptions& options, int context, const char* what) {
  const std::string problem = std::string("not enough memory (") + what + ") for the model with a context of " +
                              std::to_string(context) + " positions";
  if (options.context_length > 0)
    return EngineError("bad_request", "options.context_length: " + problem, {}, "options.context_length",
                       "a smaller context, or a machine with more memory");
  return EngineError("model_error", model + ": " + problem, model, {}, "a model that fits in memory");
}

// The self-check of the report: the backend's own checks, then each drafter's, each with
// `required` when options.require named it. A required one that is not active throws, or with
// options.fallback becomes a warning.
nlohmann::json check_optimizations(const Backend& backend, const nlohmann::json& speculation,
                                   const LoadOptions& options, std::vector<std::string>& warnings) {
  std::vector<OptimizationCheck> checks = backend.self_check();
  const std::string mode = speculation.value("mode", "off");
  for (const char* drafter : {"lookup", "mtp", "draft"}) {
    OptimizationCheck c{drafter, false, ""};
    for (const auto& d : speculation.value("drafters", nlohmann::json::array()))
      if (d.value("name", "") == drafter) {
        c.active = true;
        c.why = d.contains("backend") ? "drafts on the " + d["backend"].get<std::string>() + " backend" : "drafts on the host";
      }
    if (!c.active) {
      const auto inactive = speculation.value("inactive", nlohmann::json::object());
      c.why = inactive.contains(drafter) ? inactive[drafter].get<std::string>()
              : mode == "off"            ? "options.speculation is off"
                                         : "options.speculation is " + mode;
    }
    checks.push_back(c);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const OptimizationCheck& c : checks) {
    const bool required = std::find(options.require.begin(), options.require.end(), c.name) != options.require.end();
    out.push_back({{"name", c.name}, {"active", c.active}, {"why", c.why}, {"required", required}});
  }
  for (const std::string& name : options.require) {
    const auto it = std::find_if(checks.begin(), checks.end(), [&](const OptimizationCheck& c) { return c.name == name; });
    if (it != checks.end() && it->active) continue;
    const std::string why = it != checks.end() ? it->why : "the " + backend.name() + " backend has no " + name;
    if (it == checks.end()) out.push_back({{"name", name}, {"active", false}, {"why", why}, {"required", true}});
    if (!options.fallback)
      throw EngineError("bad_request", "options.require: " + name + " cannot be active: " + why, {}, "options.require",
                        "optimisations this load can run (the report's checks), or options.fallback true");
    warnings.push_back("options.require: " + name + " is not active: " + why);
  }
  return out;
}

}  // namespace

const std::vector<std::string>& optimization_names() {
  static const std::vector<std::string> names = {
      "simd",        "quantized_kernels", "step_graphs", "persistent_step", "pdl",
      "run_ahead",   "device_greedy_verify", "device_sampling", "fp8_weights", "fp8_lm_head",
      "tensor_core_prefill", "lookup", "mtp", "draft"};
  return names;
}

const std::vector<std::string>& weight_options() {
  static const std::vector<std::string> options = {"auto", "q8_0", "q4_k_m", "fp8"};
  return options;
}

const std::vector<std::string>& lm_head_options() {
  static const std::vector<std::string> options = {"auto", "bf16", "fp8"};
  return options;
}

const std::vector<std::string>& built_backends() {
  static const std::vector<std::string> backends = [] {
    std::vector<std::string> names;
    for (const BackendEntry& e : backend_entries()) names.push_back(e.name);
    return names;
  }();
  return backends;
}

std::unique_ptr<Session> Session::open(const std::string& model, const LoadOptions& options,
                                       const ProgressFn& progress) {
  int context = options.context_length;
  try {
    return open_checked(model, options, progress, context);
  } catch (const std::bad_alloc& e) {
    throw out_of_memory(model, options, context, e.what());
  } catch (const std::length_error& e) {
    throw out_of_memory(model, options, context, e.what());
  }
}

std::unique_ptr<Session> Session::open_checked(const std::string& model, const LoadOptions& options,
                                               const ProgressFn& progress, int& context) {
  const std::string backend = resolve_backend(options.backend);
  const BackendFactory make_backend = backend_factory(backend);
  const bool fp8_matrices = options.weights == "fp8";
  const bool fp8_lm_head = options.lm_head == "fp8" || (fp8_matrices && options.lm_head == "auto");
  if (fp8_matrices && options.lm_head == "bf16")
    throw EngineError("bad_request", "options.lm_head: bf16 with options.weights fp8 (fp8 weights quantize lm_head too)",
                      {}, "options.lm_head", "\"auto\" or \"fp8\" with fp8 weights");
  for (const auto& [asked, field] : {std::pair{fp8_matrices, "options.weights"}, std::pair{fp8_lm_head, "options.lm_head"}})
    if (asked && backend != "cuda")
      throw EngineError("bad_request",
                        std::string(field) + ": fp8 runs on the CUDA backend only (this load uses the " + backend +
                            " backend)",
                        {}, field, "\"auto\", or options.backend \"cuda\" on a machine with an NVIDIA GPU");

  auto session = std::unique_ptr<Session>(new Session());
  session->model_ = model;
  session->weights_ = std::make_shared<const ModelWeights>(
      model.starts_with(kRandomPrefix) ? random_model(model.substr(kRandomPrefix.size()))
                                       : load_model(model, progress));
  if (quantizes_at_load(options.weights))
    session->weights_ =
        std::make_shared<const ModelWeights>(quantize_for_option(*session->weights_, options.weights, progress));
  const ModelConfig& config = session->weights_->config;
  const std::vector<int32_t> newline_ids = newline_tokens_for(model, options, config.vocab_size);

  std::vector<std::string> warnings;
  context = context_for(config, options.context_length, warnings);
  if (backend == "cpu") check_kv_fits(config, context);
  const BackendOptions backend_options{threads_for(options.threads, warnings), context, fp8_matrices, fp8_lm_head,
                                       options.require};
  session->backend_ = make_backend(session->weights_, backend_options);
  nlohmann::json speculation;
  session->speculator_ = open_speculator(*session->backend_, session->weights_, model, options.speculation,
                                         make_backend, backend_options, speculation);
  session->generator_ = std::make_unique<Generator>(
      *session->backend_, GeneratorOptions{.eos_ids = config.eos_token_ids,
                                           .newline_ids = newline_ids,
                                           .speculator = session->speculator_.get()});
  check_mappings_intact();  // the backend read the weights: a file cut meanwhile shows now

  const nlohmann::json described = session->backend_->describe();
  nlohmann::json optimizations = described.is_object() ? described.value("optimizations", nlohmann::json::object())
                                                       : nlohmann::json::object();
  optimizations["prefix_reuse"] = true;
  const nlohmann::json checks = check_optimizations(*session->backend_, speculation, options, warnings);
  // What the backend could not do (block formats it cannot read as stored, run widened) is a
  // warning; what it chose not to (a small Q8_0 model widened, as fast at its size) is said in
  // the check only.
  for (const OptimizationCheck& c : session->backend_->self_check())
    if (c.warn) warnings.push_back(c.why);
  const ModelWeights& w = *session->weights_;
  for (const std::string& warning : warnings) std::cerr << "runahead-engine: warning: " << warning << "\n";
  session->report_ = {
      {"architecture", config.architecture},
      {"model", model},
      {"parameters", w.parameters},
      {"weight_bytes", w.weight_bytes},
      {"dtype", lowercase(dtype_name(w.dtype))},
      {"weights", weight_formats(w)},
      {"backend", session->backend_->name()},
      {"threads", described.is_object() ? described.value("threads", backend_options.threads) : backend_options.threads},
      {"context_length", session->backend_->context_length()},
      {"vocab_size", config.vocab_size},
      {"layers", config.num_layers},
      {"newline_tokens", newline_ids.size()},
      {"optimizations", optimizations},
      {"checks", checks},
      {"speculation", speculation},
      {"warnings", warnings},
  };
  return session;
}

}  // namespace runahead
