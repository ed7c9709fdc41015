#pragma once
// `runahead-engine bench`: prefill and decode speed of one backend on one model, with
// this machine's memory read bandwidth measured in the same run as the decode bound.
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/error.h"

namespace runahead {

// What every backend's bench does with its own parse / measure / print steps: bad
// arguments → usage and 2; an engine error → 1; else the report (or its JSON) and 0.
template <class Parse, class Measure, class Print>
int bench_main(int argc, char** argv, const char* usage, Parse parse, Measure measure, Print print) {
  decltype(parse(argc, argv)) args;
  try {
    args = parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "bench: " << e.what() << "\n" << usage;
    return 2;
  }
  try {
    const nlohmann::json report = measure(args);
    if (args.json) std::cout << report.dump() << std::endl;
    else print(report);
    return 0;
  } catch (const EngineError& e) {
    std::cerr << "bench: " << e.code << ": " << e.what() << "\n";
    return 1;
  }
}

// argv[0, argc) are the arguments that follow `bench`:
//   --model DIR | --random-shape qwen2.5-coder-0.5b|1.5b|7b
//   [--ctx N (prefill length, default 512)] [--tokens N (decode steps, default 32)]
//   [--threads N (default: one per physical core)] [--json] | --help
// Prints a report (or one JSON object with --json) on stdout; returns the exit status:
// 0, 2 for bad arguments, 1 when the model cannot be loaded or run.
int run_bench(int argc, char** argv);
extern const char* const kBenchUsage;

// The CPU backend's bench (engine/bench/backends/cpu_bench.cpp), its BackendEntry::bench.
int run_cpu_bench(int argc, char** argv);

}  // namespace runahead
