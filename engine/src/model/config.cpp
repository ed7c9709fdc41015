#include "model/config.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "model/arch.h"
#include "model/json_file.h"
#include "model/model_error.h"

namespace runahead {

using nlohmann::json;

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Architecture* a : architectures()) out.push_back(a->hf_name);
    return out;
  }();
  return names;
}

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Reads typed fields of one config.json; every complaint names the file and the field.
class Fields {
 public:
  // `prefix` names the enclosing object of nested fields, e.g. "rope_parameters.".
  Fields(const json& j, const std::string& file, std::string prefix = {})
      : j_(j), file_(file), prefix_(std::move(prefix)) {}

  Fields nested(const std::string& name, const json& v) const { return Fields(v, file_, prefix_ + name + "."); }

  // The field's value, or nullptr when absent or null (HF writes null for "unset").
  const json* find(const std::string& name) const {
    auto it = j_.find(name);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void fail(const std::string& name, const std::string& problem,
                         const std::string& expected) const {
    model_error(file_, prefix_ + name, "field '" + prefix_ + name + "' " + problem, expected);
  }

  int integer(const std::string& name, const json& v, int min) const {
    const std::string expected = "an integer >= " + std::to_string(min);
    if (!v.is_number_integer()) fail(name, "is " + describe(v), expected);
    constexpr int64_t max = std::numeric_limits<int>::max();
    const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(max);
    const int64_t x = huge ? 0 : v.get<int64_t>();
    if (huge || x < min || x > max) fail(name, "is " + v.dump(), expected);
    return static_cast<int>(x);
  }

  int required_int(const std::string& name, int min = 1) const {
    const json* v = find(name);
    if (!v) fail(name, "is missing", "an integer >= " + std::to_string(min));
    return integer(name, *v, min);
  }

  int optional_int(const std::string& name, int fallback, int min = 1) const {
    const json* v = find(name);
    return v ? integer(name, *v, min) : fallback;
  }

  float optional_positive(const std::string& name, float fallback) const {
    const json* v = find(name);
    if (!v) return fallback;
    if (!v->is_number()) fail(name, "is " + describe(*v), "a positive number");
    if (!(v->get<double>() > 0)) fail(name, "is " + v->dump(), "a positive number");
    return v->get<float>();
  }

  bool optional_bool(const std::string& name, bool fallback) const {
    const json* v = find(name);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(name, "is " + describe(*v), "true or false");
    return v->get<bool>();
  }

  std::string optional_string(const std::string& name) const {
    const json* v = find(name);
    if (!v) return {};
    if (!v->is_string()) fail(name, "is " + describe(*v), "a string");
    return v->get<std::string>();
  }

  static std::string describe(const json& v) {
    // Whole values only: cutting a dump could split a UTF-8 sequence.
    const std::string text = v.dump();
    return std::string("a ") + v.type_name() + (text.size() <= 40 ? " (" + text + ")" : "");
  }

 private:
  const json& j_;
  const std::string& file_;
  std::string prefix_;
};

std::string architecture_name(const Fields& f) {
  const json* v = f.find("architectures");
  const std::string expected = "a list naming one of " + joined(supported_architectures());
  if (!v) f.fail("architectures", "is missing", expected);
  if (!v->is_array() || v->empty() || !(*v)[0].is_string())
    f.fail("architectures", "is " + Fields::describe(*v), expected);
  const std::string arch = (*v)[0].get<std::string>();
  for (const auto& name : supported_architectures())
    if (name == arch) return arch;
  f.fail("architectures", "names '" + arch + "', which is not supported; supported: " +
                              joined(supported_architectures()),
         "one of " + joined(supported_architectures()));
}

// RoPE: unscaled, or Llama 3's "llama3" scaling; any other scaling would silently compute
// wrong logits and is refused by name. transformers 4 writes rope_theta and rope_scaling,
// transformers 5 writes rope_parameters.
void read_rope(const Fields& f, ModelConfig& c) {
  c.rope_theta = f.optional_positive("rope_theta", 10000.0f);
  for (const std::string name : {"rope_scaling", "rope_parameters"}) {
    const json* v = f.find(name);
    if (!v) continue;
    const std::string expected = "null or an object with rope_type \"default\" or \"llama3\"";
    if (!v->is_object()) f.fail(name, "is " + Fields::describe(*v), expected);
    const json type = v->value("rope_type", v->value("type", json()));
    const Fields scaling = f.nested(name, *v);
    c.rope_theta = scaling.optional_positive("rope_theta", c.rope_theta);
    if (type == "default") continue;
    if (type != "llama3") f.fail(name, "has rope type " + type.dump() + ", which is not supported", expected);
    RopeScaling& r = c.rope_scaling;
    r.type = "llama3";
    r.factor = scaling.optional_positive("factor", 0.0f);
    r.low_freq_factor = scaling.optional_positive("low_freq_factor", 0.0f);
    r.high_freq_factor = scaling.optional_positive("high_freq_factor", 0.0f);
    r.original_max_positions = scaling.optional_int("original_max_position_embeddings", 0);
    for (const char* field : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!scaling.find(field)) scaling.fail(field, "is missing", "a positive number (llama3 RoPE scaling)");
    if (!(r.high_freq_factor > r.low_freq_factor))
      scaling.fail("high_freq_factor", "is not above low_freq_factor", "high_freq_factor > low_freq_factor");
  }
}

// Options that change the computation and that the engine does not implement.
void check_unsupported_options(const Fields& f) {
  const std::string act = f.optional_string("hidden_act");
  if (!act.empty() && act != "silu") f.fail("hidden_act", "is '" + act + "'", "\"silu\"");
  if (f.optional_bool("use_sliding_window", false))
    f.fail("use_sliding_window", "is true: sliding-window attention is not supported", "false");
  if (const json* types = f.find("layer_types")) {
    if (!types->is_array()) f.fail("layer_types", "is " + Fields::describe(*types), "a list of layer types");
    for (const json& t : *types)
      if (t != "full_attention")
        f.fail("layer_types", "has a layer of type " + t.dump() + ": only full attention is supported",
               "every layer \"full_attention\"");
  }
  if (f.optional_bool("mlp_bias", false))
    f.fail("mlp_bias", "is true: MLP biases are not supported", "false");
}

// Ids past the vocabulary could never be produced: the model would never stop by itself.
std::vector<int> eos_ids(const Fields& f, int vocab_size) {
  const json* v = f.find("eos_token_id");
  if (!v) return {};
  std::vector<int> ids;
  for (const json& id : v->is_array() ? *v : json::array({*v})) {
    ids.push_back(f.integer("eos_token_id", id, 0));
    if (ids.back() >= vocab_size)
      f.fail("eos_token_id", "is " + std::to_string(ids.back()) + ", past vocab_size " + std::to_string(vocab_size),
             "token ids below vocab_size");
  }
  return ids;
}

}  // namespace

ModelConfig parse_config(const json& j, const std::string& file) {
  if (!j.is_object()) model_error(file, "", "is a JSON " + std::string(j.type_name()), "a JSON object");
  const Fields f(j, file);
  ModelConfig c;
  c.architecture = architecture_name(f);
  const Architecture& arch = *find_architecture(c.architecture);
  c.vocab_size = f.required_int("vocab_size");
  c.hidden_size = f.required_int("hidden_size");
  c.intermediate_size = f.required_int("intermediate_size");
  c.num_layers = f.required_int("num_hidden_layers");
  c.num_heads = f.required_int("num_attention_heads");
  c.num_kv_heads = f.optional_int("num_key_value_heads", c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    f.fail("num_key_value_heads", "is " + std::to_string(c.num_kv_heads) + ", which does not divide " +
                                      "num_attention_heads " + std::to_string(c.num_heads),
           "a divisor of num_attention_heads");
  if (!f.find("head_dim") && c.hidden_size % c.num_heads != 0)
    f.fail("head_dim", "is missing and hidden_size " + std::to_string(c.hidden_size) +
                           " is not a multiple of num_attention_heads " + std::to_string(c.num_heads),
           "head_dim, or hidden_size divisible by num_attention_heads");
  c.head_dim = f.optional_int("head_dim", c.hidden_size / c.num_heads);
  // transformers' defaults for configs that omit these.
  c.max_position_embeddings =
      f.optional_int("max_position_embeddings", arch.default_max_positions, kMinPositionEmbeddings);
  c.rms_norm_eps = f.optional_positive("rms_norm_eps", 1e-6f);
  read_rope(f, c);
  c.tie_word_embeddings = f.optional_bool("tie_word_embeddings", false);
  c.qkv_bias = arch.qkv_bias_always || f.optional_bool("attention_bias", false);
  c.torch_dtype = f.optional_string("torch_dtype");  // transformers 4; 5 writes "dtype"
  if (c.torch_dtype.empty()) c.torch_dtype = f.optional_string("dtype");
  c.bos_token_id = f.optional_int("bos_token_id", -1, 0);
  c.eos_token_ids = eos_ids(f, c.vocab_size);
  check_unsupported_options(f);
  return c;
}

ModelConfig load_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "config.json";
  std::error_code ec;  // a loop or an unreadable parent is a problem to name, not to throw
  if (!std::filesystem::is_directory(model_dir, ec))
    model_error(model_dir.string(), "model",
                ec && ec != std::errc::no_such_file_or_directory ? "model folder cannot be read: " + ec.message()
                                                                 : "model folder does not exist",
                "a Hugging Face model folder");
  return parse_config(read_json_file(path, "a Hugging Face config.json in the model folder"), path.string());
}

}  // namespace runahead
