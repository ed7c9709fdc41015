// Quantized safetensors (MODEL_FORMAT.md): I8 weights with F16 weight_scale load as Q8_0, in
// model.safetensors (tied embedding included), mtp.safetensors and a draft folder; bad pairs
// are model errors naming the tensor.
#include <doctest/doctest.h>

#include <memory>

#include "model/quantize.h"
#include "model_compare.h"
#include "q8_0_writer.h"
#include "runtime/drafters/draft_model.h"
#include "runtime/drafters/mtp.h"

using namespace runahead;
using namespace runahead::test;

namespace {

// The load error of a tiny_config model (hidden 64) whose layer-0 q_proj is `pair`.
EngineError pair_error(const std::vector<RawTensor>& pair) {
  TempDir dir;
  json config = tiny_config();
  config.update({{"hidden_size", 64}, {"intermediate_size", 64}});  // rows of whole Q8_0 blocks
  std::vector<RawTensor> tensors;
  for (const TensorSpec& t : decoder_tensors(config, "BF16")) {
    if (t.name == "model.layers.0.self_attn.q_proj.weight") continue;
    tensors.push_back({t.name, t.dtype, t.shape, std::string(spec_bytes(t), '\0')});
  }
  tensors.insert(tensors.end(), pair.begin(), pair.end());
  write_file(dir.path / "config.json", config.dump());
  write_file(dir.path / "model.safetensors", safetensors_of(tensors));
  EngineError e = error_of([&] { load_model(dir.path); });
  CHECK(e.code == "model_error");
  CHECK(e.file == (dir.path / "model.safetensors").string());
  return e;
}

}  // namespace

TEST_CASE("quantized safetensors: a Q8_0 bundle (tied embedding too) loads as the same blocks and the same logits") {
  for (const char* name : {"qwen2-tied-bf16", "qwen2-untied-f16", "llama-f32"}) {
    INFO(name);
    TempDir dir;
    const auto base = load_shared(kFixtureModels / name);
    const auto q8 = std::make_shared<const ModelWeights>(quantize_matrices(*base, QuantType::Q8_0));
    write_q8_0_bundle(dir.path, kFixtureModels / name, *q8);
    const auto loaded = load_shared(dir.path);
    CHECK(weight_formats(*loaded) == "q8_0");
    CHECK(loaded->final_norm.dtype == base->final_norm.dtype);
    CHECK((loaded->lm_head.data == loaded->embed.data) == base->config.tie_word_embeddings);
    CHECK(loaded->weight_bytes == q8->weight_bytes);
    CHECK(std::memcmp(loaded->layers[1][Role::WUp].data, q8->layers[1][Role::WUp].data, q8->layers[1][Role::WUp].nbytes()) == 0);
    const auto tokens = sample_tokens(24, base->config.vocab_size);
    CHECK(all_logits(loaded, tokens) == all_logits(q8, tokens));
  }
}

// The embedded model ships as Q8_0 pairs (model.safetensors, mtp.safetensors, draft/): each
// loads, and the target written back by this file's writer loads as the same blocks.
TEST_CASE("quantized safetensors: the embedded model, its MTP head and a draft folder load from Q8_0 bundles") {
  const auto target = load_shared(kEmbeddedModel);
  CHECK(weight_formats(*target) == "q8_0");
  CHECK(target->lm_head.data == target->embed.data);
  TempDir dir;
  write_q8_0_bundle(dir.path, kEmbeddedModel, *target);
  const auto rewritten = load_shared(dir.path);
  CHECK(rewritten->weight_bytes == target->weight_bytes);
  CHECK(std::memcmp(rewritten->embed.data, target->embed.data, target->embed.nbytes()) == 0);
  CHECK(std::memcmp(rewritten->layers[1][Role::WDown].data, target->layers[1][Role::WDown].data,
                    target->layers[1][Role::WDown].nbytes()) == 0);

  const MtpWeights head = load_mtp(kEmbeddedModel / "mtp.safetensors", target);
  CHECK(weight_formats(*head.layer) == "q8_0");
  CHECK(head.eh_proj.size() == size_t(2 * target->config.hidden_size * target->config.hidden_size));
  // The head's layer widened to f32 holds the shipped weights exactly: the error is the Q8_0
  // kernels' int8 activations.
  const auto reference = std::make_shared<const ModelWeights>(with_dense_matrices(*head.layer, DType::F32));
  std::vector<float> x(size_t(target->config.hidden_size));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 37) % 11) / 11.0f - 0.5f;
  auto run = [&](std::shared_ptr<const ModelWeights> layer) {
    std::vector<float> logits;
    make_cpu_backend(std::move(layer), BackendOptions{2, 64})->forward_vectors(x, 1, logits);
    return logits;
  };
  const double err = relative_rms(run(reference), run(head.layer));
  MESSAGE("MTP layer in Q8_0: relative rms error " << err);
  CHECK(err < 0.03);
  CHECK(err > 0);  // the quantized kernels ran

  const auto draft = load_draft_model(kEmbeddedModel / "draft", *target);
  CHECK(weight_formats(*draft) == "q8_0");
  CHECK(draft->config.vocab_size == target->config.vocab_size);
}

TEST_CASE("quantized safetensors: bad pairs are model errors naming the tensor") {
  const std::string q = "model.layers.0.self_attn.q_proj.weight", s = q + "_scale";
  const std::string int8(64 * 64, '\1'), scales(64 * 2 * 2, '\0');
  SUBCASE("I8 without its scale") {
    const EngineError e = pair_error({{q, "I8", {64, 64}, int8}});
    CHECK(e.field == q);
    CHECK(std::string(e.what()).find(s) != std::string::npos);
  }
  SUBCASE("a scale of the wrong shape") {
    const EngineError e = pair_error({{q, "I8", {64, 64}, int8}, {s, "F16", {64, 1}, std::string(128, '\0')}});
    CHECK(e.field == s);
    CHECK(e.expected.find("[64, 2]") != std::string::npos);
  }
  SUBCASE("a scale that is not F16") {
    const EngineError e = pair_error({{q, "I8", {64, 64}, int8}, {s, "F32", {64, 2}, std::string(512, '\0')}});
    CHECK(e.field == s);
  }
  SUBCASE("rows not a multiple of 32") {
    const EngineError e = pair_error({{q, "I8", {128, 32}, std::string(128 * 32, '\1')}, {s, "F16", {128, 1}, std::string(256, '\0')}});
    CHECK(e.field == "model.layers.0.self_attn.q_proj.weight");
    CHECK(std::string(e.what()).find("has shape [128, 32]") != std::string::npos);
  }
  SUBCASE("a scale without an I8 weight") {
    const EngineError e = pair_error({{q, "BF16", {64, 64}, std::string(64 * 64 * 2, '\0')}, {s, "F16", {64, 2}, scales}});
    CHECK(e.field == s);
  }
}
