#include <cstdlib>
#include <string>

#include "cpu/simd/kernels.h"
#include "model/error.h"

namespace runahead {

std::vector<const Kernels*> available_kernels() {
  std::vector<const Kernels*> tables;
#ifdef RUNAHEAD_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    tables.push_back(&avx512_kernels());
  }
  if (avx2) tables.push_back(&avx2_kernels());
#endif
  tables.push_back(&portable_kernels());
  return tables;
}

const Kernels& select_kernels() {
  const auto tables = available_kernels();
  const char* wanted = std::getenv("RUNAHEAD_SIMD");
  if (!wanted || !*wanted) return *tables.front();
  std::string names;
  for (const Kernels* k : tables) {
    // "avx2-vnni" names a quantized table; its float kernels are AVX2's.
    if (wanted == std::string(k->simd) || std::string(wanted).rfind(std::string(k->simd) + "-", 0) == 0) return *k;
    names += (names.empty() ? "" : ", ") + std::string(k->simd);
  }
  throw EngineError("bad_request",
                    std::string("RUNAHEAD_SIMD=") + wanted + " is not available on this CPU",
                    {}, "RUNAHEAD_SIMD", "one of: " + names);
}

}  // namespace runahead
