#pragma once
// PROTOCOL.md v1 requests, parsed and checked into typed values. The parser never
// throws anything but RequestError, whatever the line holds.
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "model/error.h"
#include "runtime/generator.h"
#include "runtime/session.h"

namespace runahead {

enum class RequestType { Hello, Ping, Load, Generate, Cancel, Stats, Unload, Shutdown };

struct LoadRequest {
  std::string model;
  LoadOptions options;
};

struct Request {
  RequestType type = RequestType::Hello;
  nlohmann::json id;  // a string or a number; null when the request has none
  std::variant<std::monostate, LoadRequest, GenerateRequest> body;
};

// A bad line: bad_json or bad_request, with the request's id when it could be read.
struct RequestError : EngineError {
  nlohmann::json id;
  RequestError(EngineError error, nlohmann::json id) : EngineError(std::move(error)), id(std::move(id)) {}
};

inline constexpr size_t kMaxLineBytes = 4 * 1024 * 1024;

Request parse_request(std::string_view line);

}  // namespace runahead
