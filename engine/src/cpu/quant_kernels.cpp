#include "cpu/quant_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "model/error.h"
#include "model/half.h"

namespace runahead {

void Q8Activations::quantize(const float* x, int64_t n) {
  cols = n;
  const int64_t blocks = n / 32;
  d.resize(blocks);
  q.resize(n);
  sum.resize(blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0;
    for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(xb[l]));
    d[b] = f16_to_f32(f32_to_f16(amax / 127));
    const float inv = amax ? 127 / amax : 0;
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) {
      const int8_t v = int8_t(std::nearbyint(xb[l] * inv));
      q[32 * b + l] = v;
      s += v;
    }
    sum[b] = s;
  }
}

std::vector<const QuantKernels*> available_quant_kernels() {
  std::vector<const QuantKernels*> tables;
#ifdef RUNAHEAD_X86
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    tables.push_back(&avx512_vnni_quant_kernels());
  if (avx2) tables.push_back(&avx2_quant_kernels());
#endif
  tables.push_back(&portable_quant_kernels());
  return tables;
}

const QuantKernels& select_quant_kernels() {
  const auto tables = available_quant_kernels();
  const char* wanted = std::getenv("RUNAHEAD_SIMD");
  if (!wanted || !*wanted) return *tables.front();
  std::string names;
  for (const QuantKernels* k : tables) {
    const std::string simd = k->simd;
    if (wanted == simd || simd.rfind(std::string(wanted) + "-", 0) == 0) return *k;
    names += (names.empty() ? "" : ", ") + simd;
  }
  throw EngineError("bad_request", std::string("RUNAHEAD_SIMD=") + wanted + " is not available on this CPU", {},
                    "RUNAHEAD_SIMD", "one of: " + names);
}

}  // namespace runahead
