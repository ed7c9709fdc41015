#pragma once
// config.json of a Hugging Face model folder, reduced to what the engine runs.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace runahead {

// The fewest positions a model must hold: a FIM prompt and a completion need more than that.
inline constexpr int kMinPositionEmbeddings = 64;

// RoPE frequency scaling. "default": none. "llama3" (Llama 3.1+): frequencies below
// original_max_positions / low_freq_factor are divided by factor, those above
// original_max_positions / high_freq_factor kept, and the ones between blended; a GGUF file
// states the result instead, as one divisor per frequency (freq_divisors).
struct RopeScaling {
  std::string type = "default";
  float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
  int original_max_positions = 8192;
  std::vector<float> freq_divisors;  // [head_dim / 2] or empty: inv_freq[i] / freq_divisors[i]
};

struct ModelConfig {
  std::string architecture;  // one of supported_architectures() (model/arch/)
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;        // num_hidden_layers
  int num_heads = 0;         // num_attention_heads
  int num_kv_heads = 0;      // num_key_value_heads (defaults to num_heads)
  int head_dim = 0;          // head_dim, or hidden_size / num_heads
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // Qwen2: always; Llama, Qwen3: attention_bias
  std::string torch_dtype;   // as declared; the tensors' own dtype wins
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
};

// Throws EngineError{code "model_error"} naming `file` and the field on any problem.
ModelConfig parse_config(const nlohmann::json& j, const std::string& file);
ModelConfig load_config(const std::filesystem::path& model_dir);

const std::vector<std::string>& supported_architectures();

}  // namespace runahead
