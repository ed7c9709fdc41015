// cuda-bench ARGS: runs what `runahead-engine bench --backend cuda ARGS` runs.
#include "cuda/cuda_backend.h"

int main(int argc, char** argv) { return runahead::run_cuda_bench(argc - 1, argv + 1); }
