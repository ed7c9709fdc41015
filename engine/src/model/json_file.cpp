#include "model/json_file.h"

#include "model/model_error.h"
#include "model/regular_file.h"

namespace runahead {

nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& expected) {
  const std::string file = path.string();
  const std::string text = read_whole_file(path, expected);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) model_error(file, "", "is not valid JSON", expected);
  return j;
}

}  // namespace runahead
