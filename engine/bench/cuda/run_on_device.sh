#!/usr/bin/env bash
# One call on a GPU machine: build the CUDA backend (standalone project beside this file),
# run its tests, compute-sanitizer memcheck on the tiny model, then the decode/prefill bench
# of the three Qwen2.5-Coder shapes. Everything lands in $OUT (default: ./cuda-out).
# Usage: engine/bench/cuda/run_on_device.sh  (from the repository root)
set -u
OUT=${OUT:-$PWD/cuda-out}
mkdir -p "$OUT"
ROOT=$PWD
DEPS=$ROOT/.devdeps
BUILD=/tmp/cuda-build
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
log "gpu: $(tail -1 "$OUT/gpu.txt")"
PREFIX=""
[ -d "$DEPS" ] && PREFIX="-DCMAKE_PREFIX_PATH=$DEPS"
cmake -S engine/bench/cuda -B $BUILD -G Ninja $PREFIX > "$OUT/build.txt" 2>&1 &&
  ninja -C $BUILD -j16 cuda-tests cuda-bench >> "$OUT/build.txt" 2>&1
status=$?
log "build: exit $status"
if [ $status -ne 0 ]; then grep -E "error|Error" "$OUT/build.txt" | head -40; exit 1; fi

timeout 150 $BUILD/cuda-tests > "$OUT/tests.txt" 2>&1
log "tests: exit $? -- $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/tests.txt" | tr '\n' ' ')"
grep -E "ERROR|FATAL|MESSAGE|CHECK|REQUIRE|values:|logit" "$OUT/tests.txt" | head -60

if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  timeout 120 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
    $BUILD/cuda-tests -tc="cuda ops: rmsnorm*,cuda ops: gemm*,cuda backend: the tensor*,cuda backend: sampled*" \
    > "$OUT/memcheck.txt" 2>&1
  log "memcheck: exit $? -- $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | head -1)"
fi

for shape in ${SHAPES:-qwen2.5-coder-0.5b qwen2.5-coder-1.5b qwen2.5-coder-7b}; do
  prefill=2048
  timeout 150 $BUILD/cuda-bench --backend cuda --random-shape $shape --ctx 512 --tokens 256 --prefill $prefill \
    --reps 100 > "$OUT/bench-$shape.txt" 2>&1
  log "bench $shape: exit $?"
  cat "$OUT/bench-$shape.txt"
done
if [ "${PDL_COMPARE:-1}" = 1 ]; then
  RUNAHEAD_CUDA_PDL=0 timeout 60 $BUILD/cuda-bench --random-shape qwen2.5-coder-0.5b --ctx 512 --tokens 256 \
    --prefill 0 --reps 50 2>&1 | grep -E "^decode" | sed 's/^/without PDL: /' | tee -a "$OUT/summary.txt"
fi
log "done"
