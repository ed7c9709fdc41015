#!/usr/bin/env python3
"""The loops of a kernel's PTX and what their bodies hold, to find code the compiler left serial.

A latency-bound kernel loses most where a loop with a runtime trip count runs a long-latency
instruction (a shuffle, a global or shared load, a division) and its iterations wait on each
other: NOTES v54's attention shuffles were such a loop. This lists every backward branch of each
kernel whose name matches PATTERN, with the instructions of those kinds in its body.

Usage (repository root; nvcc only, no GPU):
  nvcc -O3 -DNDEBUG -arch=sm_90a -std=c++17 -DRUNAHEAD_CUDA=1 -Iengine/src -I BUILD/generated \\
       -isystem .devdeps/include -ptx engine/src/cuda/attention.cu -o /tmp/a.ptx
  python3 engine/bench/cuda/ptx_loops.py /tmp/a.ptx [PATTERN]
"""
import re
import sys

KINDS = ["ld.global", "ld.shared", "shfl", "div", "ex2", "mbarrier", "st.shared", "st.global", "dp4a", "bar.sync",
         "atom", "prefetch"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pattern = sys.argv[2] if len(sys.argv) > 2 else ""
    lines = open(sys.argv[1]).read().split("\n")
    labels, on = {}, False
    for i, line in enumerate(lines):
        if ".entry" in line:
            labels, on = {}, re.search(pattern, line) is not None
            if on:
                print("kernel", line.split("(")[0].split()[-1])
        if not on:
            continue
        m = re.match(r"^(\$L__BB\d+_\d+):", line)
        if m:
            labels[m.group(1)] = i
        m = re.search(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if m and labels.get(m.group(1), i) < i:
            body = lines[labels[m.group(1)]:i]
            kinds = {k: n for k in KINDS if (n := sum(k in b for b in body))}
            print(f"  loop, PTX lines {labels[m.group(1)] + 1}-{i + 1}: {kinds}")


if __name__ == "__main__":
    main()
