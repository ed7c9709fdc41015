#include "model/weights.h"

#include <algorithm>
#include <string_view>

#include "model/finite_scan.h"
#include "model/gguf_weights.h"
#include "model/layout.h"
#include "model/model_error.h"
#include "model/regular_file.h"
#include "model/safetensors.h"

namespace runahead {

// Takes each tensor the architecture needs out of the store, checking it against the config.
class WeightBinder {
 public:
  WeightBinder(const WeightStore& store, std::string where) : store_(store), where_(std::move(where)) {}

  Tensor bind(const TensorSlot& slot, const ModelConfig& config) const {
    const Tensor* t = store_.find(slot.name);
    if (!t)
      model_error(where_, slot.name, "tensor '" + slot.name + "' is missing",
                  "a tensor of shape " + shape_string(slot.shape) + " for " + config.architecture);
    if (t->shape != slot.shape)
      model_error(file_of(slot.name), slot.name,
                  "tensor '" + slot.name + "' has shape " + shape_string(t->shape),
                  "shape " + shape_string(slot.shape) + " from config.json");
    return *t;
  }

  const std::string& file_of(const std::string& name) const { return store_.file_of_.at(name); }

 private:
  const WeightStore& store_;
  std::string where_;  // the file that should have held a missing tensor
};

namespace {

// Before anything is sized per layer: the files must hold the last layer config.json names,
// so a num_hidden_layers of 10^6 fails at once instead of allocating gigabytes of tensor
// slots before the first missing tensor is named.
void check_layers_present(const ModelConfig& config, const WeightStore& store, const std::string& config_file) {
  constexpr std::string_view kPrefix = "model.layers.";
  int64_t layers = 0;  // one past the highest layer index of any tensor
  for (const auto& [name, tensor] : store.tensors()) {
    if (!name.starts_with(kPrefix)) continue;
    int64_t index = 0;
    size_t i = kPrefix.size();
    for (; i < name.size() && i < kPrefix.size() + 10 && name[i] >= '0' && name[i] <= '9'; ++i)
      index = index * 10 + (name[i] - '0');
    if (i > kPrefix.size()) layers = std::max(layers, index + 1);
  }
  if (config.num_layers <= layers) return;
  model_error(config_file, "num_hidden_layers",
              "field 'num_hidden_layers' is " + std::to_string(config.num_layers) + " but the safetensors files (" +
                  std::to_string(store.total_bytes()) + " bytes of tensors) hold " + std::to_string(layers) +
                  " layers",
              "the number of model.layers.N in the weights");
}

}  // namespace

ModelWeights load_model(const std::filesystem::path& dir, const ProgressFn& progress) {
  auto report = [&](const char* stage, int64_t done, int64_t total) {
    if (progress) progress(stage, done, total);
  };
  if (is_gguf_path(dir)) return load_gguf_model(dir, progress);
  ModelWeights w;
  w.config = load_config(dir);
  w.source = dir.string();

  report("mapping", 0, 1);
  std::shared_ptr<WeightStore> store = WeightStore::open(dir);
  report("mapping", 1, 1);
  check_layers_present(w.config, *store, (dir / "config.json").string());

  const auto index = dir / "model.safetensors.index.json";
  const WeightBinder binder(*store, store->files().size() == 1 && !has_entry(index)
                                        ? store->files()[0]
                                        : index.string());
  const std::vector<TensorSlot> slots = tensor_slots(w);
  const int groups = w.config.num_layers + 2;
  for (size_t i = 0; i < slots.size(); ++i) {
    *slots[i].dst = binder.bind(slots[i], w.config);
    if (i + 1 == slots.size() || slots[i + 1].group != slots[i].group)
      report("binding", slots[i].group + 1, groups);
  }
  check_matrix_dtypes(slots, [&](const std::string& name) { return binder.file_of(name); });
  for (const TensorSlot& s : slots) check_finite_sample(*s.dst, binder.file_of(s.name));
  finish_weights(w, slots);
  w.storage = store;
  return w;
}

}  // namespace runahead
