// The CPU backend's `runahead-engine bench` (its BackendEntry::bench): prefill and decode
// speed, with this machine's read bandwidth measured in the same run as the decode bound.
#include "runtime/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu/read_bandwidth.h"
#include "cpu/simd/kernels.h"
#include "cpu/thread_pool.h"
#include "runtime/cpus.h"
#include "model/error.h"
#include "model/quantize.h"
#include "model/weights.h"
#include "runtime/backend.h"

namespace runahead {
namespace {

struct BenchArgs {
  std::string model;  // a folder, or empty with random_shape
  std::string random_shape;
  int ctx = 512;
  int tokens = 32;
  int threads = 0;
  std::string weights = "auto";  // --weights: "auto" (as stored), or quantized at load: "q8_0", "q4_k_m"
  bool json = false;
};


// Throws std::invalid_argument naming the bad argument.
BenchArgs parse_args(int argc, char** argv) {
  BenchArgs a;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto positive = [&](int& i) {
    const std::string flag = argv[i], v = value(i);
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(v, &used);
    } catch (const std::exception&) {
    }
    if (used != v.size() || n < 1) throw std::invalid_argument(flag + " expects a positive integer, got '" + v + "'");
    return n;
  };
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--model") a.model = value(i);
    else if (arg == "--random-shape") a.random_shape = value(i);
    else if (arg == "--ctx") a.ctx = positive(i);
    else if (arg == "--tokens") a.tokens = positive(i);
    else if (arg == "--threads") a.threads = positive(i);
    else if (arg == "--weights") {
      a.weights = value(i);
      if (a.weights != "auto" && !quantizes_at_load(a.weights))
        throw std::invalid_argument("--weights expects auto, q8_0 or q4_k_m, got '" + a.weights + "'");
    }
    else if (arg == "--json") a.json = true;
    else throw std::invalid_argument("unknown argument '" + arg + "'");
  }
  if (a.model.empty() == a.random_shape.empty()) {
    throw std::invalid_argument("give exactly one of --model and --random-shape");
  }
  return a;
}

// VmRSS of /proc/self/status (resident now, not the peak), in bytes; 0 if unknown.
size_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return size_t(std::stoull(line.substr(6))) * 1024;
  }
  return 0;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::json bench(const BenchArgs& a) {
  auto weights = std::make_shared<ModelWeights>(
      a.model.empty() ? random_model(a.random_shape) : load_model(a.model));
  double quantize_s = 0;
  if (quantizes_at_load(a.weights)) {
    const auto start = std::chrono::steady_clock::now();
    weights = std::make_shared<ModelWeights>(quantize_for_option(*weights, a.weights));
    quantize_s = seconds_since(start);
  }
  const ModelConfig& c = weights->config;
  BackendOptions options;
  options.threads = a.threads;
  options.context_length = a.ctx + a.tokens;
  auto backend = make_cpu_backend(weights, options);
  const nlohmann::json described = backend->describe();
  const int threads = described.at("threads").get<int>();

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> token(0, c.vocab_size - 1);
  std::vector<int32_t> prompt(size_t(a.ctx));
  for (int32_t& t : prompt) t = token(rng);
  std::vector<float> logits;

  auto start = std::chrono::steady_clock::now();
  backend->forward(prompt, 1, logits);
  const double prefill_s = seconds_since(start);

  start = std::chrono::steady_clock::now();
  for (int i = 0; i < a.tokens; ++i) {
    const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    backend->forward(std::span<const int32_t>(&next, 1), 1, logits);
  }
  const double decode_ms = seconds_since(start) * 1000.0 / a.tokens;
  const size_t rss = resident_bytes();
  backend.reset();

  // After the model is released, so the probe's 1 GiB does not add to its memory.
  ThreadPool pool(threads);
  const double bandwidth = read_bandwidth(pool, size_t(1) << 30, 5);
  const double bound_ms = double(weights->weight_bytes) / bandwidth * 1000.0;

  return {{"backend", described.at("backend")},
          {"simd", described.at("simd")},
          {"threads", threads},
          {"model", weights->source},
          {"shape", a.random_shape.empty() ? c.architecture : a.random_shape},
          {"dtype", dtype_name(weights->dtype)},
          {"weights", weight_formats(*weights)},
          {"quantize_s", quantize_s},
          {"parameters", weights->parameters},
          {"weight_bytes", weights->weight_bytes},
          {"prefill_tokens", a.ctx},
          {"prefill_ms", prefill_s * 1000.0},
          {"prefill_tokens_per_s", a.ctx / prefill_s},
          {"decode_tokens", a.tokens},
          {"decode_ms_per_token", decode_ms},
          {"read_bandwidth_gb_s", bandwidth / 1e9},
          {"bound_ms_per_token", bound_ms},
          {"bound_ratio", bound_ms / decode_ms},
          {"rss_bytes", rss},
          {"rss_kind", "VmRSS after decode"},
          {"optimizations", described.value("optimizations", nlohmann::json::object())}};
}

void print_report(const nlohmann::json& r) {
  std::printf("model    %s (%s, %.1f MB of weights read per token)\n",
              r["model"].get<std::string>().c_str(), r["weights"].get<std::string>().c_str(),
              r["weight_bytes"].get<double>() / 1e6);
  if (r["quantize_s"].get<double>() > 0)
    std::printf("quantize %.2f s at load (%u hardware threads)\n", r["quantize_s"].get<double>(),
                std::thread::hardware_concurrency());
  std::printf("backend  %s, %s, %d threads\n", r["backend"].get<std::string>().c_str(),
              r["simd"].get<std::string>().c_str(), r["threads"].get<int>());
  std::printf("prefill  %d tokens in %.0f ms: %.1f tokens/s\n", r["prefill_tokens"].get<int>(),
              r["prefill_ms"].get<double>(), r["prefill_tokens_per_s"].get<double>());
  std::printf("decode   %.2f ms/token over %d tokens; bound %.2f ms/token at %.2f GB/s read "
              "bandwidth: %.0f%% of the bound\n",
              r["decode_ms_per_token"].get<double>(), r["decode_tokens"].get<int>(),
              r["bound_ms_per_token"].get<double>(), r["read_bandwidth_gb_s"].get<double>(),
              100.0 * r["bound_ratio"].get<double>());
  std::printf("memory   %.1f MB resident (VmRSS after decode)\n", r["rss_bytes"].get<double>() / 1e6);
}

}  // namespace

int run_cpu_bench(int argc, char** argv) {
  return bench_main(argc, argv, kBenchUsage, parse_args, bench, print_report);
}

}  // namespace runahead
