#include "model/gguf.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "model/model_error.h"
#include "model/regular_file.h"
#include "model/weight_mappings.h"

namespace runahead {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr uint64_t kMaxName = 63;        // GGML_MAX_NAME less its terminating NUL
constexpr int kMaxArrayDepth = 4;        // arrays of arrays: real files use none
constexpr const char* kLayout =
    "GGUF v2/v3: magic, version, tensor count, metadata count, metadata, tensor infos, aligned data";

// Encoded size of a scalar value type, 0 for String and Array.
size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::Uint8: case GgufValueType::Int8: case GgufValueType::Bool: return 1;
    case GgufValueType::Uint16: case GgufValueType::Int16: return 2;
    case GgufValueType::Uint32: case GgufValueType::Int32: case GgufValueType::Float32: return 4;
    case GgufValueType::Uint64: case GgufValueType::Int64: case GgufValueType::Float64: return 8;
    default: return 0;
  }
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Decodes a scalar at p (its bytes already bounds-checked) into v's u/i/f.
void decode_scalar(GgufValueType t, const uint8_t* p, GgufValue& v) {
  switch (t) {
    case GgufValueType::Uint8: v.u = load<uint8_t>(p); break;
    case GgufValueType::Int8: v.i = load<int8_t>(p); break;
    case GgufValueType::Uint16: v.u = load<uint16_t>(p); break;
    case GgufValueType::Int16: v.i = load<int16_t>(p); break;
    case GgufValueType::Uint32: v.u = load<uint32_t>(p); break;
    case GgufValueType::Int32: v.i = load<int32_t>(p); break;
    case GgufValueType::Float32: v.f = load<float>(p); break;
    case GgufValueType::Bool: v.u = load<uint8_t>(p); break;
    case GgufValueType::Uint64: v.u = load<uint64_t>(p); break;
    case GgufValueType::Int64: v.i = load<int64_t>(p); break;
    case GgufValueType::Float64: v.f = load<double>(p); break;
    default: break;
  }
}

bool is_signed(GgufValueType t) {
  return t == GgufValueType::Int8 || t == GgufValueType::Int16 || t == GgufValueType::Int32 ||
         t == GgufValueType::Int64;
}

// A bounds-checked cursor over the file; every complaint names what was being read.
class Reader {
 public:
  Reader(const GgufFile& g, const uint8_t* bytes, size_t size) : g_(g), p_(bytes), size_(size) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& field, const std::string& what) const {
    if (n > left())
      g_.fail(field, "is truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " +
                         std::to_string(pos_) + " but the file has " + std::to_string(left()) + " left",
              "a complete file (" + std::string(kLayout) + ")");
  }
  template <class T>
  T read(const std::string& field, const std::string& what) {
    need(sizeof(T), field, what);
    const T v = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::string_view string(const std::string& field, const std::string& what) {
    const uint64_t n = read<uint64_t>(field, what + " length");
    need(n, field, what + " of " + std::to_string(n) + " bytes");
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }
  const uint8_t* here() const { return p_ + pos_; }
  void skip(uint64_t n) { pos_ += n; }  // after need()

 private:
  const GgufFile& g_;
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
};

GgufValueType value_type(const GgufFile& g, uint32_t raw, const std::string& key) {
  if (raw > uint32_t(GgufValueType::Float64))
    g.fail(key, "metadata '" + key + "' has value type " + std::to_string(raw) + ", which GGUF does not define",
           "a value type 0..12 (uint8 .. float64)");
  return GgufValueType(raw);
}

// Reads (and bounds-checks) one value of type t; arrays are walked, not copied.
void read_value(const GgufFile& g, Reader& r, GgufValueType t, const std::string& key, GgufValue& v, int depth) {
  v.type = t;
  if (const size_t n = scalar_size(t)) {
    r.need(n, key, "the " + std::string(gguf_value_type_name(t)) + " value of '" + key + "'");
    decode_scalar(t, r.here(), v);
    r.skip(n);
    if (t == GgufValueType::Bool && v.u > 1)
      g.fail(key, "metadata '" + key + "' is a bool of value " + std::to_string(v.u), "0 or 1");
    return;
  }
  if (t == GgufValueType::String) {
    v.str = r.string(key, "the string value of '" + key + "'");
    return;
  }
  if (depth >= kMaxArrayDepth)
    g.fail(key, "metadata '" + key + "' nests arrays " + std::to_string(depth + 1) + " deep",
           "arrays nested at most " + std::to_string(kMaxArrayDepth) + " deep");
  v.elem_type = value_type(g, r.read<uint32_t>(key, "the array type of '" + key + "'"), key);
  v.count = r.read<uint64_t>(key, "the array length of '" + key + "'");
  v.elems = r.here();
  // Every element takes at least this many bytes: a length that cannot fit is refused
  // before any element is read (no allocation depends on it).
  const size_t min_elem = scalar_size(v.elem_type) ? scalar_size(v.elem_type)
                          : v.elem_type == GgufValueType::String ? 8 : 12;
  if (v.count > r.left() / min_elem)
    g.fail(key, "metadata '" + key + "' declares " + std::to_string(v.count) + " " +
                    gguf_value_type_name(v.elem_type) + " elements, more than the " +
                    std::to_string(r.left()) + " bytes left in the file can hold",
           "an array length that fits in the file");
  if (scalar_size(v.elem_type)) {
    r.skip(v.count * min_elem);
    if (v.elem_type == GgufValueType::Bool)
      for (uint64_t k = 0; k < v.count; ++k)
        if (v.elems[k] > 1) g.fail(key, "metadata '" + key + "' has a bool element of value " + std::to_string(v.elems[k]), "0 or 1");
    return;
  }
  GgufValue elem;
  for (uint64_t k = 0; k < v.count; ++k) read_value(g, r, v.elem_type, key, elem, depth + 1);
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  static const char* names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                "bool", "string", "array", "uint64", "int64", "float64"};
  const auto i = uint32_t(t);
  return i < std::size(names) ? names[i] : "unknown";
}

const char* ggml_type_name(uint32_t type) {
  static const char* names[] = {
      "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
      "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
      "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4",
      "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  return type < std::size(names) ? names[type] : "unknown";
}

std::string readable_ggml_types() {
  std::string names = "F32, F16, BF16";
  for (const QuantFormat& f : kQuantFormats) names += std::string(", ") + ggml_type_name(f.ggml_id);
  return names;
}

bool GgufValue::is_integer() const {
  return scalar_size(type) && !is_float();
}

std::optional<DType> GgufTensor::dense_dtype() const {
  switch (type) {
    case kGgmlF32: return DType::F32;
    case kGgmlF16: return DType::F16;
    case kGgmlBF16: return DType::BF16;
    default: return std::nullopt;
  }
}

std::optional<QuantType> GgufTensor::quant_type() const { return quant_type_of_ggml(type); }

Tensor GgufTensor::view(const std::string& as) const {
  if (const auto dtype = dense_dtype()) return Tensor{as, *dtype, shape, data};
  if (const auto quant = quant_type()) return Tensor{as, dtype_of(*quant), shape, data};
  throw EngineError("model_error", "tensor '" + name + "' is " + ggml_type_name(type) + ", which the engine cannot read",
                    {}, name, "one of " + readable_ggml_types());
}

// The whole file, mapped read-only and guarded like the safetensors mappings: a file
// truncated while loaded becomes a model_error, not a SIGBUS.
class GgufMapping {
 public:
  explicit GgufMapping(const std::filesystem::path& path) {
    const RegularFile f(path, "a readable GGUF file");
    size_ = f.size();
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, f.fd(), 0);
    if (p == MAP_FAILED)
      model_error(path.string(), "", std::string("cannot map: ") + std::strerror(errno), "a mappable file");
    data_ = static_cast<const uint8_t*>(p);
    guard_ = guard_mapping(data_, size_, path.string());
  }
  ~GgufMapping() {
    if (!data_) return;
    unguard_mapping(guard_);
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  GgufMapping(const GgufMapping&) = delete;
  GgufMapping& operator=(const GgufMapping&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int guard_ = -1;
};

GgufFile::~GgufFile() = default;

void GgufFile::fail(const std::string& field, const std::string& problem, const std::string& expected) const {
  model_error(file_, field, problem, expected);
}

std::unique_ptr<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  auto map = std::make_unique<GgufMapping>(path);
  auto g = parse(map->data(), map->size(), path.string());
  g->map_ = std::move(map);
  return g;
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* bytes, size_t size, const std::string& file) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->file_ = file;
  g->parse_all(bytes, size);
  return g;
}

void GgufFile::parse_all(const uint8_t* bytes, size_t size) {
  Reader r(*this, bytes, size);
  if (r.read<uint32_t>("magic", "the magic") != kMagic)
    fail("magic", "does not start with the GGUF magic", "the bytes \"GGUF\" (" + std::string(kLayout) + ")");
  version_ = r.read<uint32_t>("version", "the version");
  if (version_ != 2 && version_ != 3)
    fail("version", "is GGUF version " + std::to_string(version_) + ", which is not supported",
         "version 2 or 3 (llama.cpp has written v3 since 2023; re-convert older files)");
  const uint64_t n_tensors = r.read<uint64_t>("tensor_count", "the tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata_kv_count", "the metadata count");
  // Lower bounds of an entry's encoding: a count past them cannot be real.
  if (n_kv > r.left() / 13)
    fail("metadata_kv_count", "declares " + std::to_string(n_kv) + " metadata entries, more than the file can hold",
         "a metadata count that fits in the file");
  if (n_tensors > r.left() / 24)
    fail("tensor_count", "declares " + std::to_string(n_tensors) + " tensors, more than the file can hold",
         "a tensor count that fits in the file");

  metadata_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string entry = "metadata entry " + std::to_string(k);
    const std::string key(r.string(entry, "the key of " + entry));
    if (key.empty()) fail(entry, entry + " has an empty key", "a non-empty key such as general.architecture");
    if (key_index_.count(key)) fail(key, "metadata '" + key + "' appears twice", "each key once");
    GgufValue v;
    read_value(*this, r, value_type(*this, r.read<uint32_t>(key, "the value type of '" + key + "'"), key), key, v, 0);
    key_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(key, v);
  }

  if (find("general.alignment")) {
    const GgufValue& a = *find("general.alignment");
    if (a.type != GgufValueType::Uint32 || a.u == 0 || (a.u & (a.u - 1)) != 0)
      fail("general.alignment", "metadata 'general.alignment' is not a power-of-two uint32",
           "a uint32 power of two (default 32)");
    alignment_ = a.u;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const std::string entry = "tensor info " + std::to_string(k);
    GgufTensor t;
    t.name = std::string(r.string(entry, "the name of " + entry));
    const std::string& name = t.name;
    auto bad = [&](const std::string& problem, const std::string& expected) {
      fail(name, "tensor '" + name + "' " + problem, expected);
    };
    if (name.empty() || name.size() > kMaxName)
      fail(name.empty() ? entry : name, entry + " has a name of " + std::to_string(name.size()) + " bytes",
           "a name of 1 to " + std::to_string(kMaxName) + " bytes");
    if (tensor_index_.count(name)) bad("appears twice", "each tensor name once");
    const uint32_t n_dims = r.read<uint32_t>(name, "the dimension count of '" + name + "'");
    if (n_dims < 1 || n_dims > kMaxDims)
      bad("has " + std::to_string(n_dims) + " dimensions", "1 to " + std::to_string(kMaxDims));
    uint64_t numel = 1;
    std::vector<uint64_t> dims(n_dims);
    for (uint64_t& d : dims) {
      d = r.read<uint64_t>(name, "the dimensions of '" + name + "'");
      if (d == 0 || d > uint64_t(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(numel, d, &numel) ||
          numel > uint64_t(std::numeric_limits<int64_t>::max()))
        bad("has dimensions that are zero or whose product overflows", "positive dimensions of at most 2^63 elements in all");
    }
    t.type = r.read<uint32_t>(name, "the type of '" + name + "'");
    t.offset = r.read<uint64_t>(name, "the offset of '" + name + "'");
    const auto quant = t.quant_type();
    if (!t.dense_dtype() && !quant)
      bad("has type " + std::string(ggml_type_name(t.type)) + " (" + std::to_string(t.type) + "), which is not supported",
          "one of " + readable_ggml_types());
    const uint64_t block = quant ? quant_format(*quant).block_elems : 1;
    const uint64_t block_bytes = quant ? quant_format(*quant).block_bytes : dtype_size(*t.dense_dtype());
    if (dims[0] % block != 0)
      bad("is " + std::string(ggml_type_name(t.type)) + " with rows of " + std::to_string(dims[0]) + " elements",
          "a row length that is a multiple of " + std::to_string(block));
    if (__builtin_mul_overflow(numel / block, block_bytes, &t.nbytes))
      bad("has more bytes than 2^64", "a tensor that fits in the file");
    if (t.offset % alignment_ != 0)
      bad("has offset " + std::to_string(t.offset) + ", not a multiple of the alignment " + std::to_string(alignment_),
          "offsets aligned to general.alignment");
    for (uint32_t d = n_dims; d > 0; --d) t.shape.push_back(int64_t(dims[d - 1]));
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the infos.
  data_offset_ = r.pos() + (alignment_ - r.pos() % alignment_) % alignment_;
  const uint64_t data_size = data_offset_ <= size ? size - data_offset_ : 0;
  struct Span { uint64_t begin, end; size_t tensor; };
  std::vector<Span> spans;
  for (size_t k = 0; k < tensors_.size(); ++k) {
    GgufTensor& t = tensors_[k];
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail(t.name, "tensor '" + t.name + "' at data offset " + std::to_string(t.offset) + " with " +
                       std::to_string(t.nbytes) + " bytes runs past the end of the file (data section of " +
                       std::to_string(data_size) + " bytes); is the file truncated?",
           "tensor data within the file");
    t.data = bytes + data_offset_ + t.offset;
    spans.push_back({t.offset, t.offset + t.nbytes, k});
  }
  // Two tensors sharing bytes would alias weights: refuse rather than guess.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < spans.size(); ++k)
    if (spans[k].begin < spans[k - 1].end) {
      const std::string& a = tensors_[spans[k - 1].tensor].name;
      const std::string& b = tensors_[spans[k].tensor].name;
      fail(b, "tensor '" + b + "' overlaps tensor '" + a + "' in the data section", "tensors with disjoint data");
    }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = key_index_.find(std::string(key));
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string> GgufFile::optional_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::String)
    fail(std::string(key), "metadata '" + std::string(key) + "' is a " + gguf_value_type_name(v->type), "a string");
  return std::string(v->str);
}

std::string GgufFile::string(std::string_view key) const {
  auto s = optional_string(key);
  if (!s) fail(std::string(key), "metadata '" + std::string(key) + "' is missing", "a string");
  return *s;
}

namespace {

// An integer value as int64, or nullopt when it does not fit one.
std::optional<int64_t> as_int64(const GgufValue& v) {
  if (is_signed(v.type)) return v.i;
  if (v.u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return int64_t(v.u);
}

}  // namespace

std::optional<int64_t> GgufFile::optional_integer(std::string_view key, int64_t min, int64_t max) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  const std::string k(key);
  const std::string expected = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!v->is_integer()) fail(k, "metadata '" + k + "' is a " + gguf_value_type_name(v->type), expected);
  const auto x = as_int64(*v);
  if (!x || *x < min || *x > max)
    fail(k, "metadata '" + k + "' is " + (x ? std::to_string(*x) : std::to_string(v->u)), expected);
  return x;
}

int64_t GgufFile::integer(std::string_view key, int64_t min, int64_t max) const {
  auto x = optional_integer(key, min, max);
  if (!x)
    fail(std::string(key), "metadata '" + std::string(key) + "' is missing",
         "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return *x;
}

std::optional<double> GgufFile::optional_number(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_integer() && v->type != GgufValueType::Bool) return is_signed(v->type) ? double(v->i) : double(v->u);
  fail(std::string(key), "metadata '" + std::string(key) + "' is a " + gguf_value_type_name(v->type), "a number");
}

const GgufValue& GgufFile::array_of(std::string_view key, const char* expected) const {
  const GgufValue* v = find(key);
  const std::string k(key);
  if (!v) fail(k, "metadata '" + k + "' is missing", expected);
  if (v->type != GgufValueType::Array) fail(k, "metadata '" + k + "' is a " + gguf_value_type_name(v->type), expected);
  return *v;
}

std::vector<std::string_view> GgufFile::strings(std::string_view key) const {
  const GgufValue& v = array_of(key, "an array of strings");
  if (v.elem_type != GgufValueType::String)
    fail(std::string(key), "metadata '" + std::string(key) + "' is an array of " + gguf_value_type_name(v.elem_type),
         "an array of strings");
  std::vector<std::string_view> out;
  out.reserve(v.count);  // bounded by the file size at parse time
  const uint8_t* p = v.elems;
  for (uint64_t k = 0; k < v.count; ++k) {
    const uint64_t n = load<uint64_t>(p);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), n);
    p += 8 + n;
  }
  return out;
}

std::vector<int64_t> GgufFile::integers(std::string_view key) const {
  const GgufValue& v = array_of(key, "an array of integers");
  GgufValue e;
  e.type = v.elem_type;
  if (!e.is_integer())
    fail(std::string(key), "metadata '" + std::string(key) + "' is an array of " + gguf_value_type_name(v.elem_type),
         "an array of integers");
  std::vector<int64_t> out;
  out.reserve(v.count);
  for (uint64_t k = 0; k < v.count; ++k) {
    decode_scalar(e.type, v.elems + k * scalar_size(e.type), e);
    const auto x = as_int64(e);
    if (!x) fail(std::string(key), "metadata '" + std::string(key) + "' has an element past 2^63", "int64 values");
    out.push_back(*x);
  }
  return out;
}

std::vector<double> GgufFile::numbers(std::string_view key) const {
  const GgufValue& v = array_of(key, "an array of numbers");
  GgufValue e;
  e.type = v.elem_type;
  if (!e.is_float() && !e.is_integer())
    fail(std::string(key), "metadata '" + std::string(key) + "' is an array of " + gguf_value_type_name(v.elem_type),
         "an array of numbers");
  std::vector<double> out;
  out.reserve(v.count);
  for (uint64_t k = 0; k < v.count; ++k) {
    decode_scalar(e.type, v.elems + k * scalar_size(e.type), e);
    out.push_back(e.is_float() ? e.f : is_signed(e.type) ? double(e.i) : double(e.u));
  }
  return out;
}

}  // namespace runahead
