#include "model/quantize.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "model/quant_blocks.h"
#include "model/error.h"
#include "model/fp8.h"
#include "model/half.h"
#include "model/layout.h"
#include "model/numerics.h"
#include "model/weight_mappings.h"

namespace runahead {

namespace {

// The bytes of a converted matrix, left uninitialised: the threads that convert its rows
// write them, so its pages are first touched (faulted in) in parallel instead of being
// zeroed here on one thread. A large one is 2 MiB-aligned and, on Linux, advised as huge
// pages (fewer faults; the kernel may decline).
class MatrixBytes {
 public:
  MatrixBytes() = default;
  explicit MatrixBytes(size_t size) : size_(size) {
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t align = size >= kHuge ? kHuge : 64;
    bytes_.reset(static_cast<uint8_t*>(std::aligned_alloc(align, std::max(align, (size + align - 1) / align * align))));
    if (!bytes_) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == kHuge) ::madvise(bytes_.get(), (size + align - 1) / align * align, MADV_HUGEPAGE);
#endif
  }
  uint8_t* data() { return bytes_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return !bytes_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> bytes_;
  size_t size_ = 0;
};

// The buffers of converted tensors, and the storage of the weights they were made from
// (norms, biases and untouched matrices still point into it).
struct ConvertedStorage {
  std::shared_ptr<void> base;
  std::vector<MatrixBytes> buffers;
};

// Where a matrix sits in the model: the embedding (`tied`: also the output head), a layer's
// matrix of role `role`, or an untied lm_head.
struct Place {
  enum Kind : uint8_t { Embed, Layer, Head } kind;
  bool tied = false;
  int layer = -1;  // Layer: its index
  Role role = Role::Count;
};

bool is_matrix(const Tensor& t) { return !t.empty() && t.shape.size() == 2; }

// f(t) for every matrix of `w` (embedding, layers', an untied lm_head), each once.
template <class F>
void each_matrix(const ModelWeights& w, F&& f) {
  const auto visit = [&](const Tensor& t) {
    if (is_matrix(t)) f(t);
  };
  visit(w.embed);
  for (const LayerWeights& l : w.layers)
    for (const Tensor& t : l.by_role) visit(t);
  if (w.lm_head.data != w.embed.data) visit(w.lm_head);
}

// Replaces every matrix of `w` by convert(matrix, place, dtype) (a MatrixBytes of the matrix in
// `dtype`; an empty one leaves the matrix as it is), keeping a tied lm_head tied; recounts
// the bytes a decode step reads. `progress` (stage "quantizing": matrices done of all)
// before the first matrix and after each.
template <class Convert>
ModelWeights convert_matrices(const ModelWeights& w, Convert&& convert, const ProgressFn& progress = {}) {
  ModelWeights out = w;
  auto storage = std::make_shared<ConvertedStorage>();
  storage->base = w.storage;
  const bool tied = w.lm_head.data == w.embed.data;
  int64_t total = 0, done = 0;
  each_matrix(w, [&](const Tensor&) { ++total; });
  if (progress) progress("quantizing", 0, total);
  auto apply = [&](Tensor& t, const Place& place) {
    if (!is_matrix(t)) return;
    DType dtype = t.dtype;
    if (MatrixBytes bytes = convert(t, place, dtype); !bytes.empty()) {
      t.dtype = dtype;
      t.data = storage->buffers.emplace_back(std::move(bytes)).data();
    }
    if (progress) progress("quantizing", ++done, total);
  };
  apply(out.embed, Place{Place::Embed, tied});
  for (size_t i = 0; i < out.layers.size(); ++i)
    for (size_t r = 0; r < size_t(Role::Count); ++r) apply(out.layers[i].by_role[r], Place{Place::Layer, false, int(i), Role(r)});
  if (tied)
    out.lm_head = out.embed;
  else
    apply(out.lm_head, Place{Place::Head});
  out.dtype = out.embed.dtype;
  out.weight_bytes = decode_bytes(out);
  out.storage = storage;
  return out;
}

// body(begin, end) over the rows [0, rows) in chunks of about 64K weights, on up to
// std::thread::hardware_concurrency() threads (this one included). Each row is written by
// one call whatever the schedule, so the result does not depend on the number of threads.
// An exception in a chunk stops the others at their next chunk and is rethrown here.
template <class Body>
void for_row_chunks(int64_t rows, int64_t cols, Body&& body) {
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, cols));
  const int64_t chunks = (rows + chunk - 1) / chunk;
  const int threads = int(std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), chunks));
  if (threads <= 1) {
    if (rows > 0) body(int64_t(0), rows);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    try {
      for (int64_t c; (c = next.fetch_add(1)) < chunks;) body(c * chunk, std::min(rows, (c + 1) * chunk));
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      next = chunks;
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads - 1));
  for (int i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// t's rows in format `type`, quantized on every core. Throws the bad_request of
// quantize_matrices (naming `option`) when a row is not whole blocks.
MatrixBytes quantized_rows(const ModelWeights& w, const Tensor& t, QuantType type, const std::string& option) {
  const QuantFormat& f = quant_format(type);
  const int64_t rows = t.rows(), cols = t.cols();
  if (cols % f.block_elems != 0)
    throw EngineError("bad_request",
                      "options.weights \"" + option + "\": tensor '" + t.name + "' has rows of " + std::to_string(cols) +
                          " weights, not a multiple of the " + f.name + " block of " + std::to_string(f.block_elems),
                      w.source, "options.weights", "\"auto\", or a format whose block divides every row");
  const size_t rb = quant_row_bytes(type, cols);
  MatrixBytes bytes(size_t(rows) * rb);
  for_row_chunks(rows, cols, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      widen(t, r * cols, cols, row.data());
      quantize_row(type, row.data(), cols, bytes.data() + size_t(r) * rb);
    }
  });
  return bytes;
}

}  // namespace

bool q4_k_m_more_bits(int layer, int layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

QuantType q4_k_m_type(const ModelWeights& w, const Tensor& t, bool head, int layer, Role role) {
  const int64_t k_block = quant_format(QuantType::Q4_K).block_elems;  // Q6_K's too
  if (t.cols() % k_block != 0) return QuantType::Q8_0;
  if (head) return QuantType::Q6_K;
  if (layer >= 0 && (role == Role::Wv || role == Role::WDown) && q4_k_m_more_bits(layer, int(w.layers.size())))
    return QuantType::Q6_K;
  return QuantType::Q4_K;
}

ModelWeights quantize_matrices(const ModelWeights& w, QuantType type, const ProgressFn& progress) {
  return convert_matrices(
      w,
      [&](const Tensor& t, const Place&, DType& dtype) {
        if (is_quantized(t.dtype)) return MatrixBytes();
        dtype = dtype_of(type);
        return quantized_rows(w, t, type, quant_format(type).name);
      },
      progress);
}

ModelWeights quantize_q4_k_m(const ModelWeights& w, const ProgressFn& progress) {
  return convert_matrices(
      w,
      [&](const Tensor& t, const Place& p, DType& dtype) {
        if (is_quantized(t.dtype)) return MatrixBytes();
        const QuantType type = q4_k_m_type(w, t, p.kind == Place::Head || p.tied, p.kind == Place::Layer ? p.layer : -1, p.role);
        dtype = dtype_of(type);
        return quantized_rows(w, t, type, "q4_k_m");
      },
      progress);
}

bool quantizes_at_load(std::string_view weights) { return weights == "q8_0" || weights == "q4_k_m"; }

ModelWeights quantize_for_option(const ModelWeights& w, std::string_view weights, const ProgressFn& progress) {
  if (weights == "q8_0") return quantize_matrices(w, QuantType::Q8_0, progress);
  if (weights == "q4_k_m") return quantize_q4_k_m(w, progress);
  throw EngineError("bad_request", "options.weights: \"" + std::string(weights) + "\" does not quantize at load", w.source,
                    "options.weights", "\"q8_0\" or \"q4_k_m\"");
}

ModelWeights with_dense_matrices(const ModelWeights& w, DType to) {
  return convert_matrices(w, [to](const Tensor& t, const Place&, DType& dtype) {
    if (t.dtype == to) return MatrixBytes();
    const int64_t rows = t.rows(), cols = t.cols();
    const size_t size = dtype_size(to);
    MatrixBytes bytes(size_t(rows * cols) * size);
    for_row_chunks(rows, cols, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = begin; r < end; ++r) {
        widen(t, r * cols, cols, row.data());
        uint8_t* dst = bytes.data() + size_t(r * cols) * size;
        if (to == DType::F32) {
          std::memcpy(dst, row.data(), size_t(cols) * size);
          continue;
        }
        for (int64_t j = 0; j < cols; ++j) {
          const uint16_t half = to == DType::BF16 ? f32_to_bf16(row[size_t(j)]) : f32_to_f16(row[size_t(j)]);
          std::memcpy(dst + size_t(j) * size, &half, size);
        }
      }
    });
    dtype = to;
    return bytes;
  });
}

size_t mapped_matrix_bytes(const ModelWeights& w) {
  size_t bytes = 0;
  each_matrix(w, [&](const Tensor& t) {
    if (in_weight_mapping(t.data)) bytes += t.nbytes();
  });
  return bytes;
}

ModelWeights with_mapped_matrices_copied(const ModelWeights& w) {
  return convert_matrices(w, [](const Tensor& t, const Place&, DType&) {
    if (!in_weight_mapping(t.data)) return MatrixBytes();
    const int64_t rows = t.rows();
    const size_t row_bytes = t.nbytes() / size_t(rows);
    MatrixBytes bytes(t.nbytes());
    for_row_chunks(rows, int64_t(row_bytes), [&](int64_t begin, int64_t end) {  // first touch on every core
      std::memcpy(bytes.data() + size_t(begin) * row_bytes, static_cast<const uint8_t*>(t.data) + size_t(begin) * row_bytes,
                  size_t(end - begin) * row_bytes);
    });
    return bytes;
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
    MatrixBytes& bytes = storage->buffers.emplace_back(values.size() * sizeof(float));
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
