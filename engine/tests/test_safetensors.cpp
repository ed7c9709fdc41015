#include <doctest/doctest.h>

#include <cstring>

#include "model/safetensors.h"
#include "model_writer.h"

using namespace runahead;
using namespace runahead::test;

namespace {

const std::vector<TensorSpec> kTwo = {{"a", "BF16", {2, 3}}, {"b", "F32", {4}}};

std::vector<Tensor> parse(const std::string& bytes, const std::string& file = "/m/model.safetensors") {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), file);
}

EngineError parse_error(const std::string& bytes) {
  EngineError e = error_of([&] { parse(bytes); });
  CHECK(e.code == "model_error");
  CHECK(e.file == "/m/model.safetensors");
  CHECK_FALSE(e.expected.empty());
  return e;
}

bool has(const EngineError& e, const std::string& part) { return std::string(e.what()).find(part) != std::string::npos; }

std::string header(const json& h) { return h.dump(); }

}  // namespace

TEST_CASE("safetensors: a valid file gives views of the right bytes, __metadata__ is allowed") {
  const std::string bytes = safetensors_file(kTwo, {{"format", "pt"}});
  const std::vector<Tensor> tensors = parse(bytes);
  REQUIRE(tensors.size() == 2);
  const size_t data_start = bytes.size() - 12 - 16;
  for (const Tensor& t : tensors) {
    const size_t k = t.name == "a" ? 0 : 1;
    CHECK(t.dtype == (k == 0 ? DType::BF16 : DType::F32));
    CHECK(t.shape == kTwo[k].shape);
    CHECK(t.nbytes() == spec_bytes(kTwo[k]));
    const auto* p = static_cast<const uint8_t*>(t.data);
    CHECK(p == reinterpret_cast<const uint8_t*>(bytes.data()) + data_start + (k == 0 ? 0 : 12));
    for (size_t j = 0; j < t.nbytes(); ++j) CHECK(p[j] == pattern_byte(k, j));
  }
}

TEST_CASE("safetensors: a truncated file names the tensor whose data is cut off") {
  const std::string bytes = safetensors_file(kTwo);
  const EngineError e = parse_error(bytes.substr(0, bytes.size() - 5));
  CHECK(e.field == "b");
  CHECK(has(e, "past the end of the data section"));
}

TEST_CASE("safetensors: a file too short for the header length") {
  const EngineError e = parse_error(std::string("\x10\0\0", 3));
  CHECK(e.field == "header");
  CHECK(has(e, "3 bytes"));
}

TEST_CASE("safetensors: a header length past the end of the file") {
  std::string bytes = safetensors_file(kTwo);
  bytes[0] = '\xff', bytes[1] = '\xff';
  const EngineError e = parse_error(bytes);
  CHECK(e.field == "header");
  CHECK(has(e, "past the end of the file"));
  CHECK(has(e, std::to_string(bytes.size()) + " bytes"));
}

TEST_CASE("safetensors: a header that is not a JSON object") {
  CHECK(has(parse_error(safetensors_raw("{\"a\": ", "")), "not valid JSON"));
  CHECK(has(parse_error(safetensors_raw("[1, 2]", "")), "array"));
}

TEST_CASE("safetensors: offsets outside the data section") {
  const json h = {{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 24}}}}};
  const EngineError e = parse_error(safetensors_raw(header(h), std::string(16, '\0')));
  CHECK(e.field == "w");
  CHECK(has(e, "[8,24]"));
  CHECK(has(e, "16 bytes"));
  CHECK(e.expected == "offsets within the data section");
}

TEST_CASE("safetensors: overlapping tensors are refused, naming both") {
  const json h = {{"x", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                  {"y", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 24}}}}};
  const EngineError e = parse_error(safetensors_raw(header(h), std::string(24, '\0')));
  CHECK(e.field == "y");
  CHECK(has(e, "'x'"));
  CHECK(has(e, "overlaps"));
}

TEST_CASE("safetensors: an overlap hidden behind an empty tensor is still found") {
  const json h = {{"big", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                  {"empty", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {4, 4}}}},
                  {"late", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}};
  CHECK(parse_error(safetensors_raw(header(h), std::string(16, '\0'))).field == "late");
}

TEST_CASE("safetensors: an unknown dtype is named") {
  const json h = {{"ids", {{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {0, 16}}}}};
  const EngineError e = parse_error(safetensors_raw(header(h), std::string(16, '\0')));
  CHECK(e.field == "ids");
  CHECK(has(e, "I64"));
  CHECK(e.expected.find("BF16") != std::string::npos);
}

TEST_CASE("safetensors: a shape that is not a list of non-negative integers") {
  for (const json& shape : {json(4), json({2, -1}), json({2.5}), json({"2"}), json({1e30})}) {
    CAPTURE(shape.dump());
    const json h = {{"w", {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {0, 8}}}}};
    const EngineError e = parse_error(safetensors_raw(header(h), std::string(8, '\0')));
    CHECK(e.field == "w");
    CHECK(e.expected == "a list of non-negative integers");
  }
}

TEST_CASE("safetensors: a byte count that does not match shape x dtype") {
  const json h = {{"w", {{"dtype", "BF16"}, {"shape", {3, 3}}, {"data_offsets", {0, 16}}}}};
  const EngineError e = parse_error(safetensors_raw(header(h), std::string(16, '\0')));
  CHECK(e.field == "w");
  CHECK(has(e, "needs 18"));
  const json huge = {{"w", {{"dtype", "F32"}, {"shape", {1ull << 62, 1ull << 62}}, {"data_offsets", {0, 16}}}}};
  CHECK(has(parse_error(safetensors_raw(header(huge), std::string(16, '\0'))), "more than 2^64"));
}

TEST_CASE("safetensors: MappedFile maps the file read-only, a missing file is a model_error") {
  TempDir dir;
  const std::string bytes = safetensors_file(kTwo);
  write_file(dir.path / "w.safetensors", bytes);
  MappedFile map(dir.path / "w.safetensors");
  REQUIRE(map.size() == bytes.size());
  CHECK(std::memcmp(map.data(), bytes.data(), bytes.size()) == 0);
  const EngineError e = error_of([&] { MappedFile(dir.path / "none.safetensors"); });
  CHECK(e.code == "model_error");
  CHECK(e.file == (dir.path / "none.safetensors").string());
}

TEST_CASE("weight store: one file, or shards listed by model.safetensors.index.json") {
  TempDir single, sharded;
  write_file(single.path / "model.safetensors", safetensors_file(kTwo));
  auto store = WeightStore::open(single.path);
  CHECK(store->files() == std::vector<std::string>{(single.path / "model.safetensors").string()});
  REQUIRE(store->find("b"));
  CHECK(store->find("b")->shape == std::vector<int64_t>{4});
  CHECK(store->find("c") == nullptr);
  CHECK(store->total_bytes() == 12 + 16);

  write_file(sharded.path / "model-00001-of-00002.safetensors", safetensors_file({kTwo[0]}));
  write_file(sharded.path / "model-00002-of-00002.safetensors", safetensors_file({kTwo[1]}));
  write_file(sharded.path / "model.safetensors.index.json",
             json{{"metadata", {{"total_size", 28}}},
                  {"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}}
                 .dump());
  store = WeightStore::open(sharded.path);
  CHECK(store->files().size() == 2);
  REQUIRE(store->find("a"));
  REQUIRE(store->find("b"));
  CHECK(store->find("b")->dtype == DType::F32);
}

TEST_CASE("weight store: an index pointing to a missing shard names the shard") {
  TempDir dir;
  write_file(dir.path / "model-00001-of-00002.safetensors", safetensors_file({kTwo[0]}));
  write_file(dir.path / "model.safetensors.index.json",
             json{{"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}}
                 .dump());
  const EngineError e = error_of([&] { WeightStore::open(dir.path); });
  CHECK(e.code == "model_error");
  CHECK(e.file == (dir.path / "model-00002-of-00002.safetensors").string());
  CHECK(std::string(e.what()).find("missing") != std::string::npos);
}

TEST_CASE("weight store: index entries must match the shards' contents") {
  TempDir dir;
  write_file(dir.path / "s1.safetensors", safetensors_file(kTwo));
  write_file(dir.path / "s2.safetensors", safetensors_file({kTwo[1]}));
  // "b" is in both shards.
  write_file(dir.path / "model.safetensors.index.json",
             json{{"weight_map", {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}}}.dump());
  EngineError e = error_of([&] { WeightStore::open(dir.path); });
  CHECK(e.field == "b");
  // "c" is listed but in no shard.
  write_file(dir.path / "model.safetensors.index.json",
             json{{"weight_map", {{"a", "s1.safetensors"}, {"c", "s1.safetensors"}}}}.dump());
  e = error_of([&] { WeightStore::open(dir.path); });
  CHECK(e.field == "c");
  CHECK(e.file == (dir.path / "s1.safetensors").string());
  // A shard path that leaves the folder.
  write_file(dir.path / "model.safetensors.index.json", json{{"weight_map", {{"a", "../s1.safetensors"}}}}.dump());
  CHECK(error_of([&] { WeightStore::open(dir.path); }).field == "a");
}

TEST_CASE("weight store: a folder without weights names what it looked for") {
  TempDir dir;
  const EngineError e = error_of([&] { WeightStore::open(dir.path); });
  CHECK(e.code == "model_error");
  CHECK(std::string(e.what()).find("model.safetensors.index.json") != std::string::npos);
}
