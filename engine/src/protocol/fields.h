#pragma once
// Typed reads of request fields. Every failure is an EngineError{"bad_request"} whose
// `field` is the dotted path ("params.max_tokens", "prompt[3]") and whose `expected`
// says what would have been accepted.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace runahead {

// The member `key` of `object`, or nullptr when it is absent or null.
const nlohmann::json* optional_field(const nlohmann::json& object, const char* key);
// The member `key` of `object`; throws naming `path` when it is absent or null.
const nlohmann::json& required_field(const nlohmann::json& object, const char* key, const std::string& path);

// Refuses a member of `object` whose key is not in `known` (a misspelt option would otherwise be
// ignored in silence): field "<path>.<key>", message "unknown <what>; known: a, b, ...".
void only_known_keys(const nlohmann::json& object, const std::string& path, std::initializer_list<const char*> known,
                     const char* what);

int64_t as_int(const nlohmann::json& value, const std::string& path, int64_t min, int64_t max);
uint64_t as_uint64(const nlohmann::json& value, const std::string& path);
double as_number(const nlohmann::json& value, const std::string& path, double min, double max);
std::string as_string(const nlohmann::json& value, const std::string& path);
// A string among `known`; otherwise "<path>: unknown <what> \"<value>\"", expecting `expected`.
std::string as_one_of(const nlohmann::json& value, const std::string& path, const std::vector<std::string>& known,
                      const std::string& what, const std::string& expected);
// true or false; otherwise "<path>: expected true or false".
bool as_bool(const nlohmann::json& value, const std::string& path);
const nlohmann::json& as_object(const nlohmann::json& value, const std::string& path);
std::vector<int32_t> as_token_ids(const nlohmann::json& value, const std::string& path);

}  // namespace runahead
