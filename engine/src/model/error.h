#pragma once
// A structured engine error: the protocol turns it into {"type":"error", ...}.
#include <stdexcept>
#include <string>

namespace runahead {

struct EngineError : std::runtime_error {
  std::string code;      // machine-readable: "model_error", "bad_request", "not_loaded", ...
  std::string file;      // the file involved, if any
  std::string field;     // the JSON field / tensor name involved, if any
  std::string expected;  // what was expected, in words

  EngineError(std::string code, const std::string& message, std::string file = {},
              std::string field = {}, std::string expected = {})
      : std::runtime_error(message), code(std::move(code)), file(std::move(file)),
        field(std::move(field)), expected(std::move(expected)) {}
};

}  // namespace runahead
