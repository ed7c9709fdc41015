#include "runtime/newline_tokens.h"

#include <algorithm>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/json_file.h"
#include "model/model_error.h"

namespace runahead {

namespace {

bool spells_newline(std::string_view token) {
  return token.find("\xC4\x8A") != std::string_view::npos  // "Ċ", byte-level BPE's "\n"
         || token.find('\n') != std::string_view::npos || token == "<0x0A>";
}

}  // namespace

std::vector<int32_t> newline_tokens_from_tokenizer(const std::filesystem::path& tokenizer_json, int vocab_size) {
  const std::string file = tokenizer_json.string();
  const nlohmann::json j = read_json_file(tokenizer_json, "a Hugging Face tokenizer.json");
  if (!j.is_object()) model_error(file, "", "is a JSON " + std::string(j.type_name()), "a JSON object");

  // An id the model has no row for would fail every completion that meets it: refuse it now.
  const std::string in_vocab = "an id in [0, " + std::to_string(vocab_size) + "), vocab_size of config.json";
  const auto checked_id = [&](const nlohmann::json& id, const std::string& field) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size)
      model_error(file, field, field + " is " + id.dump(), in_vocab);
    return id.get<int32_t>();
  };

  std::vector<int32_t> ids;
  const nlohmann::json* vocab = nullptr;
  if (auto model = j.find("model"); model != j.end() && model->is_object())
    if (auto v = model->find("vocab"); v != model->end() && v->is_object()) vocab = &*v;
  if (!vocab)
    model_error(file, "model.vocab", "model.vocab is missing or not an object", "an object mapping token strings to ids");
  for (const auto& [token, id] : vocab->items()) {
    const int32_t checked = checked_id(id, "model.vocab[" + nlohmann::json(token).dump() + "]");
    if (spells_newline(token)) ids.push_back(checked);
  }

  if (auto added = j.find("added_tokens"); added != j.end() && added->is_array())
    for (size_t i = 0; i < added->size(); ++i) {
      const nlohmann::json& t = (*added)[i];
      if (!t.is_object()) continue;
      const int32_t id = checked_id(t.value("id", nlohmann::json()), "added_tokens[" + std::to_string(i) + "].id");
      const nlohmann::json content = t.value("content", nlohmann::json());
      if (content.is_string() && spells_newline(content.get<std::string>())) ids.push_back(id);
    }

  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int32_t> newline_tokens_from_gguf(const std::filesystem::path& gguf, int vocab_size) {
  const auto g = GgufFile::open(gguf);
  if (!g->find("tokenizer.ggml.tokens")) return {};
  const std::vector<std::string_view> tokens = g->strings("tokenizer.ggml.tokens");
  std::vector<int32_t> ids;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!spells_newline(tokens[id])) continue;
    if (id >= size_t(vocab_size))
      g->fail("tokenizer.ggml.tokens", "token " + std::to_string(id) + " spells a newline but the embedding has " +
                                           std::to_string(vocab_size) + " rows",
              "token ids within token_embd.weight's rows");
    ids.push_back(int32_t(id));
  }
  return ids;
}

}  // namespace runahead
