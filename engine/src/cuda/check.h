#pragma once
// CUDA runtime errors become EngineError{"cuda_error"} naming the call that failed.
#include <cuda_runtime_api.h>

#include <string>

#include "model/error.h"

namespace runahead::cuda {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw EngineError("cuda_error", std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace runahead::cuda
