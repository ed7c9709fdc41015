// Block-quantized matrices on the CPU backend: logits near the float model's, same greedy tokens.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>

#include "code_prompts.h"
#include "model/quantize.h"
#include "model_compare.h"
#include "model_writer.h"

using namespace runahead;
using namespace runahead::test;

namespace {

std::shared_ptr<const ModelWeights> fixture(const char* name) {
  return load_shared(kFixtureModels / name);
}

// The embedded model (trained, so its greedy choices are not coin flips) as it ships, Q8_0.
std::shared_ptr<const ModelWeights> embedded() { return load_shared(kEmbeddedModel); }

// `w` with its matrices in f32: a Q8_0 weight (int8 times an f16 scale) widens exactly, so
// this is the float model whose Q8_0 form `w` is.
std::shared_ptr<const ModelWeights> widened_f32(const ModelWeights& w) {
  return std::make_shared<const ModelWeights>(with_dense_matrices(w, DType::F32));
}

// Whether every matrix of `a` holds the same bytes as `b`'s.
bool same_matrices(const ModelWeights& a, const ModelWeights& b) {
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.dtype == y.dtype && x.shape == y.shape && std::memcmp(x.data, y.data, x.nbytes()) == 0;
  };
  bool all = same(a.embed, b.embed) && same(a.lm_head, b.lm_head);
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (size_t r = 0; r < a.layers[l].by_role.size(); ++r)
      if (a.layers[l].by_role[r].shape.size() == 2) all = all && same(a.layers[l].by_role[r], b.layers[l].by_role[r]);
  return all;
}

}  // namespace

// The fixtures are random 2-layer models with logits up to ~30: Q8_0 weights and int8
// activations move their logits by 2-4% (rms), their greedy choices near ties.
TEST_CASE("quantized weights: every fixture model quantized to Q8_0 at load stays within 6% of its logits") {
  for (const char* name : {"qwen2-tied-bf16", "qwen2-untied-f16", "llama-f32", "qwen3-tiny-bf16"}) {
    INFO(name);
    const auto base = fixture(name);
    const auto q8 = std::make_shared<const ModelWeights>(quantize_matrices(*base, QuantType::Q8_0));
    CHECK(q8->embed.dtype == DType::Q8_0);
    CHECK(q8->layers[1][Role::WDown].dtype == DType::Q8_0);
    CHECK(q8->layers[0][Role::AttnNorm].dtype == base->layers[0][Role::AttnNorm].dtype);
    CHECK((q8->lm_head.data == q8->embed.data) == base->config.tie_word_embeddings);
    CHECK(q8->weight_bytes < base->weight_bytes);
    CHECK(weight_formats(*q8) == "q8_0");
    const auto tokens = sample_tokens(40, base->config.vocab_size);
    const double err = relative_rms(all_logits(base, tokens), all_logits(q8, tokens));
    MESSAGE(name << " Q8_0 relative rms error " << err);
    CHECK(err < 0.06);
    CHECK(err > 0);  // the quantized kernels ran
  }
}

// The model ships in Q8_0; its f32 widening holds the same weights, so the two differ only by
// the Q8_0 kernels' int8 activations. Greedy runs agree until the reference's first near-tie
// (top-2 margin under 0.1 logits; at least 12 tokens over the three prompts, as a prompt may
// end where two continuations are equally likely: the C one has a tie at its 2nd token), and
// teacher-forced on the reference's continuation the top-1 choices agree for at least 90% of
// the tokens.
TEST_CASE("quantized weights: the embedded model in Q8_0 (tied head on a quantized table) decodes the same greedy tokens") {
  const auto q8 = embedded();
  REQUIRE(q8->lm_head.data == q8->embed.data);
  CHECK(weight_formats(*q8) == "q8_0");
  const auto base = widened_f32(*q8);
  CHECK(weight_formats(*base) == "f32");
  // The engine's quantizer, given the float model, rounds to the very blocks that ship.
  CHECK(same_matrices(quantize_matrices(*base, QuantType::Q8_0), *q8));
  CHECK(same_matrices(quantize_matrices(*q8, QuantType::Q8_0), *q8));  // options.weights "q8_0": kept as shipped
  size_t decided_tokens = 0;
  for (const std::vector<int32_t>& prompt : code_prompts()) {
    const double err = relative_rms(all_logits(base, prompt), all_logits(q8, prompt));
    MESSAGE("Q8_0 relative rms error " << err);
    CHECK(err < 0.03);
    CHECK(err > 0);  // the quantized kernels ran
    const Greedy reference = greedy_tokens(base, prompt, 32);
    const std::vector<int32_t> decided = decided_prefix(reference, 0.1f);
    MESSAGE(decided.size() << " of 32 greedy tokens before a near-tie");
    decided_tokens += decided.size();
    CHECK(first(greedy_tokens(q8, prompt, 32), decided.size()) == decided);
    std::vector<int32_t> text = prompt;
    text.insert(text.end(), reference.tokens.begin(), reference.tokens.end());
    const double agree = top1_agreement(all_logits(base, text), all_logits(q8, text), size_t(base->config.vocab_size),
                                        prompt.size() - 1);
    MESSAGE("teacher-forced top-1 agreement " << agree);
    CHECK(agree >= 0.9);
  }
  CHECK(decided_tokens >= 12);
}

TEST_CASE("quantized weights: a row length that is not a multiple of the block is refused naming the tensor") {
  const auto base = fixture("qwen2-tied-bf16");  // hidden 64: not a multiple of Q4_K's 256
  const EngineError e = error_of([&] { quantize_matrices(*base, QuantType::Q4_K); });
  CHECK(e.code == "bad_request");
  CHECK(e.field == "options.weights");
  CHECK(std::string(e.what()).find("model.embed_tokens.weight") != std::string::npos);
}

TEST_CASE("quantized weights: widened to bf16 for a backend without quantized kernels, one dtype for all matrices") {
  const auto base = fixture("qwen2-untied-f16");
  CHECK(with_bf16_matrices(base) == base);  // nothing quantized: the same weights
  const auto q8 = std::make_shared<const ModelWeights>(quantize_matrices(*base, QuantType::Q8_0));
  const auto bf16 = with_bf16_matrices(q8);
  CHECK(weight_formats(*bf16) == "bf16");
  CHECK(bf16->dtype == DType::BF16);
  const auto tokens = sample_tokens(32, base->config.vocab_size);
  const auto q8_logits = all_logits(q8, tokens);
  const double err = relative_rms(q8_logits, all_logits(bf16, tokens));
  MESSAGE("bf16 from Q8_0 vs Q8_0 relative rms " << err);
  CHECK(err < 0.06);
}
