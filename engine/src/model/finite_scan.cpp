#include "model/finite_scan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/quant_blocks.h"
#include "model/model_error.h"

namespace runahead {

namespace {

constexpr size_t kBlockBytes = 4096;
constexpr size_t kBlocks = 64;

// An IEEE value is NaN or Inf exactly when its exponent bits are all ones.
template <class Bits>
int64_t first_non_finite(const uint8_t* data, size_t begin, size_t end, Bits exponent) {
  for (size_t i = begin; i < end; ++i) {
    Bits x;
    std::memcpy(&x, data + i * sizeof(Bits), sizeof(Bits));  // safetensors does not promise alignment
    if ((x & exponent) == exponent) return int64_t(i);
  }
  return -1;
}

int64_t first_non_finite(const Tensor& t, size_t begin, size_t end) {
  const auto* data = static_cast<const uint8_t*>(t.data);
  switch (t.dtype) {
    case DType::BF16: return first_non_finite<uint16_t>(data, begin, end, 0x7F80);
    case DType::F16: return first_non_finite<uint16_t>(data, begin, end, 0x7C00);
    case DType::F32: return first_non_finite<uint32_t>(data, begin, end, 0x7F800000u);
    default: return -1;
  }
}

// A block format: up to kBlocks evenly spaced rows, dequantized (their scales are what can
// be non-finite). Returns the first bad element's index, or -1.
int64_t first_non_finite_rows(const Tensor& t) {
  const int64_t rows = t.numel() / t.shape.back(), cols = t.shape.back();
  const int64_t scanned = std::min<int64_t>(rows, int64_t(kBlocks));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t k = 0; k < scanned; ++k) {
    const int64_t r = scanned == 1 ? 0 : k * (rows - 1) / (scanned - 1);
    dequantize_row(*quant_type_of(t.dtype), static_cast<const uint8_t*>(t.data) + size_t(r) * row_bytes(t.dtype, cols),
                   cols, row.data());
    for (int64_t i = 0; i < cols; ++i)
      if (!std::isfinite(row[size_t(i)])) return r * cols + i;
  }
  return -1;
}

// The first non-finite element of a dense tensor's sample, or -1.
int64_t first_non_finite_sample(const Tensor& t) {
  if (dtype_size(t.dtype) < 2) return -1;  // I8: always finite
  const size_t n = size_t(t.numel()), per_block = kBlockBytes / dtype_size(t.dtype);
  const size_t blocks = (n + per_block - 1) / per_block;
  const size_t scanned = std::min(blocks, kBlocks);
  for (size_t k = 0; k < scanned; ++k) {
    // Evenly spaced blocks, the first and the last among them.
    const size_t block = scanned == 1 ? 0 : k * (blocks - 1) / (scanned - 1);
    const int64_t at = first_non_finite(t, block * per_block, std::min(n, (block + 1) * per_block));
    if (at >= 0) return at;
  }
  return -1;
}

}  // namespace

void check_finite_sample(const Tensor& t, const std::string& file) {
  if (t.empty()) return;
  const int64_t at = is_quantized(t.dtype) ? first_non_finite_rows(t) : first_non_finite_sample(t);
  if (at >= 0)
    model_error(file, t.name, "tensor '" + t.name + "' holds NaN or Inf (element " + std::to_string(at) + ")",
                "finite weights; is the file damaged or badly converted?");
}

}  // namespace runahead
