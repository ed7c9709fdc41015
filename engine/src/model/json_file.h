#pragma once
// The JSON files of a model folder (config.json, model.safetensors.index.json).
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace runahead {

// Throws EngineError{"model_error"} naming the file if it is missing, not a regular file,
// larger than kMaxWholeFileBytes (regular_file.h) or not valid JSON;
// `expected` says what the file should be, for the message.
nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& expected);

}  // namespace runahead
