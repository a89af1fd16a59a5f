#!/usr/bin/env python3
"""The state-space search comparison (scripts/bench_state_space.sh): states per second and bytes
moved per state against the number of ranks, one line per method (rdmahash's PGAS table,
MPI_Alltoallv, one process), medians over repetitions with min-max bars. Rows that did not reach
the known answer (`correct` false) are refused.

usage: fig_state_space.py RESULTS.jsonl --out DIR
"""
import argparse
import json
import os
import statistics
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fig_state_space.py")
    ap.add_argument("results")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        rows = [json.loads(l) for l in open(a.results, encoding="utf-8") if l.strip()]
    except (OSError, json.JSONDecodeError) as e:
        print(f"fig_state_space.py: error: {a.results}: {e}", file=sys.stderr)
        return 2
    need = ("graph", "method", "ranks", "states_per_s", "bytes_moved", "states", "correct")
    if not rows or any(k not in r for r in rows for k in need):
        print(f"fig_state_space.py: error: {a.results}: expected rows of examples/state_space --json", file=sys.stderr)
        return 2
    wrong = [r for r in rows if not r["correct"]]
    if wrong:
        print(f"fig_state_space.py: error: {len(wrong)} row(s) missed the known answer: {wrong[0]}", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(a.out, exist_ok=True)
    graph = sorted({r["graph"] for r in rows})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6), layout="constrained")
    lines = []
    for method in ("rdmahash", "alltoall", "local"):
        mr = [r for r in rows if r["method"] == method]
        if not mr:
            continue
        ranks = sorted({r["ranks"] for r in mr})
        for ax, key, scale in ((ax1, "states_per_s", 1e-6), (ax2, None, 1.0)):
            meds, lo, hi = [], [], []
            for n in ranks:
                vals = [(r[key] if key else r["bytes_moved"] / r["states"]) * scale for r in mr if r["ranks"] == n]
                m = statistics.median(vals)
                meds.append(m)
                lo.append(m - min(vals))
                hi.append(max(vals) - m)
            ax.errorbar(ranks, meds, yerr=[lo, hi], marker="o", capsize=3, label=method)
        lines.append(method)
    ax1.set_ylabel("states per second (millions)")
    ax2.set_ylabel("bytes per state: rdmahash requests / Alltoallv sends")
    all_ranks = sorted({r["ranks"] for r in rows})
    for ax in (ax1, ax2):
        ax.set_xticks(all_ranks)
        ax.set_xlabel("MPI ranks (this machine: 2 cores)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Distributed BFS of {', '.join(graph)} ({rows[0]['states']:,} states, checked every run) — "
                 "medians, bars min-max", fontweight="bold")
    png = os.path.join(a.out, "state_space.png")
    fig.savefig(png, dpi=130)
    with open(os.path.join(a.out, "index.md"), "w", encoding="utf-8") as f:
        f.write(f"# state-space search\n\n- [`state_space.png`](state_space.png): states/s and bytes moved per state vs ranks, "
                f"per method, from `{a.results}`\n")
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
