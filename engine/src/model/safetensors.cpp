#include "model/safetensors.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "model/model_error.h"
#include "model/regular_file.h"
#include "model/weight_mappings.h"

namespace runahead {

using nlohmann::json;

namespace {

// The reference implementation refuses larger headers; so do we, before parsing them.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

bool parse_dtype(const std::string& s, DType& out) {
  for (DType t : {DType::BF16, DType::F16, DType::F32, DType::I8})
    if (s == dtype_name(t)) return out = t, true;
  return false;
}

struct Span {
  uint64_t begin, end;
  size_t tensor;
};

// One entry of the header: {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}.
Tensor parse_entry(const std::string& name, const json& entry, const uint8_t* data,
                   uint64_t data_size, const std::string& file, Span& span) {
  auto fail = [&](const std::string& problem, const std::string& expected) {
    model_error(file, name, "tensor '" + name + "' " + problem, expected);
  };
  if (!entry.is_object()) fail("is a JSON " + std::string(entry.type_name()), "an object with dtype, shape, data_offsets");

  Tensor t;
  t.name = name;
  const json dtype = entry.value("dtype", json());
  if (!dtype.is_string()) fail("has dtype " + dtype.dump(), "a dtype string");
  if (!parse_dtype(dtype.get<std::string>(), t.dtype))
    fail("has dtype '" + dtype.get<std::string>() + "', which is not supported", "one of BF16, F16, F32 (or I8 with an F16 weight_scale: Q8_0)");

  const json shape = entry.value("shape", json());
  if (!shape.is_array()) fail("has shape " + shape.dump(), "a list of non-negative integers");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("has shape " + shape.dump(), "a list of non-negative integers");
    t.shape.push_back(d.get<int64_t>());
    overflow |= __builtin_mul_overflow(numel, d.get<uint64_t>(), &numel);
  }
  if (std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end()) numel = 0, overflow = false;

  const json offsets = entry.value("data_offsets", json());
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned() || offsets[0].get<uint64_t>() > offsets[1].get<uint64_t>())
    fail("has data_offsets " + offsets.dump(), "[begin, end] with 0 <= begin <= end");
  span = {offsets[0].get<uint64_t>(), offsets[1].get<uint64_t>(), 0};
  if (span.end > data_size)
    fail("has data offsets " + offsets.dump() + " past the end of the data section (" +
             std::to_string(data_size) + " bytes)",
         "offsets within the data section");
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &nbytes);
  if (overflow || nbytes != span.end - span.begin)
    fail("has " + std::to_string(span.end - span.begin) + " bytes of data but shape " +
             shape_string(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
             (overflow ? std::string("more than 2^64") : std::to_string(nbytes)),
         "data_offsets spanning shape x dtype size bytes");
  t.data = data + span.begin;
  return t;
}

}  // namespace

std::vector<Tensor> parse_safetensors(const uint8_t* bytes, size_t size, const std::string& file) {
  if (size < 8)
    model_error(file, "header", "is " + std::to_string(size) + " bytes, too short to hold the header length",
                "an 8-byte little-endian header length, a JSON header, then data");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];
  if (header_len > size - 8)
    model_error(file, "header", "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                                    std::to_string(size) + " bytes)",
                "a header length of at most " + std::to_string(size - 8) + " bytes; is the file truncated?");
  if (header_len > kMaxHeaderBytes)
    model_error(file, "header", "header length " + std::to_string(header_len) + " is too large",
                "at most " + std::to_string(kMaxHeaderBytes) + " bytes");
  const uint8_t* header_begin = bytes + 8;
  const json header = json::parse(header_begin, header_begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) model_error(file, "header", "header is not valid JSON", "a JSON object");
  if (!header.is_object())
    model_error(file, "header", "header is a JSON " + std::string(header.type_name()), "a JSON object");

  const uint8_t* data = header_begin + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<Tensor> tensors;
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) model_error(file, name, "__metadata__ is not an object", "a map of strings");
      continue;
    }
    Span span;
    tensors.push_back(parse_entry(name, entry, data, data_size, file, span));
    span.tensor = tensors.size() - 1;
    spans.push_back(span);
  }

  // Two tensors sharing bytes would alias weights: refuse rather than guess.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const Span* furthest = nullptr;  // the non-empty span seen so far that ends last
  for (const Span& cur : spans) {
    if (cur.end == cur.begin) continue;
    if (furthest && cur.begin < furthest->end) {
      const std::string &a = tensors[furthest->tensor].name, &b = tensors[cur.tensor].name;
      model_error(file, b,
                  "tensor '" + b + "' at [" + std::to_string(cur.begin) + ", " + std::to_string(cur.end) +
                      ") overlaps tensor '" + a + "' at [" + std::to_string(furthest->begin) + ", " +
                      std::to_string(furthest->end) + ")",
                  "tensors with disjoint data_offsets");
    }
    if (!furthest || cur.end > furthest->end) furthest = &cur;
  }
  return tensors;
}

MappedFile::MappedFile(const std::filesystem::path& path) {
  const std::string file = path.string();
  const RegularFile f(path, "a readable safetensors file");
  size_ = f.size();
  if (size_ > 0) {
    // Read-only and private: the weights stay in the page cache, never copied.
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, f.fd(), 0);
    if (p == MAP_FAILED) model_error(file, "", std::string("cannot map: ") + std::strerror(errno), "a mappable file");
    data_ = static_cast<const uint8_t*>(p);
    guard_ = guard_mapping(data_, size_, file);
  }
}

MappedFile::~MappedFile() {
  if (!data_) return;
  unguard_mapping(guard_);
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace runahead
