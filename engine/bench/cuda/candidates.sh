#!/usr/bin/env bash
# Build-time candidates against the default, in one call: this tree built as it is and once per
# candidate's flags (CMAKE_CUDA_FLAGS, e.g. a macro that NOTES names as a candidate), in parallel,
# with another commit's tree beside them where BASE_SRC names one; each build's CUDA tests; then
# switches.sh over the builds (and ENV_VARIANTS on the default build), rounds interleaved, ratios
# against the default build's.
# Usage (repository root, on a GPU machine; .devdeps/ carried as run_on_device.sh says):
#   CANDIDATES="-DRUNAHEAD_FOO=1;-DRUNAHEAD_BAR=3" ENV_VARIANTS="RUNAHEAD_CUDA_BAZ=1" \
#   bash engine/bench/cuda/candidates.sh   (NOTES v56: the first use, its command and table)
#   CANDIDATES: ";"-separated, each one build's CMAKE_CUDA_FLAGS; candidate N is built in
#   /tmp/cand-N (a diagnostic build's tests fail by design: RUNAHEAD_RING_DIAG's results are wrong).
#   ENV_VARIANTS: ";"-separated, each a space-separated NAME=VALUE list run on the default build,
#   or on candidate N's where it begins with @/tmp/cand-N/runahead-engine. BASE_SRC: a directory holding
#   another commit's engine/ (on the host: `git archive COMMIT engine/CMakeLists.txt engine/src
#   engine/bench/backends engine/bench/cpu | tar -x -C .base`; .base/ ignored, carried), built
#   without tests. TESTS (doctest -tc pattern, default "cuda*": the whole CUDA suite, ~15 s a
#   build), CASES, CTX, ROUNDS, REPS, TOKENS as switches.sh takes them; CTXS ("512 2048 512"):
#   the table once a context named, in turn. BUDGET_S (default 540): runs that could not end that
#   many seconds after the start are skipped (switches.sh's UNTIL), so a 10-minute call brings its
#   table back.
# Time on an H100: 3-4 builds in parallel ~2.5 min; then a (variant, case) a round at REPS=10 takes
# ~8 s on a 1.5B, ~20-30 s on a 7B (most of it making the random weights and quantizing them at load).
# Output: $OUT/summary.txt (builds, tests, the table), $OUT/switches.md, everything else in
# $OUT/candidates.tgz (build and test logs, each run's JSON): few files, as the device tool
# brings back.
set -u
START=$(date +%s)
OUT=${OUT:-$PWD/candidates-out}
WORK=$OUT/candidates
mkdir -p "$WORK"
ROOT=$PWD
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$WORK/gpu.txt" 2>&1
log "gpu: $(tail -1 "$WORK/gpu.txt")"

. "$ROOT/engine/bench/cuda/engine_for_bench.sh" /tmp/cand-default/runahead-engine  # BENCH_CMAKE_ARGS, no build
IFS=';' read -r -a flags <<< "${CANDIDATES:-}"
dirs=(/tmp/cand-default) srcs=(engine) cflags=("") targets=("runahead-engine engine-tests")
for i in "${!flags[@]}"; do
  [ -z "${flags[$i]}" ] && continue
  dirs+=("/tmp/cand-$((i + 1))") srcs+=(engine) cflags+=("${flags[$i]}") targets+=("runahead-engine engine-tests")
done
if [ -n "${BASE_SRC:-}" ]; then
  dirs+=(/tmp/cand-base) srcs+=("$BASE_SRC/engine") cflags+=("") targets+=(runahead-engine)
fi
jobs=$(( $(nproc) / ${#dirs[@]} + 1 ))
for b in "${!dirs[@]}"; do
  (
    args=("${BENCH_CMAKE_ARGS[@]}")
    [ -n "${cflags[$b]}" ] && args+=("-DCMAKE_CUDA_FLAGS=${cflags[$b]}")
    [[ ${targets[$b]} == *engine-tests* ]] || args+=(-DRUNAHEAD_TESTS=OFF)
    name=$(basename "${dirs[$b]}")
    # shellcheck disable=SC2086  # the targets are words
    cmake -S "${srcs[$b]}" -B "${dirs[$b]}" "${args[@]}" > "$WORK/build-$name.txt" 2>&1 &&
      ninja -C "${dirs[$b]}" -j"$jobs" ${targets[$b]} >> "$WORK/build-$name.txt" 2>&1
    log "build $name (${cflags[$b]:-default}, ${srcs[$b]}): exit $?"
  ) &
done
wait

variants=("")
for b in "${!dirs[@]}"; do
  name=$(basename "${dirs[$b]}")
  [ -x "${dirs[$b]}/runahead-engine" ] || { log "$name: no binary, see build-$name.txt"; tail -5 "$WORK/build-$name.txt"; continue; }
  [ "$b" -gt 0 ] && variants+=("@${dirs[$b]}/runahead-engine")
  [ -x "${dirs[$b]}/engine-tests" ] || continue
  timeout "${TEST_TIMEOUT:-240}" "${dirs[$b]}/engine-tests" -tc="${TESTS:-cuda*}" > "$WORK/tests-$name.txt" 2>&1
  log "tests $name (${cflags[$b]:-default}): exit $? -- $(grep -E '^\[doctest\] (test cases|assertions)' "$WORK/tests-$name.txt" | tr '\n' ' ')"
  grep -E "ERROR|FATAL" "$WORK/tests-$name.txt" | head -5 | tee -a "$OUT/summary.txt"
done
IFS=';' read -r -a envs <<< "${ENV_VARIANTS:-}"
for e in "${envs[@]}"; do [ -n "$e" ] && variants+=("$e"); done
[ ${#variants[@]} -gt 1 ] || { log "nothing to compare with the default"; exit 1; }
joined=$(IFS=';'; echo "${variants[*]}")
log "variants: default;${joined#;} (the candidates in the order given, the base, then ENV_VARIANTS)"
pass=0
for ctx in ${CTXS:-${CTX:-512}}; do
  pass=$((pass + 1)) dir=$WORK/pass-$pass-ctx-$ctx
  mkdir -p "$dir"
  OUT=$dir CTX=$ctx UNTIL=$((START + ${BUDGET_S:-540})) VARIANTS="$joined" \
    bash "$ROOT/engine/bench/cuda/switches.sh" /tmp/cand-default/runahead-engine | tee -a "$OUT/summary.txt"
  { echo "## context $ctx (pass $pass)"; cat "$dir/switches.md"; } >> "$OUT/switches.md" 2>/dev/null
done
tar -czf "$OUT/candidates.tgz" -C "$OUT" candidates && rm -rf "$WORK"
