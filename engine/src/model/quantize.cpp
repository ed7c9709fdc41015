#include "model/quantize.h"

#include <cstring>
#include <string>

#include "model/quant_blocks.h"
#include "model/error.h"
#include "model/fp8.h"
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

ModelWeights with_dense_matrices(const ModelWeights& w, DType to) {
  return convert_matrices(w, [to](const Tensor& t, std::vector<uint8_t>& bytes, DType& dtype) {
    if (t.dtype == to) return false;
    const int64_t n = t.numel(), cols = t.cols();
    const size_t size = dtype_size(to);
    bytes.resize(size_t(n) * size);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t i = 0; i < n; i += cols) {
      widen(t, i, cols, row.data());
      uint8_t* dst = bytes.data() + size_t(i) * size;
      if (to == DType::F32) {
        std::memcpy(dst, row.data(), size_t(cols) * size);
        continue;
      }
      for (int64_t j = 0; j < cols; ++j) {
        const uint16_t half = to == DType::BF16 ? f32_to_bf16(row[size_t(j)]) : f32_to_f16(row[size_t(j)]);
        std::memcpy(dst + size_t(j) * size, &half, size);
      }
    }
    dtype = to;
    return true;
  });
}

ModelWeights with_fp8_matrices_reference(const ModelWeights& w, bool matrices, bool lm_head) {
  ModelWeights out = with_dense_matrices(w, DType::F32);
  auto storage = std::make_shared<ConvertedStorage>();
  storage->base = out.storage;
  // A new f32 tensor holding f(values of t).
  const auto replaced = [&](const Tensor& t, auto&& f) {
    std::vector<float> values = widen(t);
    f(values, t.cols());
    std::vector<uint8_t>& bytes = storage->buffers.emplace_back(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    Tensor r = t;
    r.data = bytes.data();
    return r;
  };
  const auto fp8_rows = [](std::vector<float>& v, int64_t cols) {
    std::vector<uint8_t> q(static_cast<size_t>(cols));
    for (size_t i = 0; i < v.size(); i += size_t(cols)) {
      const float scale = quantize_fp8_row(v.data() + i, cols, q.data());
      for (int64_t j = 0; j < cols; ++j) v[i + size_t(j)] = fp8_e4m3_to_f32(q[size_t(j)]) * scale;
    }
  };
  if (lm_head || matrices) {
    out.lm_head = replaced(out.lm_head, fp8_rows);
    out.config.tie_word_embeddings = false;
  }
  if (matrices) {
    for (LayerWeights& l : out.layers)
      for (Tensor& t : l.by_role)
        if (!t.empty() && t.shape.size() == 2) t = replaced(t, fp8_rows);
    out.embed = replaced(out.embed, [](std::vector<float>& v, int64_t) {
      for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    });
  }
  out.weight_bytes = decode_bytes(out);
  out.storage = storage;
  return out;
}

std::shared_ptr<const ModelWeights> with_bf16_matrices(std::shared_ptr<const ModelWeights> w) {
  if (!has_quantized_matrix(*w)) return w;
  return std::make_shared<const ModelWeights>(with_dense_matrices(*w, DType::BF16));
}

}  // namespace runahead
