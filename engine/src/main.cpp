// runahead-engine: the protocol server (default), the benchmark, and a demo that
// prints a greedy continuation with per-token timings.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "model/error.h"
#include "protocol/messages.h"
#include "protocol/server.h"
#include "runtime/bench.h"
#include "runtime/session.h"
#include "runtime/version.h"

namespace {

using namespace runahead;

constexpr const char* kUsage =
    "usage: runahead-engine [serve]          serve PROTOCOL.md v1 on stdin/stdout\n"
    "       runahead-engine bench ...        benchmark (runahead-engine bench --help)\n"
    "       runahead-engine demo --model DIR|random:<shape> [--prompt-ids 1,2,3] [--tokens N] [--threads N]\n"
    "                                        [--speculation auto|off|lookup|mtp|draft] [--max-draft N]\n"
    "                                        greedy continuation, each token id with its ms, then the stats\n"
    "       runahead-engine --version | --help\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "runahead-engine: " << message << "\n" << kUsage;
  std::exit(2);
}

int parse_count(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const long value = std::stol(text, &used);
    if (used == text.size() && value >= 0 && value <= 1 << 30) return static_cast<int>(value);
  } catch (const std::exception&) {
  }
  usage_error(flag + ": expected a non-negative integer, got \"" + text + "\"");
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    ids.push_back(parse_count("--prompt-ids", text.substr(begin, comma - begin)));
    begin = comma + 1;
  }
  return ids;
}

int run_demo(int argc, char** argv) {
  std::string model;
  std::vector<int32_t> prompt;
  GenerateRequest request;
  request.max_tokens = 32;
  LoadOptions options;
  for (int i = 0; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error(flag + ": expected a value after it");
    const std::string value = argv[++i];
    if (flag == "--model") model = value;
    else if (flag == "--prompt-ids") request.prompt = parse_ids(value);
    else if (flag == "--tokens") request.max_tokens = parse_count(flag, value);
    else if (flag == "--threads") options.threads = parse_count(flag, value);
    else if (flag == "--speculation") options.speculation.mode = value;
    else if (flag == "--max-draft") options.speculation.max_draft = parse_count(flag, value);
    else usage_error("demo: unknown option " + flag);
  }
  if (model.empty()) usage_error("demo: --model is required");

  try {
    auto session = Session::open(model, options, [](const std::string& stage, int64_t done, int64_t total) {
      std::cerr << "\rloading: " << stage << " " << done << "/" << total << std::flush;
    });
    std::cerr << "\n";
    std::cout << session->report().dump(2) << "\n";
    if (request.prompt.empty()) {
      // Without a prompt, start from the model's BOS token (or token 0).
      const int bos = session->weights().config.bos_token_id;
      request.prompt = {bos >= 0 ? bos : 0};
    }
    const std::atomic<bool> never{false};
    const GenerateResult result = session->generator().generate(
        request,
        [](std::span<const int32_t> tokens, std::span<const double> ms) {
          for (size_t i = 0; i < tokens.size(); ++i) std::printf("token %d  %.2f ms\n", tokens[i], ms[i]);
          std::fflush(stdout);
        },
        never);
    nlohmann::json summary = stats_json(result.stats);
    summary["finish_reason"] = finish_reason_name(result.finish);
    std::cout << summary.dump(2) << std::endl;
    return 0;
  } catch (const EngineError& e) {
    std::cerr << "runahead-engine: " << error_message(e, nullptr).dump() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "serve";
  if (command == "--version") {
    std::cout << kEngineVersion << " (protocol " << kProtocolVersion << ")\n";
    return 0;
  }
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "bench") return run_bench(argc - 2, argv + 2);
  if (command == "demo") return run_demo(argc - 2, argv + 2);
  if (command == "serve") {
    // A client that goes away must not kill the engine mid-write; writes then fail and it exits.
    signal(SIGPIPE, SIG_IGN);
    return Server(STDIN_FILENO, STDOUT_FILENO).run();
  }
  usage_error("unknown command \"" + command + "\"");
}
