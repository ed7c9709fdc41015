// The CUDA backend on Q8_0 weights as stored (cuda/q8_0.cu, common.cuh's Chunk<Q8Weight>): the
// upload splits ggml's blocks into the bytes they hold, and a model whose matrices are all Q8_0
// computes what the same weights widened exactly to f32 compute on the CPU backend (the fixtures
// are small: options.require quantized_kernels keeps them as stored, as a model of 1 GiB and
// more is by default). The
// matrix-vector dot products widen each int8 exactly and sum in f32, so the logits agree to f32
// summation order (within 0.1 % of the largest; a wrong block scale or row is off by far
// more); the tensor-core prefill reads the weights rounded to bf16, within 2 % as the bf16
// prefill test asks. Skipped, with a message, without a CUDA device.
#ifdef RUNAHEAD_CUDA
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda_test_util.h"
#include "model/half.h"
#include "model/quant_blocks.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "runtime/session.h"

using namespace runahead;
using namespace runahead::cuda;
using namespace runahead::testing;
namespace fs = std::filesystem;

TEST_CASE("cuda q8_0: the upload splits each block into its weights and scale, and widens them for the prefill") {
  if (!have_device()) return;
  constexpr int rows = 37, K = 96;  // three blocks a row; an odd row count
  std::mt19937 rng(21);
  const std::vector<float> values = random_floats(size_t(rows) * K, rng, 0.3f);
  const size_t row_size = quant_row_bytes(QuantType::Q8_0, K);
  std::vector<uint8_t> blocks(rows * row_size);
  for (int r = 0; r < rows; ++r) quantize_row(QuantType::Q8_0, values.data() + size_t(r) * K, K, blocks.data() + r * row_size);
  DeviceBuffer stored = to_device(blocks), q(size_t(rows) * K), d(size_t(rows) * (K / 32) * 2);
  split_q8_0_blocks(stored.get(), rows, K, q.get(), d.get(), nullptr);
  const auto got_q = to_host<int8_t>(q, size_t(rows) * K);
  const auto got_d = to_host<uint16_t>(d, size_t(rows) * (K / 32));
  int wrong = 0;
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < K / 32; ++b) {
      const BlockQ8_0* block = reinterpret_cast<const BlockQ8_0*>(blocks.data() + r * row_size) + b;
      uint16_t scale;
      std::memcpy(&scale, &block->d, 2);
      wrong += got_d[size_t(r) * (K / 32) + b] != scale;
      for (int i = 0; i < 32; ++i) wrong += got_q[size_t(r) * K + b * 32 + i] != block->qs[i];
    }
  CHECK(wrong == 0);

  DeviceBuffer wide(size_t(rows) * K * 2);
  dequantize_q8_0_rows(q.get(), d.get(), rows, K, wide.get(), nullptr);
  const auto got_wide = to_host<uint16_t>(wide, size_t(rows) * K);
  std::vector<float> exact(K);
  int off = 0;
  for (int r = 0; r < rows; ++r) {
    dequantize_row(QuantType::Q8_0, blocks.data() + r * row_size, K, exact.data());
    for (int k = 0; k < K; ++k) off += got_wide[size_t(r) * K + k] != f32_to_bf16(exact[size_t(k)]);
  }
  CHECK(off == 0);
}

TEST_CASE("cuda q8_0: Q8_0 weights run as stored and compute what the same weights in f32 compute") {
  if (!have_device()) return;
  const fs::path models = fs::path(RUNAHEAD_FIXTURES) / "models";
  for (const char* model : {"qwen2-tied-bf16", "qwen2-untied-f16", "qwen3-tiny-bf16"}) {
    CAPTURE(model);
    const ModelWeights loaded = load_model(models / model);
    auto q8 = std::make_shared<const ModelWeights>(quantize_matrices(loaded, QuantType::Q8_0));
    auto reference = std::make_shared<const ModelWeights>(with_dense_matrices(*q8, DType::F32));
    BackendOptions options;
    options.context_length = 512;
    options.require = {"quantized_kernels"};
    auto cuda = make_cuda_backend(q8, options);
    auto cpu = make_cpu_backend(reference, BackendOptions{2, 512});
    const auto optimizations = cuda->describe()["optimizations"];
    CHECK(optimizations["weights"].get<std::string>().rfind("Q8_0 as stored", 0) == 0);
    CHECK(optimizations["lm_head"].get<std::string>() == "Q8_0");
    CHECK(optimizations["decode_step"].get<std::string>().find("dense or fp8 matrices") != std::string::npos);
    const auto checks = cuda->self_check();
    const auto quantized = std::find_if(checks.begin(), checks.end(), [](const OptimizationCheck& c) {
      return c.name == "quantized_kernels";
    });
    REQUIRE(quantized != checks.end());
    CHECK(quantized->active);

    const int V = q8->config.vocab_size;
    std::mt19937 rng(17);
    const std::vector<int32_t> prompt = random_tokens(40, V, rng), long_prompt = random_tokens(300, V, rng);
    constexpr double kTol = 1e-3;
    std::vector<float> a, b;
    // The matrix-vector path: a 40-token prompt in chunks (17 tokens, then the rest), 8 rows of
    // logits; then single steps.
    cpu->forward(prompt, 8, a);
    cuda->forward(prompt, 8, b);
    CHECK(relative_max(b, a) < kTol);
    int32_t next = argmax_row(b, 7, V);
    for (int i = 0; i < 10; ++i) {
      cpu->forward(std::span<const int32_t>(&next, 1), 1, a);
      cuda->forward(std::span<const int32_t>(&next, 1), 1, b);
      CHECK(relative_max(b, a) < kTol);
      CHECK(argmax_row(a, 0, V) == argmax_row(b, 0, V));
      next = argmax_row(b, 0, V);
    }
    // The device loop, then the device verify of its tokens as a draft: all kept, and the
    // reference picks each of them.
    std::vector<int32_t> got;
    cuda->decode_greedy(next, 6, [&](int32_t token) {
      got.push_back(token);
      return true;
    });
    REQUIRE(got.size() == 6);
    cuda->truncate(cuda->kv_len() - 6);
    const GreedyVerdict verdict = cuda->verify_greedy(next, std::span<const int32_t>(got.data(), 5));
    CHECK(verdict.accepted == 5);
    CHECK(verdict.next == got[5]);
    std::vector<int32_t> step = {next};
    step.insert(step.end(), got.begin(), got.begin() + 5);
    cpu->forward(step, 6, a);
    for (size_t i = 0; i < 6; ++i) CHECK(argmax_row(a, i, V) == got[i]);

    // A prompt long enough for the tensor-core prefill (the weights widened to bf16).
    cpu->truncate(0);
    cuda->truncate(0);
    cpu->forward(long_prompt, 8, a);
    cuda->forward(long_prompt, 8, b);
    CHECK(relative_max(b, a) < 0.02);
  }
}

// How block-quantized weights run, as the self-check's quantized_kernels says: `why` of the
// check that `backend` reports (empty when it has none), and whether it is active.
std::pair<bool, std::string> quantized_check(const CudaBackend& backend) {
  for (const OptimizationCheck& c : backend.self_check())
    if (c.name == "quantized_kernels") return {c.active, c.why};
  return {false, ""};
}

TEST_CASE("cuda q8_0: a small Q8_0 model, Q8_0 with fp8, or Q8_0 mixed with another format runs widened to bf16") {
  if (!have_device()) return;
  const ModelWeights loaded = load_model(fs::path(RUNAHEAD_FIXTURES) / "models" / "qwen2-tied-bf16");
  auto q8 = std::make_shared<const ModelWeights>(quantize_matrices(loaded, QuantType::Q8_0));
  BackendOptions options;
  options.context_length = 128;
  {  // below 1 GiB: widened, so that the persistent step may run; the check says why
    auto cuda = make_cuda_backend(q8, options);
    CHECK(cuda->describe()["optimizations"]["weights"].get<std::string>() == "BF16");
    const auto [active, why] = quantized_check(*cuda);
    CHECK_FALSE(active);
    CHECK(why.find("below 1 GiB") != std::string::npos);
  }
  {  // the persistent step asked for
    BackendOptions persistent = options;
    persistent.require = {"persistent_step"};
    auto cuda = make_cuda_backend(q8, persistent);
    CHECK(quantized_check(*cuda).second.find("options.require persistent_step") != std::string::npos);
  }
  {  // fp8 asked for: quantized from the widened matrices
    BackendOptions fp8 = options;
    fp8.fp8_matrices = true;
    fp8.require = {"quantized_kernels"};
    auto cuda = make_cuda_backend(q8, fp8);
    CHECK(cuda->describe()["optimizations"]["weights"].get<std::string>().rfind("F8_E4M3", 0) == 0);
    CHECK_FALSE(quantized_check(*cuda).first);
  }
  // One matrix in another block format.
  ModelWeights mixed = quantize_matrices(loaded, QuantType::Q8_0);
  const ModelWeights q4 = quantize_matrices(loaded, QuantType::Q4_0);
  mixed.layers[0][Role::Wo] = q4.layers[0][Role::Wo];
  auto storage = std::make_shared<std::vector<std::shared_ptr<void>>>(
      std::vector<std::shared_ptr<void>>{mixed.storage, q4.storage});
  mixed.storage = storage;
  options.require = {"quantized_kernels"};
  auto cuda = make_cuda_backend(std::make_shared<const ModelWeights>(std::move(mixed)), options);
  CHECK(cuda->describe()["optimizations"]["weights"].get<std::string>() == "BF16");
  const auto [active, why] = quantized_check(*cuda);
  CHECK_FALSE(active);
  CHECK(why.find("q8_0+q4_0 matrices run widened to bf16") != std::string::npos);
}
TEST_CASE("cuda q8_0: the embedded model (Q8_0, small) loads widened without a warning, or as stored when asked") {
  if (!have_device()) return;
  const fs::path embedded = fs::path(RUNAHEAD_FIXTURES) / ".." / ".." / "engine" / "models" / "runahead-coder";
  const auto quantized = [](const Session& s) {
    for (const auto& c : s.report()["checks"])
      if (c["name"] == "quantized_kernels") return c;
    return nlohmann::json();
  };
  LoadOptions o;
  o.backend = "cuda";
  {  // the faster path for its size is a choice the check explains, not a degraded load
    const auto s = Session::open(embedded.string(), o);
    for (const auto& w : s->report()["warnings"]) CHECK(w.get<std::string>().find("widened") == std::string::npos);
    const auto c = quantized(*s);
    REQUIRE(c.is_object());
    CHECK(c["active"] == false);
    CHECK(c["why"].get<std::string>().find("below 1 GiB") != std::string::npos);
  }
  o.require = {"quantized_kernels"};
  const auto s = Session::open(embedded.string(), o);
  CHECK(quantized(*s)["active"] == true);
  CHECK(s->report()["optimizations"]["weights"].get<std::string>().rfind("Q8_0 as stored", 0) == 0);
}
#endif  // RUNAHEAD_CUDA
