#include "runtime/drafters/mtp.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "model/layout.h"
#include "model/model_error.h"
#include "model/numerics.h"
#include "model/q8_0_pairs.h"
#include "model/safetensors.h"

namespace runahead {

namespace {

struct MtpStorage {
  std::unique_ptr<MappedFile> file;
  std::vector<std::vector<uint8_t>> q8_0_blocks;  // Q8_0 pairs joined (model/q8_0_pairs.h)
  std::shared_ptr<const ModelWeights> target;
};

}  // namespace

MtpWeights load_mtp(const std::filesystem::path& path, std::shared_ptr<const ModelWeights> target) {
  const std::string file = path.string();
  auto storage = std::make_shared<MtpStorage>();
  storage->file = std::make_unique<MappedFile>(path);
  storage->target = target;
  const MappedFile& mapped = *storage->file;
  std::unordered_map<std::string, Tensor> tensors;
  for (Tensor& t : parse_safetensors(mapped.data(), mapped.size(), file)) tensors[t.name] = std::move(t);
  join_q8_0_pairs(tensors, [&](const std::string&) { return file; }, storage->q8_0_blocks);

  // The header was validated above; read its metadata for the format tag.
  uint64_t header_len = 0;
  std::memcpy(&header_len, mapped.data(), 8);
  const auto header = nlohmann::json::parse(
      std::string(reinterpret_cast<const char*>(mapped.data()) + 8, size_t(header_len)));
  const auto meta = header.value("__metadata__", nlohmann::json::object());
  if (meta.value("format", "") != "runahead-mtp" || meta.value("version", "") != "1")
    model_error(file, "__metadata__", "the header's __metadata__ is " + meta.dump(),
                "{\"format\": \"runahead-mtp\", \"version\": \"1\"}");

  const ModelConfig& c = target->config;
  const int64_t H = c.hidden_size;
  auto find = [&](const std::string& name) -> const Tensor* {
    const auto it = tensors.find(name);
    return it == tensors.end() ? nullptr : &it->second;
  };
  const Tensor* gate = find("mtp.layer.mlp.gate_proj.weight");
  if (!gate || gate->shape.size() != 2)
    model_error(file, "mtp.layer.mlp.gate_proj.weight", "tensor 'mtp.layer.mlp.gate_proj.weight' is missing or not 2-D",
                "a tensor of shape [I_mtp, " + std::to_string(H) + "]");
  const int64_t I = gate->shape[0];
  // Dense tensors share one dtype (norms included); matrices may be Q8_0 instead.
  const DType dtype = find("mtp.final_norm.weight") ? find("mtp.final_norm.weight")->dtype : gate->dtype;
  auto bind = [&](const std::string& name, std::vector<int64_t> shape) -> Tensor {
    const Tensor* t = find(name);
    if (!t) model_error(file, name, "tensor '" + name + "' is missing", "a tensor of shape " + shape_string(shape));
    if (t->shape != shape)
      model_error(file, name, "tensor '" + name + "' has shape " + shape_string(t->shape),
                  "shape " + shape_string(shape) + " for the target's hidden size " + std::to_string(H));
    if (t->dtype != dtype && !(is_quantized(t->dtype) && shape.size() == 2))
      model_error(file, name, "tensor '" + name + "' is " + dtype_name(t->dtype),
                  std::string("every dense tensor in one dtype (") + dtype_name(dtype) + "), matrices optionally Q8_0");
    return *t;
  };

  MtpWeights w;
  w.enorm = widen(bind("mtp.enorm.weight", {H}));
  w.hnorm = widen(bind("mtp.hnorm.weight", {H}));
  w.eh_proj = widen(bind("mtp.eh_proj.weight", {H, 2 * H}));

  auto layer = std::make_shared<ModelWeights>();
  layer->config = c;
  layer->config.num_layers = 1;
  layer->config.intermediate_size = int(I);
  LayerWeights l;
  for (const TensorSlot& slot : layer_slots(layer->config, "mtp.layer.", l, 1)) *slot.dst = bind(slot.name, slot.shape);
  layer->layers.push_back(l);
  layer->final_norm = bind("mtp.final_norm.weight", {H});
  layer->embed = target->embed;
  layer->lm_head = target->lm_head;
  layer->dtype = dtype;
  layer->source = file;
  for (const auto& [name, t] : tensors) layer->parameters += t.numel();
  layer->weight_bytes = target->lm_head.nbytes();
  for (const Tensor& t : l.by_role)
    if (t.shape.size() == 2) layer->weight_bytes += t.nbytes();
  layer->storage = storage;
  w.layer = layer;
  return w;
}

MtpDrafter::MtpDrafter(MtpWeights weights, std::shared_ptr<const ModelWeights> target,
                       const BackendFactory& make_backend, const BackendOptions& options)
    : w_(std::move(weights)),
      target_(std::move(target)),
      layer_(make_backend(w_.layer, options)),
      hidden_size_(target_->config.hidden_size) {
  // Refuses here, at load, on a backend that cannot run the head.
  std::vector<float> x(size_t(hidden_size_), 0.0f);
  layer_->forward_vectors(x, 1, logits_);
  layer_->truncate(0);
}

nlohmann::json MtpDrafter::describe() const {
  return {{"name", name()},
          {"file", w_.layer->source},
          {"intermediate_size", w_.layer->config.intermediate_size},
          {"parameters", w_.layer->parameters},
          {"backend", layer_->name()}};
}

void MtpDrafter::input(int32_t token, const float* h, float* x) {
  const int H = hidden_size_;
  const float eps = target_->config.rms_norm_eps;
  eh_.resize(size_t(2 * H));
  widen(target_->embed, int64_t(token) * H, H, eh_.data());
  rmsnorm_row(eh_.data(), w_.enorm.data(), eps, H, eh_.data());
  rmsnorm_row(h, w_.hnorm.data(), eps, H, eh_.data() + H);
  for (int r = 0; r < H; ++r) {
    const float* row = w_.eh_proj.data() + size_t(r) * size_t(2 * H);
    // Eight partial sums: independent chains the compiler can keep in vector registers.
    float acc[8] = {};
    int i = 0;
    for (; i + 8 <= 2 * H; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += row[i + j] * eh_[size_t(i + j)];
    for (; i < 2 * H; ++i) acc[0] += row[i] * eh_[size_t(i)];
    x[r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
}

void MtpDrafter::observe(int pos0, std::span<const int32_t> tokens, std::span<const float> hidden) {
  const size_t H = size_t(hidden_size_), end = size_t(pos0) + tokens.size();
  rows_.resize(end * H, 0.0f);  // a row it was never given stays zero: drafts get worse, never wrong
  if (hidden.size() == tokens.size() * H) std::copy(hidden.begin(), hidden.end(), rows_.begin() + std::ptrdiff_t(pos0 * H));
}

Draft MtpDrafter::propose(std::span<const int32_t> context, int k, Sampler& sampler) {
  const int L = int(context.size());
  const size_t H = size_t(hidden_size_);
  // Entry j (target position j) needs h_{j-1}: the target must hold every position but the last.
  if (L < 2 || k <= 0 || rows_.size() < size_t(L - 1) * H) return {};
  k = std::min(k, layer_->context_length() - (L - 1));
  if (k <= 0) return {};

  // Keep the entries whose tokens still match (entry j read tokens 0..j), and recompute
  // at least the last one: its output starts the chain.
  const auto common = std::mismatch(entry_tokens_.begin(), entry_tokens_.end(), context.begin(), context.end());
  const int matched = int(common.first - entry_tokens_.begin());
  const int keep = std::clamp(std::min(layer_->kv_len(), matched - 1), 0, L - 2);
  layer_->truncate(keep);

  const auto start = std::chrono::steady_clock::now();
  const int n = (L - 1) - keep;  // entries for positions keep+1 .. L-1
  x_.resize(size_t(n) * H);
  for (int i = 0; i < n; ++i) {
    const int j = keep + 1 + i;
    input(context[size_t(j)], rows_.data() + size_t(j - 1) * H, x_.data() + size_t(i) * H);
  }
  layer_->forward_vectors(x_, 1, logits_);
  entry_tokens_.assign(context.begin(), context.end());

  Draft draft;
  // Entries past the first of this catch-up belong to tokens accepted since the last draft.
  if (n > 1)
    draft.catch_up_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() *
                        double(n - 1) / n;
  draft.confidence = pick_draft_token(logits_, sampler, draft);
  x_.resize(H);
  while (int(draft.tokens.size()) < k) {
    h_.assign(layer_->hidden().end() - std::ptrdiff_t(H), layer_->hidden().end());
    input(draft.tokens.back(), h_.data(), x_.data());
    layer_->forward_vectors(x_, 1, logits_);
    // Only a deterministic draft may be cut by what it drew: a sampled one must stay a draw from q.
    if (pick_draft_token(logits_, sampler, draft) < kMinDraftProb && sampler.params().greedy()) {
      draft.tokens.pop_back();
      break;
    }
  }
  layer_->truncate(L - 1);  // the chain's entries were speculative
  return draft;
}

}  // namespace runahead
