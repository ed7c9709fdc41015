#include "protocol/messages.h"

#include <cmath>

#include "model/quant_format.h"
#include "model/config.h"
#include "protocol/requests.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "runtime/version.h"

namespace runahead {

namespace {

// Three decimals are enough for ms and keep the lines short.
double rounded(double ms) { return std::round(ms * 1000.0) / 1000.0; }

// The weight storage types the engine reads: the dense ones and every block format.
nlohmann::json readable_dtypes() {
  nlohmann::json names = {"bf16", "f16", "f32"};
  for (const QuantFormat& f : kQuantFormats) names.push_back(f.name);
  return names;
}

}  // namespace

nlohmann::json hello_message() {
  return {{"type", "hello"},
          {"protocol", kProtocolVersion},
          {"engine", kEngineVersion},
          {"capabilities",
           {{"backends", built_backends()},
            {"architectures", supported_architectures()},
            {"dtypes", readable_dtypes()},
            {"model_files", {"folder", "gguf"}},
            {"weights", weight_options()},
            {"lm_head", lm_head_options()},
            {"sampling", {"greedy", "temperature", "top_k", "top_p", "seed"}},
            {"speculation", speculation_modes()},
            {"require", optimization_names()},
            {"max_line_bytes", kMaxLineBytes}}}};
}

nlohmann::json error_message(const EngineError& error, const nlohmann::json& id) {
  nlohmann::json m = {{"type", "error"}};
  if (!id.is_null()) m["id"] = id;
  m["code"] = error.code;
  m["message"] = error.what();
  if (!error.file.empty()) m["file"] = error.file;
  if (!error.field.empty()) m["field"] = error.field;
  if (!error.expected.empty()) m["expected"] = error.expected;
  return m;
}

nlohmann::json tokens_message(const nlohmann::json& id, std::span<const int32_t> tokens, std::span<const double> ms) {
  nlohmann::json times = nlohmann::json::array();
  for (double t : ms) times.push_back(rounded(t));
  return {{"type", "tokens"}, {"id", id}, {"tokens", tokens}, {"ms", times}};
}

nlohmann::json stats_json(const GenerateStats& s) {
  nlohmann::json j = {{"prompt_tokens", s.prompt_tokens},
          {"reused_tokens", s.reused_tokens},
          {"prefill_ms", rounded(s.prefill_ms)},
          {"ttft_ms", rounded(s.ttft_ms)},
          {"decode_ms_per_token", rounded(s.decode_ms_per_token)},
          {"tokens", s.tokens},
          {"total_ms", rounded(s.total_ms)},
          {"steps", s.steps},
          {"drafted", s.drafted},
          {"accepted", s.accepted},
          {"accepted_per_step", rounded(s.accepted_per_step)}};
  if (!s.speculation.drafter.empty()) j["speculation"] = s.speculation.to_json();  // a speculator ran
  return j;
}

nlohmann::json done_message(const nlohmann::json& id, FinishReason finish, const GenerateStats& stats) {
  return {{"type", "done"}, {"id", id}, {"finish_reason", finish_reason_name(finish)}, {"stats", stats_json(stats)}};
}

}  // namespace runahead
