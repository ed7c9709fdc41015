#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <thread>

#include "model/layout.h"
#include "model/model_error.h"
#include "model/weights.h"

namespace runahead {

namespace {

struct KnownShape {
  const char* name;
  int hidden, intermediate, layers, heads, kv_heads, vocab;
  bool tied;
};

// The published Qwen2.5-Coder configs.
constexpr KnownShape kShapes[] = {
    {"qwen2.5-coder-0.5b", 896, 4864, 24, 14, 2, 151936, true},
    {"qwen2.5-coder-1.5b", 1536, 8960, 28, 12, 2, 151936, true},
    {"qwen2.5-coder-7b", 3584, 18944, 28, 28, 4, 152064, false},
};

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Round-to-nearest-even float -> bf16.
uint16_t to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

// Uniform in [-a, a] with a = std * sqrt(3), so the standard deviation is `std`.
// Chunks are seeded by index, so the weights do not depend on the thread count.
void fill_uniform(uint16_t* out, size_t n, float std, uint64_t seed) {
  constexpr size_t kChunk = size_t(1) << 20;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  const float a = std * std::sqrt(3.0f);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks;) {
      uint64_t state = seed * 0x2545F4914F6CDD1Dull + c;
      const size_t end = std::min(n, (c + 1) * kChunk);
      // 16 random bits per value (bf16 keeps 8): four values per 64-bit draw.
      for (size_t i = c * kChunk; i < end; i += 4) {
        const uint64_t r = splitmix64(state);
        for (size_t k = 0; k < 4 && i + k < end; ++k)
          out[i + k] = to_bf16(a * (float((r >> (16 * k)) & 0xFFFF) * (2.0f / 65536.0f) - 1.0f));
      }
    }
  };
  const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), chunks));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace

ModelConfig shape_config(const std::string& shape) {
  for (const KnownShape& s : kShapes) {
    if (shape != s.name) continue;
    ModelConfig c;
    c.architecture = "Qwen2ForCausalLM";
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.intermediate_size = s.intermediate;
    c.num_layers = s.layers;
    c.num_heads = s.heads;
    c.num_kv_heads = s.kv_heads;
    c.head_dim = s.hidden / s.heads;
    c.max_position_embeddings = 32768;
    c.rms_norm_eps = 1e-6f;
    c.rope_theta = 1e6f;
    c.tie_word_embeddings = s.tied;
    c.qkv_bias = true;
    c.torch_dtype = "bfloat16";
    c.bos_token_id = 151643;
    c.eos_token_ids = {151643};
    return c;
  }
  std::string known;
  for (const KnownShape& s : kShapes) known += (known.empty() ? "" : ", ") + std::string(s.name);
  throw EngineError("model_error", "random:" + shape + ": unknown model shape '" + shape + "'; known: " + known,
                    "random:" + shape, "model", "one of " + known);
}

ModelWeights random_model(const std::string& shape, uint64_t seed) {
  ModelWeights w;
  w.config = shape_config(shape);
  w.source = "random:" + shape;
  const std::vector<TensorSlot> slots = tensor_slots(w);

  // One buffer for all tensors, each starting on a 64-byte boundary for SIMD loads.
  constexpr size_t kAlign = 64 / sizeof(uint16_t);
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const TensorSlot& s : slots) {
    offsets.push_back(total);
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    total += (size_t(n) + kAlign - 1) / kAlign * kAlign;
  }
  std::shared_ptr<uint16_t[]> buffer(new (std::align_val_t(64)) uint16_t[total],
                                     [](uint16_t* p) { ::operator delete[](p, std::align_val_t(64)); });
  fill_uniform(buffer.get(), total, 0.02f, seed);

  const uint16_t one = to_bf16(1.0f);
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSlot& s = slots[i];
    *s.dst = Tensor{s.name, DType::BF16, s.shape, buffer.get() + offsets[i]};
    if (s.kind == TensorSlot::Norm) std::fill_n(buffer.get() + offsets[i], s.dst->numel(), one);
  }
  finish_weights(w, slots);
  w.storage = buffer;
  return w;
}

}  // namespace runahead
