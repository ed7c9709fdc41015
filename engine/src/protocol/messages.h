#pragma once
// PROTOCOL.md v1 messages from the engine, built in one place.
#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

#include "model/error.h"
#include "runtime/generator.h"
#include "runtime/stopping.h"

namespace runahead {

nlohmann::json hello_message();
// `id` is left out when null; file, field and expected when empty.
nlohmann::json error_message(const EngineError& error, const nlohmann::json& id);
nlohmann::json tokens_message(const nlohmann::json& id, std::span<const int32_t> tokens, std::span<const double> ms);
nlohmann::json done_message(const nlohmann::json& id, FinishReason finish, const GenerateStats& stats);
nlohmann::json stats_json(const GenerateStats& stats);

}  // namespace runahead
