#include "model/tensor.h"

namespace runahead {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I8: return 1;
    case DType::F8_E4M3: return 1;
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q6_K:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q5_K:
    case DType::Q4_1:
    case DType::Q5_1: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I8: return "I8";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_K: return "Q4_K";
    case DType::Q6_K: return "Q6_K";
    case DType::Q4_0: return "Q4_0";
    case DType::Q5_0: return "Q5_0";
    case DType::Q5_K: return "Q5_K";
    case DType::Q4_1: return "Q4_1";
    case DType::Q5_1: return "Q5_1";
  }
  return "?";
}

std::optional<QuantType> quant_type_of(DType t) {
  switch (t) {
    case DType::Q8_0: return QuantType::Q8_0;
    case DType::Q4_K: return QuantType::Q4_K;
    case DType::Q6_K: return QuantType::Q6_K;
    case DType::Q4_0: return QuantType::Q4_0;
    case DType::Q5_0: return QuantType::Q5_0;
    case DType::Q5_K: return QuantType::Q5_K;
    case DType::Q4_1: return QuantType::Q4_1;
    case DType::Q5_1: return QuantType::Q5_1;
    default: return std::nullopt;
  }
}

bool is_quantized(DType t) { return quant_type_of(t).has_value(); }

DType dtype_of(QuantType t) {
  switch (t) {
    case QuantType::Q8_0: return DType::Q8_0;
    case QuantType::Q4_K: return DType::Q4_K;
    case QuantType::Q6_K: return DType::Q6_K;
    case QuantType::Q4_0: return DType::Q4_0;
    case QuantType::Q5_0: return DType::Q5_0;
    case QuantType::Q5_K: return DType::Q5_K;
    case QuantType::Q4_1: return DType::Q4_1;
    case QuantType::Q5_1: return DType::Q5_1;
  }
  return DType::Q8_0;
}

size_t row_bytes(DType t, int64_t cols) {
  if (const auto q = quant_type_of(t)) return quant_row_bytes(*q, cols);
  return size_t(cols) * dtype_size(t);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t Tensor::nbytes() const {
  if (shape.empty()) return dtype_size(dtype);
  const int64_t inner = shape.back();
  return inner == 0 ? 0 : size_t(numel() / inner) * row_bytes(dtype, inner);
}

}  // namespace runahead
