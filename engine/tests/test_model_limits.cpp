// Issue 18, the model folder: whatever a folder holds (FIFOs, devices, loops, huge or
// inconsistent sizes, NaN weights, a tokenizer that does not match), loading ends at once
// with a model_error naming the file and the field, never a hang, a crash or `internal`.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "runtime/cpus.h"
#include "model/regular_file.h"
#include "model/weights.h"
#include "model_writer.h"
#include "runtime/drafters/draft_model.h"
#include "runtime/newline_tokens.h"
#include "runtime/session.h"

using namespace runahead;
using namespace runahead::test;

namespace {

void write_tiny_model(const fs::path& dir, const json& config = tiny_config()) {
  write_model(dir, config, decoder_tensors(config, "BF16"));
}

// The model_error of loading `dir`, checked to name `file_suffix`.
EngineError model_error_of(const fs::path& dir, const std::string& file_suffix) {
  const EngineError e = error_of([&] { load_model(dir); });
  CHECK(e.code == "model_error");
  CHECK_MESSAGE(e.file.ends_with(file_suffix), e.file);
  CHECK_FALSE(e.expected.empty());
  return e;
}

bool mentions(const EngineError& e, const std::string& text) {
  return std::string(e.what()).find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("model files: a FIFO, a device, a directory or a symlink loop as config.json is named, never waited on") {
  TempDir dir;
  write_tiny_model(dir.path);
  const fs::path config = dir.path / "config.json";
  fs::remove(config);
  REQUIRE(::mkfifo(config.c_str(), 0600) == 0);
  CHECK(mentions(model_error_of(dir.path, "config.json"), "a FIFO"));

  fs::remove(config);
  fs::create_symlink("/dev/zero", config);
  CHECK(mentions(model_error_of(dir.path, "config.json"), "a device"));

  fs::remove(config);
  fs::create_directory(config);
  CHECK(mentions(model_error_of(dir.path, "config.json"), "a directory"));

  fs::remove(config);
  fs::create_symlink("config.json", config);  // points at itself
  CHECK(mentions(model_error_of(dir.path, "config.json"), "symbolic link loop"));
}

TEST_CASE("model files: weights and the shard index must be regular files too") {
  TempDir dir;
  write_tiny_model(dir.path);
  fs::remove(dir.path / "model.safetensors");
  REQUIRE(::mkfifo((dir.path / "model.safetensors").c_str(), 0600) == 0);
  CHECK(mentions(model_error_of(dir.path, "model.safetensors"), "a FIFO"));

  fs::remove(dir.path / "model.safetensors");
  fs::create_symlink("/dev/zero", dir.path / "model.safetensors.index.json");
  CHECK(mentions(model_error_of(dir.path, "model.safetensors.index.json"), "a device"));

  fs::remove(dir.path / "model.safetensors.index.json");
  fs::create_symlink("model.safetensors", dir.path / "model.safetensors");
  CHECK(mentions(model_error_of(dir.path, "model.safetensors"), "symbolic link loop"));
}

TEST_CASE("model files: a file read whole is refused past 64 MiB without reading it") {
  TempDir dir;
  const fs::path big = dir.path / "tokenizer.json";
  write_file(big, "{}");
  fs::resize_file(big, kMaxWholeFileBytes + 1);  // sparse: costs no disk
  const EngineError e = error_of([&] { newline_tokens_from_tokenizer(big, 32); });
  CHECK(e.code == "model_error");
  CHECK(e.file == big.string());
  CHECK(mentions(e, "more than the limit of 67108864 bytes"));
}

TEST_CASE("model files: a FIFO as tokenizer.json or draft/config.json is named") {
  TempDir dir;
  write_tiny_model(dir.path);
  REQUIRE(::mkfifo((dir.path / "tokenizer.json").c_str(), 0600) == 0);
  EngineError e = error_of([&] { Session::open(dir.path.string(), LoadOptions{}); });
  CHECK(e.code == "model_error");
  CHECK(e.file.ends_with("tokenizer.json"));

  fs::create_directory(dir.path / "draft");
  REQUIRE(::mkfifo((dir.path / "draft" / "config.json").c_str(), 0600) == 0);
  const ModelWeights target = load_model(dir.path);
  e = error_of([&] { load_draft_model(dir.path / "draft", target); });
  CHECK(e.code == "model_error");
  CHECK(e.file.ends_with("draft/config.json"));
  CHECK(mentions(e, "a FIFO"));
}

TEST_CASE("model files: num_hidden_layers beyond the layers in the weights fails before anything is sized") {
  for (const int64_t layers : {int64_t(1'000'000), int64_t(50'000'000), int64_t(2147483647)}) {
    CAPTURE(layers);
    TempDir dir;
    json config = tiny_config();
    write_tiny_model(dir.path, config);
    config["num_hidden_layers"] = layers;
    write_file(dir.path / "config.json", config.dump());
    const EngineError e = model_error_of(dir.path, "config.json");
    CHECK(e.field == "num_hidden_layers");
    CHECK(mentions(e, "hold 2 layers"));
    CHECK(mentions(e, "bytes of tensors"));
  }
}

TEST_CASE("model files: max_position_embeddings too small for a prompt and a completion is refused") {
  TempDir dir;
  json config = tiny_config();
  config["max_position_embeddings"] = 1;
  write_tiny_model(dir.path, config);
  const EngineError e = model_error_of(dir.path, "config.json");
  CHECK(e.field == "max_position_embeddings");
  CHECK(e.expected == "an integer >= " + std::to_string(kMinPositionEmbeddings));
}

TEST_CASE("model files: a NaN or Inf weight is named with its tensor and file") {
  for (const std::string dtype : {"BF16", "F16", "F32"}) {
    CAPTURE(dtype);
    TempDir dir;
    const json config = tiny_config();
    write_model(dir.path, config, decoder_tensors(config, dtype));
    // The last tensor written is model.norm.weight: make its last element +Inf (or NaN for bf16).
    std::string bytes;
    {
      std::ifstream in(dir.path / "model.safetensors", std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (dtype == "BF16") bytes.replace(bytes.size() - 2, 2, "\xC0\x7F");
    if (dtype == "F16") bytes.replace(bytes.size() - 2, 2, std::string("\x00\x7C", 2));
    if (dtype == "F32") bytes.replace(bytes.size() - 4, 4, std::string("\x00\x00\x80\x7F", 4));
    write_file(dir.path / "model.safetensors", bytes);
    const EngineError e = model_error_of(dir.path, "model.safetensors");
    CHECK(e.field == "model.norm.weight");
    CHECK(mentions(e, "NaN or Inf"));
  }
}

TEST_CASE("model files: tokenizer ids at or above vocab_size are refused naming the entry") {
  TempDir dir;
  const fs::path tokenizer = dir.path / "tokenizer.json";
  write_file(tokenizer, json{{"model", {{"vocab", {{"a", 0}, {"\xC4\x8A", 5}}}}},
                             {"added_tokens", {{{"id", 6}, {"content", "<x>"}}, {{"id", 32}, {"content", "<y>"}}}}}
                            .dump());
  EngineError e = error_of([&] { newline_tokens_from_tokenizer(tokenizer, 32); });
  CHECK(e.code == "model_error");
  CHECK(e.file == tokenizer.string());
  CHECK(e.field == "added_tokens[1].id");
  CHECK(e.expected.find("vocab_size of config.json") != std::string::npos);
  CHECK(mentions(e, "[0, 32)"));

  write_file(tokenizer, json{{"model", {{"vocab", {{"a", 0}, {"\xC4\x8A", 40}}}}}}.dump());
  e = error_of([&] { newline_tokens_from_tokenizer(tokenizer, 32); });
  CHECK(e.field == "model.vocab[\"\xC4\x8A\"]");
  CHECK(newline_tokens_from_tokenizer(tokenizer, 41) == std::vector<int32_t>{40});
}

TEST_CASE("model files: a context above the model's maximum is capped with a warning, 0 is min(maximum, 4096)") {
  TempDir dir;
  write_tiny_model(dir.path);  // max_position_embeddings 128
  for (const int requested : {1000, 2147483647}) {
    LoadOptions options;
    options.context_length = requested;
    options.speculation.mode = "off";
    const auto session = Session::open(dir.path.string(), options);
    CHECK(session->report()["context_length"] == 128);
    REQUIRE(session->report()["warnings"].size() == 1);
    CHECK(session->report()["warnings"][0].get<std::string>().find("capped to 128") != std::string::npos);
  }
  LoadOptions options;
  options.speculation.mode = "off";
  const auto session = Session::open(dir.path.string(), options);
  CHECK(session->report()["context_length"] == 128);
  CHECK(session->report()["warnings"].empty());
}

TEST_CASE("model files: more threads than the affinity mask allows are capped with a warning") {
  TempDir dir;
  write_tiny_model(dir.path);
  LoadOptions options;
  options.threads = 1024;
  options.speculation.mode = "off";
  const auto session = Session::open(dir.path.string(), options);
  CHECK(session->report()["threads"] == usable_cpus());
  REQUIRE(session->report()["warnings"].size() == 1);
  CHECK(session->report()["warnings"][0].get<std::string>().find("options.threads 1024") != std::string::npos);
}
