#pragma once
// Owning handles of device memory, pinned host memory, streams, events and graphs.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "cuda/check.h"

namespace runahead::cuda {

// cudaMalloc'd bytes, typed on access.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) check_cuda(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  template <class T = void> T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory, mapped into the device's address space.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) {
    check_cuda(cudaHostAlloc(&ptr_, bytes, cudaHostAllocMapped), "cudaHostAlloc");
    check_cuda(cudaHostGetDevicePointer(&device_, ptr_, 0), "cudaHostGetDevicePointer");
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), device_(std::exchange(o.device_, nullptr)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(device_, o.device_);
    return *this;
  }
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  template <class T = void> T* host() const { return static_cast<T*>(ptr_); }
  template <class T = void> T* device() const { return static_cast<T*>(device_); }

 private:
  void* ptr_ = nullptr;
  void* device_ = nullptr;
};

class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraphExec_t g) : g_(g) {}
  GraphExec(GraphExec&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    std::swap(g_, o.g_);
    return *this;
  }
  ~GraphExec() {
    if (g_) cudaGraphExecDestroy(g_);
  }
  cudaGraphExec_t get() const { return g_; }

 private:
  cudaGraphExec_t g_ = nullptr;
};

}  // namespace runahead::cuda
