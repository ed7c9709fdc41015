#!/usr/bin/env python3
"""Where a decode step's time goes, kernel by kernel, from `runahead-engine bench --backend cuda
--trace-out FILE` (an engine built with -DRUNAHEAD_CUDA_TRACE=ON; src/cuda/trace.h).

Each row of the file is one block of one kernel: when it started, passed its pdl_wait (the kernel
before it done) and left, in ns. Blocks sorted by start form launches (a launch's blocks all start
before the next kernel's first: it launches once every block of this one has passed its trigger);
a step begins at its embedding launch. Each launch is named by its kernel and the kernel before it
("residual_ring after attention" is o_proj, "after quantize_inputs" is down). Per launch:
  step share  its last block's end minus the previous launch's: these add up to the step
  wait        from the previous launch's last end to this launch's first block past its wait
  work        from there to this launch's last end
  early       how long before the previous launch's end its first block started (PDL overlap)
  tail        its last block's end minus the median block's end
Medians over the launches of that name in all steps but the first; step share summed over a step.
With a kernel's name after the file, also where its blocks' time goes between their wait and their
end: the median block's marks (trace_mark, the kernel's comment says where each is), each from its
block's wait, for the blocks that reached each mark; blocks grouped by the last mark they reached;
and mark 1 by when the block started (by_start). With --layers instead of a kernel's name, each
launch's work and step share by its place in the step (its layer, for a launch run once a layer),
medians over the steps: where one layer's launch differs from another's (a Q4_K_M model's Q6_K
layers beside its Q4_K ones).
Usage: python3 trace_step.py TRACE.csv [KERNEL | --layers]
"""
import csv
import statistics
import sys
from collections import defaultdict


def launches(rows):
    rows = sorted(rows, key=lambda r: r["start"])
    out = []
    for r in rows:
        if not out or out[-1]["kernel"] != r["kernel"]:
            out.append({"kernel": r["kernel"], "blocks": []})
        out[-1]["blocks"].append(r)
    for l in out:
        b = l["blocks"]
        waited = [x["waited"] for x in b if x["waited"] >= 0]
        l["first_start"] = min(x["start"] for x in b)
        l["first_waited"] = min(waited) if waited else None
        l["last_end"] = max(x["end"] for x in b)
        l["median_end"] = statistics.median(x["end"] for x in b)
    return out


def marks_of(path, kernel, rows):
    blocks = [r for r in rows if r["kernel"] == kernel and r["waited"] >= 0]
    if not blocks:
        sys.exit(f"trace_step.py: no block of {kernel} passed a wait in {path}")
    groups = defaultdict(list)
    for r in blocks:
        groups[max([0] + [m + 1 for m, t in enumerate(r["marks"]) if t >= 0])].append(r)
    med = statistics.median
    print(f"{kernel}: us from each block's wait, medians")
    print("| blocks | last mark | " + " | ".join(f"mark {m + 1}" for m in range(len(blocks[0]["marks"]))) + " | end |")
    print("|---|---|" + "---|" * (len(blocks[0]["marks"]) + 1))
    for last in sorted(groups):
        g = groups[last]
        cells = []
        for m in range(len(g[0]["marks"])):
            reached = [r["marks"][m] - r["waited"] for r in g if r["marks"][m] >= 0]
            cells.append(f"{med(reached) / 1e3:.2f}" if reached else "-")
        print(f"| {len(g)} | {last} | " + " | ".join(cells) + f" | {med(r['end'] - r['waited'] for r in g) / 1e3:.2f} |")


def by_start(steps, kernel):
    """Mark 1 of each block of `kernel` (in the rings: its first tile is in), in us after its launch's
    wait, by when the block started (0.5 us bins, from that wait): a mark that does not move with
    the start waits on something after the wait, not on what the block asked for at its start."""
    bins = defaultdict(lambda: defaultdict(list))
    for step in steps[1:]:
        for l in step:
            if l["kernel"] != kernel or l["first_waited"] is None:
                continue
            for r in l["blocks"]:
                if r["marks"][0] >= 0:
                    s = round((r["start"] - l["first_waited"]) / 500) / 2
                    bins[l["name"]][s].append((r["marks"][0] - l["first_waited"]) / 1e3)
    print(f"{kernel}: mark 1 by the block's start, us from the launch's wait (medians; bins of 50 blocks or more)")
    print("| launch | start | blocks | mark 1 |")
    print("|---|---|---|---|")
    for name in sorted(bins):
        for s in sorted(bins[name]):
            if len(bins[name][s]) >= 50:
                print(f"| {name} | {s:.1f} | {len(bins[name][s])} | {statistics.median(bins[name][s]):.2f} |")


def layers(per_place):
    """Work us (step share us) of each launch run more than once a step, by its place in the step."""
    names = [n for n in sorted(per_place) if len(per_place[n]) > 1]
    places = max(len(per_place[n]) for n in names) if names else 0
    med = statistics.median
    print("work us (step share us) by place in the step, medians over the steps")
    print("| place | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in range(places):
        cells = []
        for n in names:
            p = per_place[n].get(k)
            cells.append(f'{med(p["work"]):.2f} ({med(p["share"]):.2f})' if p else "-")
        print(f"| {k} | " + " | ".join(cells) + " |")


def main(path, kernel=None):
    with open(path) as f:
        rows = [{"kernel": r["kernel"], "block": int(r["block"]), "start": int(r["start_ns"]),
                 "waited": int(r["waited_ns"]), "end": int(r["end_ns"]),
                 "marks": [int(v) for k, v in r.items() if k.startswith("mark")]} for r in csv.DictReader(f)]
    ls = launches(rows)
    steps, prev = [], None
    for l in ls:
        if l["kernel"] == "embedding":
            steps.append([])
        if steps:
            l["name"] = l["kernel"] + (f" after {prev}" if prev else "")
            steps[-1].append(l)
        prev = l["kernel"]
    if len(steps) < 2:
        sys.exit("trace_step.py: fewer than two steps in the trace")
    # Each step's first launch is measured from the previous step's last end.
    per_name = defaultdict(lambda: {"share": [], "wait": [], "work": [], "early": [], "tail": [], "blocks": []})
    per_place = defaultdict(lambda: defaultdict(lambda: {"work": [], "share": []}))  # name -> place in step
    step_us, launches_per_step = [], []
    for i in range(1, len(steps)):
        before = steps[i - 1][-1]["last_end"]
        shares, seen = defaultdict(float), defaultdict(int)
        for l in steps[i]:
            d = per_name[l["name"]]
            shares[l["name"]] += (l["last_end"] - before) / 1e3
            w = l["first_waited"] if l["first_waited"] is not None else l["first_start"]
            place = per_place[l["name"]][seen[l["name"]]]
            seen[l["name"]] += 1
            place["work"].append((l["last_end"] - w) / 1e3)
            place["share"].append((l["last_end"] - before) / 1e3)
            d["wait"].append((w - before) / 1e3)
            d["work"].append((l["last_end"] - w) / 1e3)
            d["early"].append((before - l["first_start"]) / 1e3)
            d["tail"].append((l["last_end"] - l["median_end"]) / 1e3)
            d["blocks"].append(len(l["blocks"]))
            before = l["last_end"]
        for name, s in shares.items():
            per_name[name]["share"].append(s)
        step_us.append((steps[i][-1]["last_end"] - steps[i - 1][-1]["last_end"]) / 1e3)
        launches_per_step.append(len(steps[i]))
    med = statistics.median
    print(f"{len(steps) - 1} steps measured: {', '.join(f'{s:.1f}' for s in step_us)} us "
          f"({med(launches_per_step):.0f} launches a step)")
    print("| launch | a step | blocks | step share us | wait us | work us | early us | tail us |")
    print("|---|---|---|---|---|---|---|---|")
    order = sorted(per_name, key=lambda n: -med(per_name[n]["share"]))
    for name in order:
        d = per_name[name]
        n = len(d["wait"]) / (len(steps) - 1)
        print(f"| {name} | {n:.0f} | {med(d['blocks']):.0f} | {med(d['share']):.1f} | {med(d['wait']):.2f} | "
              f"{med(d['work']):.2f} | {med(d['early']):.2f} | {med(d['tail']):.2f} |")
    wait_total = sum(med(per_name[n]["wait"]) * len(per_name[n]["wait"]) / (len(steps) - 1) for n in per_name)
    print(f"a step {med(step_us):.1f} us, of which waits {wait_total:.1f} us (summed medians)")
    if kernel == "--layers":
        layers(per_place)
    elif kernel:
        marks_of(path, kernel, rows)
        by_start(steps, kernel)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(*sys.argv[1:])
