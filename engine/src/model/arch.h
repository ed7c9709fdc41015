#pragma once
// What a decoder layer is, stated once per architecture (model/arch/<name>.cpp), in the
// spirit of gpt-fast's model.py: the tensors it binds (Hugging Face name, role, shape in
// config terms, when present) and the ordered ops of a step over named buffers. Every
// backend runs the ops in this order; a backend that has no implementation of an op
// refuses the model by naming it. The step around the layers is the same for all
// decoder-only models: embed -> layers -> rmsnorm_lm_head.
#include <cstdint>
#include <string>
#include <vector>

namespace runahead {

struct ModelConfig;

// A layer tensor's job; LayerWeights is indexed by it.
enum class Role : uint8_t {
  AttnNorm, Wq, Wk, Wv, Bq, Bk, Bv, QNorm, KNorm, Wo, MlpNorm, WGate, WUp, WDown, Count
};
const char* role_name(Role r);

// The sizes a shape is written in.
enum class Dim : uint8_t { Hidden, Intermediate, QDim, KvDim, HeadDim };

struct LayerTensor {
  const char* name;  // under "model.layers.N." (or a drafter's own prefix)
  Role role;
  std::vector<Dim> shape;
  enum When : uint8_t { Always, IfQkvBias } when = Always;
};

// The activations a step passes between ops: x is the residual stream [n, H]; q [n, QDim];
// att [n, QDim]; act [n, I]. K and V go straight into the cache.
enum class Buffer : uint8_t { X, Q, Att, Act };

enum class OpKind : uint8_t {
  // q = rope(qk_norm?(rmsnorm(x) Wq^T + bq)), likewise k (-> cache), v = ... (-> cache)
  // weights: AttnNorm, Wq, Wk, Wv [, Bq, Bk, Bv] [, QNorm, KNorm]
  RmsnormQkvRopeAppend,
  // out = causal softmax(q K^T / sqrt(head_dim)) V over the cache (grouped-query)
  Attention,
  // x += in W^T   weights: W
  MatmulResidual,
  // act = silu(rmsnorm(x) Wg^T) * (rmsnorm(x) Wu^T)   weights: MlpNorm, WGate, WUp
  RmsnormGateUpSwiglu,
};
const char* op_name(OpKind k);

// The fused ops read their weights by role; tensors a config leaves out (biases, q/k norms)
// are absent and the op skips that part. MatmulResidual names its matrix.
struct Op {
  OpKind kind;
  Buffer in, out;
  Role weight = Role::Count;
  bool operator==(const Op&) const = default;
};

struct Architecture {
  const char* hf_name;               // config.json's architectures[0]
  bool qkv_bias_always;              // Qwen2: biases whatever attention_bias says
  int default_max_positions;         // transformers' default when config.json has none
  std::vector<LayerTensor> layer;     // the tensors of one layer
  std::vector<Op> step;              // the ops of one layer, in order
};

// Every architecture of model/arch/ (collected by the build), and the one named `hf_name`
// (null if none).
const std::vector<const Architecture*>& architectures();
const Architecture* find_architecture(const std::string& hf_name);
// The architecture of a parsed config; throws std::logic_error if parse_config did not check it.
const Architecture& architecture_of(const ModelConfig& c);

// The layer's tensors present for this config, with their shapes.
struct BoundSpec {
  std::string name;
  Role role;
  std::vector<int64_t> shape;
};
std::vector<BoundSpec> layer_tensors(const Architecture& a, const ModelConfig& c);

}  // namespace runahead
