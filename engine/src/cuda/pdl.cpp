// Whether kernels launch with programmatic dependent launch (kernels.h, common.cuh's launch_pdl).
#include <cstdlib>
#include <string>

#include "cuda/kernels.h"

namespace runahead::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("RUNAHEAD_CUDA_PDL");
    return !(v && std::string(v) == "0");
  }();
  return enabled;
}

}  // namespace runahead::cuda
