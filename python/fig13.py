#!/usr/bin/env python3
"""Seed 000 Fig. 13: the read size the cluster-tracking model picks at read offsets x from the start
of a known cluster of L slots (the cluster spans x = 0 … L-1), beside the cluster-oblivious model's,
per load factor. Reads JSON Lines written by scripts/fig_seed000_fig13.sh — one `rdmahash model
--json` object per (load factor, x, hint or not), with the script's `x` and `hint` fields added —
and writes OUT/seed000_fig13.png and OUT/fig13.csv.

usage: fig13.py ROWS.jsonl --out DIR
"""
import argparse
import csv
import json
import os
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fig13.py")
    ap.add_argument("rows")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        rows = [json.loads(line) for line in open(a.rows, encoding="utf-8") if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        print(f"fig13.py: error: {a.rows}: {e}", file=sys.stderr)
        return 2
    need = ("x", "hint", "load_factor", "read_size", "cluster_span")
    if not rows or any(k not in r for r in rows for k in need):
        print(f"fig13.py: error: {a.rows}: expected rows of scripts/fig_seed000_fig13.sh with {', '.join(need)}",
              file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(a.out, exist_ok=True)
    span = rows[0]["cluster_span"]
    fig, ax = plt.subplots(figsize=(8, 4.6), layout="constrained")
    colors = {}
    for lf in sorted({r["load_factor"] for r in rows}):
        for hint, style in ((False, "--"), (True, "-")):
            pts = sorted((r["x"], r["read_size"]) for r in rows if r["load_factor"] == lf and r["hint"] == hint)
            label = f"load {lf:g}, " + ("cluster-tracking" if hint else "cluster-oblivious")
            line = ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o" if hint else None,
                           markersize=3, label=label, color=colors.get(lf))
            colors[lf] = line[0].get_color()
    ax.axvspan(-0.5, span - 0.5, color="grey", alpha=0.15, label=f"the cluster (x = 0 … {span - 1})")
    ax.set_xlabel("read offset x from the cluster's start (slots)")
    ax.set_ylabel("read size R* (slots)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    r0 = rows[0]
    fig.suptitle("Seed 000 Fig. 13 — read size chosen near a known cluster", fontweight="bold")
    ax.set_title(f"`rdmahash model`: {r0['records']:,} records, {r0['slot_bytes']:g}-byte slots, "
                 f"c = {r0['c_ns']:g} ns, α = {r0['alpha_ns_per_byte']:g} ns/B, "
                 + ("bandwidth-constrained" if r0["constrained"] else "unconstrained"), fontsize=9)
    png = os.path.join(a.out, "seed000_fig13.png")
    fig.savefig(png, dpi=130)
    with open(os.path.join(a.out, "fig13.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["load_factor", "x", "cluster_tracking", "read_size", "expected_reads", "cost_ns"])
        for r in sorted(rows, key=lambda r: (r["load_factor"], r["hint"], r["x"])):
            w.writerow([r["load_factor"], r["x"], int(r["hint"]), r["read_size"], r["expected_reads"], r["cost_ns"]])
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
