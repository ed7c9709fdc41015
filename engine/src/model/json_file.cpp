#include "model/json_file.h"

#include <fstream>
#include <sstream>

#include "model/model_error.h"

namespace runahead {

nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& expected) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) model_error(file, "", "is missing or unreadable", expected);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) model_error(file, "", "is not valid JSON", expected);
  return j;
}

}  // namespace runahead
