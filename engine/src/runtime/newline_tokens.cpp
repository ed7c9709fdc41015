#include "runtime/newline_tokens.h"

#include <algorithm>
#include <fstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/error.h"

namespace runahead {

namespace {

bool spells_newline(std::string_view token) {
  return token.find("\xC4\x8A") != std::string_view::npos  // "Ċ", byte-level BPE's "\n"
         || token.find('\n') != std::string_view::npos || token == "<0x0A>";
}

}  // namespace

std::vector<int32_t> newline_tokens_from_tokenizer(const std::filesystem::path& tokenizer_json) {
  const std::string file = tokenizer_json.string();
  std::ifstream in(tokenizer_json, std::ios::binary);
  if (!in) throw EngineError("model_error", file + ": cannot be opened", file, {}, "a readable tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw EngineError("model_error", file + ": not a JSON object", file, {}, "a JSON object");

  std::vector<int32_t> ids;
  const nlohmann::json* vocab = nullptr;
  if (auto model = j.find("model"); model != j.end() && model->is_object())
    if (auto v = model->find("vocab"); v != model->end() && v->is_object()) vocab = &*v;
  if (!vocab)
    throw EngineError("model_error", file + ": model.vocab is missing or not an object", file, "model.vocab",
                      "an object mapping token strings to ids");
  for (const auto& [token, id] : vocab->items())
    if (id.is_number_integer() && spells_newline(token)) ids.push_back(id.get<int32_t>());

  if (auto added = j.find("added_tokens"); added != j.end() && added->is_array())
    for (const auto& t : *added)
      if (t.is_object() && t.value("content", nlohmann::json()).is_string() &&
          t.value("id", nlohmann::json()).is_number_integer() && spells_newline(t["content"].get<std::string>()))
        ids.push_back(t["id"].get<int32_t>());

  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace runahead
