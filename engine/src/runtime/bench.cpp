#include "runtime/bench.h"

#include <string>
#include <vector>

#include "runtime/backend.h"

namespace runahead {

const char* const kBenchUsage =
    "usage: runahead-engine bench (--model DIR|FILE.gguf | --random-shape qwen2.5-coder-0.5b|1.5b|7b)\n"
    "                             [--ctx N] [--tokens N] [--threads N] [--weights auto|q8_0|q4_k_m] [--json]\n"
    "       runahead-engine bench --backend cuda (--model DIR | --random-shape ...)\n"
    "                             [--ctx N] [--tokens N] [--prefill N] [--reps N]\n"
    "                             [--weights auto|fp8|q8_0|q4_k_m] [--json]\n";

int run_bench(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << kBenchUsage;
      return 0;
    }
  }
  // --backend NAME hands the command to that backend's bench (its entry); the default is the CPU's.
  std::string name = "cpu";
  std::vector<char*> rest(argv, argv + argc);
  for (int i = 0; i + 1 < argc; ++i) {
    if (std::string(argv[i]) != "--backend") continue;
    name = argv[i + 1];
    if (name == "cpu") rest.erase(rest.begin() + i, rest.begin() + i + 2);  // the CPU bench takes no --backend
    break;
  }
  const BackendEntry* entry = find_backend(name);
  if (!entry) {
    if (name == "cuda") std::cerr << "bench: this engine was built without CUDA\n";
    else std::cerr << "bench: --backend expects cpu or cuda, got '" << name << "'\n" << kBenchUsage;
    return name == "cuda" ? 1 : 2;
  }
  return entry->bench(int(rest.size()), rest.data());
}

}  // namespace runahead
