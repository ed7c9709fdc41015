#include "model/arch.h"

#include <stdexcept>

#include "model/config.h"

namespace runahead {

// architectures.inc is written by CMake: RUNAHEAD_ARCHITECTURE(name) for each model/arch/name.cpp.
#define RUNAHEAD_ARCHITECTURE(name) extern const Architecture name##_architecture;
#include "model/architectures.inc"
#undef RUNAHEAD_ARCHITECTURE

const std::vector<const Architecture*>& architectures() {
#define RUNAHEAD_ARCHITECTURE(name) &name##_architecture,
  static const std::vector<const Architecture*> all = {
#include "model/architectures.inc"
  };
#undef RUNAHEAD_ARCHITECTURE
  return all;
}

const Architecture* find_architecture(const std::string& hf_name) {
  for (const Architecture* a : architectures())
    if (hf_name == a->hf_name) return a;
  return nullptr;
}

const Architecture& architecture_of(const ModelConfig& c) {
  const Architecture* a = find_architecture(c.architecture);
  if (!a) throw std::logic_error("no architecture named '" + c.architecture + "'");
  return *a;
}

const char* role_name(Role r) {
  static const char* const names[] = {"attn_norm", "wq", "wk", "wv", "bq", "bk", "bv", "q_norm",
                                      "k_norm", "wo", "mlp_norm", "w_gate", "w_up", "w_down"};
  static_assert(std::size(names) == size_t(Role::Count));
  return names[size_t(r)];
}

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::RmsnormQkvRopeAppend: return "rmsnorm_qkv_rope_append";
    case OpKind::Attention: return "attention";
    case OpKind::MatmulResidual: return "matmul_residual";
    case OpKind::RmsnormGateUpSwiglu: return "rmsnorm_gate_up_swiglu";
  }
  return "?";
}

std::vector<BoundSpec> layer_tensors(const Architecture& a, const ModelConfig& c) {
  auto size = [&](Dim d) -> int64_t {
    switch (d) {
      case Dim::Hidden: return c.hidden_size;
      case Dim::Intermediate: return c.intermediate_size;
      case Dim::QDim: return int64_t(c.num_heads) * c.head_dim;
      case Dim::KvDim: return int64_t(c.num_kv_heads) * c.head_dim;
      case Dim::HeadDim: return c.head_dim;
    }
    return 0;
  };
  std::vector<BoundSpec> out;
  for (const LayerTensor& t : a.layer) {
    if (t.when == LayerTensor::IfQkvBias && !c.qkv_bias) continue;
    BoundSpec b{t.name, t.role, {}};
    for (Dim d : t.shape) b.shape.push_back(size(d));
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace runahead
