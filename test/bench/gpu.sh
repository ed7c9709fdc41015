#!/usr/bin/env bash
# `npm run bench` on a GPU machine that has no Node (the device of engine/bench/cuda/): here,
# `bash test/bench/gpu.sh prepare` bundles the benchmark (esbuild, one file) and packs this
# machine's node binary into .devbench/ (git-ignored: add /.devbench/ to .git/info/exclude);
# there, with .devbench/ and .devdeps/ carried, `bash test/bench/gpu.sh run` builds the CUDA
# engine and runs the quick benchmark on it (no llama.cpp peer: node-llama-cpp is not carried).
# Outputs: $OUT/bench-gpu.{txt,json,md}. The H200 run of this session: test/bench/results/h200-quick.*
set -eu
case "${1:-}" in
  prepare)
    mkdir -p .devbench/x
    # .devbench/x/bench.mjs: two levels below the repository root, as test/bench/bench.mts is.
    npx esbuild test/bench/bench.mts --bundle --platform=node --format=esm --target=node20 \
      --outfile=.devbench/x/bench.mjs --external:node-llama-cpp \
      --banner:js="import { createRequire as __cr } from 'module'; import { fileURLToPath as __fu } from 'url'; import { dirname as __dn } from 'path'; const require = __cr(import.meta.url); const __filename = __fu(import.meta.url); const __dirname = __dn(__filename);"
    xz -T0 -6 -c "$(command -v node)" > .devbench/node.xz
    du -sh .devbench ;;
  run)
    OUT=${OUT:-$PWD/cuda-out}
    mkdir -p "$OUT"
    python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('.devbench/node.xz'), open('/tmp/node', 'wb'))"
    chmod +x /tmp/node
    ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DRUNAHEAD_TESTS=OFF)
    [ -d .devdeps ] && ARGS+=("-DCMAKE_PREFIX_PATH=$PWD/.devdeps")
    cmake -S engine -B /tmp/engine-bench "${ARGS[@]}" > "$OUT/build.txt" 2>&1
    ninja -C /tmp/engine-bench runahead-engine >> "$OUT/build.txt" 2>&1
    /tmp/node .devbench/x/bench.mjs --quick --no-peer --backend cuda --engine /tmp/engine-bench/runahead-engine \
      --json "$OUT/bench-gpu.json" --markdown "$OUT/bench-gpu.md" > "$OUT/bench-gpu.txt" 2> "$OUT/bench-gpu.err"
    cat "$OUT/bench-gpu.txt" ;;
  *) echo "usage: bash test/bench/gpu.sh prepare|run" >&2; exit 2 ;;
esac
