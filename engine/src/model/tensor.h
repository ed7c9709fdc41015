#pragma once
// A non-owning view of a weight tensor (memory-mapped or owned elsewhere).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace runahead {

enum class DType : uint8_t { F32, F16, BF16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "F32", "F16", "BF16" (safetensors spelling)

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major; a Linear weight is [out_features, in_features]
  const void* data = nullptr;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
  bool empty() const { return data == nullptr; }
};

}  // namespace runahead
