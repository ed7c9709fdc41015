#include "model/quantize.h"

#include <string>

#include "cpu/quant_blocks.h"
#include "model/error.h"
#include "model/half.h"
#include "model/layout.h"
#include "model/numerics.h"

namespace runahead {

namespace {

// The buffers of converted tensors, and the storage of the weights they were made from
// (norms, biases and untouched matrices still point into it).
struct ConvertedStorage {
  std::shared_ptr<void> base;
  std::vector<std::vector<uint8_t>> buffers;
};

// Replaces every matrix of `w` by convert(matrix) (or leaves it when that returns false),
// keeping a tied lm_head tied; recounts the bytes a decode step reads.
template <class Convert>
ModelWeights convert_matrices(const ModelWeights& w, Convert&& convert) {
  ModelWeights out = w;
  auto storage = std::make_shared<ConvertedStorage>();
  storage->base = w.storage;
  auto apply = [&](Tensor& t) {
    std::vector<uint8_t> bytes;
    DType dtype;
    if (t.empty() || t.shape.size() != 2 || !convert(t, bytes, dtype)) return;
    storage->buffers.push_back(std::move(bytes));
    t.dtype = dtype;
    t.data = storage->buffers.back().data();
  };
  apply(out.embed);
  for (LayerWeights& l : out.layers)
    for (Tensor& t : l.by_role) apply(t);
  if (w.lm_head.data == w.embed.data)
    out.lm_head = out.embed;
  else
    apply(out.lm_head);
  out.dtype = out.embed.dtype;
  out.weight_bytes = decode_bytes(out);
  out.storage = storage;
  return out;
}

}  // namespace

ModelWeights quantize_matrices(const ModelWeights& w, QuantType type) {
  const QuantFormat& f = quant_format(type);
  return convert_matrices(w, [&](const Tensor& t, std::vector<uint8_t>& bytes, DType& dtype) {
    if (is_quantized(t.dtype)) return false;
    const int64_t rows = t.rows(), cols = t.cols();
    if (cols % f.block_elems != 0)
      throw EngineError("bad_request",
                        "options.weights \"" + std::string(f.name) + "\": tensor '" + t.name + "' has rows of " +
                            std::to_string(cols) + " weights, not a multiple of the format's block of " +
                            std::to_string(f.block_elems),
                        w.source, "options.weights", "\"auto\", or a format whose block divides every row");
    const size_t rb = quant_row_bytes(type, cols);
    bytes.resize(size_t(rows) * rb);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      widen(t, r * cols, cols, row.data());
      quantize_row(type, row.data(), cols, bytes.data() + size_t(r) * rb);
    }
    dtype = dtype_of(type);
    return true;
  });
}

std::vector<uint16_t> dequantize_to_bf16(const Tensor& t) {
  const int64_t n = t.numel(), cols = t.shape.empty() ? 1 : t.shape.back();
  std::vector<uint16_t> out(static_cast<size_t>(n));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t i = 0; i < n; i += cols) {
    widen(t, i, cols, row.data());
    for (int64_t j = 0; j < cols; ++j) out[size_t(i + j)] = f32_to_bf16(row[size_t(j)]);
  }
  return out;
}

std::shared_ptr<const ModelWeights> with_bf16_matrices(std::shared_ptr<const ModelWeights> w) {
  if (!has_quantized_matrix(*w)) return w;
  return std::make_shared<const ModelWeights>(
      convert_matrices(*w, [](const Tensor& t, std::vector<uint8_t>& bytes, DType& dtype) {
        if (t.dtype == DType::BF16) return false;
        const std::vector<uint16_t> values = dequantize_to_bf16(t);
        const auto* begin = reinterpret_cast<const uint8_t*>(values.data());
        bytes.assign(begin, begin + values.size() * sizeof(uint16_t));
        dtype = DType::BF16;
        return true;
      }));
}

}  // namespace runahead
