#pragma once
// The one way model loading reports a problem: EngineError{"model_error"} whose
// message reads "<file>: <problem> (expected <expected>)".
#include <string>
#include <vector>

#include "model/error.h"

namespace runahead {

[[noreturn]] inline void model_error(const std::string& file, const std::string& field,
                                     const std::string& problem, const std::string& expected) {
  std::string message = file + ": " + problem;
  if (!expected.empty()) message += " (expected " + expected + ")";
  throw EngineError("model_error", message, file, field, expected);
}

// "[896, 4864]", for messages about shapes.
inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace runahead
