#include "cpu/simd/kernels.h"
#include "cpu/simd_select.h"

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

const Kernels& select_kernels() { return select_simd_table(available_kernels()); }

}  // namespace runahead
