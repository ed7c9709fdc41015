#!/usr/bin/env bash
# The weight formats side by side on the GPU, in one call: decode ms/token of the Qwen2.5-Coder
# shapes (random weights) in bf16, Q8_0, Q4_K_M and fp8, each beside the bound of the bytes it
# reads at the copy bandwidth measured in the same run, as a markdown table (stdout and
# $OUT/formats.md; each run's JSON in $OUT/formats/).
# Usage (repository root, on a GPU machine): bash engine/bench/cuda/formats.sh [ENGINE]
#   ENGINE: a built runahead-engine (default: build one in $BUILD as run_on_device.sh does).
#   SHAPES, FORMATS, CTX, ROUNDS (interleaved rounds; the table takes each cell's best) override.
# The 0.5B's rows of 896 weights are no whole Q4_K block: its q4_k_m row says what ran instead
# (the bench's "device_dtypes" column).
set -u
OUT=${OUT:-$PWD/formats-out}
BUILD=${BUILD:-/tmp/engine-build}
SHAPES=${SHAPES:-qwen2.5-coder-0.5b qwen2.5-coder-1.5b qwen2.5-coder-7b}
FORMATS=${FORMATS:-bf16 q8_0 q4_k_m fp8}
CTX=${CTX:-512}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT/formats"
. "$(dirname "$0")/engine_for_bench.sh"
for round in $(seq "$ROUNDS"); do
  for shape in $SHAPES; do
    for format in $FORMATS; do
      weights=$format
      [ "$format" = bf16 ] && weights=auto
      timeout 240 "$ENGINE" bench --backend cuda --random-shape "$shape" --ctx "$CTX" --tokens 256 --prefill 0 \
        --reps 20 --weights "$weights" --json > "$OUT/formats/$shape-$format-$round.json" 2> "$OUT/formats/$shape-$format-$round.err" ||
        echo "$shape $format round $round: exit $? ($(tail -1 "$OUT/formats/$shape-$format-$round.err"))" >&2
    done
  done
done
python3 - "$OUT" "$SHAPES" "$FORMATS" "$ROUNDS" <<'EOF' | tee "$OUT/formats.md"
import json, sys, pathlib
out, shapes, formats, rounds = pathlib.Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split(), int(sys.argv[4])
print("| shape | format | on the device | MB read a token | decode ms/token (each round) | bound ms/token | of the bound |")
print("|---|---|---|---|---|---|---|")
for shape in shapes:
    for fmt in formats:
        runs = []
        for r in range(1, rounds + 1):
            try:
                runs.append(json.loads((out / "formats" / f"{shape}-{fmt}-{r}.json").read_text()))
            except (OSError, ValueError):
                pass
        if not runs:
            print(f"| {shape} | {fmt} | (no result: see formats/{shape}-{fmt}-*.err) | | | | |")
            continue
        best = min(runs, key=lambda j: j["decode_ms_per_token"])
        each = ", ".join(f'{j["decode_ms_per_token"]:.3f}' for j in runs)
        print(f'| {shape} | {fmt} | {best["device_dtypes"]} | {best["weight_bytes"] / 1e6:.0f} | {each} | '
              f'{best["bound_ms_per_token"]:.3f} | {100 * best["bound_ratio"]:.0f} % |')
EOF
