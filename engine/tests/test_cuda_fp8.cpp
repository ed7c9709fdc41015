// The CUDA backend's fp8 options (`weights: fp8`, `lm_head: fp8`): the device quantizer gives
// the host format's bytes (model/fp8.h), and a model whose matrices are fp8 computes what its
// exact f32 reference (with_fp8_matrices_reference) computes on the CPU backend, on the
// persistent step, the kernel-per-op step, the device loop, the device verify and the
// tensor-core prefill. The fp8 dot products sum 16 products at a time in f16 (common.cuh), so
// "what the reference computes" is within f16 rounding: logits within 1 % of the largest (0.3-
// 0.4 % measured on the fixtures; a wrong scale or row is off by far more), and each token the
// device picks at most that far from the reference's best.
// Skipped, with a message, without a CUDA device.
#ifdef RUNAHEAD_CUDA
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda_test_util.h"
#include "model/fp8.h"
#include "model/quantize.h"
#include "model/weights.h"

using namespace runahead;
using namespace runahead::cuda;
using namespace runahead::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kModels = fs::path(RUNAHEAD_FIXTURES) / "models";

}  // namespace

TEST_CASE("cuda fp8: the device quantizer gives the host format's bytes and scales") {
  if (!have_device()) return;
  constexpr int rows = 37, K = 272;
  std::mt19937 rng(9);
  Bf16Matrix m = random_bf16(size_t(rows) * K, rng, 0.05f);
  for (int k = 0; k < K; ++k) {  // a zero row, and a row spanning the subnormals
    m.bits[size_t(3) * K + k] = 0;
    m.values[size_t(3) * K + k] = 0.0f;
    const float tiny = std::ldexp(float(k % 17) - 8.0f, -12) * (k == 5 ? 4096.0f : 1.0f);
    m.bits[size_t(4) * K + k] = f32_to_bf16(tiny);
    m.values[size_t(4) * K + k] = bf16_to_f32(m.bits[size_t(4) * K + k]);
  }
  DeviceBuffer w = to_device(m.bits), q(size_t(rows) * K), scale(size_t(rows) * sizeof(float));
  quantize_fp8_rows(w.get(), DType::BF16, rows, K, q.get(), scale.get<float>(), nullptr);
  const auto got_q = to_host<uint8_t>(q, size_t(rows) * K);
  const auto got_scale = to_host<float>(scale, rows);
  std::vector<uint8_t> want(K);
  int differing = 0;
  for (int r = 0; r < rows; ++r) {
    const float s = quantize_fp8_row(m.values.data() + size_t(r) * K, K, want.data());
    CHECK(got_scale[size_t(r)] == s);
    for (int k = 0; k < K; ++k) differing += got_q[size_t(r) * K + k] != want[size_t(k)];
  }
  CHECK(differing == 0);
  CHECK(got_scale[3] == 0.0f);

  // Widened back to bf16 for the tensor-core prefill: each value is bf16(q * scale).
  DeviceBuffer wide(size_t(rows) * K * 2);
  dequantize_fp8_rows(q.get(), scale.get<float>(), rows, K, wide.get(), nullptr);
  const auto got_wide = to_host<uint16_t>(wide, size_t(rows) * K);
  int wrong = 0;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < K; ++k)
      wrong += got_wide[size_t(r) * K + k] != f32_to_bf16(fp8_e4m3_to_f32(got_q[size_t(r) * K + k]) * got_scale[size_t(r)]);
  CHECK(wrong == 0);
}

TEST_CASE("cuda fp8: fp8 weights and an fp8 lm_head compute what their f32 reference computes") {
  if (!have_device()) return;
  struct Case {
    const char* model;
    bool matrices, lm_head;
  };
  for (const Case& c : {Case{"qwen2-tied-bf16", true, true}, Case{"qwen2-untied-f16", true, true},
                        Case{"qwen3-tiny-bf16", true, true}, Case{"qwen2-tied-bf16", false, true},
                        Case{"qwen2-untied-f16", false, true}}) {
    auto weights = std::make_shared<const ModelWeights>(load_model(kModels / c.model));
    auto reference = std::make_shared<const ModelWeights>(with_fp8_matrices_reference(*weights, c.matrices, c.lm_head));
    BackendOptions options;
    options.context_length = 512;
    options.fp8_matrices = c.matrices;
    options.fp8_lm_head = c.lm_head;
    const int V = weights->config.vocab_size;
    std::mt19937 rng(17);
    const std::vector<int32_t> prompt = random_tokens(40, V, rng), long_prompt = random_tokens(300, V, rng);
    for (const char* persistent : {"1", "0"}) {
      CAPTURE(c.model);
      CAPTURE(c.matrices);
      CAPTURE(persistent);
      auto cuda = backend_on(persistent, weights, options);
      auto cpu = make_cpu_backend(reference, BackendOptions{2, 512});
      const auto optimizations = cuda->describe()["optimizations"];
      CHECK(optimizations["lm_head"].get<std::string>().rfind("F8_E4M3", 0) == 0);
      CHECK((optimizations["weights"].get<std::string>().rfind("F8_E4M3", 0) == 0) == c.matrices);

      // The matrix-vector path (chunks of up to 8 tokens), then single steps.
      constexpr double kTol = 1e-2;
      // `token` is the reference's best in `row` of `ref`, or within the tolerance of it.
      const auto near_best = [&](const std::vector<float>& ref, size_t row, int32_t token) {
        const float* r = ref.data() + row * size_t(V);
        const float best = *std::max_element(r, r + V);
        float scale = 0;
        for (int v = 0; v < V; ++v) scale = std::max(scale, std::abs(r[v]));
        return r[token] >= best - 2 * kTol * scale;
      };
      std::vector<float> a, b;
      cpu->forward(prompt, 8, a);
      cuda->forward(prompt, 8, b);
      CHECK(relative_max(b, a) < kTol);
      int32_t next = argmax_row(b, 7, V);
      CHECK(near_best(a, 7, next));
      for (int i = 0; i < 12; ++i) {
        cpu->forward(std::span<const int32_t>(&next, 1), 1, a);
        cuda->forward(std::span<const int32_t>(&next, 1), 1, b);
        CHECK(relative_max(b, a) < kTol);
        next = argmax_row(b, 0, V);
        CHECK(near_best(a, 0, next));
      }
      // The device loop: each token it picks is the reference's best (or near it) after the
      // tokens before it.
      std::vector<int32_t> got;
      cuda->decode_greedy(next, 6, [&](int32_t token) {
        got.push_back(token);
        return true;
      });
      REQUIRE(got.size() == 6);
      int32_t fed = next;
      for (int32_t token : got) {
        cpu->forward(std::span<const int32_t>(&fed, 1), 1, a);
        CHECK(near_best(a, 0, token));
        fed = token;
      }
      // The device verify of those tokens as a draft: what it keeps and its next token are the
      // reference's choices (or near them) at each row; the loop's own tokens are normally all kept.
      cuda->truncate(cuda->kv_len() - 6);
      cpu->truncate(cpu->kv_len() - 6);
      const GreedyVerdict verdict = cuda->verify_greedy(next, std::span<const int32_t>(got.data(), 5));
      std::vector<int32_t> step = {next};
      step.insert(step.end(), got.begin(), got.begin() + 5);
      cpu->forward(step, 6, a);
      for (int i = 0; i < verdict.accepted; ++i) CHECK(near_best(a, size_t(i), got[size_t(i)]));
      CHECK(near_best(a, size_t(verdict.accepted), verdict.next));
      if (verdict.accepted < 5) MESSAGE("verify kept " << verdict.accepted << " of the device loop's 5 tokens (a near-tie)");
      CHECK(cuda->kv_len() == cpu->kv_len() - 5 + verdict.accepted);

      // A prompt long enough for the tensor-core prefill (the fp8 matrices widened to bf16,
      // bf16 activations): within 2 % of the largest logit, as the bf16 prefill test asks.
      cpu->truncate(0);
      cuda->truncate(0);
      cpu->forward(long_prompt, 8, a);
      cuda->forward(long_prompt, 8, b);
      CHECK(relative_max(b, a) < 0.02);
    }
  }
}

TEST_CASE("cuda fp8: fp8 weights on a published shape stay close to bf16 on both decode paths") {
  if (!have_device()) return;
  auto weights = std::make_shared<const ModelWeights>(random_model("qwen2.5-coder-0.5b", 3));
  BackendOptions bf16;
  bf16.context_length = 256;
  BackendOptions fp8 = bf16;
  fp8.fp8_matrices = true;
  auto persistent = backend_on("1", weights, fp8);
  auto per_op = backend_on("0", weights, fp8);
  auto plain = backend_on("0", weights, bf16);
  REQUIRE(persistent->describe()["optimizations"]["decode_step"].get<std::string>().rfind("one persistent kernel", 0) == 0);
  const int V = weights->config.vocab_size;
  std::mt19937 rng(4);
  const std::vector<int32_t> prompt = random_tokens(24, V, rng);
  std::vector<float> a, b, c;
  persistent->forward(prompt, 1, a);
  per_op->forward(prompt, 1, b);
  plain->forward(prompt, 1, c);
  int32_t next = argmax_row(b, 0, V);
  double worst_paths = 0, fp8_error = 0;
  for (int i = 0; i < 8; ++i) {
    persistent->forward(std::span<const int32_t>(&next, 1), 1, a);
    per_op->forward(std::span<const int32_t>(&next, 1), 1, b);
    plain->forward(std::span<const int32_t>(&next, 1), 1, c);
    worst_paths = std::max(worst_paths, relative_max(a, b));
    fp8_error = std::max(fp8_error, relative_max(b, c));
    next = argmax_row(b, 0, V);
  }
  MESSAGE("0.5B shape, fp8 weights: persistent vs per-op " << worst_paths << ", fp8 vs bf16 " << fp8_error
                                                         << " (largest |difference| / largest |logit|)");
  CHECK(worst_paths < 1e-2);  // the same f16 chunk sums, added in another order
  CHECK(fp8_error < 0.5);  // e4m3 keeps 3 mantissa bits; garbage would be far off
}
#endif  // RUNAHEAD_CUDA
