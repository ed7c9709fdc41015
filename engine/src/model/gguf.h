#pragma once
// GGUF, llama.cpp's one-file model format (versions 2 and 3, little-endian): magic "GGUF",
// version, tensor count, metadata count, typed key/value metadata, tensor infos (name,
// dims, ggml type, offset), then tensor data aligned to general.alignment (default 32).
// The file is memory-mapped; tensors and metadata strings are views into the mapping.
// Every malformed file is an EngineError{"model_error"} naming the key or tensor.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/quant_format.h"
#include "model/tensor.h"

namespace runahead {

class GgufMapping;

enum class GgufValueType : uint32_t {
  Uint8 = 0, Int8 = 1, Uint16 = 2, Int16 = 3, Uint32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
  String = 8, Array = 9, Uint64 = 10, Int64 = 11, Float64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);  // "uint32", "string", "array", ...

// ggml's tensor type numbers that the engine reads; any other is refused by name.
inline constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlBF16 = 30;
const char* ggml_type_name(uint32_t type);  // "Q4_K", "IQ2_XS", ... or "unknown"
std::string readable_ggml_types();          // "F32, F16, BF16, Q8_0, ...": every type the engine reads

// One metadata value. Scalars are held decoded; strings and arrays point into the file
// (already bounds-checked) and are decoded by GgufFile's accessors.
struct GgufValue {
  GgufValueType type = GgufValueType::Uint8;
  uint64_t u = 0;          // unsigned integers and bool
  int64_t i = 0;           // signed integers
  double f = 0;            // floats
  std::string_view str;    // String
  GgufValueType elem_type = GgufValueType::Uint8;  // Array
  uint64_t count = 0;      // Array: number of elements
  const uint8_t* elems = nullptr;  // Array: the encoded elements

  bool is_integer() const;
  bool is_float() const { return type == GgufValueType::Float32 || type == GgufValueType::Float64; }
};

struct GgufTensor {
  std::string name;             // as in the file: "blk.0.attn_q.weight"
  uint32_t type = 0;            // ggml type number: kGgmlF32/F16/BF16 or a QuantFormat's ggml_id
  std::vector<int64_t> shape;   // outermost first (GGUF's dims reversed): a Linear is [out, in]
  uint64_t offset = 0;          // within the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;

  // F32/F16/BF16 as the engine's dense DType; nullopt for a block format.
  std::optional<DType> dense_dtype() const;
  // A block format of model/quant_format.h (Q8_0, Q4_K, ...); nullopt for a dense type.
  std::optional<QuantType> quant_type() const;
  // The view (data, storage format, shape) under `name`: a dense dtype or a block format.
  Tensor view(const std::string& name) const;
};

class GgufFile {
 public:
  // Maps the file and parses it; throws EngineError{"model_error"} naming the file.
  static std::unique_ptr<GgufFile> open(const std::filesystem::path& path);
  // Parses `size` bytes held in memory (tests, fuzzing); views point into `bytes`.
  static std::unique_ptr<GgufFile> parse(const uint8_t* bytes, size_t size, const std::string& file);
  ~GgufFile();

  const std::string& file() const { return file_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;

  // Typed reads; a missing key (for the required forms) or one of another type is a
  // model_error naming the key and the type expected.
  std::string string(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  // Any integer type (and bool) whose value lies in [min, max].
  int64_t integer(std::string_view key, int64_t min, int64_t max) const;
  std::optional<int64_t> optional_integer(std::string_view key, int64_t min, int64_t max) const;
  // Float32/Float64 (integers accepted too).
  std::optional<double> optional_number(std::string_view key) const;
  // Arrays: every element of the named type family.
  std::vector<std::string_view> strings(std::string_view key) const;
  std::vector<int64_t> integers(std::string_view key) const;
  std::vector<double> numbers(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(std::string_view name) const;

  [[noreturn]] void fail(const std::string& field, const std::string& problem, const std::string& expected) const;

 private:
  GgufFile() = default;
  void parse_all(const uint8_t* bytes, size_t size);
  const GgufValue& array_of(std::string_view key, const char* expected) const;

  std::string file_;
  std::unique_ptr<GgufMapping> map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> key_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace runahead
