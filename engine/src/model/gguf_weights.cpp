#include "model/gguf_weights.h"

#include <cstring>
#include <memory>
#include <vector>

#include "model/finite_scan.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/layout.h"
#include "model/model_error.h"

namespace runahead {

namespace {

// The mapped file, and the q/k tensors copied out of it in Hugging Face row order.
struct GgufStorage {
  std::unique_ptr<GgufFile> file;
  std::vector<std::vector<uint8_t>> reordered;
};

// `t` with its rows (elements, for a bias) in HF order: HF row r is the file's row
// gguf_row_of_hf_row(r). Rows are whole blocks, so this never re-quantizes.
Tensor hf_row_order(const Tensor& t, int head_dim, GgufStorage& storage) {
  const int64_t rows = t.shape[0];
  const size_t row_bytes = t.nbytes() / size_t(rows);
  std::vector<uint8_t> out(t.nbytes());
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + size_t(r) * row_bytes, src + size_t(gguf_row_of_hf_row(r, head_dim)) * row_bytes, row_bytes);
  storage.reordered.push_back(std::move(out));
  Tensor copy = t;
  copy.data = storage.reordered.back().data();
  return copy;
}

}  // namespace

bool is_gguf_path(const std::filesystem::path& path) {
  return path.extension() == ".gguf" && !std::filesystem::is_directory(path);
}

ModelWeights load_gguf_model(const std::filesystem::path& path, const ProgressFn& progress) {
  auto report = [&](const char* stage, int64_t done, int64_t total) {
    if (progress) progress(stage, done, total);
  };
  auto storage = std::make_shared<GgufStorage>();
  report("mapping", 0, 1);
  storage->file = GgufFile::open(path);
  report("mapping", 1, 1);
  const GgufFile& g = *storage->file;

  ModelWeights w;
  w.config = gguf_config(g);
  w.source = path.string();
  const auto weights = gguf_weights(g, w.config);
  const std::vector<TensorSlot> slots = tensor_slots(w);
  const int groups = w.config.num_layers + 2;
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSlot& slot = slots[i];
    const auto it = weights.find(slot.name);
    if (it == weights.end())
      model_error(g.file(), slot.name, "has no tensor for '" + slot.name + "'",
                  "a tensor of shape " + shape_string(slot.shape) + " for " + w.config.architecture);
    const GgufTensor& t = *it->second.tensor;
    if (t.shape != slot.shape)
      model_error(g.file(), t.name, "tensor '" + t.name + "' has shape " + shape_string(t.shape),
                  "shape " + shape_string(slot.shape) + " for '" + slot.name + "' from the metadata");
    Tensor view = t.view(slot.name);
    if (it->second.interleaved_rope_head_dim > 0) view = hf_row_order(view, it->second.interleaved_rope_head_dim, *storage);
    *slot.dst = view;
    if (i + 1 == slots.size() || slots[i + 1].group != slot.group) report("binding", slot.group + 1, groups);
  }
  check_matrix_dtypes(slots, [&](const std::string&) { return g.file(); });
  for (const TensorSlot& s : slots) check_finite_sample(*s.dst, g.file());
  finish_weights(w, slots);
  w.storage = storage;
  return w;
}

}  // namespace runahead
