#include <map>

#include <nlohmann/json.hpp>

#include "model/json_file.h"
#include "model/model_error.h"
#include "model/q8_0_pairs.h"
#include "model/regular_file.h"
#include "model/safetensors.h"

namespace runahead {

using nlohmann::json;

namespace {

// model.safetensors.index.json: {"weight_map": {"<tensor>": "<shard file>", ...}}.
std::map<std::string, std::string> read_weight_map(const std::filesystem::path& path) {
  const std::string file = path.string();
  const json j = read_json_file(path, "a JSON object with weight_map");
  if (!j.is_object()) model_error(file, "", "is a JSON " + std::string(j.type_name()), "a JSON object with weight_map");
  const auto it = j.find("weight_map");
  if (it == j.end() || !it->is_object())
    model_error(file, "weight_map", "field 'weight_map' is missing or not an object",
                "an object mapping tensor names to shard files");
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : it->items()) {
    // A shard is a file beside the index, never a path that leaves the folder.
    if (!shard.is_string() || shard.get<std::string>().empty() ||
        shard.get<std::string>().find('/') != std::string::npos)
      model_error(file, name, "weight_map entry '" + name + "' is " + shard.dump(),
                  "the file name of a shard in the model folder");
    map[name] = shard.get<std::string>();
  }
  return map;
}

}  // namespace

std::shared_ptr<WeightStore> WeightStore::open(const std::filesystem::path& model_dir) {
  auto store = std::make_shared<WeightStore>();
  const auto index_path = model_dir / "model.safetensors.index.json";
  const auto single_path = model_dir / "model.safetensors";

  std::map<std::string, std::string> weight_map;  // tensor -> shard; empty for one file
  std::vector<std::filesystem::path> shards;
  if (has_entry(index_path)) {
    weight_map = read_weight_map(index_path);
    std::map<std::string, bool> seen;
    for (const auto& [name, shard] : weight_map)
      if (!seen[shard]) seen[shard] = true, shards.push_back(model_dir / shard);
  } else if (has_entry(single_path)) {
    shards.push_back(single_path);
  } else {
    model_error(single_path.string(), "", "missing: the folder has neither model.safetensors nor "
                                          "model.safetensors.index.json",
                "safetensors weights in the model folder");
  }

  for (const auto& path : shards) {
    const std::string file = path.string();
    if (!has_entry(path))
      model_error(file, "weight_map", "shard listed in " + index_path.filename().string() + " is missing",
                  "every shard named by the index to exist");
    auto map = std::make_unique<MappedFile>(path);
    for (Tensor& t : parse_safetensors(map->data(), map->size(), file)) {
      if (store->file_of_.count(t.name))
        model_error(file, t.name, "tensor '" + t.name + "' is also in " + store->file_of_[t.name],
                    "each tensor in exactly one file");
      store->file_of_[t.name] = file;
      store->tensors_[t.name] = std::move(t);
    }
    store->maps_.push_back(std::move(map));
    store->files_.push_back(file);
  }

  for (const auto& [name, shard] : weight_map) {
    const std::string file = (model_dir / shard).string();
    const auto it = store->file_of_.find(name);
    if (it == store->file_of_.end() || it->second != file)
      model_error(file, name,
                  "tensor '" + name + "' is listed in the index but not in its shard",
                  "the shard to hold every tensor the index assigns to it");
  }
  join_q8_0_pairs(store->tensors_, [&](const std::string& name) { return store->file_of_.at(name); },
                  store->q8_0_blocks_);
  return store;
}

const Tensor* WeightStore::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

size_t WeightStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.nbytes();
  return n;
}

}  // namespace runahead
