#pragma once
// A non-owning view of a weight tensor (memory-mapped or owned elsewhere), in its storage
// format: a dense dtype (one value per element) or a block format (model/quant_format.h),
// where each row of the last dimension is a run of blocks.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/quant_format.h"

namespace runahead {

// I8 exists only inside a quantized safetensors file (the int8 half of a Q8_0 pair); the
// loader turns each pair into one Q8_0 tensor, so no model tensor is ever I8.
// F8_E4M3: fp8 (1 sign, 4 exponent, 3 mantissa bits, max 448), only as the CUDA backend's
// device copy of a matrix quantized at load with a scale per row (model/fp8.h).
enum class DType : uint8_t { F32, F16, BF16, I8, Q8_0, Q4_K, Q6_K, Q4_0, Q5_0, Q5_K, Q4_1, Q5_1, F8_E4M3 };

// Bytes of one element of a dense dtype; 0 for a block format (use row_bytes).
size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "F32", "F16", "BF16", "I8" (safetensors spelling), "Q8_0", "Q4_K", ...
bool is_quantized(DType t);       // a block format
std::optional<QuantType> quant_type_of(DType t);
DType dtype_of(QuantType t);
// Bytes of a row of `cols` elements (cols a multiple of the block for a block format).
size_t row_bytes(DType t, int64_t cols);

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major; a Linear weight is [out_features, in_features]
  const void* data = nullptr;

  int64_t numel() const;
  size_t nbytes() const;
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
  bool empty() const { return data == nullptr; }
  // Row r of a 2-D tensor, in its storage format.
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + size_t(r) * row_bytes(dtype, cols()); }
};

}  // namespace runahead
