#pragma once
// CUDA runtime errors become EngineError{"cuda_error"} naming the call that failed.
#include <cuda_runtime_api.h>

#include <new>
#include <string>

#include "model/error.h"

namespace runahead::cuda {

// Out of device memory is an allocation failure like std::bad_alloc: the loader turns both
// into an error naming what asked for the memory (runtime/session.cpp).
class DeviceOutOfMemory : public std::bad_alloc {
 public:
  explicit DeviceOutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

inline void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaErrorMemoryAllocation)
    throw DeviceOutOfMemory(std::string(what) + ": " + cudaGetErrorString(status));
  if (status != cudaSuccess)
    throw EngineError("cuda_error", std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace runahead::cuda
