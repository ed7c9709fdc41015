#pragma once
// Test helper: writes loaded tensors back as safetensors, a Q8_0 tensor as the quantized
// safetensors pair of MODEL_FORMAT.md (I8 `X.weight` [out, in] + F16 `X.weight_scale`
// [out, in / 32]) — spelled out from the format description, not from the engine's reader.
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tensor.h"
#include "model/weights.h"
#include "model_writer.h"

namespace runahead::test {

struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A Q8_0 tensor as its I8 and F16 halves; any other tensor as it is.
inline std::vector<RawTensor> safetensors_form(const Tensor& t) {
  const auto* p = static_cast<const char*>(t.data);
  if (t.dtype != DType::Q8_0) return {{t.name, dtype_name(t.dtype), t.shape, std::string(p, t.nbytes())}};
  const int64_t blocks = t.numel() / 32;
  RawTensor q{t.name, "I8", t.shape, {}}, d{t.name + "_scale", "F16", {t.rows(), t.cols() / 32}, {}};
  for (int64_t b = 0; b < blocks; ++b) {
    d.bytes.append(p + 34 * b, 2);       // block: f16 d, then int8 q[32]
    q.bytes.append(p + 34 * b + 2, 32);
  }
  return {q, d};
}

inline std::string safetensors_of(const std::vector<RawTensor>& tensors, const json& metadata = nullptr) {
  json header = json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return safetensors_raw(text, data);
}

// Every tensor of `w` (lm_head only when untied), Q8_0 ones as pairs.
inline std::vector<RawTensor> model_tensors(const ModelWeights& w) {
  std::vector<const Tensor*> all = {&w.embed};
  for (const LayerWeights& l : w.layers)
    for (const Tensor& t : l.by_role)
      if (!t.empty()) all.push_back(&t);
  all.push_back(&w.final_norm);
  if (w.lm_head.data != w.embed.data) all.push_back(&w.lm_head);
  std::vector<RawTensor> out;
  for (const Tensor* t : all)
    for (RawTensor& r : safetensors_form(*t)) out.push_back(std::move(r));
  return out;
}

// `dir` holds `model`'s config.json and `w`'s weights, Q8_0 matrices as pairs.
inline void write_q8_0_bundle(const fs::path& dir, const fs::path& model, const ModelWeights& w) {
  fs::create_directories(dir);
  fs::copy_file(model / "config.json", dir / "config.json");
  write_file(dir / "model.safetensors", safetensors_of(model_tensors(w)));
}

}  // namespace runahead::test
