// Block-quantized matrices on the CPU backend: logits near the float model's, same greedy tokens.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>

#include "code_prompts.h"
#include "model/numerics.h"
#include "model/quant_blocks.h"
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

namespace {

std::shared_ptr<const ModelWeights> k_quant_model(bool tied, int layers) {
  TempDir dir;
  write_random_model(dir.path, k_quant_config(tied, layers), tied ? 3 : 4);
  const auto w = std::make_shared<const ModelWeights>(load_model(dir.path));
  // The loader maps the file; widened to f32 in memory, the weights outlive the folder.
  return std::make_shared<const ModelWeights>(with_dense_matrices(*w, DType::F32));
}

// Whether `q` holds each dense matrix of `base` quantized row by row with quantize_row in the
// format it has (the threads of quantize_matrices write exactly the single-threaded rows).
bool rows_as_quantize_row(const ModelWeights& base, const ModelWeights& q) {
  auto same = [](const Tensor& b, const Tensor& t) {
    const std::optional<QuantType> type = quant_type_of(t.dtype);
    if (!type || b.shape != t.shape) return false;
    const int64_t cols = t.cols();
    const size_t rb = quant_row_bytes(*type, cols);
    std::vector<float> row(size_t(cols), 0.0f);
    std::vector<uint8_t> expected(rb);
    for (int64_t r = 0; r < t.rows(); ++r) {
      widen(b, r * cols, cols, row.data());
      quantize_row(*type, row.data(), cols, expected.data());
      if (std::memcmp(expected.data(), static_cast<const uint8_t*>(t.data) + size_t(r) * rb, rb) != 0) return false;
    }
    return true;
  };
  bool all = same(base.embed, q.embed) && same(base.lm_head, q.lm_head);
  for (size_t l = 0; l < base.layers.size(); ++l)
    for (size_t r = 0; r < base.layers[l].by_role.size(); ++r)
      if (base.layers[l].by_role[r].shape.size() == 2) all = all && same(base.layers[l].by_role[r], q.layers[l].by_role[r]);
  return all;
}

}  // namespace

TEST_CASE("quantized weights: q4_k_m_more_bits is llama.cpp's use_more_bits") {
  auto layers = [](int n) {
    std::vector<int> out;
    for (int i = 0; i < n; ++i)
      if (q4_k_m_more_bits(i, n)) out.push_back(i);
    return out;
  };
  CHECK(layers(8) == std::vector<int>{0, 3, 6, 7});
  CHECK(layers(7) == std::vector<int>{2, 5, 6});   // n / 8 == 0: the last layer and every third from 2
  CHECK(layers(28) == std::vector<int>{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27});  // Qwen2.5-Coder-7B
  CHECK(layers(2) == std::vector<int>{1});
}

// llama.cpp's Q4_K_M (llama_tensor_get_type): output Q6_K, token_embd Q4_K, attn_v and ffn_down
// Q6_K where use_more_bits, Q4_K for the rest.
TEST_CASE("quantized weights: q4_k_m quantizes to llama.cpp's Q4_K_M mix, the tied table as the head") {
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    const auto base = k_quant_model(tied, 8);
    const auto q = std::make_shared<const ModelWeights>(quantize_q4_k_m(*base));
    CHECK(q->embed.dtype == (tied ? DType::Q6_K : DType::Q4_K));
    CHECK(q->lm_head.dtype == DType::Q6_K);
    CHECK((q->lm_head.data == q->embed.data) == tied);
    for (int l = 0; l < 8; ++l) {
      CAPTURE(l);
      const bool more = l == 0 || l == 3 || l == 6 || l == 7;
      const LayerWeights& lw = q->layers[size_t(l)];
      CHECK(lw[Role::Wv].dtype == (more ? DType::Q6_K : DType::Q4_K));
      CHECK(lw[Role::WDown].dtype == (more ? DType::Q6_K : DType::Q4_K));
      for (Role r : {Role::Wq, Role::Wk, Role::Wo, Role::WGate, Role::WUp}) CHECK(lw[r].dtype == DType::Q4_K);
      for (Role r : {Role::AttnNorm, Role::MlpNorm, Role::Bq, Role::Bk, Role::Bv}) {
        CHECK(lw[r].dtype == DType::F32);
        CHECK(lw[r].data == base->layers[size_t(l)][r].data);
      }
    }
    CHECK(q->final_norm.data == base->final_norm.data);
    CHECK(weight_formats(*q) == (tied ? "q6_k+q4_k" : "q4_k+q6_k"));
    CHECK(q->weight_bytes < base->weight_bytes / 6);  // f32 -> 4.5 and 6.6 bits a weight
    CHECK(rows_as_quantize_row(*base, *q));
    CHECK(same_matrices(quantize_q4_k_m(*base), *q));  // the same bytes every time
    CHECK(same_matrices(quantize_q4_k_m(*q), *q));     // block-quantized matrices stay as they are
    CHECK(same_matrices(quantize_for_option(*base, "q4_k_m"), *q));

    // The CPU backend runs the blocks as stored; against the exact f32 widening of the same
    // blocks only its 8-bit activations differ, against the float model the 4-6 bit weights
    // too (measured 0.012 and 0.114 untied, 0.011 and 0.075 tied, where the table is Q6_K:
    // uniform random weights through 8 layers, a harder case than a trained model's).
    const auto tokens = sample_tokens(40, base->config.vocab_size);
    const auto logits = all_logits(q, tokens);
    const double kernel_err = relative_rms(all_logits(widened_f32(*q), tokens), logits);
    const double weight_err = relative_rms(all_logits(base, tokens), logits);
    MESSAGE("q4_k_m (tied " << tied << "): relative rms error " << kernel_err << " against its f32 widening, "
                            << weight_err << " against the float model");
    CHECK(kernel_err > 0);  // the quantized kernels ran
    CHECK(kernel_err < 0.02);
    CHECK(weight_err < (tied ? 0.1 : 0.15));
  }
}

TEST_CASE("quantized weights: q8_0 rows are written by the threads exactly as quantize_row writes them") {
  const auto base = k_quant_model(false, 2);
  const ModelWeights q = quantize_matrices(*base, QuantType::Q8_0);
  CHECK(weight_formats(q) == "q8_0");
  CHECK(rows_as_quantize_row(*base, q));
  CHECK(same_matrices(quantize_for_option(*base, "q8_0"), q));
}

// The embedded model's rows of 384 (hidden, q) are not Q4_K blocks: those matrices, the tied
// table among them, fall back to Q8_0; mlp.down_proj (rows of 1024) takes Q4_K or, in layers
// 2, 5 and 6 of 7, Q6_K.
TEST_CASE("quantized weights: q4_k_m falls back to Q8_0 for rows that are not a multiple of 256, and the embedded model's logits stay within 6%") {
  const auto base = widened_f32(*embedded());
  const auto q = std::make_shared<const ModelWeights>(quantize_q4_k_m(*base));
  CHECK(weight_formats(*q) == "q8_0+q4_k+q6_k");
  CHECK(q->embed.dtype == DType::Q8_0);
  CHECK(q->lm_head.data == q->embed.data);
  for (int l = 0; l < 7; ++l) {
    CAPTURE(l);
    const LayerWeights& lw = q->layers[size_t(l)];
    CHECK(lw[Role::WDown].dtype == (l == 2 || l == 5 || l == 6 ? DType::Q6_K : DType::Q4_K));
    for (Role r : {Role::Wq, Role::Wk, Role::Wv, Role::Wo, Role::WGate, Role::WUp}) CHECK(lw[r].dtype == DType::Q8_0);
  }
  CHECK(rows_as_quantize_row(*base, *q));
  const std::vector<int32_t>& prompt = code_prompts()[0];
  const double err = relative_rms(all_logits(base, prompt), all_logits(q, prompt));
  MESSAGE("embedded model q4_k_m: relative rms error " << err);  // measured 0.030
  CHECK(err > 0);
  CHECK(err < 0.06);
}

TEST_CASE("quantized weights: q4_k_m refuses a row that is not a multiple of 32 either, naming the tensor and the option") {
  TempDir dir;
  write_random_model(dir.path, tiny_config());  // hidden 16
  const ModelWeights w = load_model(dir.path);
  const EngineError e = error_of([&] { quantize_q4_k_m(w); });
  CHECK(e.code == "bad_request");
  CHECK(e.field == "options.weights");
  CHECK(std::string(e.what()).find("\"q4_k_m\"") != std::string::npos);
  CHECK(std::string(e.what()).find("model.embed_tokens.weight") != std::string::npos);
  CHECK(quantizes_at_load("q4_k_m"));
  CHECK(quantizes_at_load("q8_0"));
  CHECK(!quantizes_at_load("auto"));
  CHECK(!quantizes_at_load("fp8"));
}
