// The CUDA backend: weights uploaded once, an f32 KV cache, and a forward that is either
// the matrix-vector path (up to 17 tokens per pass over the weights, replayed as a CUDA
// graph) or, for long bf16 prompts, the tensor-core prefill path.
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "cuda/decode_step.h"
#include "cuda/device_memory.h"
#include "cuda/kernels.h"
#include "cuda/step_parts.h"
#include "model/arch/llama.h"
#include "model/error.h"
#include "model/half.h"
#include "model/numerics.h"
#include "model/quantize.h"
#include "model/rope.h"

namespace runahead {

bool cuda_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

namespace {

using namespace cuda;

constexpr int kChoiceSteps = 20;  // timed steps of each decode path at load

// Whether the environment variable `name` is set to `value` (the backend's switches, read at load).
bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

DeviceBuffer upload(const void* data, size_t bytes) {
  DeviceBuffer b(bytes);
  check_cuda(cudaMemcpy(b.get(), data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  return b;
}

// Matrices stacked by rows into one buffer, in their own dtype.
DeviceBuffer upload_rows(std::initializer_list<const Tensor*> parts) {
  size_t bytes = 0;
  for (const Tensor* t : parts) bytes += t->nbytes();
  DeviceBuffer b(bytes);
  size_t offset = 0;
  for (const Tensor* t : parts) {
    check_cuda(cudaMemcpy(b.get<char>() + offset, t->data, t->nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
    offset += t->nbytes();
  }
  return b;
}

// Small tensors (norms, biases) widened to f32 and stacked; empty tensors give no buffer.
DeviceBuffer upload_f32(std::initializer_list<const Tensor*> parts) {
  std::vector<float> values;
  for (const Tensor* t : parts) {
    const std::vector<float> v = widen(*t);
    values.insert(values.end(), v.begin(), v.end());
  }
  return values.empty() ? DeviceBuffer() : upload(values.data(), values.size() * sizeof(float));
}

// One layer on the device: q/k/v and gate/up stacked by rows for the fused kernels; q_norm and
// k_norm only for architectures with per-head q/k norms (Qwen3).
struct DeviceLayer {
  DeviceBuffer wqkv, bqkv, q_norm, k_norm, wo, w_gate_up, w_down, attn_norm, mlp_norm;
  // fp8: an f32 scale per row; Q8_0: f16 block scales (kernels.h); null otherwise.
  // K-quant matrices (kquant.cuh): the matrix buffer holds the Q4_K rows, the scale buffer the Q6_K ones.
  DeviceBuffer wqkv_scale, wo_scale, w_gate_up_scale, w_down_scale;
  int qkv_q6_from = 0;  // a K-quant q/k/v with both formats: its first Q6_K row
  // The matrix a MatmulResidual op names, and its scales.
  const void* matrix(Role r) const { return matrix_buffers(r).first->get(); }
  const void* matrix_scale(Role r) const { return matrix_buffers(r).second->get(); }

 private:
  std::pair<const DeviceBuffer*, const DeviceBuffer*> matrix_buffers(Role r) const {
    if (r == Role::Wo) return {&wo, &wo_scale};
    if (r == Role::WDown) return {&w_down, &w_down_scale};
    throw EngineError("unsupported", std::string("the CUDA backend keeps no matrix ") + role_name(r) + " for matmul_residual");
  }
};

// A matrix of `rows` rows of K elements of `dtype` on the device, quantized there to fp8 e4m3
// with a scale per row (model/fp8.h); `q` and `scale` receive the two buffers.
void quantize_on_device(const void* w, DType dtype, int rows, int K, DeviceBuffer& q, DeviceBuffer& scale) {
  q = DeviceBuffer(size_t(rows) * K);
  scale = DeviceBuffer(size_t(rows) * sizeof(float));
  quantize_fp8_rows(w, dtype, rows, K, q.get(), scale.get<float>(), nullptr);
  check_cuda(cudaDeviceSynchronize(), "quantize_fp8_rows");
}

// A Q8_0 matrix of `rows` rows of K weights, uploaded as stored (`blocks`, on the device) and
// split there into its int8 weights `q` and f16 block scales `d` (kernels.h).
void split_on_device(const DeviceBuffer& blocks, int rows, int K, DeviceBuffer& q, DeviceBuffer& d) {
  q = DeviceBuffer(size_t(rows) * K);
  d = DeviceBuffer(size_t(rows) * (K / 32) * 2);
  split_q8_0_blocks(blocks.get(), rows, K, q.get(), d.get(), nullptr);
  check_cuda(cudaDeviceSynchronize(), "split_q8_0_blocks");
}

// A K-quant matrix (kquant.cuh) made of `parts` (each all Q4_K or all Q6_K, the Q4_K ones
// first, make_cuda_backend checks): its Q4_K rows packed into q4, its Q6_K rows into q6, each
// buffer empty when it has none. Returns the number of Q4_K rows (the first Q6_K row).
int upload_kquant(std::initializer_list<const Tensor*> parts, DeviceBuffer& q4, DeviceBuffer& q6) {
  const int K = int((*parts.begin())->cols());
  int rows4 = 0, rows6 = 0;
  for (const Tensor* t : parts) (t->dtype == DType::Q6_K ? rows6 : rows4) += int(t->rows());
  q4 = rows4 ? DeviceBuffer(size_t(rows4) * cuda::q4k_row_bytes(K)) : DeviceBuffer();
  q6 = rows6 ? DeviceBuffer(size_t(rows6) * cuda::q6k_row_bytes(K)) : DeviceBuffer();
  if (rows6) check_cuda(cudaMemset(q6.get(), 0, q6.bytes()), "cudaMemset");  // the rows' padding
  int at4 = 0, at6 = 0;
  for (const Tensor* t : parts) {
    const bool is_q6 = t->dtype == DType::Q6_K;
    const DeviceBuffer blocks = upload(t->data, t->nbytes());
    uint8_t* out = is_q6 ? q6.get<uint8_t>() + size_t(at6) * cuda::q6k_row_bytes(K)
                         : q4.get<uint8_t>() + size_t(at4) * cuda::q4k_row_bytes(K);
    pack_kquant_rows(blocks.get(), is_q6, int(t->rows()), K, out, nullptr);
    check_cuda(cudaDeviceSynchronize(), "pack_kquant_rows");
    (is_q6 ? at6 : at4) += int(t->rows());
  }
  return rows4;
}

// How the device keeps the layers' matrices: the stored dtype, fp8 (options.weights), or
// DType::Q4_K for K-quant matrices, whatever mix of Q4_K and Q6_K they hold (kquant.cuh).
DType device_layer_dtype(const ModelWeights& w, bool fp8) {
  if (fp8) return DType::F8_E4M3;
  return w.dtype == DType::Q6_K ? DType::Q4_K : w.dtype;
}

// How a model's block-quantized matrices run (make_cuda_backend): as stored, or widened to bf16;
// `why` says which and why, `warn` when widening was not a choice (OptimizationCheck::warn).
// Empty `why`: no block-quantized matrix.
struct Quantized {
  bool as_stored = false;
  std::string why;
  bool warn = false;
};

// How a step ends: logits only, a greedy or sampled token fed to the next step, or a greedy
// verify of the step's drafted tokens (StepEnd::draft).
enum class StepMode { Logits, Greedy, Sample, Verify };

class CudaBackendImpl final : public CudaBackend, private StepParts {
 public:
  // `quantized`: how block-quantized matrices run.
  CudaBackendImpl(std::shared_ptr<const ModelWeights> weights, const BackendOptions& options, Quantized quantized)
      : w_(std::move(weights)),
        c_(w_->config),
        layer_ops_(architecture_of(c_).step),
        quantized_(std::move(quantized)),
        layer_dtype_(device_layer_dtype(*w_, options.fp8_matrices)),
        head_dtype_(device_layer_dtype(*w_, options.fp8_matrices || options.fp8_lm_head)),
        embed_dtype_(options.fp8_matrices ? DType::BF16 : device_layer_dtype(*w_, false)) {
    if (!cuda_available()) throw EngineError("cuda_error", "no CUDA device is available");
    check_cuda(cudaSetDevice(0), "cudaSetDevice");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    device_name_ = prop.name;
    sms_ = prop.multiProcessorCount;
    validate();
    capacity_ = options.context_length > 0
                    ? options.context_length
                    : std::min(c_.max_position_embeddings > 0 ? c_.max_position_embeddings : 4096, 4096);
    prefill_rows_ = std::min(kPrefillChunk, capacity_);
    const auto required = [&](const char* name) {
      return std::find(options.require.begin(), options.require.end(), name) != options.require.end();
    };
    run_ahead_ = required("run_ahead") || env_is("RUNAHEAD_CUDA_RUN_AHEAD", "1");
    force_persistent_ = required("persistent_step");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    for (cudaEvent_t& e : events_) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    upload_weights();
    allocate();
    choose_decode_step();
    warm_up();
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (load)");
    checks_ = check_at_load();
  }

  ~CudaBackendImpl() override {
    cudaStreamSynchronize(stream_);
    graphs_.clear();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (cudaEvent_t e : timeline_) cudaEventDestroy(e);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return c_; }
  int context_length() const override { return capacity_; }
  int kv_len() const override { return kv_len_; }
  std::span<const float> hidden() const override { return hidden_; }

  // Whether the layers' matrices are `dtype` (DType::Q4_K: K-quants) and some layer satisfies f(layer).
  template <class F> bool any_layer_of(DType dtype, F f) const {
    if (layer_dtype_ != dtype) return false;
    for (int l = 0; l < int(layers_.size()); ++l)
      if (f(l)) return true;
    return false;
  }

  nlohmann::json describe() const override {
    const bool tensor_cores = prefill_on_tensor_cores();
    const auto gate_up_ring = [&](int l) {
      return gate_up_ring_applies(layers_[l].w_gate_up.get(), layer_dtype_, layers_[l].w_gate_up_scale.get(),
                                  c_.hidden_size, c_.intermediate_size, gate_up_ring_, sms_);
    };
    const auto qkv_ring = [&](int l) { return qkv_ring_applies(qkv_args(l), qkv_ring_, sms_); };
    return {{"backend", "cuda"},
            {"device", device_name_},
            {"multiprocessors", sms_},
            {"optimizations",
             {{"weights", layer_dtype_ == DType::F8_E4M3 ? "F8_E4M3 with a scale per row (quantized at load; embedding "
                                                              "BF16)"
                          : layer_dtype_ == DType::Q8_0 ? "Q8_0 as stored (int8 weights and f16 block scales)"
                          : layer_dtype_ == DType::Q4_K ? "Q4_K and Q6_K as stored (" + weight_formats(*w_) + ")"
                                                        : dtype_name(layer_dtype_)},
              {"lm_head", head_dtype_ == DType::F8_E4M3 ? "F8_E4M3 with a scale per row (quantized at load)"
                          : head_dtype_ == DType::Q4_K  ? std::string(dtype_name((c_.tie_word_embeddings ? w_->embed : w_->lm_head).dtype)) + " as stored"
                                                        : dtype_name(head_dtype_)},
              {"activations", "f32"},
              {"kv_cache", "f32"},
              {"decode_step_cuda_graph", true},
              {"decode_step", describe_decode_step()},
              {"programmatic_dependent_launch", pdl_enabled()},
              {"device_argmax_and_sampling", true},
              {"device_greedy_verify", true},
              {"greedy_run_ahead", run_ahead_},
              {"fused_rmsnorm_qkv_rope_kv_append", true},
              {"fused_rmsnorm_gate_up_swiglu", true},
              {"split_k_decode_attention", attention_.splits},
              {"lm_head_rows_taken_as_blocks_finish", head_cursor_},
              {"ring_tiles_taken_as_stages_free", ring_cursors_.bytes() > 0},
              {"ring_tiles_in_flight", ring_flags_.in_flight},
              {"ring_inputs_staged_by_consumers", ring_flags_.consumers_stage},
              {"residual_ring_inputs_copied_by_consumers", residual_tuning_.flags.consumers_stage},
              {"ring_producers_unwaited", ring_flags_.producer_unwaited && ring_flags_.consumers_stage},
              {"ring_prefetches_next_kb", ring_prefetch_ / 1024},
              {"down_launched_before_its_quantize_waits", !layers_.empty() && down_quantized_early()},
              {"decode_attention_merged_in_cluster", attention_.cluster},
              {"decode_attention_splits_weighed_by_one_warp", attention_.weigh_by_warp},
              {"decode_attention_partials_counted", attention_.counted},
              {"o_proj_inputs_quantized_by_attention", attention_q8_},
              {"kquant_gate_up_ring", any_layer_of(DType::Q4_K, gate_up_ring)},
              {"kquant_o_proj_down_ring", any_layer_of(DType::Q4_K, [&](int l) { return residual_rings(l); })},
              {"kquant_qkv_ring", any_layer_of(DType::Q4_K, qkv_ring)},
              // Q8_0 layers through the same rings (rows of a multiple of 256 weights)
              {"q8_0_gate_up_ring", any_layer_of(DType::Q8_0, gate_up_ring)},
              {"q8_0_o_proj_down_ring", any_layer_of(DType::Q8_0, [&](int l) { return residual_rings(l); })},
              {"q8_0_qkv_ring", any_layer_of(DType::Q8_0, qkv_ring)},
              {"kquant_pair_planar_inputs", q8_planar_.get() != nullptr},
              {"tensor_core_prefill", tensor_cores},
              {"prefill_gemm", tensor_cores ? gemm_bf16_impl() : "none"},
              {"tensor_core_prefill_min_tokens", kTensorCoreMinTokens},
              {"prefill_warmed_at_load", warmed_}}}};
  }

  std::vector<OptimizationCheck> self_check() const override { return checks_; }
  HostWaits host_waits() const override { return waits_; }

  void truncate(int n) override {
    if (n < 0 || n > kv_len_)
      throw EngineError("bad_request",
                        "truncate(" + std::to_string(n) + ") with " + std::to_string(kv_len_) +
                            " positions in the KV cache",
                        {}, "n", "0 <= n <= kv_len");
    set_position(n);
  }

  void forward(std::span<const int32_t> tokens, int n_out, std::vector<float>& logits) override {
    const int n = int(tokens.size());
    check(tokens, n_out);
    const int V = c_.vocab_size, H = c_.hidden_size;
    ensure_host_rows(n, n_out);
    std::memcpy(host_in_.host(), tokens.data(), size_t(n) * sizeof(int32_t));
    const bool tensor_cores = n >= kTensorCoreMinTokens && prefill_on_tensor_cores();
    const int out_first = n - n_out;
    for (int done = 0; done < n;) {
      const int chunk = std::min(n - done, tensor_cores ? prefill_rows_ : kMaxVecTokens);
      const int rows_out = std::max(0, done + chunk - std::max(out_first, done));
      check_cuda(cudaMemcpyAsync(tokens_d_.get(), host_in_.host<int32_t>() + done, size_t(chunk) * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync (tokens)");
      if (!tensor_cores) {
        launch_graph(graph_for(StepMode::Logits, chunk, rows_out));
      } else {
        enqueue_prefill_layers(chunk);
        if (rows_out == 0) advance_position(pos_d_.get<int>(), chunk, stream_);
      }
      // Output rows leave in groups of at most kMaxVecTokens through logits_d_.
      for (int g = 0; g < rows_out; g += kMaxVecTokens) {
        const int rows = std::min(kMaxVecTokens, rows_out - g);
        const int local = chunk - rows_out + g;  // row within the chunk
        if (tensor_cores) {
          StepEnd end;
          if (g + rows == rows_out) end.pos = pos_d_.get<int>(), end.advance = chunk;
          enqueue_head(local, rows, end);
        }
        const size_t out_row = size_t(done + local - out_first);
        check_cuda(cudaMemcpyAsync(host_logits_.host<float>() + out_row * V, logits_d_.get(), size_t(rows) * V * 4,
                                   cudaMemcpyDeviceToHost, stream_),
                   "cudaMemcpyAsync (logits)");
        check_cuda(cudaMemcpyAsync(host_hidden_.host<float>() + out_row * H, x_.get<float>() + size_t(local) * H,
                                   size_t(rows) * H * 4, cudaMemcpyDeviceToHost, stream_),
                   "cudaMemcpyAsync (hidden)");
      }
      done += chunk;
    }
    wait_stream("forward");
    kv_len_ += n;
    logits.assign(host_logits_.host<float>(), host_logits_.host<float>() + size_t(n_out) * V);
    hidden_.assign(host_hidden_.host<float>(), host_hidden_.host<float>() + size_t(n_out) * H);
  }

  int decode(int32_t first, int max_tokens, const SamplingParams& sampling,
             const std::function<bool(int32_t)>& on_token) override {
    if (first < 0 || first >= c_.vocab_size)
      throw EngineError("bad_request", "token id " + std::to_string(first) + " is outside the vocabulary", {},
                        "tokens", "ids in [0, " + std::to_string(c_.vocab_size) + ")");
    max_tokens = std::min(max_tokens, capacity_ - kv_len_);
    if (max_tokens <= 0) return 0;
    wait_stream("decode");  // the copies below are not stream-ordered
    const StepMode mode = sampling.greedy() ? StepMode::Greedy : StepMode::Sample;
    if (mode == StepMode::Sample) {
      SamplingState s{sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed, 0};
      copy_blocking(sampling_d_.get(), &s, sizeof(s), "cudaMemcpy (sampling)");
    }
    copy_blocking(tokens_d_.get(), &first, sizeof(first), "cudaMemcpy (token)");
    const cudaGraphExec_t step = graph_for(mode, 1, 1);
    const int start = kv_len_;
    volatile int32_t* produced = host_tokens_.host<int32_t>();  // [p + 1]: the token after position p
    int launched = 0, emitted = 0;
    auto launch = [&] {
      launch_step(step);
      check_cuda(cudaEventRecord(events_[launched % 2], stream_), "cudaEventRecord");
      ++launched;
    };
    launch();
    while (emitted < launched) {
      if (launched < max_tokens) launch();  // the next step is queued before this one is read
      wait_event(events_[emitted % 2], launched == emitted + 1, "decode step");
      const int32_t token = produced[start + emitted + 1];
      ++emitted;
      if (!on_token(token)) break;
    }
    wait_stream("decode");
    kv_len_ = start + launched;
    set_position(start + emitted);
    return emitted;
  }

  int decode_greedy(int32_t first, int max_tokens, const std::function<bool(int32_t)>& on_token) override {
    return decode(first, max_tokens, SamplingParams{}, on_token);
  }

  // One captured graph per width: the rows' argmaxes, the comparison with the draft and the
  // rollback happen on the device (StepEnd::draft); two ints come back. Wider steps than one
  // matrix-vector pass serves go through forward() (max_verify_width() says how wide).
  GreedyVerdict verify_greedy(int32_t pending, std::span<const int32_t> draft) override {
    const int n = 1 + int(draft.size());
    if (n > kMaxVecTokens) return Backend::verify_greedy(pending, draft);
    ensure_host_rows(n, 1);
    int32_t* in = host_in_.host<int32_t>();
    in[0] = pending;
    std::copy(draft.begin(), draft.end(), in + 1);
    check(std::span<const int32_t>(in, size_t(n)), n);
    check_cuda(cudaMemcpyAsync(tokens_d_.get(), in, size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync (tokens)");
    launch_step(graph_for(StepMode::Verify, n, n));
    wait_stream("verify_greedy");
    const volatile int32_t* verdict = verdict_.host<int32_t>();
    const GreedyVerdict v{verdict[0], verdict[1]};
    kv_len_ += 1 + v.accepted;
    return v;
  }
  int max_verify_width() const override { return kMaxVecTokens; }

  // Run-ahead: a queued step's pending token is the one its predecessor left in tokens_d_[0];
  // its draft goes to tokens_d_[1..] by a copy ordered after that step on the stream (from a
  // pinned slot of its own), its verdict to a mapped slot of its own, and an event marks its end.
  // The generator queues ahead only with RUNAHEAD_CUDA_RUN_AHEAD=1: on the H200 it gained 1-2 %
  // on random-weight models (plain steps back to back) and lost 15-20 % on the embedded model
  // with real code, where a plain step queued ahead takes the place of a verify (NOTES.md).
  bool runs_ahead() const override { return run_ahead_; }

  void begin_greedy_run(int32_t first) override {
    check(std::span<const int32_t>(&first, 1), 1);
    wait_stream("begin_greedy_run");
    copy_blocking(tokens_d_.get(), &first, sizeof(first), "cudaMemcpy (token)");
    run_head_ = run_queued_ = 0;
  }

  void enqueue_verify_greedy(std::span<const int32_t> draft) override {
    const int n = 1 + int(draft.size());
    if (run_queued_ == 2) throw EngineError("bad_request", "cuda backend: more than two greedy steps queued");
    if (n > kMaxVecTokens)
      throw EngineError("bad_request", "cuda backend: a queued greedy step of " + std::to_string(n) + " tokens", {},
                        "draft", "at most " + std::to_string(kMaxVecTokens - 1) + " drafted tokens");
    int positions = kv_len_ + n;
    for (int i = 0; i < run_queued_; ++i) positions += run_width_[(run_head_ + i) % 2];
    if (positions > capacity_)
      throw EngineError("context_overflow", "cuda backend: queued greedy steps past the context of " +
                                                std::to_string(capacity_));
    for (int32_t t : draft)
      if (t < 0 || t >= c_.vocab_size)
        throw EngineError("bad_request", "token id " + std::to_string(t) + " is outside the vocabulary", {}, "draft",
                          "ids in [0, " + std::to_string(c_.vocab_size) + ")");
    const int slot = (run_head_ + run_queued_) % 2;
    int32_t* staging = run_staging_.host<int32_t>() + slot * kMaxVecTokens;
    std::copy(draft.begin(), draft.end(), staging);
    if (!draft.empty())
      check_cuda(cudaMemcpyAsync(tokens_d_.get<int32_t>() + 1, staging, draft.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync (draft)");
    launch_step(graph_for(StepMode::Verify, n, n, slot));
    check_cuda(cudaEventRecord(events_[slot], stream_), "cudaEventRecord");
    run_width_[slot] = n;
    ++run_queued_;
  }

  GreedyVerdict next_verdict() override {
    if (run_queued_ == 0) throw EngineError("bad_request", "cuda backend: no greedy step queued");
    const int slot = run_head_;
    wait_event(events_[slot], run_queued_ == 1, "greedy step");
    const volatile int32_t* verdict = verdict_.host<int32_t>() + 2 * slot;
    const GreedyVerdict v{verdict[0], verdict[1]};
    kv_len_ += 1 + v.accepted;
    run_head_ = (run_head_ + 1) % 2;
    --run_queued_;
    return v;
  }

  void end_greedy_run() override {
    if (run_queued_ > 0) set_position(kv_len_);  // waits for them and drops their entries
    run_queued_ = 0;
  }

  StepParts& step_parts() override { return *this; }

  void record_timeline(bool on) override {
    wait_stream("record_timeline");
    timeline_on_ = on;
    timeline_used_ = 0;
  }

  std::vector<double> step_gaps_us() override {
    wait_stream("step_gaps_us");
    std::vector<double> gaps;
    for (int i = 1; i < timeline_used_; ++i) {
      float ms = 0;  // from the end of step i - 1 to the moment step i was queued behind it
      check_cuda(cudaEventElapsedTime(&ms, timeline_[2 * (i - 1) + 1], timeline_[2 * i]), "cudaEventElapsedTime");
      gaps.push_back(std::max(0.0, double(ms) * 1e3));
    }
    timeline_used_ = 0;
    return gaps;
  }

  // --- StepParts: the step's parts one at a time, for the bench's profiler ---------------

  const ModelWeights& weights() const override { return *w_; }
  DType layer_dtype() const override { return layer_dtype_; }
  DType head_dtype() const override { return head_dtype_; }
  cudaStream_t stream() const override { return stream_; }
  cudaGraphExec_t greedy_step_graph() override { return graph_for(StepMode::Greedy, 1, 1); }
  cudaGraphExec_t verify_step_graph(int n) override { return graph_for(StepMode::Verify, n, n); }
  const DecodeStepPlan& persistent_plan() const override { return step_plan_; }

 private:
  void validate() const {
    // Elements per 16-byte chunk of the matrix-vector kernels.
    const int hd = c_.head_dim,
              E = layer_dtype_ == DType::Q4_K                                   ? 32
                  : layer_dtype_ == DType::F8_E4M3 || layer_dtype_ == DType::Q8_0 ? 16
                  : layer_dtype_ == DType::F32                                    ? 4
                                                                                  : 8;
    auto need = [&](bool ok, const std::string& what) {
      if (!ok) throw EngineError("unsupported", "the CUDA kernels need " + what, w_->source, "config.json");
    };
    need(hd % 2 == 0, "an even head_dim");
    need(c_.num_heads % c_.num_kv_heads == 0, "num_heads divisible by num_key_value_heads");
    need(c_.hidden_size % E == 0 && c_.intermediate_size % E == 0 && (c_.num_heads * hd) % E == 0,
         "hidden, intermediate and attention widths divisible by " + std::to_string(E));
    need(c_.hidden_size % 2 == 0 && c_.vocab_size % 2 == 0, "even hidden and vocabulary sizes");
    need(head_dtype_ != DType::F8_E4M3 || c_.hidden_size % 16 == 0, "a hidden size divisible by 16 for an fp8 lm_head");
    need(hd % 4 == 0 && hd <= 128 && 128 % (hd / 4) == 0, "a head_dim of 8, 16, 32, 64 or 128");
  }

  bool qk_norm() const { return !w_->layers.empty() && !w_->layers[0][Role::QNorm].empty(); }

  void upload_weights() {
    const auto& W = *w_;
    if (embed_dtype_ == DType::Q4_K) {  // packed as the layers' matrices; a tied head reads this copy
      upload_kquant({&W.embed}, embed_, embed_scale_);
    } else if (embed_dtype_ == DType::Q8_0) {  // split as the layers' matrices; a tied head reads this copy
      split_on_device(upload(W.embed.data, W.embed.nbytes()), int(W.embed.rows()), int(W.embed.cols()), embed_,
                      embed_scale_);
    } else if (embed_dtype_ == W.embed.dtype) {
      embed_ = upload(W.embed.data, W.embed.nbytes());
    } else {  // fp8 weights keep a bf16 embedding
      const std::vector<float> wide = widen(W.embed);
      std::vector<uint16_t> narrow(wide.size());
      for (size_t i = 0; i < wide.size(); ++i) narrow[i] = f32_to_bf16(wide[i]);
      embed_ = upload(narrow.data(), narrow.size() * 2);
    }
    const Tensor& head = c_.tie_word_embeddings ? W.embed : W.lm_head;
    if (head_dtype_ == DType::F8_E4M3) {
      const DeviceBuffer stored = upload(head.data, head.nbytes());
      quantize_on_device(stored.get(), head.dtype, int(head.rows()), int(head.cols()), lm_head_, lm_head_scale_);
    } else if (!c_.tie_word_embeddings && head_dtype_ == DType::Q4_K) {
      upload_kquant({&head}, lm_head_, lm_head_scale_);
    } else if (!c_.tie_word_embeddings && head_dtype_ == DType::Q8_0) {
      split_on_device(upload(head.data, head.nbytes()), int(head.rows()), int(head.cols()), lm_head_, lm_head_scale_);
    } else if (!c_.tie_word_embeddings) {
      lm_head_ = upload(W.lm_head.data, W.lm_head.nbytes());
    }
    final_norm_ = upload_f32({&W.final_norm});
    // A matrix as the layers keep it: as stored, quantized to fp8 on the device, Q8_0 split
    // into weights and block scales there, or K-quant rows packed (returns the first Q6_K row).
    const auto matrix = [&](std::initializer_list<const Tensor*> parts, DeviceBuffer& data, DeviceBuffer& scale) {
      if (layer_dtype_ == DType::Q4_K) return upload_kquant(parts, data, scale);
      data = upload_rows(parts);
      if (layer_dtype_ != DType::F8_E4M3 && layer_dtype_ != DType::Q8_0) return 0;
      int rows = 0;
      for (const Tensor* t : parts) rows += int(t->rows());
      const DeviceBuffer stored = std::move(data);
      const int K = int((*parts.begin())->cols());
      if (layer_dtype_ == DType::Q8_0)
        split_on_device(stored, rows, K, data, scale);
      else
        quantize_on_device(stored.get(), W.dtype, rows, K, data, scale);
      return 0;
    };
    for (const LayerWeights& l : W.layers) {
      DeviceLayer d;
      d.qkv_q6_from = matrix({&l[Role::Wq], &l[Role::Wk], &l[Role::Wv]}, d.wqkv, d.wqkv_scale);
      if (!l[Role::Bq].empty()) d.bqkv = upload_f32({&l[Role::Bq], &l[Role::Bk], &l[Role::Bv]});
      d.q_norm = upload_f32({&l[Role::QNorm]});
      d.k_norm = upload_f32({&l[Role::KNorm]});
      matrix({&l[Role::Wo]}, d.wo, d.wo_scale);
      matrix({&l[Role::WGate], &l[Role::WUp]}, d.w_gate_up, d.w_gate_up_scale);
      matrix({&l[Role::WDown]}, d.w_down, d.w_down_scale);
      d.attn_norm = upload_f32({&l[Role::AttnNorm]});
      d.mlp_norm = upload_f32({&l[Role::MlpNorm]});
      layers_.push_back(std::move(d));
    }
  }

  // Long prompts run on tensor cores: bf16 matrices as they are, fp8, Q8_0 and K-quant ones
  // widened to bf16 a matrix at a time into prefill_w_.
  bool widened_for_prefill() const {
    return layer_dtype_ == DType::F8_E4M3 || layer_dtype_ == DType::Q8_0 || layer_dtype_ == DType::Q4_K;
  }
  bool prefill_on_tensor_cores() const { return layer_dtype_ == DType::BF16 || widened_for_prefill(); }

  // The bf16 matrix a prefill GEMM reads: `data` itself, or its fp8, Q8_0 or K-quant rows
  // widened into prefill_w_ (q6_from: a K-quant q/k/v's first Q6_K row when it has both).
  const void* prefill_matrix(const void* data, const void* scale, int rows, int K, int q6_from = 0) {
    if (layer_dtype_ == DType::Q4_K)
      dequantize_kquant_rows(data, scale, kq_q6_from(data, scale, rows, q6_from), rows, K, prefill_w_.get(), stream_);
    else if (layer_dtype_ == DType::F8_E4M3)
      dequantize_fp8_rows(data, static_cast<const float*>(scale), rows, K, prefill_w_.get(), stream_);
    else if (layer_dtype_ == DType::Q8_0)
      dequantize_q8_0_rows(data, scale, rows, K, prefill_w_.get(), stream_);
    else
      return data;
    return prefill_w_.get();
  }

  void allocate() {
    const int H = c_.hidden_size, I = c_.intermediate_size, V = c_.vocab_size, L = c_.num_layers;
    const int hd = c_.head_dim, qd = c_.num_heads * hd, kvd = c_.num_kv_heads * hd;
    const int qkv_rows = qd + 2 * kvd, rows = prefill_rows_;
    const RopeTables rope = rope_tables(c_, capacity_);
    rope_cos_ = upload(rope.cos.data(), rope.cos.size() * 4);
    rope_sin_ = upload(rope.sin.data(), rope.sin.size() * 4);
    k_cache_ = DeviceBuffer(size_t(L) * capacity_ * kvd * 4);
    v_cache_ = DeviceBuffer(size_t(L) * capacity_ * kvd * 4);
    // Never-written cache rows are never read, but keep them finite for the memory checker.
    check_cuda(cudaMemset(k_cache_.get(), 0, k_cache_.bytes()), "cudaMemset");
    check_cuda(cudaMemset(v_cache_.get(), 0, v_cache_.bytes()), "cudaMemset");

    pos_d_ = DeviceBuffer(sizeof(int));
    check_cuda(cudaMemset(pos_d_.get(), 0, sizeof(int)), "cudaMemset");
    tokens_d_ = DeviceBuffer(size_t(rows) * sizeof(int32_t));
    x_ = DeviceBuffer(size_t(rows) * H * 4);
    q_ = DeviceBuffer(size_t(rows) * qd * 4);
    att_ = DeviceBuffer(size_t(rows) * qd * 4);
    act_ = DeviceBuffer(size_t(kMaxVecTokens) * I * 4);
    logits_d_ = DeviceBuffer(size_t(kMaxVecTokens) * V * 4);
    head_partial_ = DeviceBuffer(size_t(2) * kMaxVecTokens * lm_head_blocks(V, sms_) * 4);
    head_counter_ = DeviceBuffer(2 * sizeof(int));  // LmHead's counter and cursor
    check_cuda(cudaMemset(head_counter_.get(), 0, head_counter_.bytes()), "cudaMemset");
    // RUNAHEAD_CUDA_LM_HEAD_CURSOR=0: lm_head's blocks take its rows in turn (LmHead::cursor), to measure.
    head_cursor_ = !env_is("RUNAHEAD_CUDA_LM_HEAD_CURSOR", "0");
    attention_.heads = c_.num_heads;
    attention_.kv_heads = c_.num_kv_heads;
    attention_.head_dim = hd;
    attention_.capacity = capacity_;
    attention_.splits = attention_splits(c_.num_heads, sms_);
    // The splits of a head merge in a cluster where one of them runs (at most 16 a head then);
    // RUNAHEAD_CUDA_ATTENTION_CLUSTER=0: through global memory, and
    // RUNAHEAD_CUDA_ATTENTION_SPLITS=n (1..32) sets the splits a head, to measure the choices.
    const bool try_cluster = !env_is("RUNAHEAD_CUDA_ATTENTION_CLUSTER", "0");
    if (try_cluster) attention_.splits = std::min(attention_.splits, kMaxAttentionCluster);
    if (const char* splits = std::getenv("RUNAHEAD_CUDA_ATTENTION_SPLITS"))
      attention_.splits = std::clamp(std::atoi(splits), 1, 32);
    attention_.cluster = try_cluster && attention_cluster_fits(attention_.splits);
    // In a cluster, where its clusters fit, the splits push their partials into its block 0
    // (DecodeAttention::push; H100, ms/token, 1.5B Q4_K_M 1.060 -> 1.046, 7B 2.347 -> 2.329,
    // 7B Q8_0 3.207 -> 3.181; H200 within noise, 0.970 -> 0.971 and 1.941 -> 1.950: NOTES v33);
    // and their stores are counted in bytes on a barrier of block 0's (DecodeAttention::counted;
    // H100, ms/token, two rounds: 1.5B Q4_K_M 0.903-0.904 -> 0.895, 7B Q4_K_M 2.098-2.107 ->
    // 2.068-2.069, 7B Q8_0 2.974-2.977 -> 2.947-2.954: NOTES v46). RUNAHEAD_CUDA_ATTENTION_PUSH=0:
    // block 0 loads the partials; =uncounted: pushed, not counted (a cluster barrier); to measure.
    attention_.push = attention_.cluster && !env_is("RUNAHEAD_CUDA_ATTENTION_PUSH", "0") &&
                      attention_cluster_fits(attention_.splits, true);
    attention_.counted = attention_.push && !env_is("RUNAHEAD_CUDA_ATTENTION_PUSH", "uncounted") &&
                         attention_cluster_fits(attention_.splits, true, true);
    // The counted merge's split weights by one warp, the head's warps waiting at a barrier
    // (DecodeAttention::weigh_by_warp; H100, ms/token, five rounds at contexts 512 and 2048:
    // 1.5B Q4_K_M x0.990-0.996, 7B Q4_K_M x0.993-1.000, 7B Q8_0 x0.998-1.000: NOTES v53);
    // RUNAHEAD_CUDA_ATTENTION_WEIGH=threads: every thread weighs every split, to measure.
    attention_.weigh_by_warp = attention_.counted && hd % 32 == 0 && !env_is("RUNAHEAD_CUDA_ATTENTION_WEIGH", "threads");
    attention_partial_ = DeviceBuffer(attention_partial_floats(c_.num_heads, hd, attention_.splits) * 4);
    attention_counters_ = DeviceBuffer(size_t(kMaxVecTokens) * c_.num_heads * sizeof(int));
    check_cuda(cudaMemset(attention_counters_.get(), 0, attention_counters_.bytes()), "cudaMemset");
    attention_.partial = attention_partial_.get<float>();
    attention_.counters = attention_counters_.get<int>();
    sampling_d_ = DeviceBuffer(sizeof(SamplingState));
    allocate_step();
    host_tokens_ = PinnedBuffer(size_t(capacity_ + 2) * sizeof(int32_t));
    verdict_ = PinnedBuffer(4 * sizeof(int32_t));  // {accepted, next} for two queued steps
    run_staging_ = PinnedBuffer(2 * kMaxVecTokens * sizeof(int32_t));
    if (prefill_on_tensor_cores()) {
      const int widest = std::max({H, qd, I});
      h_bf16_ = DeviceBuffer(size_t(rows) * widest * 2);
      gate_up_ = DeviceBuffer(size_t(rows) * 2 * I * 4);
    }
    if (widened_for_prefill())  // the largest matrix of a layer, widened
      prefill_w_ = DeviceBuffer(std::max({size_t(qkv_rows) * H, size_t(H) * qd, size_t(2) * I * H, size_t(H) * I}) * 2);
    // The prefill GEMM's output; with q/k norms also the vector path's projection before them.
    if (prefill_on_tensor_cores() || qk_norm())
      qkv_ = DeviceBuffer(size_t(prefill_on_tensor_cores() ? rows : kMaxVecTokens) * qkv_rows * 4);
    const auto reads_int8 = [](DType t) { return t == DType::Q4_K || t == DType::Q8_0; };
    if (reads_int8(layer_dtype_) || reads_int8(head_dtype_)) {
      const size_t widest = std::max({H, qd, I});
      q8_q_ = DeviceBuffer(size_t(kMaxVecTokens) * widest);
      q8_d_ = DeviceBuffer(size_t(kMaxVecTokens) * (widest / 32) * sizeof(float));
      if (layer_dtype_ == DType::Q4_K && kq_planar_enabled()) q8_planar_ = DeviceBuffer(widest);
    }
    // o_proj's int8 inputs written by attention's merge instead of by a launch of their own;
    // RUNAHEAD_CUDA_FUSED_Q8=0 keeps the launch, to measure what this gains.
    // (Down's written by gate/up's ring instead, each group's last tile quantizing it, measured
    // slower in v33, v42 and v43: x1.03-1.10; removed.)
    attention_q8_ = reads_int8(layer_dtype_) && hd % 32 == 0 && !env_is("RUNAHEAD_CUDA_FUSED_Q8", "0");
    // One token's K-quant gate/up, and o_proj and down, through a ring of bulk copies where the
    // shape gains from it (kernels.h KqRing), and Q8_0's o_proj, down and q/k/v; each switch: =0
    // never, =force wherever it can run (to measure and test it).
    const auto ring_switch = [](const char* name) {
      const char* v = std::getenv(name);
      const std::string s = v ? v : "";
      return s == "0" ? KqRing::Off : s == "force" ? KqRing::Forced : KqRing::Auto;
    };
    gate_up_ring_ = ring_switch("RUNAHEAD_CUDA_KQ_RING");
    residual_ring_ = ring_switch("RUNAHEAD_CUDA_KQ_RING_RESIDUAL");
    // RUNAHEAD_CUDA_KQ_RING_SPLIT=1|2|4|8: o_proj's and down's ring with that many warps a row
    // wherever two stages of it fit; RUNAHEAD_CUDA_KQ_RING_LONG=1|0: as for long matrices or not
    // (kernels.h RingTuning), to measure.
    const char* split = std::getenv("RUNAHEAD_CUDA_KQ_RING_SPLIT");
    const int s = split ? std::atoi(split) : 0;
    residual_tuning_.split = s == 1 || s == 2 || s == 4 || s == 8 ? s : 0;
    const char* long_rows = std::getenv("RUNAHEAD_CUDA_KQ_RING_LONG");
    residual_tuning_.long_rows = !long_rows ? 0 : std::string(long_rows) == "0" ? -1 : 1;
    // RUNAHEAD_CUDA_KQ_RING_LONG_STAGES=n: the long matrices' rings with up to n stages.
    const char* stages = std::getenv("RUNAHEAD_CUDA_KQ_RING_LONG_STAGES");
    residual_tuning_.stages = stages ? std::max(0, std::atoi(stages)) : 0;
    // RUNAHEAD_CUDA_RESIDUAL_SPLIT=1|2|4|8: o_proj's and down's per-warp kernel (where no ring
    // runs: Q8_0, ...) with that many warps a row pair, to measure.
    const char* warp_split = std::getenv("RUNAHEAD_CUDA_RESIDUAL_SPLIT");
    const int w = warp_split ? std::atoi(warp_split) : 0;
    residual_tuning_.warp_split = w == 1 || w == 2 || w == 4 || w == 8 ? w : 0;
    qkv_ring_ = ring_switch("RUNAHEAD_CUDA_KQ_RING_QKV");
    // RUNAHEAD_CUDA_RING_IN_FLIGHT=n: every ring's blocks with n tiles in flight (0: every stage;
    // kernels.h kRingTilesInFlight), to measure.
    if (const char* in_flight = std::getenv("RUNAHEAD_CUDA_RING_IN_FLIGHT")) ring_flags_.in_flight = std::max(0, std::atoi(in_flight));
    // RUNAHEAD_CUDA_RING_STAGE=0 / RUNAHEAD_CUDA_RING_PRODUCER=0 turn the defaults off, to
    // measure (kernels.h RingFlags); =consumers keeps the norm-fused rings' alone.
    ring_flags_.consumers_stage = !env_is("RUNAHEAD_CUDA_RING_STAGE", "0");
    ring_flags_.producer_unwaited = !env_is("RUNAHEAD_CUDA_RING_PRODUCER", "0");
    // RUNAHEAD_CUDA_RING_PREFETCH=KB: each ring prefetches that many KB of the next ring's first
    // tiles into L2 instead of kRingPrefetchKb (kernels.h RingPrefetch; 0 none), to measure.
    const char* kb = std::getenv("RUNAHEAD_CUDA_RING_PREFETCH");
    ring_prefetch_ = size_t(kb ? std::max(0, std::atoi(kb)) : kRingPrefetchKb) * 1024;
    residual_tuning_.flags = ring_flags_;
    residual_tuning_.flags.consumers_stage = ring_flags_.consumers_stage && !env_is("RUNAHEAD_CUDA_RING_STAGE", "consumers");
    // RUNAHEAD_CUDA_QUANTIZE_EARLY=1 / 0: down launched before its quantize waits always /
    // never (RingTuning::quantize_early; its rule otherwise), to measure.
    residual_tuning_.quantize_early = env_is("RUNAHEAD_CUDA_QUANTIZE_EARLY", "1") ? 1 : env_is("RUNAHEAD_CUDA_QUANTIZE_EARLY", "0") ? -1 : 0;
    if (!env_is("RUNAHEAD_CUDA_RING_CURSOR", "0")) {
      ring_cursors_ = DeviceBuffer(size_t(c_.num_layers) * 3 * 2 * sizeof(int));
      check_cuda(cudaMemset(ring_cursors_.get(), 0, ring_cursors_.bytes()), "cudaMemset");
    }
  }

  // The persistent decode step (decode_step.h): its layer table and scratch.
  // RUNAHEAD_CUDA_PERSISTENT=0 keeps a kernel per op, to measure what it gains.
  void allocate_step() {
    const int H = c_.hidden_size, I = c_.intermediate_size, hd = c_.head_dim;
    const size_t kvd = size_t(c_.num_kv_heads) * hd;
    std::vector<DecodeLayer> table;
    for (int l = 0; l < c_.num_layers; ++l) {
      const DeviceLayer& d = layers_[l];
      DecodeLayer t;
      t.wqkv = d.wqkv.get();
      t.bqkv = d.bqkv.get<float>();
      t.wo = d.wo.get();
      t.w_gate_up = d.w_gate_up.get();
      t.w_down = d.w_down.get();
      t.attn_norm = d.attn_norm.get<float>();
      t.mlp_norm = d.mlp_norm.get<float>();
      t.wqkv_scale = d.wqkv_scale.get();
      t.wo_scale = d.wo_scale.get();
      t.w_gate_up_scale = d.w_gate_up_scale.get();
      t.w_down_scale = d.w_down_scale.get();
      t.qkv_q6_from = d.qkv_q6_from;
      t.k_cache = k_cache_.get<float>() + size_t(l) * capacity_ * kvd;
      t.v_cache = v_cache_.get<float>() + size_t(l) * capacity_ * kvd;
      table.push_back(t);
    }
    step_layers_ = upload(table.data(), table.size() * sizeof(DecodeLayer));
    step_qkv_ = DeviceBuffer(size_t(c_.num_heads + 2 * c_.num_kv_heads) * hd * 4);
    step_gate_up_ = DeviceBuffer(size_t(2) * I * 4);
    step_partial_ = DeviceBuffer(decode_step_partial_floats(c_.num_heads, hd) * 4);
    step_best_ = DeviceBuffer(size_t(2) * sms_ * 4);
    step_sync_ = DeviceBuffer(size_t(decode_step_sync_words()) * sizeof(unsigned));
    check_cuda(cudaMemset(step_sync_.get(), 0, step_sync_.bytes()), "cudaMemset");
    DecodeStep& s = step_;
    s.dtype = layer_dtype_;
    s.head_dtype = head_dtype_;
    s.embed_dtype = embed_dtype_;
    s.lm_head_scale = lm_head_scale();
    s.embed_scale = embed_scale_.get();
    s.layers = c_.num_layers;
    s.hidden = H;
    s.intermediate = I;
    s.heads = c_.num_heads;
    s.kv_heads = c_.num_kv_heads;
    s.head_dim = hd;
    s.vocab = c_.vocab_size;
    s.eps = c_.rms_norm_eps;
    s.layer = step_layers_.get<DecodeLayer>();
    s.embed = embed_.get();
    s.lm_head = lm_head_weights();
    s.final_norm = final_norm_.get<float>();
    s.rope_cos = rope_cos_.get<float>();
    s.rope_sin = rope_sin_.get<float>();
    s.token = tokens_d_.get<int32_t>();
    s.pos = pos_d_.get<int>();
    s.x = x_.get<float>();
    s.qkv = step_qkv_.get<float>();
    s.gate_up = step_gate_up_.get<float>();
    s.partial = step_partial_.get<float>();
    s.logits = logits_d_.get<float>();
    s.best = step_best_.get<float>();
    s.sync = step_sync_.get<unsigned>();
    if (env_is("RUNAHEAD_CUDA_PERSISTENT", "0")) {
      step_plan_.refused = "RUNAHEAD_CUDA_PERSISTENT unset or 1";
    } else if (layer_ops_ != llama_step()) {  // its phases are Llama's layer, fixed in the kernel
      step_plan_.refused = "a layer of Llama's ops (model/arch/llama.cpp)";
    } else if (qk_norm()) {
      step_plan_.refused = "a layer without per-head q/k RMSNorm (" + c_.architecture + " has q_norm/k_norm)";
    } else {
      int device = 0;
      check_cuda(cudaGetDevice(&device), "cudaGetDevice");
      step_plan_ = plan_decode_step(s, device);
    }
  }

  bool persistent_step() const { return persistent_; }

  // A single-token step runs the persistent kernel when its plan holds and it is the faster of
  // the two over a few timed steps; RUNAHEAD_CUDA_PERSISTENT=1 (or 0) forces it on (or off).
  void choose_decode_step() {
    persistent_ = false;
    const int steps = std::min(kChoiceSteps, capacity_ - 2);
    if (!step_plan_.refused.empty() || steps < 1) return;
    if (force_persistent_ || env_is("RUNAHEAD_CUDA_PERSISTENT", "1")) {
      persistent_ = true;
      return;
    }
    check_cuda(cudaMemsetAsync(tokens_d_.get(), 0, sizeof(int32_t), stream_), "cudaMemsetAsync (token)");
    for (const bool persistent : {false, true}) {
      persistent_ = persistent;
      set_position(0);
      GraphExec g = capture([&] { enqueue_vec_step(StepMode::Greedy, 1, 1); });
      step_ms_[persistent] = time_graph(g.get(), steps);
    }
    persistent_ = step_ms_[1] < step_ms_[0];
    set_position(0);
  }

  // The first tensor-core prefill creates cuBLASLt's handle and plans, and captures graphs: the
  // first request's prompt would wait for it (0.13 s for 856 tokens of the embedded model on an
  // H200, against about 1 ms warm). One prefill at load instead; a draft model's backend too.
  void warm_up() {
    const int n = std::min(512, capacity_ - 1);
    if (!prefill_on_tensor_cores() || n < kTensorCoreMinTokens) return;
    const std::vector<int32_t> tokens(size_t(n), 0);
    std::vector<float> logits;
    forward(tokens, 1, logits);
    set_position(0);
    warmed_ = n;
  }

  std::string describe_decode_step() const {
    const auto ms = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3f", v);
      return std::string(b);
    };
    const std::string persistent =
        "one persistent kernel, " + std::to_string(step_plan_.stages) + " weight stages of " +
        std::to_string(step_plan_.stage_bytes / 1024) + " KB per block";
    if (!step_plan_.refused.empty()) return "a kernel per op (persistent kernel off: needs " + step_plan_.refused + ")";
    if (step_ms_[0] == 0) return persistent_ ? persistent + " (forced)" : "a kernel per op";
    const std::string times = ms(step_ms_[1]) + " ms/step against " + ms(step_ms_[0]) + " for a kernel per op";
    return persistent_ ? persistent + " (" + times + ")" : "a kernel per op (the persistent kernel took " + times + ")";
  }

  void enqueue_persistent_step(const StepEnd& end, long long* clock) override {
    DecodeStep s = step_;
    s.end = end;
    s.clock = clock;
    decode_step(s, step_plan_, stream_);
  }

  // Pinned staging for a forward of n tokens with n_out logit rows.
  void ensure_host_rows(int n, int n_out) {
    if (n > host_in_rows_) {
      host_in_ = PinnedBuffer(size_t(n) * sizeof(int32_t));
      host_in_rows_ = n;
    }
    if (n_out > host_out_rows_) {
      host_logits_ = PinnedBuffer(size_t(n_out) * c_.vocab_size * 4);
      host_hidden_ = PinnedBuffer(size_t(n_out) * c_.hidden_size * 4);
      host_out_rows_ = n_out;
    }
  }

  void check(std::span<const int32_t> tokens, int n_out) const {
    const int n = int(tokens.size());
    if (n == 0 || n_out < 1 || n_out > n)
      throw EngineError("bad_request",
                        "forward of " + std::to_string(n) + " tokens asking for " + std::to_string(n_out) +
                            " logit rows",
                        {}, "n_out", "1 <= n_out <= number of tokens");
    if (kv_len_ + n > capacity_)
      throw EngineError("context_overflow",
                        std::to_string(kv_len_) + " positions in the KV cache + " + std::to_string(n) +
                            " new tokens exceed the context of " + std::to_string(capacity_),
                        {}, "tokens", "at most " + std::to_string(capacity_ - kv_len_) + " tokens");
    for (int32_t t : tokens)
      if (t < 0 || t >= c_.vocab_size)
        throw EngineError("bad_request", "token id " + std::to_string(t) + " is outside the vocabulary", {},
                          "tokens", "ids in [0, " + std::to_string(c_.vocab_size) + ")");
  }

  void set_position(int n) override {
    wait_stream("set_position");
    copy_blocking(pos_d_.get(), &n, sizeof(n), "cudaMemcpy (position)");
    kv_len_ = n;
  }

  // Every blocking wait of the host on the device goes through these three (host_waits()).
  // A stream synchronisation leaves the device with nothing queued.
  void wait_stream(const char* what) {
    ++waits_.all, ++waits_.drained;
    check_cuda(cudaStreamSynchronize(stream_), what);
  }
  // `drained`: nothing is queued behind the event.
  void wait_event(cudaEvent_t e, bool drained, const char* what) {
    ++waits_.all, waits_.drained += drained;
    check_cuda(cudaEventSynchronize(e), what);
  }
  // A copy from pageable host memory on the legacy stream: the host waits for it, though the
  // backend's own stream may still have work queued.
  void copy_blocking(void* device, const void* host, size_t bytes, const char* what) {
    ++waits_.all;
    check_cuda(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), what);
  }

  // --- the ops of one step, in order -------------------------------------------------

  bool head_is_embedding() const { return c_.tie_word_embeddings && head_dtype_ == embed_dtype_; }
  const void* lm_head_weights() const { return head_is_embedding() ? embed_.get() : lm_head_.get(); }
  const void* lm_head_scale() const { return head_is_embedding() ? embed_scale_.get() : lm_head_scale_.get(); }

  QkvRope qkv_args(int l) const {
    const DeviceLayer& d = layers_[l];
    const size_t kvd = size_t(c_.num_kv_heads) * c_.head_dim;
    QkvRope a;
    a.w = d.wqkv.get();
    a.dtype = layer_dtype_;
    a.scale = d.wqkv_scale.get();
    a.q6_from = d.qkv_q6_from;
    a.bias = d.bqkv.get<float>();
    a.norm = d.attn_norm.get<float>();
    a.q_norm = d.q_norm.get<float>();
    a.k_norm = d.k_norm.get<float>();
    if (a.q_norm) a.qkv = qkv_.get<float>();
    a.eps = c_.rms_norm_eps;
    a.rope_cos = rope_cos_.get<float>();
    a.rope_sin = rope_sin_.get<float>();
    a.hidden = c_.hidden_size;
    a.heads = c_.num_heads;
    a.kv_heads = c_.num_kv_heads;
    a.head_dim = c_.head_dim;
    a.k_cache = k_cache_.get<float>() + size_t(l) * capacity_ * kvd;
    a.v_cache = v_cache_.get<float>() + size_t(l) * capacity_ * kvd;
    a.q8 = q8_inputs();
    a.ring_flags = ring_flags_;
    return a;
  }

  // The Q8_0 and K-quant kernels' inputs quantized to int8 (kernels.h Q8Scratch); none for other formats.
  Q8Scratch q8_inputs() const { return Q8Scratch{q8_q_.get<int8_t>(), q8_d_.get<float>(), q8_planar_.get<int8_t>()}; }

  DecodeAttention attention_args(int l) const {
    DecodeAttention a = attention_;
    const size_t kvd = size_t(c_.num_kv_heads) * c_.head_dim;
    a.k_cache = k_cache_.get<float>() + size_t(l) * capacity_ * kvd;
    a.v_cache = v_cache_.get<float>() + size_t(l) * capacity_ * kvd;
    if (attention_q8_) a.q8 = q8_inputs();
    return a;
  }

  void enqueue_embedding(int n) override {
    embedding_lookup(embed_.get(), embed_dtype_, embed_scale_.get(), c_.hidden_size, tokens_d_.get<int32_t>(), n,
                     x_.get<float>(), stream_);
  }
  void enqueue_qkv(int l, int n, const RingPrefetch& next) {
    QkvRope a = qkv_args(l);
    a.ring_flags.next = next;
    rmsnorm_qkv_rope_append(a, x_.get<float>(), n, pos_d_.get<int>(), q_.get<float>(), sms_, stream_, qkv_ring_);
  }
  void enqueue_attention(int l, int n) {
    attention_decode(attention_args(l), q_.get<float>(), n, pos_d_.get<int>(), att_.get<float>(), stream_);
  }
  void enqueue_gate_up(int l, int n, const RingPrefetch& next) {
    const DeviceLayer& d = layers_[l];
    RingFlags flags = ring_flags_;
    flags.next = next;
    rmsnorm_gate_up_swiglu(d.w_gate_up.get(), layer_dtype_, d.w_gate_up_scale.get(), d.mlp_norm.get<float>(),
                           c_.rms_norm_eps, c_.hidden_size, c_.intermediate_size, x_.get<float>(), n, act_.get<float>(),
                           q8_inputs(), sms_, stream_, gate_up_ring_, ring_cursor(l, 1), flags);
  }
  // The first ring_prefetch_ bytes of the ring after op `i` of layer l (the next op with a
  // matrix: in this layer, else the next layer's first; none after the last layer's last: lm_head
  // is not a ring), for that op's ring to prefetch (kernels.h RingPrefetch); none where
  // ring_prefetch_ is 0.
  RingPrefetch next_ring_prefix(int l, size_t i) const {
    if (ring_prefetch_ == 0) return {};
    const int H = c_.hidden_size, I = c_.intermediate_size;
    for (;;) {
      if (++i == layer_ops_.size()) {
        i = 0;
        if (++l == c_.num_layers) return {};
      }
      const Op& op = layer_ops_[i];
      switch (op.kind) {
        case OpKind::RmsnormQkvRopeAppend: return qkv_ring_prefix(qkv_args(l), qkv_ring_, sms_, ring_prefetch_);
        case OpKind::Attention: continue;
        case OpKind::MatmulResidual: {
          const Tensor& w = w_->layers[l][op.weight];
          return residual_ring_prefix(layers_[l].matrix(op.weight), layer_dtype_, layers_[l].matrix_scale(op.weight),
                                      int(w.rows()), int(w.cols()), residual_ring_, residual_tuning_, ring_prefetch_);
        }
        case OpKind::RmsnormGateUpSwiglu: {
          const DeviceLayer& d = layers_[l];
          return gate_up_ring_prefix(d.w_gate_up.get(), layer_dtype_, d.w_gate_up_scale.get(), H, I, gate_up_ring_, sms_,
                                     ring_prefetch_);
        }
      }
    }
  }
  // Layer l's pair of ints for the ring of its o_proj (0), gate/up (1) or down (2), or null
  // (RUNAHEAD_CUDA_RING_CURSOR=0: the blocks take their tiles in turn, to measure).
  int* ring_cursor(int l, int which) const {
    return ring_cursors_.bytes() ? ring_cursors_.get<int>() + (size_t(l) * 3 + which) * 2 : nullptr;
  }
  // Whether layer 0's down launches before the launch quantizing its inputs has waited.
  bool down_quantized_early() const {
    const Tensor& w = w_->layers[0][Role::WDown];
    return residual_quantizes_early(layers_[0].matrix(Role::WDown), layer_dtype_, layers_[0].matrix_scale(Role::WDown),
                                    int(w.rows()), int(w.cols()), residual_ring_, residual_tuning_);
  }
  // Whether layer l's o_proj and down both go through the bulk-copy ring.
  bool residual_rings(int l) const {
    const auto ring = [&](Role role) {
      const Tensor& w = w_->layers[l][role];
      return residual_ring_applies(layers_[l].matrix(role), layer_dtype_, layers_[l].matrix_scale(role), int(w.rows()),
                                   int(w.cols()), residual_ring_, residual_tuning_);
    };
    return ring(Role::Wo) && ring(Role::WDown);
  }
  // x += in W^T for the layer's matrix `role` (o_proj or down).
  void enqueue_matmul_residual(int l, Role role, const float* in, int n, const RingPrefetch& next) {
    const Tensor& w = w_->layers[l][role];
    const bool from_attention = attention_q8_ && in == att_.get<float>();
    // Down reads its inputs pair-planar (7B Q4_K_M down 653 -> 635 us a step); o_proj a chunk a
    // lane, as attention's merge writes them: the same bits whether it or a launch quantizes.
    Q8Scratch q8 = q8_inputs();
    if (role != Role::WDown) q8.planar = nullptr;
    RingTuning tuning = residual_tuning_;
    tuning.flags.next = next;
    matvec_residual_add(layers_[l].matrix(role), layer_dtype_, layers_[l].matrix_scale(role), int(w.rows()),
                        int(w.cols()), in, n, x_.get<float>(), q8, sms_, stream_, from_attention,
                        residual_ring_, tuning, ring_cursor(l, role == Role::Wo ? 0 : 2));
  }

  float* buffer(Buffer b) const {
    switch (b) {
      case Buffer::X: return x_.get<float>();
      case Buffer::Q: return q_.get<float>();
      case Buffer::Att: return att_.get<float>();
      case Buffer::Act: return act_.get<float>();
    }
    return nullptr;
  }

  // One op of the model's layer (model/arch/) on the matrix-vector path. The fused kernels
  // read and write the buffers the architecture names for them: x, q, att, act.
  // A ring prefetches the next one's first ring_prefetch_ bytes.
  void enqueue_op(const Op& op, int l, int n) override {
    const RingPrefetch next =
        n == 1 ? next_ring_prefix(l, size_t(std::find(layer_ops_.begin(), layer_ops_.end(), op) - layer_ops_.begin()))
               : RingPrefetch{};
    switch (op.kind) {
      case OpKind::RmsnormQkvRopeAppend: enqueue_qkv(l, n, next); break;
      case OpKind::Attention: enqueue_attention(l, n); break;
      case OpKind::MatmulResidual: enqueue_matmul_residual(l, op.weight, buffer(op.in), n, next); break;
      case OpKind::RmsnormGateUpSwiglu: enqueue_gate_up(l, n, next); break;
    }
  }

  // Final norm + lm_head + argmax of `rows` rows of x starting at row `first`.
  void enqueue_head(int first, int rows, const StepEnd& end) override {
    LmHead a;
    a.w = lm_head_weights();
    a.dtype = head_dtype_;
    a.scale = lm_head_scale();
    a.norm = final_norm_.get<float>();
    a.eps = c_.rms_norm_eps;
    a.hidden = c_.hidden_size;
    a.vocab = c_.vocab_size;
    a.partial = head_partial_.get<float>();
    a.counter = head_counter_.get<int>();
    a.cursor = head_cursor_ ? head_counter_.get<int>() + 1 : nullptr;
    a.q8 = q8_inputs();
    rmsnorm_lm_head_argmax(a, x_.get<float>() + size_t(first) * c_.hidden_size, rows, logits_d_.get<float>(), end,
                           sms_, stream_);
  }

  // One step of n <= kMaxVecTokens tokens (tokens_d_) through the matrix-vector path,
  // ending as `mode` says; n_out rows of logits (0: none, only the position moves).
  void enqueue_vec_step(StepMode mode, int n, int n_out, int slot = 0) {
    // A single token with its logits can run as one persistent kernel: layers and head.
    const bool one_kernel = n == 1 && n_out == 1 && persistent_step();
    if (!one_kernel) {
      enqueue_embedding(n);
      for (int l = 0; l < c_.num_layers; ++l)
        for (const Op& op : layer_ops_) enqueue_op(op, l, n);
    }
    int* pos = pos_d_.get<int>();
    if (n_out == 0) {
      advance_position(pos, n, stream_);
      return;
    }
    StepEnd end;
    end.pos = pos;
    end.advance = n;
    if (mode == StepMode::Verify) {
      end.next = tokens_d_.get<int32_t>();
      end.draft = tokens_d_.get<int32_t>();
      end.verdict = verdict_.device<int32_t>() + 2 * slot;
    } else if (mode != StepMode::Logits) {
      end.next = tokens_d_.get<int32_t>();
      end.host = host_tokens_.device<int32_t>();
    }
    const auto head = [&](const StepEnd& e) {
      if (one_kernel) enqueue_persistent_step(e, nullptr);
      else enqueue_head(n - n_out, n_out, e);
    };
    if (mode == StepMode::Sample) {
      head(StepEnd{});
      sample_token(logits_d_.get<float>(), c_.vocab_size, sampling_d_.get<SamplingState>(), end, stream_);
    } else {
      head(end);
    }
  }


  // The layers of n tokens (tokens_d_) on tensor cores; x_ ends with their hidden states.
  // `ops` selects op kinds (all by default; the benchmark times them one kind at a time).
  void enqueue_prefill_layers(int n, unsigned ops = kAllPrefillOps) override {
    const int H = c_.hidden_size, I = c_.intermediate_size, qd = c_.num_heads * c_.head_dim;
    const int qkv_rows = qd + 2 * c_.num_kv_heads * c_.head_dim;
    const int* pos = pos_d_.get<int>();
    float* x = x_.get<float>();
    void* h = h_bf16_.get();
    const bool gemm = ops & kPrefillGemm, attention = ops & kPrefillAttention, other = ops & kPrefillOther;
    if (other) enqueue_embedding(n);
    for (int l = 0; l < c_.num_layers; ++l) {
      const DeviceLayer& d = layers_[l];
      for (const Op& op : layer_ops_) {
        switch (op.kind) {
          case OpKind::RmsnormQkvRopeAppend:
            if (other) rmsnorm_to_bf16(x, d.attn_norm.get<float>(), c_.rms_norm_eps, n, H, h, stream_);
            if (gemm)
              gemm_bf16(h, prefill_matrix(d.wqkv.get(), d.wqkv_scale.get<float>(), qkv_rows, H, d.qkv_q6_from), n, qkv_rows, H,
                        qkv_.get<float>(), false, stream_);
            if (other) bias_rope_append(qkv_args(l), qkv_.get<float>(), n, pos, q_.get<float>(), stream_);
            break;
          case OpKind::Attention:
            if (attention) attention_prefill(attention_args(l), q_.get<float>(), n, pos, att_.get<float>(), stream_);
            break;
          case OpKind::MatmulResidual: {
            const Tensor& w = w_->layers[l][op.weight];
            // swiglu_to_bf16 left act in h already; any other input is converted here.
            if (other && op.in != Buffer::Act) to_bf16(buffer(op.in), size_t(n) * w.cols(), h, stream_);
            if (gemm)
              gemm_bf16(h, prefill_matrix(d.matrix(op.weight), d.matrix_scale(op.weight), int(w.rows()), int(w.cols())),
                        n, int(w.rows()), int(w.cols()), x, true, stream_);
            break;
          }
          case OpKind::RmsnormGateUpSwiglu:
            if (other) rmsnorm_to_bf16(x, d.mlp_norm.get<float>(), c_.rms_norm_eps, n, H, h, stream_);
            if (gemm)  // bf16 out: half the bytes
              gemm_bf16_to_bf16(h, prefill_matrix(d.w_gate_up.get(), d.w_gate_up_scale.get<float>(), 2 * I, H), n,
                                2 * I, H, gate_up_.get(), stream_);
            if (other) swiglu_to_bf16(gate_up_.get(), n, I, h, stream_);
            break;
        }
      }
    }
  }

  // --- graphs --------------------------------------------------------------------------

  GraphExec capture(const std::function<void()>& enqueue) override {
    check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream_, &broken);
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    last_shape_ = shape_of(graph);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check_cuda(status, "cudaGraphInstantiate");
    return GraphExec(exec);
  }

  // graphs_' and shapes_' key of a step graph.
  static int graph_key(StepMode mode, int n, int n_out, int slot = 0) {
    return (slot << 20) | (int(mode) << 16) | (n << 8) | n_out;
  }

  // `slot`: which verdict slot a Verify step writes (two steps may be queued).
  cudaGraphExec_t graph_for(StepMode mode, int n, int n_out, int slot = 0) {
    const int key = graph_key(mode, n, n_out, slot);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      wait_stream("graph capture");  // a queued step may still run on the stream
      it = graphs_.emplace(key, capture([&] { enqueue_vec_step(mode, n, n_out, slot); })).first;
      shapes_[key] = last_shape_;
    }
    return it->second.get();
  }

  void launch_graph(cudaGraphExec_t g) override { check_cuda(cudaGraphLaunch(g, stream_), "cudaGraphLaunch"); }

  // A step of the decode loop: with the timeline on, between a timing event that completes when
  // the stream reaches it (once the step before has ended and this one is queued) and one at its end.
  void launch_step(cudaGraphExec_t g) {
    if (!timeline_on_) return launch_graph(g);
    while (int(timeline_.size()) < 2 * (timeline_used_ + 1)) {
      cudaEvent_t e = nullptr;
      check_cuda(cudaEventCreate(&e), "cudaEventCreate");
      timeline_.push_back(e);
    }
    check_cuda(cudaEventRecord(timeline_[2 * timeline_used_], stream_), "cudaEventRecord");
    launch_graph(g);
    check_cuda(cudaEventRecord(timeline_[2 * timeline_used_ + 1], stream_), "cudaEventRecord");
    ++timeline_used_;
  }

  // What a captured graph holds: its kernel nodes, and the edges between kernels, of which
  // `programmatic` let the next kernel start before its predecessor ends (PDL).
  struct GraphShape {
    int kernels = 0, kernel_edges = 0, programmatic = 0;
  };
  static GraphShape shape_of(cudaGraph_t graph) {
    GraphShape shape;
    size_t count = 0;
    check_cuda(cudaGraphGetNodes(graph, nullptr, &count), "cudaGraphGetNodes");
    std::vector<cudaGraphNode_t> nodes(count);
    check_cuda(cudaGraphGetNodes(graph, nodes.data(), &count), "cudaGraphGetNodes");
    const auto is_kernel = [](cudaGraphNode_t node) {
      cudaGraphNodeType type{};
      check_cuda(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
      return type == cudaGraphNodeTypeKernel;
    };
    for (cudaGraphNode_t node : nodes) shape.kernels += is_kernel(node);
    size_t edges = 0;
    check_cuda(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges), "cudaGraphGetEdges");
    std::vector<cudaGraphNode_t> from(edges), to(edges);
    std::vector<cudaGraphEdgeData> data(edges);
    check_cuda(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &edges), "cudaGraphGetEdges");
    for (size_t e = 0; e < edges; ++e) {
      if (!is_kernel(from[e]) || !is_kernel(to[e])) continue;
      ++shape.kernel_edges;
      shape.programmatic += data[e].type == cudaGraphDependencyTypeProgrammatic;
    }
    return shape;
  }

  // The start-up self-check: each optimisation as the graphs the backend captured really hold it.
  std::vector<OptimizationCheck> check_at_load() {
    graph_for(StepMode::Verify, 2, 2);
    graph_for(StepMode::Greedy, 1, 1);
    const GraphShape step = shapes_.at(graph_key(StepMode::Greedy, 1, 1));
    const GraphShape verify = shapes_.at(graph_key(StepMode::Verify, 2, 2));
    std::vector<OptimizationCheck> checks;
    checks.push_back({"step_graphs", step.kernels >= 1,
                      "a decode step replays one CUDA graph of " + std::to_string(step.kernels) +
                          " kernel(s); a 2-token verify step one of " + std::to_string(verify.kernels)});
    checks.push_back({"persistent_step", persistent_ && step.kernels == 1, describe_decode_step()});
    const std::string edges = std::to_string(verify.programmatic) + " of the " + std::to_string(verify.kernel_edges) +
                              " kernel-to-kernel edges of a 2-token verify step's graph are programmatic";
    checks.push_back({"pdl", pdl_enabled() && verify.programmatic > 0,
                      pdl_enabled() ? edges : "RUNAHEAD_CUDA_PDL=0 (" + edges + ")"});
    checks.push_back({"run_ahead", run_ahead_,
                      run_ahead_ ? "greedy steps are queued one ahead of their verdicts"
                                 : "off unless asked for (options.require or RUNAHEAD_CUDA_RUN_AHEAD=1): it measured "
                                   "slower on the embedded model (engine/bench/cuda/NOTES.md)"});
    checks.push_back({"device_greedy_verify", true,
                      "verify steps of 1.." + std::to_string(kMaxVecTokens) +
                          " tokens pick, compare and roll back on the device; two ints cross to the host"});
    checks.push_back({"device_sampling", true, "sampled decode draws each token on the device; a sampled speculative "
                                                "verify reads its rows on the host"});
    checks.push_back({"fp8_weights", layer_dtype_ == DType::F8_E4M3,
                      layer_dtype_ == DType::F8_E4M3 ? "every matrix but the embedding is F8_E4M3 on the device"
                                                     : std::string("the matrices are ") + dtype_name(layer_dtype_) +
                                                           " (options.weights \"fp8\" quantizes them)"});
    checks.push_back({"fp8_lm_head", head_dtype_ == DType::F8_E4M3,
                      head_dtype_ == DType::F8_E4M3 ? "lm_head is F8_E4M3 on the device"
                                                    : std::string("lm_head is ") + dtype_name(head_dtype_) +
                                                          " (options.lm_head \"fp8\" quantizes it)"});
    if (!quantized_.why.empty())
      checks.push_back({"quantized_kernels", quantized_.as_stored, quantized_.why, quantized_.warn});
    checks.push_back({"tensor_core_prefill", prefill_on_tensor_cores(),
                      prefill_on_tensor_cores() ? std::string("prompts of ") + std::to_string(kTensorCoreMinTokens) +
                                                      "+ tokens run " + gemm_bf16_impl() + " GEMMs"
                                                : std::string("no tensor-core path for ") + dtype_name(layer_dtype_)});
    return checks;
  }

  double time_graph(cudaGraphExec_t g, int reps) override {
    launch_graph(g);
    cudaEvent_t begin, end;
    check_cuda(cudaEventCreate(&begin), "cudaEventCreate");
    check_cuda(cudaEventCreate(&end), "cudaEventCreate");
    check_cuda(cudaEventRecord(begin, stream_), "cudaEventRecord");
    for (int i = 0; i < reps; ++i) launch_graph(g);
    check_cuda(cudaEventRecord(end, stream_), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(end), "time_graph");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    return ms / reps;
  }

  std::shared_ptr<const ModelWeights> w_;
  const ModelConfig& c_;
  const std::vector<Op>& layer_ops_;  // the ops of one layer (model/arch/)
  std::string device_name_;
  int sms_ = 0;
  int capacity_ = 0;
  int prefill_rows_ = 0;
  int kv_len_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[2] = {};

  const Quantized quantized_;
  const DType layer_dtype_, head_dtype_, embed_dtype_;  // as the device keeps them
  // embed_scale_ and lm_head_scale_ as DeviceLayer's scale buffers (lm_head's also fp8's).
  DeviceBuffer embed_, embed_scale_, lm_head_, lm_head_scale_, final_norm_;
  DeviceBuffer prefill_w_;  // block-quantized and fp8 weights: the matrix a prefill GEMM reads, widened to bf16
  std::vector<DeviceLayer> layers_;
  DeviceBuffer rope_cos_, rope_sin_, k_cache_, v_cache_;
  DeviceBuffer pos_d_, tokens_d_, x_, q_, att_, act_, logits_d_, head_partial_, head_counter_;
  DeviceBuffer attention_partial_, attention_counters_, sampling_d_;
  DeviceBuffer h_bf16_, qkv_, gate_up_;  // tensor-core prefill only
  bool attention_q8_ = false;  // allocate(): o_proj's inputs quantized by attention's merge
  bool head_cursor_ = true;  // allocate(): LmHead::cursor
  size_t ring_prefetch_ = 0;  // bytes of the next ring's first tiles each ring prefetches (allocate(): kRingPrefetchKb KB)
  RingFlags ring_flags_;  // allocate(): every ring's RingShape::flags (residual_tuning_ has the residual rings')
  DeviceBuffer ring_cursors_;      // ring_cursor(): 3 pairs of ints a layer, or none
  KqRing gate_up_ring_ = KqRing::Auto;   // allocate(): K-quant gate/up's bulk-copy ring
  KqRing residual_ring_ = KqRing::Auto;  // allocate(): the same for o_proj and down
  RingTuning residual_tuning_;            // allocate(): their ring's shape (0s: its rule)
  KqRing qkv_ring_ = KqRing::Auto;       // allocate(): the same for q/k/v
  DeviceBuffer q8_q_, q8_d_, q8_planar_;  // Q8_0 and K-quant matrices: their inputs quantized (q8_inputs())
  DeviceBuffer step_layers_, step_qkv_, step_gate_up_, step_partial_, step_best_, step_sync_;
  DecodeStep step_;
  DecodeStepPlan step_plan_;
  bool persistent_ = false;
  int warmed_ = 0;  // tokens of the prefill run at load
  bool run_ahead_ = false;          // RUNAHEAD_CUDA_RUN_AHEAD=1 or options.require "run_ahead"
  bool force_persistent_ = false;   // options.require "persistent_step"
  HostWaits waits_;
  std::vector<cudaEvent_t> timeline_;  // record_timeline: [2 i] before step i, [2 i + 1] after it
  bool timeline_on_ = false;
  int timeline_used_ = 0;
  GraphShape last_shape_;           // of the graph capture() made last
  std::map<int, GraphShape> shapes_;  // by graph_for's key
  std::vector<OptimizationCheck> checks_;
  double step_ms_[2] = {0, 0};  // a timed single-token step: [0] kernel per op, [1] persistent
  DecodeAttention attention_;
  PinnedBuffer host_tokens_, host_in_, host_logits_, host_hidden_, verdict_, run_staging_;
  int run_head_ = 0, run_queued_ = 0, run_width_[2] = {0, 0};  // queued greedy steps (a ring of two)
  int host_in_rows_ = 0, host_out_rows_ = 0;
  std::vector<float> hidden_;
  std::map<int, GraphExec> graphs_;
};

constexpr size_t kQ8AsStoredBytes = size_t(1) << 30;

// What the K-quant kernels (kquant.cuh) need and a model of Q4_K/Q6_K matrices lacks, or "":
// a fused q/k/v keeps its Q4_K rows before its Q6_K ones, gate and up share a format.
std::string kquant_misfit(const ModelWeights& w) {
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const bool q6[3] = {l[Role::Wq].dtype == DType::Q6_K, l[Role::Wk].dtype == DType::Q6_K,
                        l[Role::Wv].dtype == DType::Q6_K};
    if ((q6[0] && !q6[1]) || (q6[1] && !q6[2]))
      return "q_proj/k_proj/v_proj's Q4_K rows before their Q6_K ones (layer " + std::to_string(i) + ")";
    if (l[Role::WGate].dtype != l[Role::WUp].dtype)
      return "gate_proj and up_proj in one format (layer " + std::to_string(i) + ")";
  }
  return "";
}

// How a model of block-quantized matrices runs. Q8_0 runs as stored when every matrix is
// Q8_0 and the model is large enough for the bytes to matter: widened to bf16 a small model's
// persistent step is as fast (H200, random Qwen2.5-Coder shapes, decode ms/token as stored, a
// kernel per op, against widened: 0.5B (525 MB of Q8_0) 0.833 / 0.823, 1.5B 1.555 / 1.654, 7B
// 4.147 / 4.317). Q4_K/Q6_K run as stored at any size when the K-quant kernels can read their
// layout. As stored, a single-token step runs the persistent kernel or a kernel per op,
// whichever is faster (choose_decode_step). options.require names the path: quantized_kernels
// as stored; persistent_step as stored when the persistent step reads the matrices' shapes
// (block_step_misfit), else widened. Widening for a format, layout or fp8 the kernels cannot
// take is a warning; for the size or the persistent step, a choice.
Quantized quantized_run(const ModelWeights& w, const BackendOptions& options) {
  const std::string formats = weight_formats(w);
  const auto required = [&](const char* name) {
    return std::find(options.require.begin(), options.require.end(), name) != options.require.end();
  };
  const bool kquant = formats == "q4_k" || formats == "q6_k" || formats == "q4_k+q6_k" || formats == "q6_k+q4_k";
  const auto widened = [&](const std::string& why, bool warn) { return Quantized{false, why, warn}; };
  if (!kquant && formats != "q8_0")
    return widened("the " + formats +
                       " matrices run widened to bf16 (the CUDA kernels read Q8_0 blocks, every matrix Q8_0, and "
                       "Q4_K/Q6_K blocks, every matrix one of the two)",
                   true);
  if (const std::string misfit = kquant ? kquant_misfit(w) : ""; !misfit.empty())
    return widened("the " + formats + " matrices run widened to bf16 (the K-quant kernels need " + misfit + ")", true);
  if (options.fp8_matrices || options.fp8_lm_head)
    return widened("the " + formats +
                       " matrices are widened to bf16 and quantized to fp8 from there (options.weights/lm_head fp8)",
                   true);
  if (required("persistent_step") && !required("quantized_kernels")) {
    DecodeStep shape;  // the persistent step as it would read these matrices
    shape.dtype = shape.head_dtype = shape.embed_dtype = kquant ? DType::Q4_K : DType::Q8_0;
    shape.hidden = w.config.hidden_size;
    shape.heads = w.config.num_heads;
    shape.head_dim = w.config.head_dim;
    shape.intermediate = w.config.intermediate_size;
    if (const std::string misfit = block_step_misfit(shape); !misfit.empty())
      return widened("the " + formats + " matrices run widened to bf16 for the persistent step, which needs " + misfit +
                         " (options.require persistent_step)",
                     false);
  }
  if (!kquant && w.weight_bytes < kQ8AsStoredBytes && !required("quantized_kernels"))
    return widened("the q8_0 matrices (" + std::to_string(w.weight_bytes >> 20) +
                       " MiB) run widened to bf16: below 1 GiB the persistent bf16 step is as fast (options.require "
                       "quantized_kernels runs them as stored)",
                   false);
  return {true,
          kquant ? formats + " matrices read as stored by the CUDA K-quant kernels"
                 : "q8_0 matrices read as stored by the CUDA block kernels",
          false};
}

}  // namespace

std::unique_ptr<CudaBackend> make_cuda_backend(std::shared_ptr<const ModelWeights> weights,
                                               const BackendOptions& options) {
  if (!has_quantized_matrix(*weights)) return std::make_unique<CudaBackendImpl>(std::move(weights), options, Quantized{});
  const Quantized q = quantized_run(*weights, options);
  if (!q.as_stored) return std::make_unique<CudaBackendImpl>(with_bf16_matrices(std::move(weights)), options, q);
  return std::make_unique<CudaBackendImpl>(std::move(weights), options, q);
}

// runtime/ reaches this backend through its entry (runtime/backend.h), never this header.
extern const BackendEntry cuda_backend_entry = {
    "cuda", cuda_available,
    [](std::shared_ptr<const ModelWeights> weights, const BackendOptions& options) -> std::unique_ptr<Backend> {
      return make_cuda_backend(std::move(weights), options);
    },
    run_cuda_bench};

}  // namespace runahead
