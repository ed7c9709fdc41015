#!/usr/bin/env bash
# One call on a GPU machine: build the engine with its CUDA backend, run the CUDA tests,
# compute-sanitizer memcheck on the fixture models, then `runahead-engine bench --backend cuda`
# on the three Qwen2.5-Coder shapes, the kernel-per-op comparison and the engine's whole test
# suite (on a GPU machine `auto` picks CUDA, so the protocol and speculation tests run on it).
# Everything lands in $OUT (default: ./cuda-out); summary.txt is the short version.
# Usage: bash engine/bench/cuda/run_on_device.sh   (from the repository root)
# .devdeps/ (when present, carried with the call) is a prefix with nlohmann_json and doctest for a
# GPU machine without them; make it here from Debian's packages (nlohmann-json3-dev, doctest-dev):
#   mkdir -p .devdeps/include .devdeps/share/cmake .devdeps/lib/cmake && echo /.devdeps/ >> .git/info/exclude
#   cp -r /usr/include/nlohmann /usr/include/doctest .devdeps/include/
#   cp -r /usr/share/cmake/nlohmann_json .devdeps/share/cmake/ && cp -r /usr/lib/cmake/doctest .devdeps/lib/cmake/
#   sed -i 's|set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
#     .devdeps/lib/cmake/doctest/doctestTargets.cmake
# Switches: SHAPES, FP8, Q8_0, Q4_K_M, PER_OP_COMPARE, DEMO, DEMO_MAX_DRAFT, TIMELINE, TRACE_STEPS, NCU, SKIP_SANITIZER, ALL_TESTS, GOLDENS, BASE (see below).
# GOLDENS=1 first writes the transformers goldens of the newer architectures (qwen3, llama3) into
# test/fixtures/models/ with test/fixtures/make_fixtures.py --only (they come back in $OUT/fixtures/).
# BASE=<commit> (e.g. BASE=HEAD~3) also builds that commit (git worktree, or BASE_SRC below, in $BUILD-base)
# and runs its decode bench interleaved with this tree's, shape by shape: bench-compare.txt.
# On the device, git may not know this checkout's newest commits (a `git archive HEAD` there once
# built an older tree): run the script on the working tree as carried, and make any base tree here
# (`git archive <commit> engine/CMakeLists.txt engine/src engine/bench | tar -x -C .base`, BASE_SRC=.base).
set -u
OUT=${OUT:-$PWD/cuda-out}
mkdir -p "$OUT"
ROOT=$PWD
BUILD=${BUILD:-/tmp/engine-build}
SHAPES=${SHAPES:-qwen2.5-coder-0.5b qwen2.5-coder-1.5b qwen2.5-coder-7b}
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
log "gpu: $(tail -1 "$OUT/gpu.txt")"

ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90)
[ -d "$ROOT/.devdeps" ] && ARGS+=("-DCMAKE_PREFIX_PATH=$ROOT/.devdeps")
# cuBLASLt: the toolkit's when it has one (CMake finds it), else one a Python wheel carries.
if [ -z "$(find /usr/local/cuda*/ -name 'libcublasLt.so*' 2>/dev/null | head -1)" ]; then
  for lib in $(find /opt /usr/local /usr/lib -name 'libcublasLt.so*' 2>/dev/null); do
    dir=$(dirname "$(dirname "$lib")")
    if [ -f "$dir/include/cublasLt.h" ]; then ARGS+=("-DRUNAHEAD_CUBLASLT_ROOT=$dir"); break; fi
  done
fi
cmake -S engine -B "$BUILD" "${ARGS[@]}" > "$OUT/build.txt" 2>&1 &&
  ninja -C "$BUILD" -j16 runahead-engine engine-tests engine-ops-parity >> "$OUT/build.txt" 2>&1
status=$?
log "build: exit $status (${ARGS[*]}; the bench's \"prefill GEMM\" line says whether cuBLASLt is in)"
if [ $status -ne 0 ]; then grep -E "error|Error" "$OUT/build.txt" | head -40; exit 1; fi
# The PTX the default build ships for Ampere and Ada must assemble for compute capability 8.0.
ninja -C "$BUILD" -j16 engine-cuda-sm80-check > /tmp/sm80-check.txt 2>&1
log "kernels assembled for compute capability 8.0: exit $? $(grep -m3 -E 'error' /tmp/sm80-check.txt | tr '\n' ' ')"
ENGINE=$BUILD/runahead-engine
TESTS=$BUILD/engine-tests

if [ "${GOLDENS:-0}" = 1 ]; then
  python3 test/fixtures/make_fixtures.py test/fixtures/models --only qwen3-tiny-bf16,llama3-scaled-f32 \
    > "$OUT/goldens.txt" 2>&1
  log "goldens (qwen3, llama3): exit $? -- $(tail -2 "$OUT/goldens.txt" | tr '\n' ' ')"
  mkdir -p "$OUT/fixtures" && cp -r test/fixtures/models/qwen3-tiny-bf16 test/fixtures/models/llama3-scaled-f32 "$OUT/fixtures/"
fi

# The op parity program: every op on the CPU and CUDA against a double reference (op x backend table).
timeout 300 "$BUILD/engine-ops-parity" > "$OUT/parity.txt" 2>&1
log "ops parity: exit $? -- $(tail -1 "$OUT/parity.txt")"
sed -n '/^op x backend/,$p' "$OUT/parity.txt"

timeout ${TEST_TIMEOUT:-180} "$TESTS" -tc="cuda*" > "$OUT/tests.txt" 2>&1
log "cuda tests: exit $? -- $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/tests.txt" | tr '\n' ' ')"
grep -E "ERROR|FATAL|MESSAGE|CHECK|REQUIRE|values:|logit|persistent" "$OUT/tests.txt" | head -40
# The prefill path again on our own tensor-core GEMM instead of cuBLASLt.
RUNAHEAD_CUDA_CUBLASLT=0 timeout 120 "$TESTS" -tc="cuda ops: gemm*,cuda backend: the tensor*,cuda backend: widths*,cuda backend: qwen3*" > "$OUT/tests-mma.txt" 2>&1
log "cuda tests, mma.sync GEMM: exit $? -- $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/tests-mma.txt" | tr '\n' ' ')"

for shape in $SHAPES; do
  timeout 150 "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx 512 --tokens 256 --prefill 2048 \
    --reps 100 > "$OUT/bench-$shape.txt" 2>&1
  log "bench $shape: exit $? -- $(grep -E '^decode' "$OUT/bench-$shape.txt")"
  cat "$OUT/bench-$shape.txt"
done
# fp8 (the load options `lm_head: fp8` and `weights: fp8`): decode and prefill beside the bf16 rows
# above, each against the bound of the bytes it reads; then the top-1 agreement of each with the
# stored weights on real code (the embedded model, teacher-forced over code_prompt.ids).
if [ "${FP8:-1}" = 1 ]; then
  for shape in $SHAPES; do
    for mode in "--lm-head fp8" "--weights fp8"; do
      timeout 150 "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx 512 --tokens 256 --prefill 2048 \
        --reps 20 $mode > "$OUT/bench-fp8.txt" 2>&1
      log "bench $shape $mode: exit $? -- $(grep -E '^(model|decode|prefill)' "$OUT/bench-fp8.txt" | tr '\n' ' ')"
      grep -E "rmsnorm_lm_head|decode_step|step " "$OUT/bench-fp8.txt" | head -4
    done
  done
  for mode in "--lm-head fp8" "--weights fp8"; do
    timeout 60 "$ENGINE" bench --backend cuda --model engine/models/runahead-coder \
      --agreement engine/bench/cuda/code_prompt.ids $mode > "$OUT/agreement.txt" 2>&1
    log "agreement $mode: exit $? -- $(tail -1 "$OUT/agreement.txt")"
  done
fi
# Q8_0=1: Q8_0 as stored (every matrix quantized to Q8_0 on the host): decode, prefill and the
# per-op table against the bound of the Q8_0 bytes, beside the bf16 rows above. Off by default:
# the three shapes add about 2.5 minutes (the 7B's host quantization), which with every other
# step on may not fit one 10-minute call; the CUDA tests check Q8_0 either way.
if [ "${Q8_0:-0}" = 1 ]; then
  for shape in $SHAPES; do
    timeout 240 "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx 512 --tokens 256 --prefill 2048 \
      --reps 50 --weights q8_0 > "$OUT/bench-q8_0-$shape.txt" 2>&1
    log "bench $shape --weights q8_0: exit $? -- $(grep -E '^(model|decode|prefill)' "$OUT/bench-q8_0-$shape.txt" | tr '\n' ' ')"
    cat "$OUT/bench-q8_0-$shape.txt"
  done
fi
# Q4_K_M=1: the same for llama.cpp's Q4_K_M mix (options.weights q4_k_m: Q4_K, with Q6_K for
# lm_head and some layers' v_proj/down_proj) read as stored by the K-quant kernels. The 0.5B
# shape's rows of 896 fall back to Q8_0 (a mix the GPU runs widened), so the 1.5B and 7B shapes.
if [ "${Q4_K_M:-0}" = 1 ]; then
  for shape in ${Q4_K_M_SHAPES:-qwen2.5-coder-1.5b qwen2.5-coder-7b}; do
    timeout 240 "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx 512 --tokens 256 --prefill 2048 \
      --reps 50 --weights q4_k_m > "$OUT/bench-q4_k_m-$shape.txt" 2>&1
    log "bench $shape --weights q4_k_m: exit $? -- $(grep -E '^(model|decode|prefill)' "$OUT/bench-q4_k_m-$shape.txt" | tr '\n' ' ')"
    cat "$OUT/bench-q4_k_m-$shape.txt"
    # the same without pair-planar inputs (Q4_K rows a chunk a lane), without the q/k/v ring
    # (the warps' own loads), and with o_proj and down's ring not laid out for long matrices
    # (one run a tile, the inputs read from L1), beside it
    for switch in RUNAHEAD_CUDA_KQ_PLANAR=0 RUNAHEAD_CUDA_KQ_RING_QKV=0 RUNAHEAD_CUDA_KQ_RING_LONG=0; do
      env "$switch" timeout 240 "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx 512 --tokens 256 \
        --prefill 0 --reps 50 --weights q4_k_m 2>&1 | grep -E "^decode" | sed "s/^/$shape q4_k_m, $switch: /" |
        tee -a "$OUT/summary.txt"
    done
  done
fi
# Side by side with a base commit: both engines, the same shapes, interleaved runs (A B A B).
# A machine without the repository's history takes BASE_SRC instead: a folder holding the base
# commit's engine/, made here with `git archive BASE engine/CMakeLists.txt engine/src engine/bench | tar -x -C .base`
# and carried (BASE_SRC=.base, BASE names the commit for the log).
if [ -n "${BASE:-}" ]; then
  if [ -n "${BASE_SRC:-}" ]; then BASE_TREE=$ROOT/$BASE_SRC; else
    BASE_TREE=/tmp/engine-base; git worktree add -f "$BASE_TREE" "$BASE" > "$OUT/base-build.txt" 2>&1; fi
  cmake -S "$BASE_TREE"/engine -B "$BUILD-base" "${ARGS[@]}" -DRUNAHEAD_TESTS=OFF >> "$OUT/base-build.txt" 2>&1 &&
    ninja -C "$BUILD-base" -j16 runahead-engine >> "$OUT/base-build.txt" 2>&1
  log "base $BASE build: exit $?"
  for shape in $SHAPES; do
    for round in 1 2 3; do
      for side in base this; do
        bin=$ENGINE; [ $side = base ] && bin=$BUILD-base/runahead-engine
        timeout 120 "$bin" bench --backend cuda --random-shape "$shape" --ctx 512 --tokens 256 --prefill 0 \
          --reps 100 2>&1 | grep -E "^decode" | sed "s/^/$shape round $round $side: /" >> "$OUT/bench-compare.txt"
      done
    done
  done
  cat "$OUT/bench-compare.txt" | tee -a "$OUT/summary.txt"
  [ -z "${BASE_SRC:-}" ] && git worktree remove --force "$BASE_TREE"
fi

if [ "${PER_OP_COMPARE:-1}" = 1 ]; then
  for shape in $SHAPES; do
    RUNAHEAD_CUDA_PERSISTENT=0 timeout 60 "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx 512 \
      --tokens 256 --prefill 0 --reps 20 2>&1 | grep -E "^decode" | sed "s/^/kernel per op, $shape: /" |
      tee -a "$OUT/summary.txt"
  done
  RUNAHEAD_CUDA_PERSISTENT=0 RUNAHEAD_CUDA_PDL=0 timeout 60 "$ENGINE" bench --backend cuda \
    --random-shape qwen2.5-coder-0.5b --ctx 512 --tokens 256 --prefill 0 --reps 50 2>&1 | grep -E "^decode" |
    sed 's/^/kernel per op without PDL: /' | tee -a "$OUT/summary.txt"
fi

# The protocol's own generation path (runahead-engine demo): ms/token as a client sees it, from
# a real code prompt (code_prompt.ids: 856 tokens of engine/train/fetch_corpus.py in the embedded
# model's tokenizer), greedy, each speculation mode; with BASE, the base engine alongside.
if [ "${DEMO:-1}" = 1 ]; then
  PROMPT=$(cat engine/bench/cuda/code_prompt.ids)
  MDS=${DEMO_MAX_DRAFT:-default}
  FIRST_MD=${MDS%% *}  # speculation off runs once, with the first
  # DEMO_MAX_DRAFT="8 16": each speculating mode at each --max-draft too (the base engine may lack the flag).
  for model in engine/models/runahead-coder random:qwen2.5-coder-0.5b random:qwen2.5-coder-1.5b; do
    for spec in off lookup auto; do
      for md in $MDS; do
        [ $spec = off ] && [ "$md" != "$FIRST_MD" ] && continue
        flag=(); [ "$md" != default ] && [ $spec != off ] && flag=(--max-draft "$md")
        for side in this base; do
          bin=$ENGINE; [ $side = base ] && bin=$BUILD-base/runahead-engine
          [ -x "$bin" ] || continue
          [ $side = base ] && [ ${#flag[@]} -gt 0 ] && continue
          timeout 120 "$bin" demo --model "$model" --prompt-ids "$PROMPT" --tokens 256 --speculation $spec "${flag[@]}" > "$OUT/demo.txt" 2>&1
          log "demo $side $model speculation $spec ${flag[*]}: exit $? -- $(grep -E '^  "(tokens|steps|decode_ms_per_token|ttft_ms)"' "$OUT/demo.txt" | tr -d ' \n')"
          { echo "== $side $model $spec ${flag[*]}"; tac "$OUT/demo.txt" | sed '/^{$/q' | tac | tr -d ' \n'; echo; } >> "$OUT/demo-stats.txt"
        done
      done
    done
  done
fi

# The step loop's timeline: the device's idle time between consecutive steps of the engine's own
# loop (events around each step), with each speculation mode, on the same prompt as the demos.
if [ "${TIMELINE:-1}" = 1 ]; then
  for model in engine/models/runahead-coder random:qwen2.5-coder-0.5b; do
    timeout 120 "$ENGINE" bench --backend cuda --model "$model" --timeline engine/bench/cuda/code_prompt.ids \
      --tokens 256 > "$OUT/timeline.txt" 2>&1
    log "timeline $model: exit $?"
    cat "$OUT/timeline.txt" | tee -a "$OUT/summary.txt"
  done
fi

# TRACE_STEPS=1: an engine built with the kernel timeline (-DRUNAHEAD_CUDA_TRACE=ON, in
# $BUILD-trace) traces 4 decode steps of each TRACE_CASES "shape:weights" with the defaults and
# with each of TRACE_ENV's switches; trace_step.py says where each step's time goes, launch by launch.
if [ "${TRACE_STEPS:-0}" = 1 ]; then
  cmake -S engine -B "$BUILD-trace" "${ARGS[@]}" -DRUNAHEAD_CUDA_TRACE=ON -DRUNAHEAD_TESTS=OFF > "$OUT/trace-build.txt" 2>&1 &&
    ninja -C "$BUILD-trace" -j16 runahead-engine >> "$OUT/trace-build.txt" 2>&1
  log "trace build: exit $?"
  for case in ${TRACE_CASES:-qwen2.5-coder-1.5b:q4_k_m qwen2.5-coder-7b:q4_k_m}; do
    for v in "" ${TRACE_ENV:-}; do
      # shellcheck disable=SC2086  # v is one NAME=VALUE (or nothing) for env
      timeout 120 env $v "$BUILD-trace/runahead-engine" bench --backend cuda --random-shape "${case%%:*}" --ctx 512 \
        --tokens 64 --prefill 0 --reps 5 --weights "${case#*:}" --json --trace-out "$OUT/trace.csv" > /dev/null 2> "$OUT/trace.err"
      log "trace $case ${v:-defaults}: exit $?"
      python3 engine/bench/cuda/trace_step.py "$OUT/trace.csv" | tee -a "$OUT/summary.txt"
    done
  done
fi

# NCU=1: Nsight Compute on one persistent decode step of each shape (hardware counters).
if [ "${NCU:-0}" = 1 ]; then
  for shape in $SHAPES; do
    timeout 120 ncu --clock-control none --kernel-name regex:decode_step_kernel --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx 512 --tokens 8 --prefill 0 --reps 1 \
      > "$OUT/ncu-$shape.txt" 2>&1
    log "ncu $shape: exit $?"
    grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Eligible|Bank|Shared|DRAM|L2 Hit" "$OUT/ncu-$shape.txt" | head -40
    timeout 120 ncu --clock-control none --kernel-name regex:decode_step_kernel --launch-skip 3 --launch-count 1 \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx 512 --tokens 8 --prefill 0 --reps 1 \
      > "$OUT/ncu-stalls-$shape.txt" 2>&1
    grep -E "stalled" "$OUT/ncu-stalls-$shape.txt" | sort -k3 -n -r | head -8
  done
fi

if [ "${SKIP_SANITIZER:-0}" != 1 ]; then
  timeout 150 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 3 \
    "$TESTS" -tc="cuda ops: rmsnorm*,cuda ops: gemm*,cuda ops: attention*,cuda backend: the tensor*,cuda backend: sampled*,cuda backend: fixtures*,cuda backend: qwen3*,cuda backend: widths*,cuda backend: greedy verify*,cuda fp8: the device*,cuda fp8: fp8 weights and*" \
    > "$OUT/memcheck.txt" 2>&1
  log "memcheck: exit $? -- $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | head -1)"
fi

if [ "${ALL_TESTS:-1}" = 1 ]; then
  timeout ${ALL_TIMEOUT:-150} "$TESTS" > "$OUT/all-tests.txt" 2>&1
  log "all engine tests on this machine: exit $? -- $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/all-tests.txt" | tr '\n' ' ')"
  grep -E "ERROR|FATAL" -A3 "$OUT/all-tests.txt" | head -40
fi
log "done"
