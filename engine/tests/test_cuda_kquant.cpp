// The CUDA backend on Q4_K and Q6_K weights as stored (cuda/kquant.cu, cuda/kquant.cuh): the
// upload regroups ggml's blocks without changing a bit (each packed row widens to the bf16 of
// the CPU's dequantize_row); the matrix-vector product on inputs quantized to int8 per 32
// computes exactly llama.cpp's q8_1 arithmetic (to f32 summation order); and a model whose
// matrices are all Q4_K/Q6_K — one format, or Q4_K_M's mix with a fused q/k/v of both —
// computes what the same weights widened exactly to f32 compute on the CPU backend, within
// what the 8-bit inputs cost (check_like_f32_reference). A layout the kernels cannot read runs
// widened to bf16 and the check says why. Skipped, with a message, without a CUDA device.
#ifdef RUNAHEAD_CUDA
#include <doctest/doctest.h>

#include <algorithm>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda_test_util.h"
#include "model/half.h"
#include "model/layout.h"
#include "model/quant_blocks.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "model_writer.h"
#include "runtime/session.h"

using namespace runahead;
using namespace runahead::cuda;
using namespace runahead::testing;
using runahead::test::TempDir;
using runahead::test::k_quant_config;
using runahead::test::write_random_model;

namespace {

TEST_CASE("cuda k-quant: packed Q4_K and Q6_K rows widen to exactly the weights the blocks hold") {
  if (!have_device()) return;
  constexpr int rows = 7, K = 512;  // two blocks a row
  std::mt19937 rng(5);
  for (const QuantType type : {QuantType::Q4_K, QuantType::Q6_K}) {
    const bool q6 = type == QuantType::Q6_K;
    CAPTURE(q6);
    const std::vector<float> values = random_floats(size_t(rows) * K, rng, 0.4f);
    const size_t row_size = quant_row_bytes(type, K);
    std::vector<uint8_t> blocks(rows * row_size);
    for (int r = 0; r < rows; ++r) quantize_row(type, values.data() + size_t(r) * K, K, blocks.data() + r * row_size);
    const size_t packed_row = q6 ? q6k_row_bytes(K) : q4k_row_bytes(K);
    DeviceBuffer stored = to_device(blocks), packed(rows * packed_row), wide(size_t(rows) * K * 2);
    pack_kquant_rows(stored.get(), q6, rows, K, packed.get(), nullptr);
    dequantize_kquant_rows(q6 ? nullptr : packed.get(), q6 ? packed.get() : nullptr, q6 ? 0 : rows, rows, K,
                           wide.get(), nullptr);
    const auto got = to_host<uint16_t>(wide, size_t(rows) * K);
    std::vector<float> exact(K);
    int off = 0;
    for (int r = 0; r < rows; ++r) {
      dequantize_row(type, blocks.data() + r * row_size, K, exact.data());
      for (int k = 0; k < K; ++k) off += got[size_t(r) * K + k] != f32_to_bf16(exact[size_t(k)]);
    }
    CHECK(off == 0);
  }
}

TEST_CASE("cuda k-quant: the matrix-vector product on int8 inputs computes llama.cpp's q8_1 arithmetic") {
  if (!have_device()) return;
  constexpr int rows = 96;
  std::mt19937 rng(9);
  for (const QuantType type : {QuantType::Q4_K, QuantType::Q6_K}) {
    for (const int K : {512, 4096}) {  // 4096: long rows, split between warps
      for (const int n : {1, 2, 5, 17}) {
        const bool q6 = type == QuantType::Q6_K;
        CAPTURE(q6);
        CAPTURE(K);
        CAPTURE(n);
        const std::vector<float> values = random_floats(size_t(rows) * K, rng, 0.3f);
        const size_t row_size = quant_row_bytes(type, K);
        std::vector<uint8_t> blocks(rows * row_size);
        std::vector<float> w(size_t(rows) * K);
        for (int r = 0; r < rows; ++r) {
          quantize_row(type, values.data() + size_t(r) * K, K, blocks.data() + r * row_size);
          dequantize_row(type, blocks.data() + r * row_size, K, w.data() + size_t(r) * K);
        }
        DeviceBuffer stored = to_device(blocks), packed(rows * (q6 ? q6k_row_bytes(K) : q4k_row_bytes(K)));
        pack_kquant_rows(stored.get(), q6, rows, K, packed.get(), nullptr);
        // Inputs of varied magnitude per block of 32 (one all zero), and a residual to add to.
        std::vector<float> in = random_floats(size_t(n) * K, rng, 1.0f), res = random_floats(size_t(n) * rows, rng);
        for (size_t k = 0; k < in.size(); ++k) in[k] *= float(1 + (k / 32) % 7);
        for (int k = 0; k < 32; ++k) in[k] = 0.0f;
        DeviceBuffer din = to_device(in), dres = to_device(res), dq(size_t(kMaxVecTokens) * K),
                     dd(size_t(kMaxVecTokens) * (K / 32) * 4);
        matvec_residual_add(q6 ? nullptr : packed.get(), DType::Q4_K, q6 ? packed.get() : nullptr, rows, K,
                            din.get<float>(), n, dres.get<float>(), Q8Scratch{dq.get<int8_t>(), dd.get<float>()}, sms(),
                            nullptr);
        const std::vector<float> got = to_host<float>(dres, size_t(n) * rows);
        // The q8_1 reference (in double) and the exact one, each with the residual added.
        std::vector<float> q8_ref(got.size()), exact(got.size());
        for (int t = 0; t < n; ++t) {
          const std::vector<float> x(in.begin() + size_t(t) * K, in.begin() + size_t(t + 1) * K);
          const std::vector<double> y = q8_products(w, rows, K, host_q8(x));
          for (int r = 0; r < rows; ++r) {
            double exact_sum = 0;
            for (int k = 0; k < K; ++k) exact_sum += double(w[size_t(r) * K + k]) * x[size_t(k)];
            q8_ref[size_t(t) * rows + r] = float(res[size_t(t) * rows + r] + y[size_t(r)]);
            exact[size_t(t) * rows + r] = float(res[size_t(t) * rows + r] + exact_sum);
          }
        }
        CHECK(relative_max(got, q8_ref) < 1e-5);
        CHECK(relative_max(got, exact) < 1e-2);  // what the 8-bit inputs cost
      }
    }
  }
}

// A random Qwen2 (or `arch`) model whose every matrix has rows of a multiple of 256 weights, in f32.
ModelWeights k_quant_base(bool tied, const char* arch = "Qwen2ForCausalLM") {
  TempDir dir;
  auto config = k_quant_config(tied, 2);
  config["architectures"] = nlohmann::json::array({arch});
  write_random_model(dir.path, config, tied ? 11 : 12);
  return with_dense_matrices(load_model(dir.path), DType::F32);  // in memory: outlives the folder
}

// `all` with the tensors `pick` names taken from `other` (both quantized from one base).
template <class Pick>
std::shared_ptr<const ModelWeights> mix(ModelWeights all, const ModelWeights& other, Pick pick) {
  for (size_t l = 0; l < all.layers.size(); ++l)
    for (size_t r = 0; r < all.layers[l].by_role.size(); ++r)
      if (pick(int(l), Role(r))) all.layers[l].by_role[r] = other.layers[l].by_role[r];
  auto storage = std::make_shared<std::vector<std::shared_ptr<void>>>(
      std::vector<std::shared_ptr<void>>{all.storage, other.storage});
  all.storage = storage;
  all.weight_bytes = decode_bytes(all);
  return std::make_shared<const ModelWeights>(std::move(all));
}

// llama.cpp's Q4_K_M pattern on the two-layer model: v_proj Q6_K in layer 0, down_proj in layer 1.
std::shared_ptr<const ModelWeights> q4_k_m_mix(const ModelWeights& q4, const ModelWeights& q6) {
  return mix(q4, q6, [](int l, Role r) { return (l == 0 && r == Role::Wv) || (l == 1 && r == Role::WDown); });
}
struct NamedModel {
  const char* name;
  std::shared_ptr<const ModelWeights> w;
};

// Two backends of the same weights on the kernel-per-op path: `on` loaded with the environment
// switch `name` set to `value`, `off` with it "0" (each backend reads it at load).
struct SwitchedPair {
  std::unique_ptr<CudaBackend> on, off;
};
SwitchedPair switched_pair(const std::shared_ptr<const ModelWeights>& w, const BackendOptions& options, const char* name,
                           const char* value) {
  setenv("RUNAHEAD_CUDA_PERSISTENT", "0", 1);
  setenv(name, value, 1);
  SwitchedPair p{make_cuda_backend(w, options), nullptr};
  setenv(name, "0", 1);
  p.off = make_cuda_backend(w, options);
  unsetenv(name);
  unsetenv("RUNAHEAD_CUDA_PERSISTENT");
  return p;
}

// switched_pair, where describe()'s optimization `flag` says true for `on` and false for `off`.
SwitchedPair flagged_pair(const std::shared_ptr<const ModelWeights>& w, const BackendOptions& options, const char* name,
                          const char* value, const char* flag) {
  SwitchedPair p = switched_pair(w, options, name, value);
  CHECK(p.on->describe()["optimizations"][flag] == true);
  CHECK(p.off->describe()["optimizations"][flag] == false);
  return p;
}

// The largest relative_max of x's logits against y's over a prompt of 24 random tokens and
// `steps` tokens after it, both fed y's greedy choices (0: the same bits throughout).
double decode_gap(CudaBackend& x, CudaBackend& y, int V, int steps) {
  std::mt19937 rng(29);
  const std::vector<int32_t> prompt = random_tokens(24, V, rng);
  std::vector<float> a, b;
  x.forward(prompt, 1, a);
  y.forward(prompt, 1, b);
  double worst = relative_max(a, b);
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmax_row(b, 0, V);
    x.forward(std::span<const int32_t>(&next, 1), 1, a);
    y.forward(std::span<const int32_t>(&next, 1), 1, b);
    worst = std::max(worst, relative_max(a, b));
  }
  return worst;
}

// Pairs of backends that should compute the same logits but for summation order: within 1e-2
// of the largest over 12 decode steps (the ring tests below say why that tolerance).
struct NamedPair {
  const char* name;
  CudaBackend *x, *y;
};
void check_decode_gaps(std::initializer_list<NamedPair> pairs, int V) {
  for (const auto& p : pairs) {
    const std::string pair = p.name;  // (a char pointer would print as its address)
    CAPTURE(pair);
    CHECK(decode_gap(*p.x, *p.y, V, 12) <= 1e-2);
  }
}

TEST_CASE("cuda k-quant: Q4_K, Q6_K and Q4_K_M's mix run as stored and compute what the same weights in f32 compute") {
  if (!have_device()) return;
  BackendOptions options;
  options.context_length = 512;
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    const ModelWeights base = k_quant_base(tied);
    const ModelWeights q4 = quantize_matrices(base, QuantType::Q4_K), q6 = quantize_matrices(base, QuantType::Q6_K);
    // Q4_K_M's pattern: v_proj and down_proj Q6_K in some layers (a q/k/v of both formats),
    // the embedding and lm_head of the other format when untied.
    ModelWeights q4_m = q4;
    if (!tied) q4_m.lm_head = q6.lm_head;
    const NamedModel models[] = {
        {"q4_k", std::make_shared<const ModelWeights>(q4)},
        {"q6_k", std::make_shared<const ModelWeights>(q6)},
        {"q4_k_m", q4_k_m_mix(q4_m, q6)},
    };
    for (const auto& m : models) {
      const std::string model = m.name;
      CAPTURE(model);
      auto cuda = make_cuda_backend(m.w, options);
      const auto optimizations = cuda->describe()["optimizations"];
      CHECK(optimizations["weights"].get<std::string>().rfind("Q4_K and Q6_K as stored", 0) == 0);
      // The persistent step reads these matrices too; the faster of it and a kernel per op runs.
      CHECK(optimizations["decode_step"].get<std::string>().find("persistent kernel off") == std::string::npos);
      const auto [active, why] = quantized_check(*cuda);
      CHECK(active);
      CHECK(why.find("read as stored by the CUDA K-quant kernels") != std::string::npos);
      // The inputs of each product are quantized to int8 per 32 (as llama.cpp's GPU kernels
      // do), so the logits are within 3 % of the exact ones rather than 0.1 %.
      check_like_f32_reference(m.w, *cuda, 3e-2);
    }
  }
}

TEST_CASE("cuda k-quant: a layout the kernels cannot read or fp8 runs widened to bf16, while the persistent step reads the blocks") {
  if (!have_device()) return;
  const ModelWeights base = k_quant_base(false);
  const ModelWeights q4 = quantize_matrices(base, QuantType::Q4_K), q6 = quantize_matrices(base, QuantType::Q6_K);
  BackendOptions options;
  options.context_length = 128;
  const auto widened = [&](std::shared_ptr<const ModelWeights> w, const BackendOptions& o, const std::string& reason) {
    auto cuda = make_cuda_backend(std::move(w), o);
    CHECK(cuda->describe()["optimizations"]["weights"].get<std::string>().rfind("Q4_K", 0) != 0);
    const auto [active, why] = quantized_check(*cuda);
    CHECK_FALSE(active);
    CHECK(why.find(reason) != std::string::npos);
  };
  // q_proj Q6_K before a Q4_K k_proj; gate and up in two formats.
  widened(mix(q4, q6, [](int, Role r) { return r == Role::Wq; }), options, "Q4_K rows before their Q6_K ones");
  widened(mix(q4, q6, [](int l, Role r) { return l == 1 && r == Role::WUp; }), options, "gate_proj and up_proj");
  BackendOptions fp8 = options;
  fp8.fp8_matrices = true;
  widened(std::make_shared<const ModelWeights>(q4), fp8, "quantized to fp8");
  BackendOptions persistent = options;
  persistent.require = {"persistent_step"};
  auto cuda = make_cuda_backend(std::make_shared<const ModelWeights>(q4), persistent);
  CHECK(cuda->describe()["optimizations"]["weights"].get<std::string>().rfind("Q4_K and Q6_K as stored", 0) == 0);
  CHECK(cuda->describe()["optimizations"]["decode_step"].get<std::string>().rfind("one persistent kernel", 0) == 0);
  CHECK(quantized_check(*cuda).first);
}

// o_proj's int8 inputs are written by attention's merge instead of by a launch of their own: the
// same bits, so the same logits bit for bit, on one token, chunks of a prompt and a verify step
// (RUNAHEAD_CUDA_FUSED_Q8=0 keeps the launch).
TEST_CASE("cuda k-quant: o_proj inputs quantized by attention give the same logits as a launch of their own") {
  if (!have_device()) return;
  const ModelWeights base = k_quant_base(false);
  const ModelWeights q4 = quantize_matrices(base, QuantType::Q4_K), q6 = quantize_matrices(base, QuantType::Q6_K);
  const NamedModel models[] = {
      {"q4_k_m", q4_k_m_mix(q4, q6)},
      {"q8_0", std::make_shared<const ModelWeights>(quantize_matrices(base, QuantType::Q8_0))},
  };
  BackendOptions options;
  options.context_length = 256;
  options.require = {"quantized_kernels"};  // this small Q8_0 model would otherwise run widened to bf16
  for (const auto& m : models) {
    const std::string model = m.name;
    CAPTURE(model);
    const int V = m.w->config.vocab_size;
    auto [fused, separate] = switched_pair(m.w, options, "RUNAHEAD_CUDA_FUSED_Q8", "1");
    CHECK(fused->describe()["optimizations"]["o_proj_inputs_quantized_by_attention"] == true);
    CHECK(separate->describe()["optimizations"]["o_proj_inputs_quantized_by_attention"] == false);
    std::mt19937 rng(23);
    const std::vector<int32_t> prompt = random_tokens(40, V, rng);
    std::vector<float> a, b;
    fused->forward(prompt, 8, a);
    separate->forward(prompt, 8, b);
    CHECK(a == b);
    int32_t next = argmax_row(a, 7, V);
    for (int i = 0; i < 6; ++i) {
      fused->forward(std::span<const int32_t>(&next, 1), 1, a);
      separate->forward(std::span<const int32_t>(&next, 1), 1, b);
      CHECK(a == b);
      next = argmax_row(a, 0, V);
    }
    const std::vector<int32_t> draft = random_tokens(5, V, rng);
    const GreedyVerdict x = fused->verify_greedy(next, draft), y = separate->verify_greedy(next, draft);
    CHECK(x.accepted == y.accepted);
    CHECK(x.next == y.next);
    fused->forward(std::span<const int32_t>(&x.next, 1), 1, a);
    separate->forward(std::span<const int32_t>(&y.next, 1), 1, b);
    CHECK(a == b);
  }
}

// One token's gate/up on K-quant rows of one format streams its rows through a ring of bulk
// copies in shared memory (kquant_ring.cuh), and so do o_proj and down (several warps a row
// where two stages of 8 rows do not fit), and q/k/v; RUNAHEAD_CUDA_KQ_RING=0 /
// RUNAHEAD_CUDA_KQ_RING_RESIDUAL=0 / RUNAHEAD_CUDA_KQ_RING_QKV=0 keep the warps' own loads;
// one token's Q4_K rows go a chunk pair a lane on pair-planar inputs
// (RUNAHEAD_CUDA_KQ_PLANAR=0: a chunk a lane). The same
// products; where the per-warp kernel splits a short row over several warps, or a lane takes a
// pair of chunks, the sums are added in another order, so the logits agree to a small fraction
// of the largest: ~2e-7 of it, or (where a sum's last bits move an activation across an int8
// rounding boundary, so it quantizes one step, 1/127 of its block's largest, apart) ~3e-3
// (H200: the Q4_K model's q/k/v-ring and pair-planar pairs with attention in 16 splits, merged
// in a cluster or through global memory alike; none at 8, 12 or 32). A wrong row, scale or
// block is far beyond 1e-2.
// Every ring (q/k/v's and the residual ones forced, as short and as long rows) prefetching the
// next ring's first tiles into L2 once its producers have asked for their last (RingPrefetch;
// RUNAHEAD_CUDA_RING_PREFETCH=KB: 4 KB, a few tiles; 64 MB, past the end of each matrix, so
// whole matrices) against none (=0): the same bits, since a prefetch moves no data a kernel
// reads; and the default's amount reported.
// It leaves the switches it sets unset.
void check_ring_prefetch(const std::shared_ptr<const ModelWeights>& w, const BackendOptions& options, int V) {
  setenv("RUNAHEAD_CUDA_KQ_RING", "force", 1);
  setenv("RUNAHEAD_CUDA_KQ_RING_QKV", "force", 1);
  setenv("RUNAHEAD_CUDA_KQ_RING_RESIDUAL", "1", 1);
  for (const char* long_rows : {"0", "1"}) {
    setenv("RUNAHEAD_CUDA_KQ_RING_LONG", long_rows, 1);
    for (const char* kb : {"4", "65536"}) {
      CAPTURE(long_rows);
      CAPTURE(kb);
      auto [prefetching, none] = switched_pair(w, options, "RUNAHEAD_CUDA_RING_PREFETCH", kb);
      CHECK(prefetching->describe()["optimizations"]["ring_prefetches_next_kb"] == std::atoi(kb));
      CHECK(none->describe()["optimizations"]["ring_prefetches_next_kb"] == 0);
      CHECK(decode_gap(*prefetching, *none, V, 6) == 0.0);
    }
  }
  CHECK(make_cuda_backend(w, options)->describe()["optimizations"]["ring_prefetches_next_kb"] == cuda::kRingPrefetchKb);
  for (const char* name : {"RUNAHEAD_CUDA_KQ_RING", "RUNAHEAD_CUDA_KQ_RING_QKV", "RUNAHEAD_CUDA_KQ_RING_RESIDUAL",
                           "RUNAHEAD_CUDA_KQ_RING_LONG"})
    unsetenv(name);
}

// gate/up's and q/k/v's rings (q/k/v's forced) with their inputs staged by the consumer warps
// alone (RUNAHEAD_CUDA_RING_STAGE=consumers) against by every warp (=0, as before NOTES v42):
// the same int8 inputs, the norm's sum of squares added in other parts (8 warps' instead of 9),
// so as close as above; and (=consumers-all, as the default) the long residual rings' inputs
// copied by the consumer warps alone too.
// It leaves RUNAHEAD_CUDA_KQ_RING_QKV, _RESIDUAL and _LONG unset.
void check_consumers_stage(const std::shared_ptr<const ModelWeights>& w, const BackendOptions& options, int V) {
  setenv("RUNAHEAD_CUDA_KQ_RING_QKV", "force", 1);
  auto [consumers, all] = flagged_pair(w, options, "RUNAHEAD_CUDA_RING_STAGE", "consumers", "ring_inputs_staged_by_consumers");
  CHECK(consumers->describe()["optimizations"]["residual_ring_inputs_copied_by_consumers"] == false);
  setenv("RUNAHEAD_CUDA_KQ_RING_RESIDUAL", "1", 1);
  setenv("RUNAHEAD_CUDA_KQ_RING_LONG", "1", 1);
  auto [copies, every_warp] =
      flagged_pair(w, options, "RUNAHEAD_CUDA_RING_STAGE", "consumers-all", "residual_ring_inputs_copied_by_consumers");
  unsetenv("RUNAHEAD_CUDA_KQ_RING_LONG");
  unsetenv("RUNAHEAD_CUDA_KQ_RING_RESIDUAL");
  unsetenv("RUNAHEAD_CUDA_KQ_RING_QKV");
  check_decode_gaps({{"inputs staged by the consumers", consumers.get(), all.get()},
                     {"and the long residual rings' copied", copies.get(), every_warp.get()}},
                    V);
}

TEST_CASE("cuda k-quant: gate/up, o_proj, down and q/k/v through the bulk-copy ring compute what the per-warp loads compute") {
  if (!have_device()) return;
  const ModelWeights base = k_quant_base(false);
  const ModelWeights q4 = quantize_matrices(base, QuantType::Q4_K), q6 = quantize_matrices(base, QuantType::Q6_K);
  const NamedModel models[] = {
      {"q4_k", std::make_shared<const ModelWeights>(q4)},
      {"q6_k", std::make_shared<const ModelWeights>(q6)},
      {"q4_k_m", q4_k_m_mix(q4, q6)},
      // q/k norms: the ring's q/k/v goes through the kernel that normalises each head
      {"qwen3 q4_k", std::make_shared<const ModelWeights>(quantize_matrices(k_quant_base(false, "Qwen3ForCausalLM"), QuantType::Q4_K))},
  };
  BackendOptions options;
  options.context_length = 256;
  for (const auto& m : models) {
    const std::string model = m.name;
    CAPTURE(model);
    const int V = m.w->config.vocab_size;
    // gate/up's ring runs wherever it fits ("force" and the default are the same there)
    auto [ring, loads] = flagged_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING", "force", "kquant_gate_up_ring");
    // o_proj and down through the ring too (rows that fit two stages), against none
    auto [residual_ring, residual_loads] =
        flagged_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_RESIDUAL", "1", "kquant_o_proj_down_ring");
    // ... with 2 and 8 warps a row (long rows such as the 7B's down take 4: two stages of 8 do
    // not fit; at 8 a warp sums one or two chunks of o_proj's rows, a pair cut at its ends)
    auto [split2, auto2] = switched_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_SPLIT", "2");
    auto [split8, auto8] = switched_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_SPLIT", "8");
    // ... and as the 7B's o_proj and down go (two runs a tile, the inputs copied to shared
    // memory): 8 warps a row against 1
    setenv("RUNAHEAD_CUDA_KQ_RING_LONG", "1", 1);
    auto [long8, long1] = switched_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_SPLIT", "8");
    unsetenv("RUNAHEAD_CUDA_KQ_RING_LONG");
    // ... and as for long matrices against not: a warp sums a row of each half of the matrix at
    // once, from inputs copied to shared memory: the same sums
    {
      auto [copied, read] = switched_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_LONG", "1");
      CHECK(decode_gap(*copied, *read, V, 6) == 0.0);
    }
    // q/k/v through it (tiles of a head's rows and those RoPE pairs them with; the mix's layer
    // 0 has Q4_K q/k and Q6_K v), against none
    auto [qkv_ring, qkv_loads] = flagged_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_QKV", "force", "kquant_qkv_ring");
    // Q4_K rows a chunk pair a lane on pair-planar inputs (the rings forced, so gate/up and q/k/v
    // stage them; down quantizes them) against a chunk a lane on the plain ones
    setenv("RUNAHEAD_CUDA_KQ_RING", "force", 1);
    setenv("RUNAHEAD_CUDA_KQ_RING_QKV", "force", 1);
    auto [planar, plain] = switched_pair(m.w, options, "RUNAHEAD_CUDA_KQ_PLANAR", "1");
    unsetenv("RUNAHEAD_CUDA_KQ_RING");
    unsetenv("RUNAHEAD_CUDA_KQ_RING_QKV");
    // blocks that take their later tiles as they free stages (ring_cursor) against in turn, with
    // two blocks a ring so that most tiles are taken: the same sums, step after step (each
    // launch leaves its pair of ints zero for the next step's)
    setenv("RUNAHEAD_CUDA_RING_BLOCKS", "2", 1);
    setenv("RUNAHEAD_CUDA_KQ_RING", "force", 1);
    setenv("RUNAHEAD_CUDA_KQ_RING_RESIDUAL", "1", 1);
    {
      auto [taken, in_turn] = flagged_pair(m.w, options, "RUNAHEAD_CUDA_RING_CURSOR", "1", "ring_tiles_taken_as_stages_free");
      CHECK(decode_gap(*taken, *in_turn, V, 6) == 0.0);
      // ... and a block asking for one tile at a time (each once the one before it is in)
      auto [one_by_one, all_at_once] = switched_pair(m.w, options, "RUNAHEAD_CUDA_RING_IN_FLIGHT", "1");
      CHECK(decode_gap(*one_by_one, *all_at_once, V, 6) == 0.0);
      CHECK(one_by_one->describe()["optimizations"]["ring_tiles_in_flight"] == 1);
      CHECK(all_at_once->describe()["optimizations"]["ring_tiles_in_flight"] == 0);
      // ... and down launched before its quantize launch has waited for gate/up (the rule's
      // choice for these short rows) against after: the same bits
      auto [early, late] =
          flagged_pair(m.w, options, "RUNAHEAD_CUDA_QUANTIZE_EARLY", "1", "down_launched_before_its_quantize_waits");
      CHECK(decode_gap(*early, *late, V, 6) == 0.0);
      // ... and the inputs staged by the consumer warps alone
      check_consumers_stage(m.w, options, V);
      // ... and the producer warps not waiting for the kernel before (the default) against
      // waiting (=0): the same bits
      auto [unwaited, waiting] = flagged_pair(m.w, options, "RUNAHEAD_CUDA_RING_PRODUCER", "1", "ring_producers_unwaited");
      CHECK(decode_gap(*unwaited, *waiting, V, 6) == 0.0);
    }
    // ... and each ring prefetching the next one's first tiles, two blocks a ring a half each
    check_ring_prefetch(m.w, options, V);
    unsetenv("RUNAHEAD_CUDA_RING_BLOCKS");
    unsetenv("RUNAHEAD_CUDA_KQ_RING");
    unsetenv("RUNAHEAD_CUDA_KQ_RING_RESIDUAL");
    CHECK(planar->describe()["optimizations"]["kquant_pair_planar_inputs"] == true);
    CHECK(plain->describe()["optimizations"]["kquant_pair_planar_inputs"] == false);
    CHECK(plain->describe()["optimizations"]["kquant_gate_up_ring"] == true);
    check_decode_gaps({{"gate/up ring", ring.get(), loads.get()},
                       {"o_proj/down ring", residual_ring.get(), residual_loads.get()},
                       {"split 2", split2.get(), auto2.get()},
                       {"split 8", split8.get(), auto8.get()},
                       {"long, split 8", long8.get(), long1.get()},
                       {"q/k/v ring", qkv_ring.get(), qkv_loads.get()},
                       {"pair-planar", planar.get(), plain.get()}},
                      V);
  }
}

// A Q8_0 model's gate/up, o_proj, down and q/k/v go through the same rings (their tiles' int8 weights,
// then their scales: kquant_ring.cuh): against the per-warp kernels, the same products in another
// order (tolerance as above), with and without q/k norms, as the 7B's long matrices go too.
TEST_CASE("cuda q8_0: gate/up, o_proj, down and q/k/v through the bulk-copy ring compute what the per-warp loads compute") {
  if (!have_device() || !rings_run_here()) return;
  const NamedModel models[] = {
      {"qwen2 q8_0", std::make_shared<const ModelWeights>(quantize_matrices(k_quant_base(false), QuantType::Q8_0))},
      {"qwen3 q8_0", std::make_shared<const ModelWeights>(
                         quantize_matrices(k_quant_base(false, "Qwen3ForCausalLM"), QuantType::Q8_0))},
  };
  BackendOptions options;
  options.context_length = 256;
  options.require = {"quantized_kernels"};  // small models would be widened to bf16
  for (const auto& m : models) {
    const std::string model = m.name;
    CAPTURE(model);
    const int V = m.w->config.vocab_size;
    auto [gate_up_ring, gate_up_loads] = flagged_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING", "force", "q8_0_gate_up_ring");
    auto [residual_ring, residual_loads] =
        flagged_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_RESIDUAL", "1", "q8_0_o_proj_down_ring");
    setenv("RUNAHEAD_CUDA_KQ_RING_LONG", "1", 1);
    auto [long8, long1] = switched_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_SPLIT", "8");
    unsetenv("RUNAHEAD_CUDA_KQ_RING_LONG");
    auto [qkv_ring, qkv_loads] = flagged_pair(m.w, options, "RUNAHEAD_CUDA_KQ_RING_QKV", "force", "q8_0_qkv_ring");
    CHECK(qkv_ring->describe()["optimizations"]["weights"].get<std::string>().rfind("Q8_0 as stored", 0) == 0);
    check_consumers_stage(m.w, options, V);
    check_ring_prefetch(m.w, options, V);
    check_decode_gaps({{"gate/up ring", gate_up_ring.get(), gate_up_loads.get()},
                       {"o_proj/down ring", residual_ring.get(), residual_loads.get()},
                       {"long, split 8", long8.get(), long1.get()},
                       {"q/k/v ring", qkv_ring.get(), qkv_loads.get()}},
                      V);
  }
}

TEST_CASE("cuda k-quant: a Q4_K_M load reads the blocks without a warning, on either decode path") {
  if (!have_device()) return;
  TempDir dir;
  write_random_model(dir.path, k_quant_config(false, 2), 13);
  LoadOptions o;
  o.backend = "cuda";
  o.weights = "q4_k_m";
  for (const bool persistent : {false, true}) {
    CAPTURE(persistent);
    if (persistent) o.require = {"persistent_step"};
    const auto s = Session::open(dir.path.string(), o);
    CHECK(s->report()["weights"] == "q4_k+q6_k");
    CHECK(s->report()["warnings"].empty());
    const auto c = quantized_check(*s);
    REQUIRE(c.is_object());
    CHECK(c["active"] == true);
  }
}

}  // namespace
#endif  // RUNAHEAD_CUDA
