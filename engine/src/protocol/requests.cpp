#include "protocol/requests.h"

#include <algorithm>
#include <limits>

#include "protocol/fields.h"
#include "runtime/speculative.h"

namespace runahead {

namespace {

using nlohmann::json;

// Deeper JSON than any request needs is refused while parsing, before it costs memory.
constexpr int kMaxDepth = 32;
struct TooDeep {};

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

struct TypeName {
  const char* name;
  RequestType type;
  bool needs_id;
};
constexpr TypeName kTypes[] = {
    {"hello", RequestType::Hello, false},    {"ping", RequestType::Ping, false},
    {"load", RequestType::Load, true},       {"generate", RequestType::Generate, true},
    {"cancel", RequestType::Cancel, true},   {"stats", RequestType::Stats, false},
    {"unload", RequestType::Unload, true},   {"shutdown", RequestType::Shutdown, false},
};

json parse_json(std::string_view line) {
  const json::parser_callback_t limit_depth = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth) throw TooDeep{};
    return true;
  };
  try {
    return json::parse(line.begin(), line.end(), limit_depth);
  } catch (const json::exception& e) {
    throw EngineError("bad_json", std::string("not valid JSON: ") + e.what(), {}, {}, "one JSON object per line");
  } catch (const TooDeep&) {
    throw EngineError("bad_json", "JSON nested deeper than " + std::to_string(kMaxDepth) + " levels", {}, {},
                      "at most " + std::to_string(kMaxDepth) + " levels of nesting");
  }
}

json parse_id(const json& request) {
  const json* id = optional_field(request, "id");
  if (!id) return nullptr;
  if (!id->is_string() && !id->is_number())
    throw EngineError("bad_request", std::string("id: expected a string or a number, got ") + id->type_name(), {},
                      "id", "a string or a number");
  return *id;
}

const TypeName& parse_type(const json& request) {
  const std::string type = as_string(required_field(request, "type", "type"), "type");
  for (const TypeName& t : kTypes)
    if (type == t.name) return t;
  throw EngineError("bad_request", "type: unknown request type \"" + type + "\"", {}, "type",
                    "hello, ping, load, generate, cancel, stats, unload or shutdown");
}

// A file system path: a C string would end at a NUL and name another path (the audit saw "/etc").
std::string as_path(const json& v, const std::string& field) {
  std::string path = as_string(v, field);
  if (path.find('\0') != std::string::npos)
    throw EngineError("bad_request", field + ": the path contains a NUL byte", {}, field, "a path without NUL bytes");
  return path;
}

LoadRequest parse_load(const json& request) {
  LoadRequest load;
  load.model = as_path(required_field(request, "model", "model"), "model");
  if (load.model.empty()) throw EngineError("bad_request", "model: empty", {}, "model", "a model folder or random:<shape>");
  const json* options = optional_field(request, "options");
  if (!options) return load;
  as_object(*options, "options");
  only_known_keys(*options, "options",
                  {"backend", "threads", "context_length", "newline_tokens", "speculation", "max_draft", "draft_model",
                   "adaptive_depth", "weights", "lm_head", "require", "fallback"},
                  "option");
  if (const json* v = optional_field(*options, "backend"))
    load.options.backend = as_one_of(*v, "options.backend", {"auto", "cpu", "cuda"}, "backend",
                                     "\"auto\", \"cpu\" or \"cuda\"");
  if (const json* v = optional_field(*options, "threads"))
    load.options.threads = static_cast<int>(as_int(*v, "options.threads", 0, 1024));
  if (const json* v = optional_field(*options, "context_length"))
    load.options.context_length = static_cast<int>(as_int(*v, "options.context_length", 0, kMaxInt32));
  if (const json* v = optional_field(*options, "newline_tokens"))
    load.options.newline_tokens = as_token_ids(*v, "options.newline_tokens");
  if (const json* v = optional_field(*options, "weights"))
    load.options.weights = as_one_of(*v, "options.weights", weight_options(), "value",
                                     "\"auto\" (as stored), \"q8_0\", \"q4_k_m\" or \"fp8\" (CUDA)");
  if (const json* v = optional_field(*options, "lm_head"))
    load.options.lm_head = as_one_of(*v, "options.lm_head", lm_head_options(), "value",
                                     "\"auto\", \"bf16\" or \"fp8\" (CUDA)");
  if (const json* v = optional_field(*options, "require")) {
    if (!v->is_array())
      throw EngineError("bad_request", "options.require: expected an array of optimisation names", {}, "options.require",
                        "names from the report's checks");
    const auto& known = optimization_names();
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    for (const json& name : *v)
      load.options.require.push_back(as_one_of(name, "options.require", known, "optimisation", list));
  }
  if (const json* v = optional_field(*options, "fallback")) load.options.fallback = as_bool(*v, "options.fallback");
  SpeculationOptions& speculation = load.options.speculation;
  if (const json* v = optional_field(*options, "speculation"))
    speculation.mode = as_one_of(*v, "options.speculation", speculation_modes(), "mode", "auto, off, lookup, mtp or draft");
  if (const json* v = optional_field(*options, "max_draft"))
    speculation.max_draft = static_cast<int>(as_int(*v, "options.max_draft", 1, 32));
  if (const json* v = optional_field(*options, "draft_model"))
    speculation.draft_model = as_path(*v, "options.draft_model");
  if (const json* v = optional_field(*options, "adaptive_depth")) speculation.adaptive = as_bool(*v, "options.adaptive_depth");
  return load;
}

GenerateRequest parse_generate(const json& request) {
  GenerateRequest g;
  g.prompt = as_token_ids(required_field(request, "prompt", "prompt"), "prompt");
  if (g.prompt.empty())
    throw EngineError("bad_request", "prompt: empty", {}, "prompt", "a non-empty array of token ids");
  const json* params = optional_field(request, "params");
  if (!params) return g;
  as_object(*params, "params");
  only_known_keys(*params, "params",
                  {"max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "deadline_ms", "hard_deadline_ms"},
                  "parameter");
  if (const json* v = optional_field(*params, "max_tokens"))
    g.max_tokens = static_cast<int>(as_int(*v, "params.max_tokens", 0, kMaxInt32));
  if (const json* v = optional_field(*params, "temperature"))
    g.sampling.temperature = static_cast<float>(as_number(*v, "params.temperature", 0, 1000));
  if (const json* v = optional_field(*params, "top_k"))
    g.sampling.top_k = static_cast<int>(as_int(*v, "params.top_k", 0, kMaxInt32));
  if (const json* v = optional_field(*params, "top_p")) {
    g.sampling.top_p = static_cast<float>(as_number(*v, "params.top_p", 0, 1));
    if (g.sampling.top_p <= 0)
      throw EngineError("bad_request", "params.top_p: must be above 0", {}, "params.top_p", "a number in (0, 1]");
  }
  if (const json* v = optional_field(*params, "seed")) g.sampling.seed = as_uint64(*v, "params.seed");
  if (const json* v = optional_field(*params, "stop")) g.stop = as_token_ids(*v, "params.stop");
  if (const json* v = optional_field(*params, "deadline_ms"))
    g.deadline_ms = as_number(*v, "params.deadline_ms", 0, 1e9);
  if (const json* v = optional_field(*params, "hard_deadline_ms"))
    g.hard_deadline_ms = as_number(*v, "params.hard_deadline_ms", 0, 1e9);
  return g;
}

}  // namespace

Request parse_request(std::string_view line) {
  json id;
  try {
    const json j = parse_json(line);
    if (!j.is_object())
      throw EngineError("bad_request", std::string("expected a JSON object, got ") + j.type_name(), {}, {},
                        "a JSON object with a string \"type\"");
    id = parse_id(j);
    const TypeName& type = parse_type(j);
    if (type.needs_id && id.is_null())
      throw EngineError("bad_request", std::string("id: missing; a ") + type.name + " request needs one", {}, "id",
                        "a string or a number");
    if (type.type == RequestType::Load) only_known_keys(j, "", {"type", "id", "model", "options"}, "request field");
    else if (type.type == RequestType::Generate) only_known_keys(j, "", {"type", "id", "prompt", "params"}, "request field");
    else only_known_keys(j, "", {"type", "id"}, "request field");
    Request request{type.type, id, {}};
    if (type.type == RequestType::Load) request.body = parse_load(j);
    if (type.type == RequestType::Generate) request.body = parse_generate(j);
    return request;
  } catch (EngineError& e) {
    throw RequestError(std::move(e), std::move(id));
  }
}

}  // namespace runahead
