// `runahead-engine bench --backend cuda`: decode ms/token at a given context beside the
// bound from the weight bytes and the device-to-device copy bandwidth measured in the same
// run, prefill time, and the time of each op family of the decode step (the backend's step
// part by part, through cuda/step_parts.h: the profiling lives here, not in the backend).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/cuda_backend.h"
#include "cuda/device_memory.h"
#include "cuda/step_parts.h"
#include "cuda/trace.h"
#include "model/arch.h"
#include "model/error.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "runtime/bench.h"
#include "runtime/session.h"

namespace runahead {
namespace {

using namespace cuda;

struct CudaBenchArgs {
  std::string model, random_shape;
  int ctx = 512, tokens = 256, prefill = 2048, reps = 200;
  bool json = false;
  bool fp8_matrices = false, fp8_lm_head = false;  // --weights fp8, --lm-head fp8 (the load options)
  std::string quantize;  // --weights q8_0 | q4_k_m: the matrices quantized on the host (model/quantize.h)
  std::string agreement;  // --agreement FILE: token ids (separated by commas or whitespace) of real text
  std::string timeline;   // --timeline FILE: token ids of a prompt for the step loop's timeline
  std::string speculation = "off,lookup,auto";  // --speculation: the modes --timeline runs
  std::string trace_out;  // --trace-out FILE: the blocks of a few decode steps' kernels (trace.h), as CSV
};

constexpr const char* kUsage =
    "usage: runahead-engine bench --backend cuda (--model DIR | --random-shape qwen2.5-coder-0.5b|1.5b|7b)\n"
    "                             [--ctx N] [--tokens N] [--prefill N] [--reps N] [--weights auto|fp8|q8_0|q4_k_m]\n"
    "                             [--lm-head auto|fp8] [--agreement IDS_FILE] [--json]\n"
    "                             [--timeline IDS_FILE [--speculation off,lookup,auto]] [--trace-out CSV_FILE]\n"
    "--agreement: instead of timing, the top-1 agreement of the fp8 options with the model as stored,\n"
    "teacher-forced over the file's tokens (every position's argmax, both on the device).\n"
    "--timeline: the engine's own step loop (a loaded session, greedy, --tokens tokens after the file's\n"
    "prompt) in each speculation mode, with the device's idle time between consecutive steps.\n"
    "--trace-out: also write when each block of each kernel of 4 decode steps started, passed its wait\n"
    "for the kernel before and left (a build with -DRUNAHEAD_CUDA_TRACE=ON; engine/bench/cuda/trace_step.py\n"
    "reads it).\n";

CudaBenchArgs parse(int argc, char** argv) {
  CudaBenchArgs a;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto count = [&](int& i) {
    const std::string flag = argv[i], v = value(i);
    size_t used = 0;
    int n = -1;
    try {
      n = std::stoi(v, &used);
    } catch (const std::exception&) {
    }
    if (used != v.size() || n < 0) throw std::invalid_argument(flag + " expects a count, got '" + v + "'");
    return n;
  };
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--backend") {
      if (value(i) != "cuda") throw std::invalid_argument("this bench runs --backend cuda only");
    } else if (arg == "--model") a.model = value(i);
    else if (arg == "--random-shape") a.random_shape = value(i);
    else if (arg == "--ctx") a.ctx = std::max(1, count(i));
    else if (arg == "--tokens") a.tokens = std::max(1, count(i));
    else if (arg == "--prefill") a.prefill = count(i);
    else if (arg == "--reps") a.reps = std::max(1, count(i));
    else if (arg == "--json") a.json = true;
    else if (arg == "--agreement") a.agreement = value(i);
    else if (arg == "--timeline") a.timeline = value(i);
    else if (arg == "--speculation") a.speculation = value(i);
    else if (arg == "--trace-out") {
      a.trace_out = value(i);
      if (!trace_built())
        throw std::invalid_argument("--trace-out needs an engine built with the kernel trace (cmake -DRUNAHEAD_CUDA_TRACE=ON)");
    }
    else if (arg == "--weights" || arg == "--lm-head") {
      const std::string v = value(i);
      const bool quantize = arg == "--weights" && quantizes_at_load(v);
      if (v != "auto" && v != "fp8" && !quantize)
        throw std::invalid_argument(arg + " expects auto or fp8" + (arg == "--weights" ? ", q8_0 or q4_k_m" : "") +
                                    ", got '" + v + "'");
      (arg == "--weights" ? a.fp8_matrices : a.fp8_lm_head) = v == "fp8";
      if (arg == "--weights") a.quantize = quantize ? v : "";
    } else throw std::invalid_argument("unknown argument '" + arg + "'");
  }
  if (a.model.empty() == a.random_shape.empty())
    throw std::invalid_argument("give exactly one of --model and --random-shape");
  return a;
}

// Bytes per second of a device-to-device copy of a large buffer, counting bytes read and
// written; the best of several copies.
double copy_bandwidth(size_t bytes) {
  cuda::DeviceBuffer a(bytes), b(bytes);
  cuda::check_cuda(cudaMemset(a.get(), 1, bytes), "cudaMemset");
  cudaEvent_t begin, end;
  cuda::check_cuda(cudaEventCreate(&begin), "cudaEventCreate");
  cuda::check_cuda(cudaEventCreate(&end), "cudaEventCreate");
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    cuda::check_cuda(cudaEventRecord(begin), "cudaEventRecord");
    cuda::check_cuda(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    cuda::check_cuda(cudaEventRecord(end), "cudaEventRecord");
    cuda::check_cuda(cudaEventSynchronize(end), "copy");
    float ms = 0;
    cuda::check_cuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    if (i > 0) best = std::max(best, 2.0 * double(bytes) / (ms * 1e-3));
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return best;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The mean ms of one greedy decode step over `steps` graph replays queued back to back (the KV
// cache grows by `steps`).
double time_decode_steps(CudaBackend& backend, int steps) {
  StepParts& p = backend.step_parts();
  const int capacity = backend.context_length();
  steps = std::min(steps, capacity - backend.kv_len());
  if (steps <= 0) return 0.0;
  const cudaGraphExec_t step = p.greedy_step_graph();
  p.launch_graph(step);  // warm: the first replay uploads the graph
  check_cuda(cudaStreamSynchronize(p.stream()), "decode warm-up");
  const int start = backend.kv_len();
  p.set_position(start);
  cudaEvent_t begin, end;
  check_cuda(cudaEventCreate(&begin), "cudaEventCreate");
  check_cuda(cudaEventCreate(&end), "cudaEventCreate");
  check_cuda(cudaEventRecord(begin, p.stream()), "cudaEventRecord");
  for (int i = 0; i < steps; ++i) p.launch_graph(step);
  check_cuda(cudaEventRecord(end, p.stream()), "cudaEventRecord");
  check_cuda(cudaEventSynchronize(end), "decode steps");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  p.set_position(start + steps);  // where the replays left the device position
  return ms / steps;
}

// The blocks of `steps` greedy decode steps replayed back to back, one CSV row each (trace.h): the
// kernel, block, multiprocessor, and when it started, passed its pdl_wait and left, in ns from the
// first start (waited -1 where the block's thread 0 did not wait). The KV cache grows by `steps`.
void write_trace(CudaBackend& backend, const std::string& file, int steps) {
  StepParts& p = backend.step_parts();
  const cudaGraphExec_t step = p.greedy_step_graph();
  const int start = backend.kv_len();
  if (start + steps > backend.context_length()) throw EngineError("usage", "no room in the KV cache for the trace's steps");
  std::ofstream out(file);
  if (!out) throw EngineError("usage", "cannot write the trace to " + file);
  trace_begin(1u << 20);
  for (int i = 0; i < steps; ++i) p.launch_graph(step);
  unsigned dropped = 0;
  const std::vector<TraceRecord> records = trace_end(dropped);
  p.set_position(start + steps);
  if (dropped > 0) throw EngineError("cuda_error", "the trace dropped " + std::to_string(dropped) + " records");
  uint64_t t0 = UINT64_MAX;
  for (const TraceRecord& r : records) t0 = std::min(t0, r.start);
  const auto at = [&](uint64_t t) { return t ? int64_t(t - t0) : int64_t(-1); };
  out << "kernel,block,sm,start_ns,waited_ns,end_ns";
  for (int m = 1; m <= kTraceMarks; ++m) out << ",mark" << m << "_ns";
  out << '\n';
  for (const TraceRecord& r : records) {
    out << trace_tag_name(TraceTag(r.tag)) << ',' << r.block << ',' << r.sm << ',' << r.start - t0 << ','
        << at(r.waited) << ',' << r.end - t0;
    for (uint64_t m : r.mark) out << ',' << at(m);
    out << '\n';
  }
  if (!out) throw EngineError("usage", "cannot write the trace to " + file);
}

// verify(k): the mean ms of a greedy verify step of 1 + k tokens (the pending token and k drafted
// ones, what the token buffer holds: drafts the target rarely keeps), k = 0 .. kMaxVecTokens - 1,
// each width's graph replayed `reps` times back to back from position `ctx` (after one warm-up replay); beside the plain
// single-token step that decode replays, timed the same way.
nlohmann::json time_verify_steps(CudaBackend& backend, int ctx, int reps) {
  StepParts& p = backend.step_parts();
  const auto timed = [&](cudaGraphExec_t g) {
    p.set_position(ctx);
    return p.time_graph(g, reps);  // a warm-up replay, then `reps` (each moves the position on by what it kept)
  };
  const double plain = timed(p.greedy_step_graph());
  nlohmann::json steps = nlohmann::json::array();
  for (int n = 1; n <= kMaxVecTokens; ++n) {
    const double ms = timed(p.verify_step_graph(n));
    steps.push_back({{"k", n - 1}, {"ms", ms}, {"vs_plain", ms / plain}});
  }
  p.set_position(ctx);
  return {{"plain_ms", plain}, {"reps", reps}, {"steps", steps}};
}

// Bytes of matrix t as the device keeps it in dtype d: an fp8 matrix adds a 4-byte scale per
// row; Q8_0 and K-quants (d Q4_K: Q4_K and Q6_K rows) are read as stored; a block format the
// device widens is counted as its bf16.
double device_matrix_bytes(const Tensor& t, DType d) {
  if (d == DType::F8_E4M3) return double(t.numel()) + 4.0 * double(t.rows());
  if (d == DType::Q4_K && (t.dtype == DType::Q4_K || t.dtype == DType::Q6_K)) return double(t.nbytes());
  return d == t.dtype ? double(t.nbytes()) : double(t.numel()) * double(dtype_size(d));  // widened to d
}

// The time of each op family of the decode step alone: its launches for every layer captured
// in a graph of their own, replayed `reps` times.
nlohmann::json profile_decode_ops(CudaBackend& backend, int reps) {
  StepParts& p = backend.step_parts();
  const ModelWeights& w = p.weights();
  const ModelConfig& c = w.config;
  // The bytes of the matrices of `roles` over every layer, as the device keeps them.
  const auto layer_bytes = [&](std::initializer_list<Role> roles) {
    double bytes = 0;
    for (const LayerWeights& l : w.layers)
      for (const Role r : roles) bytes += device_matrix_bytes(l[r], p.layer_dtype());
    return bytes;
  };
  const int L = c.num_layers;
  const int kvd = c.num_kv_heads * c.head_dim;
  struct Family {
    std::string name;
    std::function<void()> enqueue;
    double bytes;
  };
  // One family per op of the layer, its launches for every layer together.
  // One row of the embedding (bf16 beside fp8 layers).
  const DType embed_dtype = p.layer_dtype() == DType::F8_E4M3 ? DType::BF16 : p.layer_dtype();
  std::vector<Family> families = {{"embedding_lookup", [&] { p.enqueue_embedding(1); },
                                   device_matrix_bytes(w.embed, embed_dtype) / double(c.vocab_size)}};
  for (const Op& op : architecture_of(c).step) {
    double bytes = 0;
    switch (op.kind) {
      case OpKind::RmsnormQkvRopeAppend: bytes = layer_bytes({Role::Wq, Role::Wk, Role::Wv}); break;
      case OpKind::Attention: bytes = double(L) * 2.0 * backend.kv_len() * kvd * 4; break;
      case OpKind::MatmulResidual: bytes = layer_bytes({op.weight}); break;
      case OpKind::RmsnormGateUpSwiglu: bytes = layer_bytes({Role::WGate, Role::WUp}); break;
    }
    const std::string name = std::string(op_name(op.kind)) +
                             (op.kind == OpKind::MatmulResidual ? std::string(" (") + role_name(op.weight) + ")" : "");
    families.push_back({name, [&p, op, L] { for (int l = 0; l < L; ++l) p.enqueue_op(op, l, 1); }, bytes});
  }
  families.push_back({"rmsnorm_lm_head_argmax", [&] { p.enqueue_head(0, 1, StepEnd{}); },
                      device_matrix_bytes(w.lm_head, p.head_dtype())});
  nlohmann::json out = nlohmann::json::array();
  for (const Family& f : families) {
    GraphExec g = p.capture(f.enqueue);
    const double ms = p.time_graph(g.get(), reps);
    out.push_back({{"op", f.name},
                   {"launches", f.name == std::string("embedding_lookup") ||
                                        f.name == std::string("rmsnorm_lm_head_argmax")
                                    ? 1
                                    : L},
                   {"us_per_step", ms * 1000.0},
                   {"bytes_per_step", f.bytes},
                   {"gb_per_s", f.bytes / (ms * 1e-3) / 1e9}});
  }
  check_cuda(cudaStreamSynchronize(p.stream()), "profile");
  return out;
}

// The persistent decode step (decode_step.h) phase by phase, summed over layers: block 0's clock
// between grid barriers, scaled to the launch's time, averaged over `reps` launches (empty when
// the model runs a kernel per op).
nlohmann::json profile_decode_step(CudaBackend& backend, int reps) {
  StepParts& p = backend.step_parts();
  const DecodeStepPlan& plan = p.persistent_plan();
  if (!plan.refused.empty()) return {};
  const ModelConfig& c = backend.config();
  const int L = c.num_layers, stamps = decode_step_stamps(L);
  DeviceBuffer clock(size_t(stamps) * sizeof(long long));
  std::vector<long long> host(stamps);
  const char* names[] = {"qkv (rmsnorm, matvec, bias)", "attention (rope, kv append, split merge)",
                         "o_proj + residual", "gate_up (rmsnorm, matvec)", "down (swiglu, matvec) + residual",
                         "lm_head + argmax"};
  std::vector<double> work(6, 0.0), wait(6, 0.0);
  cudaEvent_t begin, end;
  check_cuda(cudaEventCreate(&begin), "cudaEventCreate");
  check_cuda(cudaEventCreate(&end), "cudaEventCreate");
  double total_ms = 0;
  for (int r = 0; r <= reps; ++r) {  // the first launch warms up
    check_cuda(cudaEventRecord(begin, p.stream()), "cudaEventRecord");
    p.enqueue_persistent_step(StepEnd{}, clock.get<long long>());  // no StepEnd: the same step again
    check_cuda(cudaEventRecord(end, p.stream()), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(end), "profile decode step");
    if (r == 0) continue;
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    check_cuda(cudaMemcpy(host.data(), clock.get(), host.size() * sizeof(long long), cudaMemcpyDeviceToHost),
               "cudaMemcpy (stamps)");
    // Block 0's clock splits the launch's time between the phases it went through: the
    // work up to a phase's grid barrier, then the wait in it.
    const double us_per_cycle = ms * 1e3 / double(host[stamps - 1] - host[0]);
    for (int k = 0; k + 1 < stamps; ++k) {
      const double us = double(host[k + 1] - host[k]) * us_per_cycle;
      if (k == stamps - 2) work[5] += us;
      else (k % 2 == 0 ? work : wait)[(k / 2) % 5] += us;
    }
    total_ms += ms;
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  nlohmann::json phases = nlohmann::json::array();
  for (int p = 0; p < 6; ++p)
    phases.push_back({{"phase", names[p]}, {"us_per_step", (work[p] + wait[p]) / reps},
                      {"work_us_per_step", work[p] / reps}, {"barrier_us_per_step", wait[p] / reps},
                      {"barriers", p < 5 ? L : 0}});
  return {{"launch_us", total_ms / reps * 1e3}, {"stages", plan.stages}, {"stage_kb", plan.stage_bytes / 1024}, {"blocks", plan.blocks},
          {"phases", phases}};
}

// The time of each op kind of an n-token tensor-core prefill alone (the cache is reset).
nlohmann::json profile_prefill_ops(CudaBackend& backend, int n) {
  StepParts& p = backend.step_parts();
  const ModelConfig& c = backend.config();
  const int capacity = backend.context_length();
  if (p.weights().dtype != DType::BF16 || n < kTensorCoreMinTokens || n > std::min(kPrefillChunk, capacity)) return {};
  p.set_position(0);
  const double H = c.hidden_size, qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
  const double layer_params = (qd + 2 * kvd) * H + H * qd + 3.0 * c.intermediate_size * H;
  const double flops = 2.0 * n * layer_params * c.num_layers;
  nlohmann::json out = nlohmann::json::array();
  const std::pair<const char*, unsigned> kinds[] = {{"gemm_bf16 (all projections)", kPrefillGemm},
                                                    {"attention_prefill", kPrefillAttention},
                                                    {"norms, rope, swiglu, conversions", kPrefillOther},
                                                    {"all", kAllPrefillOps}};
  for (const auto& [name, ops] : kinds) {
    p.enqueue_prefill_layers(n, ops);  // warm
    cudaEvent_t begin, end;
    check_cuda(cudaEventCreate(&begin), "cudaEventCreate");
    check_cuda(cudaEventCreate(&end), "cudaEventCreate");
    check_cuda(cudaEventRecord(begin, p.stream()), "cudaEventRecord");
    p.enqueue_prefill_layers(n, ops);
    check_cuda(cudaEventRecord(end, p.stream()), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(end), "profile prefill");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    nlohmann::json row = {{"op", name}, {"ms", ms}};
    if (ops == kPrefillGemm) row["tflop_per_s"] = flops / (ms * 1e-3) / 1e12;
    out.push_back(row);
  }
  p.set_position(0);
  return out;
}

// Bytes of weights a decode step reads as the device keeps them: the layers' matrices and
// lm_head as device_matrix_bytes counts them, norms and biases as stored; the embedding row is
// left out, as ModelWeights::weight_bytes leaves it.
double device_weight_bytes(const ModelWeights& w, StepParts& p) {
  double bytes = device_matrix_bytes(w.lm_head, p.head_dtype()) + double(w.final_norm.nbytes());
  for (const LayerWeights& l : w.layers)
    for (const Tensor& t : l.by_role)
      if (!t.empty()) bytes += t.shape.size() == 2 ? device_matrix_bytes(t, p.layer_dtype()) : double(t.nbytes());
  return bytes;
}

// The token ids of `path`, separated by commas or whitespace (brackets allowed).
std::vector<int32_t> read_ids(const std::string& flag, const std::string& path, int vocab) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(flag + ": cannot read " + path);
  std::vector<int32_t> ids;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream numbers(std::regex_replace(text, std::regex("[,\\[\\]]"), " "));
  for (long long id; numbers >> id;) {
    if (id < 0 || id >= vocab)
      throw std::invalid_argument(flag + ": token id " + std::to_string(id) + " is outside the vocabulary");
    ids.push_back(int32_t(id));
  }
  if (ids.empty()) throw std::invalid_argument(flag + ": no token ids in " + path);
  return ids;
}

// The step loop as the engine runs it (Session, Generator, Speculator on the CUDA backend), one
// greedy request of a.tokens tokens per speculation mode, after a warm-up request: ms/token,
// steps, and the device's idle time between consecutive steps (CudaBackend::step_gaps_us).
nlohmann::json timeline(const CudaBenchArgs& a) {
  if (a.model.empty()) throw std::invalid_argument("--timeline needs --model");
  nlohmann::json out = {{"model", a.model}, {"modes", nlohmann::json::array()}};
  std::stringstream modes(a.speculation);
  for (std::string mode; std::getline(modes, mode, ',');) {
    LoadOptions o;
    o.backend = "cuda";
    o.speculation.mode = mode;
    auto session = Session::open(a.model, o);
    auto* cuda = dynamic_cast<CudaBackend*>(&session->generator().backend());
    if (!cuda) throw std::invalid_argument("--timeline: the session did not load on the CUDA backend");
    GenerateRequest r;
    r.prompt = read_ids("--timeline", a.timeline, session->weights().config.vocab_size);
    r.max_tokens = a.tokens;
    const std::atomic<bool> never{false};
    session->generator().generate(r, [](auto, auto) {}, never);  // warm: graphs, the drafters' first catch-up
    session->generator().rollback(0);
    cuda->record_timeline(true);
    const HostWaits before = cuda->host_waits();
    const GenerateResult result = session->generator().generate(r, [](auto, auto) {}, never);
    const HostWaits after = cuda->host_waits();
    std::vector<double> gaps = cuda->step_gaps_us();
    cuda->record_timeline(false);
    std::sort(gaps.begin(), gaps.end());
    const auto at = [&](double q) { return gaps.empty() ? 0.0 : gaps[size_t(q * double(gaps.size() - 1))]; };
    double sum = 0;
    int over = 0;
    for (double g : gaps) sum += g, over += g > 5.0;
    out["modes"].push_back({{"speculation", mode},
                            {"tokens", result.stats.tokens},
                            {"steps", result.stats.steps},
                            {"decode_ms_per_token", result.stats.decode_ms_per_token},
                            {"gaps", gaps.size()},
                            {"gap_us_p50", at(0.5)},
                            {"gap_us_p90", at(0.9)},
                            {"gap_us_max", at(1.0)},
                            {"gap_us_mean", gaps.empty() ? 0.0 : sum / double(gaps.size())},
                            {"gaps_over_5us", over},
                            {"host_waits", after.all - before.all},
                            {"drained_waits", after.drained - before.drained}});
  }
  return out;
}

// Top-1 agreement of the fp8 options with the weights as stored: every position of `ids`
// teacher-forced through both (one forward each, all rows), argmax against argmax.
nlohmann::json agreement(const CudaBenchArgs& a, std::shared_ptr<const ModelWeights> weights) {
  const std::vector<int32_t> ids = read_ids("--agreement", a.agreement, weights->config.vocab_size);
  BackendOptions stored;
  stored.context_length = int(ids.size()) + 8;
  BackendOptions fp8 = stored;
  fp8.fp8_matrices = a.fp8_matrices;
  fp8.fp8_lm_head = a.fp8_lm_head || !a.fp8_matrices;
  const int V = weights->config.vocab_size, n = int(ids.size());
  std::vector<float> reference, quantized;
  make_cuda_backend(weights, stored)->forward(ids, n, reference);
  auto backend = make_cuda_backend(weights, fp8);
  backend->forward(ids, n, quantized);
  int same = 0, next_in_text = 0, fp8_in_text = 0;
  for (int t = 0; t < n; ++t) {
    const auto top = [&](const std::vector<float>& l) {
      return int32_t(std::max_element(l.begin() + size_t(t) * V, l.begin() + size_t(t + 1) * V) - l.begin() -
                     size_t(t) * V);
    };
    const int32_t r = top(reference), q = top(quantized);
    same += r == q;
    if (t + 1 < n) next_in_text += r == ids[size_t(t) + 1], fp8_in_text += q == ids[size_t(t) + 1];
  }
  return {{"model", weights->source},
          {"positions", n},
          {"device_dtypes", std::string(dtype_name(backend->step_parts().layer_dtype())) + " layers, " +
                                dtype_name(backend->step_parts().head_dtype()) + " lm_head"},
          {"top1_agreement", double(same) / n},
          {"stored_top1_is_next_token", double(next_in_text) / std::max(1, n - 1)},
          {"fp8_top1_is_next_token", double(fp8_in_text) / std::max(1, n - 1)}};
}

nlohmann::json bench(const CudaBenchArgs& a) {
  if (!cuda_available()) throw EngineError("cuda_error", "no CUDA device is available");
  if (!a.timeline.empty()) return timeline(a);
  auto weights = std::make_shared<ModelWeights>(a.model.empty() ? random_model(a.random_shape) : load_model(a.model));
  if (!a.quantize.empty()) weights = std::make_shared<ModelWeights>(quantize_for_option(*weights, a.quantize));
  if (!a.agreement.empty()) return agreement(a, with_bf16_matrices(weights));
  const ModelConfig& c = weights->config;
  const double bandwidth = copy_bandwidth(size_t(2) << 30);

  BackendOptions options;
  // Room for the verify steps' replays too (each moves the position on by what it kept).
  options.context_length = std::max({a.ctx + a.tokens + 8, a.prefill, a.ctx + (a.reps + 1) * kMaxVecTokens + 8});
  options.fp8_matrices = a.fp8_matrices;
  options.fp8_lm_head = a.fp8_lm_head;
  auto backend = make_cuda_backend(weights, options);
  const double step_bytes = device_weight_bytes(*weights, backend->step_parts());
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = token(rng);
    return t;
  };
  std::vector<float> logits;

  // Prefill of --prefill tokens (the second of two runs), then of the decode context.
  double prefill_ms = 0;
  if (a.prefill > 0) {
    const auto prompt = random_tokens(a.prefill);
    for (int run = 0; run < 2; ++run) {
      backend->truncate(0);
      const auto start = std::chrono::steady_clock::now();
      backend->forward(prompt, 1, logits);
      prefill_ms = ms_since(start);
    }
  }
  backend->truncate(0);
  const auto context = random_tokens(a.ctx);
  auto start = std::chrono::steady_clock::now();
  backend->forward(context, 1, logits);
  const double ctx_prefill_ms = ms_since(start);
  const int32_t first = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());

  // Graph replays queued back to back: the device's time per step.
  const double graph_ms = time_decode_steps(*backend, a.tokens);
  if (!a.trace_out.empty()) write_trace(*backend, a.trace_out, 4);
  // The real loop: each token read by the host one step late.
  backend->truncate(a.ctx);
  int produced = 0;
  start = std::chrono::steady_clock::now();
  backend->decode(first, a.tokens, SamplingParams{}, [&](int32_t) { return ++produced < a.tokens; });
  const double loop_ms = ms_since(start) / std::max(produced, 1);
  backend->truncate(a.ctx);
  const nlohmann::json ops = profile_decode_ops(*backend, a.reps);
  double ops_us = 0;
  for (const auto& op : ops) ops_us += op["us_per_step"].get<double>();
  const nlohmann::json step = profile_decode_step(*backend, a.reps);
  const nlohmann::json prefill_ops = profile_prefill_ops(*backend, a.prefill);
  const nlohmann::json verify = time_verify_steps(*backend, a.ctx, a.reps);

  const double bound_ms = step_bytes / bandwidth * 1e3;
  return {{"backend", "cuda"},
          {"device", backend->describe()["device"]},
          {"model", weights->source},
          {"dtype", dtype_name(weights->dtype)},
          {"device_dtypes", std::string(dtype_name(backend->step_parts().layer_dtype())) + " layers, " +
                                dtype_name(backend->step_parts().head_dtype()) + " lm_head"},
          {"weight_bytes", step_bytes},
          {"copy_bandwidth_gb_s", bandwidth / 1e9},
          {"context", a.ctx},
          {"decode_tokens", a.tokens},
          {"decode_ms_per_token", graph_ms},
          {"decode_loop_ms_per_token", loop_ms},
          {"bound_ms_per_token", bound_ms},
          {"bound_ratio", bound_ms / graph_ms},
          {"prefill_tokens", a.prefill},
          {"prefill_ms", prefill_ms},
          {"context_prefill_ms", ctx_prefill_ms},
          {"ops", ops},
          {"ops_sum_us", ops_us},
          {"decode_step_phases", step},
          {"prefill_ops", prefill_ops},
          {"verify_steps", verify},
          {"optimizations", backend->describe()["optimizations"]}};
}

void print_report(const nlohmann::json& r) {
  if (r.contains("modes")) {
    std::printf("timeline  %s on the device, the engine's step loop (greedy), idle GPU between consecutive steps:\n",
                r["model"].get<std::string>().c_str());
    for (const auto& m : r["modes"])
      std::printf("  %-7s %4d tokens in %4d steps, %.4f ms/token; gap p50 %.1f us, p90 %.1f, max %.1f, mean %.1f; "
                  "%d of %d gaps over 5 us; host waits %lld (%lld with the device drained)\n",
                  m["speculation"].get<std::string>().c_str(), m["tokens"].get<int>(), m["steps"].get<int>(),
                  m["decode_ms_per_token"].get<double>(), m["gap_us_p50"].get<double>(),
                  m["gap_us_p90"].get<double>(), m["gap_us_max"].get<double>(), m["gap_us_mean"].get<double>(),
                  m["gaps_over_5us"].get<int>(), m["gaps"].get<int>(), m["host_waits"].get<long long>(),
                  m["drained_waits"].get<long long>());
    return;
  }
  if (r.contains("top1_agreement")) {
    std::printf("fp8 top-1 agreement  %s on the device (%s): %.2f%% of %d teacher-forced positions agree with the "
                "weights as stored; the next token of the text is the top-1 at %.2f%% (stored) and %.2f%% (fp8)\n",
                r["model"].get<std::string>().c_str(), r["device_dtypes"].get<std::string>().c_str(),
                100 * r["top1_agreement"].get<double>(), r["positions"].get<int>(),
                100 * r["stored_top1_is_next_token"].get<double>(), 100 * r["fp8_top1_is_next_token"].get<double>());
    return;
  }
  std::printf("model    %s (%s stored; on the device %s: %.1f MB of weights read per token) on %s\n",
              r["model"].get<std::string>().c_str(), r["dtype"].get<std::string>().c_str(),
              r["device_dtypes"].get<std::string>().c_str(), r["weight_bytes"].get<double>() / 1e6,
              r["device"].get<std::string>().c_str());
  std::printf("decode   %.3f ms/token at context %d (graph replays; %.3f in the host loop); bound %.3f ms/token at "
              "%.0f GB/s copy bandwidth: %.0f%% of the bound\n",
              r["decode_ms_per_token"].get<double>(), r["context"].get<int>(),
              r["decode_loop_ms_per_token"].get<double>(), r["bound_ms_per_token"].get<double>(),
              r["copy_bandwidth_gb_s"].get<double>(), 100.0 * r["bound_ratio"].get<double>());
  std::printf("prefill  %d tokens in %.2f ms; the %d-token context in %.2f ms\n", r["prefill_tokens"].get<int>(),
              r["prefill_ms"].get<double>(), r["context"].get<int>(), r["context_prefill_ms"].get<double>());
  const auto& o = r["optimizations"];
  std::printf("step     %s; prefill GEMM %s\n", o["decode_step"].get<std::string>().c_str(),
              o["prefill_gemm"].get<std::string>().c_str());
  const auto& step = r["decode_step_phases"];
  if (!step.empty()) {
    std::printf("persistent step (%d blocks, %d stages of %d KB), by phase over all layers (block 0's clock):\n",
                step["blocks"].get<int>(), step["stages"].get<int>(), step["stage_kb"].get<int>());
    for (const auto& p : step["phases"])
      std::printf("  %-42s %9.1f us/step  (work %7.1f, grid barrier %7.1f)\n", p["phase"].get<std::string>().c_str(),
                  p["us_per_step"].get<double>(), p["work_us_per_step"].get<double>(),
                  p["barrier_us_per_step"].get<double>());
    std::printf("  %-42s %9.1f us/step\n", "one launch", step["launch_us"].get<double>());
  }
  std::printf("per op family of the per-op kernels (verify steps; alone, all layers, one graph each):\n");
  for (const auto& op : r["ops"])
    std::printf("  %-30s %9.1f us/step  %8.1f MB  %7.0f GB/s\n", op["op"].get<std::string>().c_str(),
                op["us_per_step"].get<double>(), op["bytes_per_step"].get<double>() / 1e6, op["gb_per_s"].get<double>());
  std::printf("  %-30s %9.1f us/step (whole step %.1f us)\n", "sum", r["ops_sum_us"].get<double>(),
              r["decode_ms_per_token"].get<double>() * 1e3);
  const auto& verify = r["verify_steps"];
  std::printf("verify(k): a greedy verify step of 1 + k tokens at context %d (%d replays each), against the plain "
              "step's %.1f us:\n",
              r["context"].get<int>(), verify["reps"].get<int>(), verify["plain_ms"].get<double>() * 1e3);
  for (const auto& v : verify["steps"])
    std::printf("  k = %2d  %8.1f us  %5.2fx plain\n", v["k"].get<int>(), v["ms"].get<double>() * 1e3,
                v["vs_plain"].get<double>());
  if (!r["prefill_ops"].empty()) std::printf("prefill of %d tokens by op kind (alone):\n", r["prefill_tokens"].get<int>());
  for (const auto& op : r["prefill_ops"])
    std::printf("  %-34s %8.2f ms%s\n", op["op"].get<std::string>().c_str(), op["ms"].get<double>(),
                op.contains("tflop_per_s")
                    ? (" (" + std::to_string(int(op["tflop_per_s"].get<double>())) + " TFLOP/s)").c_str()
                    : "");
}

}  // namespace

int run_cuda_bench(int argc, char** argv) {
  return bench_main(argc, argv, kUsage, parse, bench, print_report);
}

}  // namespace runahead
