#pragma once
// Test helper: writes GGUF files byte by byte, following the format description in
// engine/MODEL_FORMAT.md rather than the engine's reader, so that a misreading fails tests.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace runahead::test {

struct GgufWriter {
  enum Type : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

  uint32_t version = 3;
  uint64_t alignment = 32;  // for the layout; add general.alignment yourself to change it
  std::string kv;
  uint64_t n_kv = 0;
  struct TensorData {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;  // GGUF order: dims[0] is the row length
    std::string data;
  };
  std::vector<TensorData> tensors;

  template <class T>
  static void put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  static void put_string(std::string& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out += s;
  }

  // A value of any type, already encoded (for malformed files and nested arrays).
  void raw(const std::string& key, uint32_t type, const std::string& encoded) {
    put_string(kv, key);
    put<uint32_t>(kv, type);
    kv += encoded;
    ++n_kv;
  }
  template <class T>
  void scalar(const std::string& key, uint32_t type, T v) {
    std::string e;
    put<T>(e, v);
    raw(key, type, e);
  }
  void u32(const std::string& key, uint32_t v) { scalar(key, U32, v); }
  void i32(const std::string& key, int32_t v) { scalar(key, I32, v); }
  void f32(const std::string& key, float v) { scalar(key, F32, v); }
  void str(const std::string& key, const std::string& v) {
    std::string e;
    put_string(e, v);
    raw(key, STRING, e);
  }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    std::string e;
    put<uint32_t>(e, STRING);
    put<uint64_t>(e, v.size());
    for (const auto& s : v) put_string(e, s);
    raw(key, ARRAY, e);
  }
  void i32s(const std::string& key, const std::vector<int32_t>& v) {
    std::string e;
    put<uint32_t>(e, I32);
    put<uint64_t>(e, v.size());
    for (int32_t x : v) put<int32_t>(e, x);
    raw(key, ARRAY, e);
  }

  void tensor(const std::string& name, uint32_t type, std::vector<uint64_t> dims, std::string data) {
    tensors.push_back({name, type, std::move(dims), std::move(data)});
  }

  // The file. Tensor data is laid out in order, each padded to the alignment, unless
  // `offsets` gives each tensor's offset explicitly.
  std::string bytes(const std::vector<uint64_t>& offsets = {}) const {
    std::string out = "GGUF";
    put<uint32_t>(out, version);
    put<uint64_t>(out, tensors.size());
    put<uint64_t>(out, n_kv);
    out += kv;
    std::string data;
    for (size_t k = 0; k < tensors.size(); ++k) {
      const TensorData& t = tensors[k];
      put_string(out, t.name);
      put<uint32_t>(out, uint32_t(t.dims.size()));
      for (uint64_t d : t.dims) put<uint64_t>(out, d);
      put<uint32_t>(out, t.type);
      const uint64_t offset = offsets.empty() ? data.size() : offsets[k];
      put<uint64_t>(out, offset);
      if (data.size() < offset + t.data.size()) data.resize(offset + t.data.size());
      data.replace(offset, t.data.size(), t.data);
      if (offsets.empty()) data.resize((data.size() + alignment - 1) / alignment * alignment);
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment);
    return out + data;
  }
};

// `n` bytes of a recognisable pattern.
inline std::string gguf_pattern(size_t n, int seed = 1) {
  std::string s(n, '\0');
  for (size_t j = 0; j < n; ++j) s[j] = char((seed * 31 + j * 7 + 1) & 0x3F);
  return s;
}

}  // namespace runahead::test
