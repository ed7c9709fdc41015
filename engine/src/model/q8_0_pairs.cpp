#include "model/q8_0_pairs.h"

#include <cstring>

#include "model/quant_format.h"
#include "model/model_error.h"

namespace runahead {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Q8_0 blocks of ggml's layout from int8 rows [rows, cols] and f16 scales [rows, cols / 32].
std::vector<uint8_t> repack(const Tensor& q, const Tensor& scale) {
  const int64_t rows = q.rows(), blocks = q.cols() / 32;
  std::vector<uint8_t> out(size_t(rows * blocks) * sizeof(BlockQ8_0));
  auto* dst = reinterpret_cast<BlockQ8_0*>(out.data());
  const auto* qs = static_cast<const int8_t*>(q.data);
  const auto* ds = static_cast<const uint8_t*>(scale.data);  // safetensors does not promise alignment
  for (int64_t b = 0; b < rows * blocks; ++b) {
    std::memcpy(&dst[b].d, ds + 2 * b, 2);
    std::memcpy(dst[b].qs, qs + 32 * b, 32);
  }
  return out;
}

}  // namespace

void join_q8_0_pairs(std::unordered_map<std::string, Tensor>& tensors,
                     const std::function<std::string(const std::string&)>& file_of,
                     std::vector<std::vector<uint8_t>>& buffers) {
  const std::string suffix = kWeightScaleSuffix;
  std::vector<std::string> weights;
  for (const auto& [name, t] : tensors) {
    if (ends_with(name, suffix)) {
      const std::string weight = name.substr(0, name.size() - suffix.size());
      const auto it = tensors.find(weight);
      if (it == tensors.end() || it->second.dtype != DType::I8)
        model_error(file_of(name), name,
                    "tensor '" + name + "' is a weight scale but '" + weight + "' is " +
                        (it == tensors.end() ? std::string("missing") : dtype_name(it->second.dtype)),
                    "an I8 tensor '" + weight + "' beside it (Q8_0)");
    } else if (t.dtype == DType::I8) {
      weights.push_back(name);
    }
  }
  for (const std::string& name : weights) {
    const Tensor& q = tensors.at(name);
    const std::string file = file_of(name), scale_name = name + suffix;
    if (q.shape.size() != 2 || q.shape[1] % 32 != 0)
      model_error(file, name, "tensor '" + name + "' is I8 " + shape_string(q.shape),
                  "an I8 weight [out, in] with in a multiple of 32 (Q8_0 blocks of 32)");
    const auto it = tensors.find(scale_name);
    if (it == tensors.end())
      model_error(file, name, "tensor '" + name + "' is I8 but has no '" + scale_name + "'",
                  "an F16 tensor '" + scale_name + "' of shape [" + std::to_string(q.shape[0]) + ", " +
                      std::to_string(q.shape[1] / 32) + "] beside it (Q8_0)");
    const Tensor& scale = it->second;
    const std::vector<int64_t> want = {q.shape[0], q.shape[1] / 32};
    if (scale.dtype != DType::F16 || scale.shape != want)
      model_error(file_of(scale_name), scale_name,
                  "tensor '" + scale_name + "' is " + dtype_name(scale.dtype) + " " + shape_string(scale.shape),
                  "F16 " + shape_string(want) + ": one scale per 32 weights of '" + name + "'");
    buffers.push_back(repack(q, scale));
    Tensor joined{name, DType::Q8_0, q.shape, buffers.back().data()};
    tensors.erase(scale_name);
    tensors[name] = std::move(joined);
  }
}

}  // namespace runahead
