#!/usr/bin/env python3
"""Seed 002 Fig. 10: continuity hashing's load factor at each resize, without added SBuckets and
with them for 1/20 and 1/10 of the segment pairs. Reads the lines that the test
ContinuityLoad.AddedSBucketsRaiseTheLoadFactorAtEachResize prints ("continuity Fig. 10, added
groups G: load at resizes 1..9 and at the final kFull (mean of 3 seeds): l1 ... l9 | full lf; ...")
from a file (scripts/fig_seed002_fig10.sh saves them) and writes OUT/seed002_fig10.png and
OUT/fig10.csv.

usage: fig_seed002_fig10.py TEST_OUTPUT --out DIR
"""
import argparse
import csv
import os
import re
import sys

LINE = re.compile(r"continuity Fig\. 10, added groups (\S+): .*?\(mean of (\d+) seeds\):((?: [0-9.]+)+) \| full ([0-9.]+)")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fig_seed002_fig10.py")
    ap.add_argument("test_output")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        text = open(a.test_output, encoding="utf-8").read()
    except OSError as e:
        print(f"fig_seed002_fig10.py: error: {a.test_output}: {e.strerror or e}", file=sys.stderr)
        return 2
    series = {}
    seeds = None
    for m in LINE.finditer(text):
        series[m.group(1)] = [float(x) for x in m.group(3).split()] + [float(m.group(4))]
        seeds = m.group(2)
    if not series:
        print(f"fig_seed002_fig10.py: error: {a.test_output}: no 'continuity Fig. 10' lines "
              "(the output of ContinuityLoad.AddedSBucketsRaiseTheLoadFactorAtEachResize)", file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(a.out, exist_ok=True)
    order = sorted(series, key=lambda g: 0 if g == "off" else 1 / int(g.split("/")[1]))
    n = max(len(v) for v in series.values())
    labels = [str(i) for i in range(1, n)] + ["full"]
    fig, ax = plt.subplots(figsize=(9, 4.6), layout="constrained")
    width = 0.8 / len(order)
    for i, g in enumerate(order):
        ys = series[g]
        ax.bar([x - 0.4 + width * (i + 0.5) for x in range(len(ys))], ys, width * 0.92,
               label="no added SBuckets" if g == "off" else f"added SBuckets for {g} of the pairs")
    ax.axhline(0.7, color="grey", linestyle=":", linewidth=1, label="seed 002: about 70 % with added SBuckets")
    ax.set_xticks(range(n), labels)
    ax.set_xlabel("resize (the table doubles from 20 buckets = 80 slots) · full: the first insert refused after 9")
    ax.set_ylabel("load factor when the resize was triggered")
    ax.set_ylim(0, 1)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.suptitle("Seed 002 Fig. 10 — continuity hashing's load factor at each resize", fontweight="bold")
    ax.set_title(f"ContinuityLoad.AddedSBucketsRaiseTheLoadFactorAtEachResize: 8-byte keys, 3 SBuckets per pair,\n"
                 f"mean of {seeds} hash seeds; load = items / all slots, added ones included", fontsize=8)
    fig.savefig(os.path.join(a.out, "seed002_fig10.png"), dpi=130)
    with open(os.path.join(a.out, "fig10.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["added_sbuckets"] + [f"resize_{l}" if l != "full" else "full" for l in labels])
        for g in order:
            w.writerow([g] + series[g])
    print(os.path.join(a.out, "seed002_fig10.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
