#include "cpu/swiglu.h"

#include <cmath>

namespace runahead {

void swiglu(ThreadPool& pool, float* gate, const float* up, int64_t n) {
  pool.for_range(n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
}

}  // namespace runahead
