#include "protocol/fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/error.h"

namespace runahead {

namespace {

[[noreturn]] void wrong(const nlohmann::json& value, const std::string& path, const std::string& expected) {
  std::string got = value.type_name();
  if (value.is_number()) got = "the number " + value.dump();
  if (value.is_boolean()) got = value.dump();
  throw EngineError("bad_request", path + ": expected " + expected + ", got " + got, {}, path, expected);
}

std::string range(int64_t min, int64_t max) {
  return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

}  // namespace

const nlohmann::json* optional_field(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

const nlohmann::json& required_field(const nlohmann::json& object, const char* key, const std::string& path) {
  const nlohmann::json* value = optional_field(object, key);
  if (!value) throw EngineError("bad_request", path + ": missing", {}, path, "a value");
  return *value;
}

void only_known_keys(const nlohmann::json& object, const std::string& path, std::initializer_list<const char*> known,
                     const char* what) {
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (const char* k : known) found |= key == k;
    if (found) continue;
    std::string list;
    for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    const std::string field = path.empty() ? key : path + "." + key;
    throw EngineError("bad_request", field + ": unknown " + what + "; known: " + list, {}, field, "one of " + list);
  }
}

int64_t as_int(const nlohmann::json& value, const std::string& path, int64_t min, int64_t max) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u <= static_cast<uint64_t>(max) && static_cast<int64_t>(u) >= min) return static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    const int64_t i = value.get<int64_t>();
    if (i >= min && i <= max) return i;
  }
  wrong(value, path, range(min, max));
}

uint64_t as_uint64(const nlohmann::json& value, const std::string& path) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return static_cast<uint64_t>(value.get<int64_t>());
  wrong(value, path, "an integer in [0, 2^64)");
}

double as_number(const nlohmann::json& value, const std::string& path, double min, double max) {
  if (value.is_number()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && d >= min && d <= max) return d;
  }
  wrong(value, path, "a number in [" + nlohmann::json(min).dump() + ", " + nlohmann::json(max).dump() + "]");
}

std::string as_string(const nlohmann::json& value, const std::string& path) {
  if (!value.is_string()) wrong(value, path, "a string");
  return value.get<std::string>();
}

std::string as_one_of(const nlohmann::json& value, const std::string& path, const std::vector<std::string>& known,
                      const std::string& what, const std::string& expected) {
  std::string s = as_string(value, path);
  if (std::find(known.begin(), known.end(), s) == known.end())
    throw EngineError("bad_request", path + ": unknown " + what + " \"" + s + "\"", {}, path, expected);
  return s;
}

bool as_bool(const nlohmann::json& value, const std::string& path) {
  if (!value.is_boolean()) throw EngineError("bad_request", path + ": expected true or false", {}, path, "true or false");
  return value.get<bool>();
}

const nlohmann::json& as_object(const nlohmann::json& value, const std::string& path) {
  if (!value.is_object()) wrong(value, path, "an object");
  return value;
}

std::vector<int32_t> as_token_ids(const nlohmann::json& value, const std::string& path) {
  if (!value.is_array()) wrong(value, path, "an array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i)
    ids.push_back(static_cast<int32_t>(
        as_int(value[i], path + "[" + std::to_string(i) + "]", 0, std::numeric_limits<int32_t>::max())));
  return ids;
}

}  // namespace runahead
