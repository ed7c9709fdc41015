#include "cpu/swiglu.h"

namespace runahead {

void swiglu(ThreadPool& pool, const Kernels& kernels, float* gate, const float* up, int64_t n) {
  pool.for_range(n, 256, [&](int64_t begin, int64_t end) {
    kernels.swiglu(gate + begin, up + begin, end - begin);
  });
}

}  // namespace runahead
