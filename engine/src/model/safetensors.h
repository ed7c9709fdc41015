#pragma once
// safetensors: an 8-byte little-endian header length, a JSON header, then raw data.
// Files are memory-mapped; tensors are views into the mapping.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/tensor.h"

namespace runahead {

// Validates the header of a safetensors file held in memory (`size` bytes in all):
// header length within the file, JSON object, known dtypes, shapes, offsets within
// the data section and not overlapping, byte counts matching shapes.
// Throws EngineError{code "model_error", file, field = tensor name} on any problem.
// Returned tensors point into `bytes`.
std::vector<Tensor> parse_safetensors(const uint8_t* bytes, size_t size, const std::string& file);

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);  // throws EngineError
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int guard_ = -1;  // weight_mappings.h slot: a truncation while mapped is an error, not a SIGBUS
};

// All tensors of a model folder: model.safetensors, or the shards listed in
// model.safetensors.index.json; Q8_0 pairs (I8 weight + F16 weight_scale) joined into one
// Q8_0 tensor each (model/q8_0_pairs.h).
class WeightStore {
 public:
  static std::shared_ptr<WeightStore> open(const std::filesystem::path& model_dir);
  const Tensor* find(const std::string& name) const;
  const std::unordered_map<std::string, Tensor>& tensors() const { return tensors_; }
  const std::vector<std::string>& files() const { return files_; }
  size_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::vector<std::string> files_;
  std::unordered_map<std::string, Tensor> tensors_;
  std::unordered_map<std::string, std::string> file_of_;  // tensor name -> file, for errors
  std::vector<std::vector<uint8_t>> q8_0_blocks_;          // the joined Q8_0 tensors' data
  friend class WeightBinder;
};

}  // namespace runahead
