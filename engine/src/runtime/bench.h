#pragma once
// `runahead-engine bench`: prefill and decode speed of one backend on one model, with
// this machine's memory read bandwidth measured in the same run as the decode bound.

namespace runahead {

// argv[0, argc) are the arguments that follow `bench`:
//   --model DIR | --random-shape qwen2.5-coder-0.5b|1.5b|7b
//   [--ctx N (prefill length, default 512)] [--tokens N (decode steps, default 32)]
//   [--threads N (default: one per physical core)] [--json] | --help
// Prints a report (or one JSON object with --json) on stdout; returns the exit status:
// 0, 2 for bad arguments, 1 when the model cannot be loaded or run.
int run_bench(int argc, char** argv);

}  // namespace runahead
