// A GGUF file as a model: the fixtures written as llama.cpp's converter writes them, in every
// tensor type the engine reads, give the logits of the safetensors folder (within each
// type's rounding) and, in Q8_0, its greedy tokens.
#include <doctest/doctest.h>

#include <memory>

#include "code_prompts.h"
#include "gguf_model_writer.h"
#include "model/gguf_weights.h"
#include "model/quantize.h"
#include "model_compare.h"
#include "model_writer.h"
#include "runtime/drafters/draft_model.h"

using namespace runahead;
using namespace runahead::test;

namespace {

// `w` as `dir`/model.gguf in `type`, loaded back.
std::shared_ptr<const ModelWeights> via_gguf(const TempDir& dir, const ModelWeights& w, uint32_t type,
                                             uint32_t fallback = kGgufQ8_0) {
  const fs::path file = dir.path / "model.gguf";
  write_file(file, gguf_of_model(w, type, fallback));
  return load_shared(file);
}

}  // namespace

TEST_CASE("gguf model: the fixtures as F32, BF16 and Q8_0 files give the safetensors logits (llama q/k rows restored)") {
  struct Type {
    uint32_t type;
    const char* name;
    double tolerance;  // relative rms of the logits
  };
  // F32 holds every fixture's values exactly; BF16 rounds the f32/f16 ones; Q8_0: see test_quantized_weights.
  for (const Type& t : {Type{kGgufF32, "f32", 1e-5}, Type{kGgufBF16, "bf16", 0.02}, Type{kGgufQ8_0, "q8_0", 0.06}}) {
    for (const char* name : {"qwen2-tied-bf16", "qwen2-untied-f16", "llama-f32", "qwen3-tiny-bf16"}) {
      INFO(name << " as " << t.name);
      TempDir dir;
      const auto base = load_shared(kFixtureModels / name);
      const auto g = via_gguf(dir, *base, t.type);
      CHECK(g->config.architecture == base->config.architecture);
      CHECK(g->config.tie_word_embeddings == base->config.tie_word_embeddings);
      CHECK(g->config.qkv_bias == base->config.qkv_bias);
      CHECK(weight_formats(*g) == t.name);
      CHECK(g->final_norm.dtype == DType::F32);
      CHECK(g->source == (dir.path / "model.gguf").string());
      const auto tokens = sample_tokens(40, base->config.vocab_size);
      const double err = relative_rms(all_logits(base, tokens), all_logits(g, tokens));
      MESSAGE(std::string(name) << " " << t.name << ": relative rms error " << err);
      CHECK(err <= t.tolerance);
    }
  }
}

// The reference is the embedded model's f32 widening: it ships in Q8_0, which f32 holds
// exactly, so the Q8_0 file has the shipped blocks and the error is the int8 activations'.
TEST_CASE("gguf model: the embedded model as Q8_0, Q4_K, Q5_K, Q6_K, Q4_0, Q5_0, Q4_1 and Q5_1 files: logits within each type's error, Q8_0's greedy tokens") {
  struct Type {
    uint32_t type;
    const char* formats;  // rows of 384 (hidden) are not Q4_K/Q6_K blocks: those matrices fall back to
                          // Q8_0 as in llama.cpp; ffn_down (rows of 1024) takes the type
    double tolerance;     // measured 0.008 (Q8_0), 0.012 (Q6_K), 0.035 (Q4_K), 0.019 (Q5_K), 0.051 (Q5_0),
                          // 0.114 (Q4_0), 0.057 (Q4_K over Q5_0, as a Q4_K_M file mixes them), 0.048 (Q5_1),
                          // 0.091 (Q4_1)
    uint32_t fallback = kGgufQ8_0;
  };
  const auto base = std::make_shared<const ModelWeights>(with_dense_matrices(*load_shared(kEmbeddedModel), DType::F32));
  const std::vector<int32_t>& prompt = code_prompts()[0];
  const auto reference = all_logits(base, prompt);
  for (const Type& t : {Type{kGgufQ8_0, "q8_0", 0.03}, Type{kGgufQ6_K, "q8_0+q6_k", 0.025}, Type{kGgufQ4_K, "q8_0+q4_k", 0.07},
                        Type{kGgufQ5_K, "q8_0+q5_k", 0.04}, Type{kGgufQ5_0, "q5_0", 0.1}, Type{kGgufQ4_0, "q4_0", 0.22},
                        Type{kGgufQ4_K, "q5_0+q4_k", 0.11, kGgufQ5_0}, Type{kGgufQ5_1, "q5_1", 0.1},
                        Type{kGgufQ4_1, "q4_1", 0.18}}) {
    INFO(t.formats);
    TempDir dir;
    const auto g = via_gguf(dir, *base, t.type, t.fallback);
    CHECK(weight_formats(*g) == t.formats);
    CHECK(g->lm_head.data == g->embed.data);
    const double err = relative_rms(reference, all_logits(g, prompt));
    MESSAGE(std::string(t.formats) << ": relative rms error " << err);
    CHECK(err <= t.tolerance);
    CHECK(err > 0);
    if (t.type != kGgufQ8_0) continue;
    for (const std::vector<int32_t>& p : code_prompts()) {
      const std::vector<int32_t> decided = decided_prefix(greedy_tokens(base, p, 32), 0.1f);
      CHECK(first(greedy_tokens(g, p, 32), decided.size()) == decided);
    }
  }
}

TEST_CASE("gguf model: Llama 3.1's rope_freqs.weight gives the logits of config.json's llama3 RoPE scaling") {
  const auto base = load_shared(kFixtureModels / "llama3-scaled-f32");
  REQUIRE(base->config.rope_scaling.type == "llama3");
  TempDir dir;
  const auto g = via_gguf(dir, *base, kGgufF32);
  CHECK(g->config.rope_scaling.type == "llama3");
  CHECK(g->config.rope_scaling.freq_divisors.size() == size_t(base->config.head_dim / 2));
  const auto tokens = sample_tokens(60, base->config.vocab_size);
  const auto reference = all_logits(base, tokens);
  const double err = relative_rms(reference, all_logits(g, tokens));
  MESSAGE("llama3-scaled-f32 with rope_freqs.weight: relative rms error " << err);
  CHECK(err <= 1e-5);
  // The same file without rope_freqs.weight runs plain RoPE: the test sees the scaling.
  ModelWeights plain = *base;
  plain.config.rope_scaling = {};
  TempDir plain_dir;
  const double unscaled = relative_rms(reference, all_logits(via_gguf(plain_dir, plain, kGgufF32), tokens));
  MESSAGE("without rope_freqs.weight: relative rms error " << unscaled);
  CHECK(unscaled > 1e-3);
}

TEST_CASE("gguf model: a draft model may be a .gguf file of the target's vocabulary") {
  TempDir dir;
  const auto target = load_shared(kFixtureModels / "qwen2-tied-bf16");
  write_file(dir.path / "draft.gguf", gguf_of_model(*target, kGgufQ8_0));
  CHECK(weight_formats(*load_draft_model(dir.path / "draft.gguf", *target)) == "q8_0");
  const auto other = load_shared(kEmbeddedModel);  // another vocabulary
  const EngineError e = error_of([&] { load_draft_model(dir.path / "draft.gguf", *other); });
  CHECK(e.code == "model_error");
  CHECK(e.field == "token_embd.weight");
}

TEST_CASE("gguf model: a file without a tensor the architecture binds is a model error naming it") {
  TempDir dir;
  const auto base = load_shared(kFixtureModels / "qwen2-tied-bf16");
  std::string bytes = gguf_of_model(*base, kGgufF32);
  // Rename blk.1.ffn_up.weight so the file lacks it (same length: the layout stays valid).
  const size_t at = bytes.find("blk.1.ffn_up.weight");
  REQUIRE(at != std::string::npos);
  bytes.replace(at, 6, "blk.9.");
  write_file(dir.path / "model.gguf", bytes);
  const EngineError e = error_of([&] { load_model(dir.path / "model.gguf"); });
  CHECK(e.code == "model_error");
  CHECK(e.file == (dir.path / "model.gguf").string());
}

// The CPU backend streams every matrix once a token, faster from memory of its own than from the
// file's pages (model/quantize.h with_mapped_matrices_copied): it copies them at load, and
// computes what reading them in the mapping computes, bit for bit.
TEST_CASE("gguf model: the CPU backend copies a file's matrices out of its mapping and computes the same logits") {
  TempDir dir;
  const auto g = via_gguf(dir, *load_shared(kEmbeddedModel), kGgufQ4_K);
  const std::vector<int32_t>& prompt = code_prompts()[0];
  const auto logits = [&](const char* copy) {
    setenv("RUNAHEAD_CPU_COPY_WEIGHTS", copy, 1);
    auto backend = make_cpu_backend(g, BackendOptions{2, 256});
    unsetenv("RUNAHEAD_CPU_COPY_WEIGHTS");
    CHECK(backend->describe()["optimizations"]["matrices_copied_from_file"] == (std::string(copy) == "1"));
    std::vector<float> out;
    backend->forward(prompt, int(prompt.size()), out);
    return out;
  };
  CHECK(logits("1") == logits("0"));
  // weights already in memory (converted at load) are not copied again
  auto dense = make_cpu_backend(std::make_shared<const ModelWeights>(with_dense_matrices(*g, DType::F32)), BackendOptions{2, 256});
  CHECK(dense->describe()["optimizations"]["matrices_copied_from_file"] == false);
}
