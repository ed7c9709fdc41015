# Sourced by the CUDA bench scripts (formats.sh, switches.sh; candidates.sh for its arguments, with
# an ENGINE given so that nothing is built): ENGINE is the binary given as the
# script's first argument, or else runahead-engine built here in $BUILD (Release, sm_90, no
# tests; .devdeps/ as a prefix when present), its log in $OUT/build.txt. Exits if the build fails.
# BENCH_CMAKE_ARGS: the configure arguments every bench build shares (candidates.sh's too).
BENCH_CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90)
[ -d .devdeps ] && BENCH_CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$PWD/.devdeps")
ENGINE=${1:-}
if [ -z "$ENGINE" ]; then
  cmake -S engine -B "$BUILD" "${BENCH_CMAKE_ARGS[@]}" -DRUNAHEAD_TESTS=OFF > "$OUT/build.txt" 2>&1 &&
    ninja -C "$BUILD" runahead-engine >> "$OUT/build.txt" 2>&1 ||
    { echo "build failed: $OUT/build.txt"; tail -20 "$OUT/build.txt"; exit 1; }
  ENGINE=$BUILD/runahead-engine
fi
