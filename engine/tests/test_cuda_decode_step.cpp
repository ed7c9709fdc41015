// The persistent decode step (src/cuda/decode_step.cu) against the kernel-per-op path on
// the published Qwen2.5-Coder shapes with random weights: head_dim 64 (0.5B, 7 query heads
// per kv head) and 128 (1.5B, 6 per kv head), contexts long enough that attention splits
// over several blocks. The fixtures' goldens (test_cuda_backend.cpp) run through it too.
// Skipped, with a message, without a CUDA device.
#ifdef RUNAHEAD_CUDA
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "model/weights.h"

using namespace runahead;
using runahead::testing::backend_on;
using runahead::testing::random_tokens;

namespace {

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

}  // namespace

TEST_CASE("cuda backend: the persistent decode step equals the per-op kernels") {
  if (!cuda_available()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  for (const char* shape : {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}) {
    CAPTURE(shape);
    auto weights = std::make_shared<const ModelWeights>(random_model(shape, 7));
    BackendOptions options;
    options.context_length = 1024;
    auto persistent = backend_on("1", weights, options);
    auto per_op = backend_on("0", weights, options);
    const std::string kind = persistent->describe()["optimizations"]["decode_step"].get<std::string>();
    MESSAGE(shape << ": " << kind);
    REQUIRE(kind.rfind("one persistent kernel", 0) == 0);
    REQUIRE(per_op->describe()["optimizations"]["decode_step"].get<std::string>().rfind("a kernel per op", 0) == 0);

    const int V = weights->config.vocab_size;
    std::mt19937 rng(3);
    const std::vector<int32_t> prompt = random_tokens(600, V, rng);
    std::vector<float> a, b;
    persistent->forward(prompt, 1, a);
    per_op->forward(prompt, 1, b);

    // Single-token forwards (the Logits step) side by side: same logits, same hidden state.
    double worst = 0, scale = 0;
    int32_t next = argmax(b);
    for (int i = 0; i < 16; ++i) {
      persistent->forward(std::span<const int32_t>(&next, 1), 1, a);
      per_op->forward(std::span<const int32_t>(&next, 1), 1, b);
      for (int v = 0; v < V; ++v)
        worst = std::max(worst, double(std::abs(a[v] - b[v]))), scale = std::max(scale, double(std::abs(b[v])));
      const auto ha = persistent->hidden(), hb = per_op->hidden();
      for (size_t k = 0; k < ha.size(); ++k) CHECK(std::abs(ha[k] - hb[k]) <= 1e-3f * (1.0f + std::abs(hb[k])));
      CHECK(argmax(a) == argmax(b));
      next = argmax(b);
    }
    MESSAGE(shape << ": largest |logit difference| " << worst << " of logits up to " << scale);
    CHECK(worst <= 1e-4 * scale);

    // The greedy device loop: the same 48 tokens, the same cache length, and the cache it
    // leaves gives the same next logits.
    std::vector<int32_t> ta, tb;
    persistent->decode(next, 48, SamplingParams{}, [&](int32_t t) { ta.push_back(t); return true; });
    per_op->decode(next, 48, SamplingParams{}, [&](int32_t t) { tb.push_back(t); return true; });
    CHECK(ta == tb);
    CHECK(persistent->kv_len() == per_op->kv_len());
    persistent->forward(std::span<const int32_t>(&ta.back(), 1), 1, a);
    per_op->forward(std::span<const int32_t>(&tb.back(), 1), 1, b);
    CHECK(argmax(a) == argmax(b));

    // A rollback into the middle of the prompt and a different continuation.
    persistent->truncate(300);
    per_op->truncate(300);
    const int32_t other = (prompt[300] + 1) % V;
    persistent->forward(std::span<const int32_t>(&other, 1), 1, a);
    per_op->forward(std::span<const int32_t>(&other, 1), 1, b);
    worst = 0;
    for (int v = 0; v < V; ++v) worst = std::max(worst, double(std::abs(a[v] - b[v])));
    CHECK(worst <= 1e-4 * scale);
  }
}

#endif  // RUNAHEAD_CUDA
