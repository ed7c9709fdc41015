#!/usr/bin/env bash
# The CUDA switches against the defaults, in one binary and one call: decode ms/token of each
# (shape, weights) case with each variant's environment, variants interleaved round by round so
# a drift of the machine lands on all of them; the table gives each variant's median over the
# rounds, its ratio to the first variant's (the default's) median in the same rounds, and the
# bound. A switch is made the default only after such a table (engine/bench/cuda/NOTES.md).
# Usage (repository root, on a GPU machine): bash engine/bench/cuda/switches.sh [ENGINE]
#   ENGINE: a built runahead-engine (default: build one in $BUILD as formats.sh does).
#   CASES ("shape:weights" ...), VARIANTS (";"-separated, each a space-separated list of
#   NAME=VALUE; the first, "" by default, is the reference), CTX, ROUNDS, REPS, TOKENS (decoded a
#   rep, 256) override. A variant may begin
#   with @BINARY: that runahead-engine instead of ENGINE (another commit's build, so the two
#   commits' decode speeds come from interleaved rounds of one run; "@/tmp/base/runahead-engine"
#   alone is that binary with no switch). The device machine has no git: on the host, `git archive
#   COMMIT engine/CMakeLists.txt engine/src engine/bench/backends engine/bench/cpu | tar -x -C .base`
#   (.base/ ignored, carried), there `cmake -S .base/engine -B /tmp/base ... -DRUNAHEAD_TESTS=OFF`.
#   UNTIL (seconds since the epoch): runs that could not end by then are skipped (a device call's
#   limit), the table made from those that ran.
# Output: stdout (a line a run as it ends, then the table) and $OUT/switches.md; each run's JSON
# in $OUT/switches/ (named by case with "_" for ":", a name the device tool brings back).
# Time on an H100, a run (one variant, one case): ~8-15 s on a 1.5B, ~20-30 s on a 7B (most of it
# making the random weights and quantizing them at load, NOTES v57).
# The default variants: v46's default turned off (the partials pushed and met at a cluster
# barrier, not counted) and v42's (the rings' producer warps waiting for the kernel before): 9
# runs a round, ~2 minutes at the default REPS, so a 10-minute call with the build holds ROUNDS=3.
set -u
OUT=${OUT:-$PWD/switches-out}
BUILD=${BUILD:-/tmp/engine-build}
CASES=${CASES:-qwen2.5-coder-7b:q4_k_m qwen2.5-coder-1.5b:q4_k_m qwen2.5-coder-7b:q8_0}
VARIANTS=${VARIANTS:-;RUNAHEAD_CUDA_ATTENTION_PUSH=uncounted;RUNAHEAD_CUDA_RING_PRODUCER=0}
CTX=${CTX:-512}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-30}
TOKENS=${TOKENS:-256}  # decoded a rep
mkdir -p "$OUT/switches"
. "$(dirname "$0")/engine_for_bench.sh"
IFS=';' read -r -a variants <<< "$VARIANTS"
# A figure of a run's JSON (the file, the key), cut to 5 characters.
figure() { grep -o "\"$2\": *[0-9.]*" "$1" | grep -o '[0-9.]*$' | cut -c1-5; }
for round in $(seq "$ROUNDS"); do
  for case in $CASES; do
    shape=${case%%:*} weights=${case#*:} run=${case//:/_}
    for v in "${!variants[@]}"; do
      vars=${variants[$v]} binary=$ENGINE
      if [[ $vars == @* ]]; then
        binary=${vars%% *} binary=${binary#@}
        [[ $vars == *" "* ]] && vars=${vars#* } || vars=""
      fi
      if [ -n "${UNTIL:-}" ] && [ $(( $(date +%s) + 45 )) -gt "$UNTIL" ]; then
        echo "$case [${variants[$v]:-default}] round $round: skipped (UNTIL)"
        rm -f "$OUT/switches/$run-$v-$round.json"
        continue
      fi
      # shellcheck disable=SC2086  # each NAME=VALUE of the variant is one word for env
      timeout 240 env $vars "$binary" bench --backend cuda --random-shape "$shape" --ctx "$CTX" --tokens "$TOKENS" \
        --prefill 0 --reps "$REPS" --weights "$weights" --json > "$OUT/switches/$run-$v-$round.json" \
        2> "$OUT/switches/$run-$v-$round.err" ||
        echo "$case [${variants[$v]:-default}] round $round: exit $? ($(tail -1 "$OUT/switches/$run-$v-$round.err"))" >&2
      # each run's figure as it comes, so that a call cut short still shows what it measured
      json=$OUT/switches/$run-$v-$round.json
      echo "$case ctx $CTX [${variants[$v]:-default}] round $round: $(figure "$json" decode_ms_per_token) ms/token" \
        "(bound $(figure "$json" bound_ms_per_token))"
    done
  done
done
python3 - "$OUT" "$CASES" "$ROUNDS" "${variants[@]}" <<'EOF' | tee "$OUT/switches.md"
import json, sys, pathlib, statistics
out, cases, rounds, variants = pathlib.Path(sys.argv[1]), sys.argv[2].split(), int(sys.argv[3]), sys.argv[4:]
def ms(case, v, r):
    try:
        return json.loads((out / "switches" / f"{case.replace(':', '_')}-{v}-{r}.json").read_text())
    except (OSError, ValueError):
        return None
print("| case | variant | decode ms/token (each round) | median | x the first (same rounds) | bound ms/token |")
print("|---|---|---|---|---|---|")
for case in cases:
    base = {r: ms(case, 0, r) for r in range(1, rounds + 1)}
    for v, name in enumerate(variants):
        runs = {r: ms(case, v, r) for r in range(1, rounds + 1)}
        got = [j["decode_ms_per_token"] for j in runs.values() if j]
        if not got:
            print(f"| {case} | {name or 'default'} | (no result: see switches/{case.replace(':', '_')}-{v}-*.err) | | | |")
            continue
        both = [r for r in runs if runs[r] and base[r]]
        ratio = (statistics.median(runs[r]["decode_ms_per_token"] for r in both) /
                 statistics.median(base[r]["decode_ms_per_token"] for r in both)) if both else float("nan")
        bound = next(j for j in runs.values() if j)["bound_ms_per_token"]
        print(f"| {case} | {name or 'default'} | {', '.join(f'{x:.3f}' for x in got)} | {statistics.median(got):.3f} | "
              f"{ratio:.3f} | {bound:.3f} |")
EOF
