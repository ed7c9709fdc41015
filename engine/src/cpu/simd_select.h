#pragma once
// The kernel table RUNAHEAD_SIMD names, shared by the float kernels (simd/kernels.h) and the
// quantized ones (quant_kernels.h), whose names differ ("avx512" and "avx512-vnni").
#include <cstdlib>
#include <string>
#include <vector>

#include "model/error.h"

namespace runahead {

// tables: best first, each with a `simd` name. Unset or empty RUNAHEAD_SIMD: the best. Else the
// table of that name; else the first whose name goes on from it after a "-" ("avx512" picks
// avx512-vnni); else the first whose name it goes on from after a "-" ("avx2-vnni" picks the
// float kernels' avx2). Throws EngineError{"bad_request"} naming the tables when none matches.
template <class Table> const Table& select_simd_table(const std::vector<const Table*>& tables) {
  const char* env = std::getenv("RUNAHEAD_SIMD");
  if (!env || !*env) return *tables.front();
  const std::string wanted = env;
  const auto extends = [](const std::string& longer, const std::string& shorter) {
    return longer.rfind(shorter + "-", 0) == 0;
  };
  std::string names;
  for (const Table* t : tables) {
    if (wanted == t->simd) return *t;
    names += (names.empty() ? "" : ", ") + std::string(t->simd);
  }
  for (const Table* t : tables)
    if (extends(t->simd, wanted)) return *t;
  for (const Table* t : tables)
    if (extends(wanted, t->simd)) return *t;
  throw EngineError("bad_request", "RUNAHEAD_SIMD=" + wanted + " is not available on this CPU", {}, "RUNAHEAD_SIMD",
                    "one of: " + names);
}

}  // namespace runahead
