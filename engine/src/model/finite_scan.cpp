#include "model/finite_scan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

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
  }
  return -1;
}

}  // namespace

void check_finite_sample(const Tensor& t, const std::string& file) {
  if (t.empty()) return;
  const size_t n = size_t(t.numel()), per_block = kBlockBytes / dtype_size(t.dtype);
  const size_t blocks = (n + per_block - 1) / per_block;
  const size_t scanned = std::min(blocks, kBlocks);
  for (size_t k = 0; k < scanned; ++k) {
    // Evenly spaced blocks, the first and the last among them.
    const size_t block = scanned == 1 ? 0 : k * (blocks - 1) / (scanned - 1);
    const int64_t at = first_non_finite(t, block * per_block, std::min(n, (block + 1) * per_block));
    if (at >= 0)
      model_error(file, t.name,
                  "tensor '" + t.name + "' holds NaN or Inf (element " + std::to_string(at) + ")",
                  "finite weights; is the file damaged or badly converted?");
  }
}

}  // namespace runahead
