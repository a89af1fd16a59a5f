#!/usr/bin/env python3
"""Plots `rdmahash bench --json` results (JSON Lines) as the figures of seed 000 §5.

usage: python3 python/plot.py RESULTS.jsonl... --out DIR [--rdmahash BIN]

Reads every line of every file, groups the points, and draws whichever figures the data supports
(a figure whose data is absent is skipped with a one-line note on stderr):

  fig6_cuckoo_throughput_vs_load.png  cuckoo variants (parallel/sequential, 1/4 slots, inline/heap)
  fig7_throughput_vs_load.png         every scheme and read-size policy
  fig8_bytes_per_lookup.png           payload bytes per lookup and the effective bandwidth
  fig9_latency_depth1.png             latency p10/p25/p50/p75/p90 of depth-1 runs
  table1_round_trips_read_size.png    round trips per lookup and read size (+ table1.csv)
  fig10_throughput_vs_read_size.png   throughput vs fixed read size R per load factor, next to the
                                      model's predicted cost E[X(R)]*T(R) (`rdmahash model --curve`)
  fig11_inline_vs_heap.png            throughput by record size (key + value bytes), inline vs heap
  fig12_cluster_skew.png              matching records/s vs zipf theta, per read-size policy
  ycsb.png                            YCSB rows: throughput per workload, phase and scheme; run-phase
                                      latency p50/p90/p99
  seed001_chunks.png                  seed 001 Table 1 / Fig. 2: find-or-put round trips, chunk READs
                                      and latency over load factor per chunk size (bench --chunk list)
  seed004_ops.png                     seed 004: insertion, search, update, deletion throughput and
                                      round trips vs client processes per scheme
  seed000_table2.png                  seed 000 Table 2: lookups per actual x assumed load factor
                                      (bench --assumed-load-factor list; + table2.csv)
  points.png                          when no figure above applies (a single point, a short mixed run;
                                      up to 40 points per layout): bars of throughput, p50 latency,
                                      round trips and bytes per op

Repeated points (the `repeat` field, or the same point in several files) are drawn at their median
with min-max error bars. Points that differ in fabric, layout, depth, workload, record size or
record count are never mixed: each such group gets its own figure (a suffix names what differs).
Rows with errors or value mismatches are left out (with a note). DIR/index.md lists the PNGs.

Bad input (a missing file, a line that is not a JSON object with the bench's fields, no usable
rows) prints `plot.py: error: ...` and exits with status 2. Needs matplotlib (Debian:
python3-matplotlib) only when there is something to draw.
"""
import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys

PROG = "plot.py"
REQUIRED = ["scheme", "scheme_detail", "fabric", "ranks", "memory_nodes", "clients", "records", "slots",
            "load_factor", "target_load_factor", "key_bytes", "value_bytes", "workload", "depth",
            "read_size", "read_size_policy", "ops", "throughput_ops_per_s", "latency_us",
            "round_trips_per_op", "requests_per_op", "bytes_per_op"]
LOOKUPS = ("get", "get-all")
PERCENTILES = ("p10", "p25", "p50", "p75", "p90")

# What must be equal for two rows to share a figure. Each figure drops the fields it puts on an
# axis or on its lines and adds the ones it holds fixed.
BASE_CONTEXT = ("fabric", "ucx_tls", "ranks", "memory_nodes", "clients", "symmetric", "depth", "workload",
                "key_bytes", "value_bytes", "records", "same_keys", "distribution", "zipf_theta")
SHORT = {"fabric": "", "ucx_tls": "tls", "ranks": "r", "memory_nodes": "m", "clients": "c", "symmetric": "sym",
         "depth": "d", "workload": "", "key_bytes": "k", "value_bytes": "v", "records": "n",
         "same_keys": "same", "distribution": "", "zipf_theta": "zipf", "target_load_factor": "lf"}


class InputError(Exception):
    pass


def note(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Reading and grouping

def load_rows(paths):
    rows = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}")
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a text file (expected JSON Lines from `rdmahash bench --json`)")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{n}: not JSON ({e.msg}): {line[:60]!r}")
            if not isinstance(r, dict):
                raise InputError(f"{path}:{n}: expected a JSON object, got {type(r).__name__}")
            missing = [k for k in REQUIRED if k not in r]
            if missing:
                raise InputError(f"{path}:{n}: not an `rdmahash bench` result (missing {', '.join(missing[:4])})")
            r.setdefault("repeat", 0)
            r.setdefault("zipf_theta", 0.0)
            r.setdefault("distribution", "zipf" if r["zipf_theta"] > 0 else "uniform")
            r["_src"] = f"{path}:{n}"
            rows.append(r)
    bad = [r for r in rows if r.get("errors") or r.get("value_mismatches")]
    if bad:
        note(f"leaving out {len(bad)} row(s) with errors or value mismatches (first: {bad[0]['_src']})")
    rows = [r for r in rows if r not in bad and r["ops"] > 0 and r["throughput_ops_per_s"] > 0]
    if not rows:
        raise InputError("no usable rows (need `rdmahash bench --json` points with ops > 0 and no errors)")
    return rows


def storage(r):
    """Where records live, from scheme_detail ("linear/heap4 slot=8B", "cuckoo/inline S=4 par"):
    inline (also linear's `set` slots), heap, or another heap layout (heap4)."""
    kind = r["scheme_detail"].split("/", 1)[-1].split()[0] if "/" in r["scheme_detail"] else "inline"
    return "inline" if kind in ("inline", "set") else kind


def is_heap(r):
    return storage(r).startswith("heap")


def variant(r, with_storage=True):
    """The line a row belongs to: scheme + probing/read-size policy."""
    if r["scheme"] == "cuckoo":
        d = r["scheme_detail"]
        probe = "sequential" if d.endswith(" seq") else "parallel"
        slots = d.split("S=")[1].split()[0] if "S=" in d else "?"
        label = f"Cuckoo {probe}, {slots} slot{'s' if slots != '1' else ''}/bucket"
        return label + (f", {storage(r)}" if with_storage and is_heap(r) else "")
    if r["scheme"] == "linear":
        p = r["read_size_policy"]
        if p.startswith("fixed:"):
            label = f"Linear fixed R={p[6:]}"
        elif p == "model":
            label = "Linear model R*"
        elif p == "model-unconstrained":
            label = "Linear model R* (unconstrained)"
        elif p == "model-throughput":
            label = "Linear model R* (throughput fit)"
        elif p == "cluster":
            label = "Linear model + cluster hints"
            if r.get("clusters", 1000) != 1000:
                label += f" (m={r['clusters']})"
        else:
            label = f"Linear {p}"
        if r.get("assumed_load_factor"):
            label += f" (assumes lf {r['assumed_load_factor']:g})"
        return label + (f", {storage(r)}" if with_storage and is_heap(r) else "")
    return r["scheme_detail"]


def variant_order(label):
    """Linear fixed sizes by R, then the model policies, then cuckoo variants."""
    if label.startswith("Linear fixed R="):
        try:
            return (0, int(label[15:].split()[0].rstrip(",")), label)
        except ValueError:
            return (0, 0, label)
    if label.startswith("Linear"):
        for i, k in enumerate(("model R* (unc", "model R*", "model + cluster")):
            if k in label:
                return (1, [1, 0, 2][i], label)
        return (1, 9, label)
    return (2, 0, label)


_colors = {}


def color_of(label):
    import matplotlib
    palette = matplotlib.colormaps["tab10"].colors
    if label not in _colors:
        _colors[label] = palette[len(_colors) % len(palette)]
    return _colors[label]


class Stat:
    def __init__(self, values):
        self.values = sorted(values)
        self.med = statistics.median(self.values)
        self.lo, self.hi, self.n = self.values[0], self.values[-1], len(self.values)


def partitions(rows, keys, keep=lambda rows: True):
    """{context tuple: rows} for the given context keys, the groups that keep(rows) accepts."""
    out = {}
    for r in rows:
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return {ctx: pr for ctx, pr in out.items() if keep(pr)}


def n_lfs(rows):
    return len({r["target_load_factor"] for r in rows})


def series(rows, line_fn, x_fn, y_fn):
    """{line label: [(x, Stat)] sorted by x}: y over the rows that share a line and an x (repeats)."""
    pts = {}
    for r in rows:
        y = y_fn(r)
        if y is None or (isinstance(y, float) and math.isnan(y)):
            continue
        pts.setdefault(line_fn(r), {}).setdefault(x_fn(r), []).append(y)
    return {line: [(x, Stat(v)) for x, v in sorted(xs.items())] for line, xs in pts.items()}


def has_repeats(ser):
    return any(s.n > 1 for pts in ser.values() for _, s in pts)


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def describe(rows, omit=()):
    """One line on what ran: fabric, layout, depth, records, record size, workload, repeats."""
    def vals(k):
        return sorted({r.get(k) for r in rows if r.get(k) is not None}, key=str)

    def one(k, fmt):
        v = vals(k)
        return fmt(v[0]) if len(v) == 1 else fmt("/".join(str(x) for x in v))

    parts = []
    fab = one("fabric", str)
    tls = vals("ucx_tls")
    parts.append(f"fabric {fab}" + (f" (UCX_TLS={'/'.join(tls)})" if tls else ""))
    if all(r.get("symmetric") for r in rows):
        parts.append(one("ranks", lambda v: f"{v} ranks, symmetric (each a memory node and a client)"))
    else:
        parts.append(f"{one('ranks', str)} ranks: {one('memory_nodes', lambda v: plural(v, 'memory node') if isinstance(v, int) else f'{v} memory nodes')}"
                     f" + {one('clients', lambda v: plural(v, 'client') if isinstance(v, int) else f'{v} clients')}")
    if "depth" not in omit:
        parts.append(one("depth", lambda v: f"depth {v}"))
    if "records" not in omit:
        parts.append(one("records", lambda v: f"{v:,} records" if isinstance(v, int) else f"{v} records"))
    if "record" not in omit:
        parts.append(f"{one('key_bytes', str)}-byte keys + {one('value_bytes', str)}-byte values")
    if "workload" not in omit:
        parts.append(one("workload", lambda v: f"workload {v}"))
    if "lf" not in omit:
        parts.append(one("target_load_factor", lambda v: f"load factor {v:g}" if isinstance(v, float) else f"load factor {v}"))
    if "zipf" not in omit and any(r.get("zipf_theta") for r in rows):
        parts.append(one("zipf_theta", lambda v: f"zipf θ={v}"))
    return " · ".join(parts)


def suffix(ctx_keys, ctx, all_ctxs):
    """A file-name suffix naming what this context has that the others do not."""
    if len(all_ctxs) < 2:
        return ""
    bits, used, distinct = [], [], 1
    for i, k in enumerate(ctx_keys):
        # a key that tells no more contexts apart than the keys already named adds nothing
        n = len({tuple(c[j] for j in used + [i]) for c in all_ctxs})
        if n > distinct:
            used.append(i)
            distinct = n
            v = ctx[i]
            if isinstance(v, bool):
                v = "1" if v else "0"
            elif isinstance(v, float):
                v = f"{v:g}"
            bits.append(f"{SHORT.get(k, k)}{v}")
    return "_" + "_".join(str(b).replace("/", "-").replace(",", "-").replace(" ", "") for b in bits)


# ---------------------------------------------------------------------------------------------
# Drawing helpers

def new_figure(ncols=1, width=7.5, height=4.6):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols if ncols > 1 else width, height),
                             squeeze=False, layout="constrained")
    return fig, list(axes[0])


def title(fig, text, rows, omit=(), extra=""):
    sub = describe(rows, omit)
    if extra:
        sub += "\n" + extra
    fig.suptitle(text, fontsize=12, fontweight="bold")
    fig.text(0.5, -0.01, sub, ha="center", va="top", fontsize=8, color="0.25", wrap=True)


def save(fig, out_dir, name):
    import matplotlib.pyplot as plt
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return name


def default_style(line):
    """Cuckoo: squares (4 slots/bucket) or triangles (1), dashed when sequential; linear: circles."""
    if line.startswith("Cuckoo"):
        return {"marker": "^" if "1 slot/" in line else "s",
                "linestyle": "--" if "sequential" in line else "-"}
    return {"marker": "o", "linestyle": "-"}


def plot_lines(ax, ser, scale=1.0, style=None):
    for line in sorted(ser, key=variant_order):
        pts = ser[line]
        xs = [x for x, _ in pts]
        ys = [s.med * scale for _, s in pts]
        kw = dict(color=color_of(line), markersize=5, linewidth=1.6, label=line)
        kw.update(default_style(line))
        if style:
            kw.update(style(line))
        err = None  # (always errorbar(): the legend then keeps the lines in this order)
        if any(s.n > 1 for _, s in pts):
            err = [[(s.med - s.lo) * scale for _, s in pts], [(s.hi - s.med) * scale for _, s in pts]]
        ax.errorbar(xs, ys, yerr=err, capsize=3, **kw)


def log_axis(ax, which, base=10, ticks=None):
    """A log axis labelled with plain numbers (1, 2, 5, 10, ... or the given ticks), not powers."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    if ticks:
        axis.set_ticks(ticks)
        axis.set_ticklabels([f"{t:g}" for t in ticks])
        axis.set_minor_formatter(NullFormatter())
        return

    def minor(v, _):
        lead = v / 10 ** math.floor(math.log10(v) + 1e-9)
        return f"{v:g}" if round(lead) in (2, 5) and abs(lead - round(lead)) < 1e-6 else ""
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def legend(ax, outside=False):
    if not ax.get_legend_handles_labels()[0]:
        return
    if outside:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    else:
        ax.legend(fontsize=8, loc="best")


def repeat_note(ser_list):
    n = max((s.n for ser in ser_list for pts in ser.values() for _, s in pts), default=1)
    return f"points: median of up to {n} runs, error bars min–max" if n > 1 else "points: single runs"


def value_ticks(ax, values):
    """x ticks at the measured values; slanted when two are too close to read side by side."""
    values = sorted(values)
    ax.set_xticks(values)
    close = len(values) > 1 and min(b - a for a, b in zip(values, values[1:])) < 0.1 * (values[-1] - values[0])
    ax.set_xticklabels([f"{x:g}" for x in values], rotation=45 if close else 0)


def lf_axis(ax, rows):
    ax.set_xlabel("load factor (records / slots)")
    value_ticks(ax, {r["target_load_factor"] for r in rows})
    ax.grid(True, alpha=0.3)


# ---------------------------------------------------------------------------------------------
# Row selections

def lookup_rows(rows):
    """Lookups of present keys on uniform keys (the throughput/latency figures)."""
    return [r for r in rows if r["workload"] in LOOKUPS and not r.get("zipf_theta")
            and r["scheme"] in ("linear", "cuckoo") and not r.get("ycsb")]


def throughput_rows(rows):
    """Throughput runs: depth > 1 when there are any (depth 1 is the latency experiment)."""
    rows = lookup_rows(rows)
    deep = [r for r in rows if r["depth"] > 1]
    return deep or rows


def mops(r):
    return r["throughput_ops_per_s"] / 1e6


class Skip(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Figures. Each returns [(png name, one-line description)] or raises Skip(reason).

def memory_limit_line(ax, rows):
    """bench --memory-limit: this machine's random-read limit measured in the same run (median over
    the rows' tables), drawn as a dashed line: what one client core's memory allows."""
    limits = [r["memory_limit_ops_per_s"] for r in rows if r.get("memory_limit_ops_per_s")]
    if limits:
        pages = sorted({r["memory_limit"]["pages"] for r in rows if r.get("memory_limit")})
        ax.axhline(statistics.median(limits) / 1e6, color="black", linestyle="--", linewidth=1,
                   label=f"memory limit: random 8-byte loads, one core ({'/'.join(pages)} pages)")


def lf_figure(rows, out, name, fig_title, what, min_lfs=2):
    keys = BASE_CONTEXT
    parts = partitions(rows, keys, lambda pr: n_lfs(pr) >= min_lfs)
    made = []
    for ctx, pr in parts.items():
        ser = series(pr, variant, lambda r: r["target_load_factor"], mops)
        fig, (ax,) = new_figure()
        plot_lines(ax, ser)
        memory_limit_line(ax, pr)
        lf_axis(ax, pr)
        ax.set_ylabel("lookup throughput (million lookups/s)")
        ax.set_ylim(bottom=0)
        legend(ax, outside=len(ser) > 4)
        title(fig, fig_title, pr, omit=("lf",), extra=repeat_note([ser]))
        made.append((save(fig, out, f"{name}{suffix(keys, ctx, list(parts))}.png"), what + " — " + describe(pr, ("lf",))))
    if not made:
        raise Skip(f"needs lookup (get/get-all) rows at {min_lfs}+ load factors")
    return made



def seed001_chunks(rows, out):
    """Seed 001 Table 1 / Fig. 2: find-or-put round trips, chunk READs and latency over the load
    factor, one line per chunk size C (rows of a `--chunk` sweep) and chunk order: linear chunks
    solid, quadratic chunks (`--chunk-order quadratic`, issue 28) dashed in the same colour."""
    rows = [r for r in rows if r.get("workload") == "find-or-put" and "chunk" in r]
    quad = lambda r: r.get("chunk_order", "linear") == "quadratic"
    chunks = sorted({r["chunk"] for r in rows})
    if len(chunks) < 2:
        raise Skip("needs find-or-put rows of 2+ chunk sizes (bench --chunk 8,16,...)")
    keys = tuple(k for k in BASE_CONTEXT if k != "workload")
    parts = partitions(rows, keys, lambda pr: n_lfs(pr) >= 2)
    made = []
    for ctx, pr in parts.items():
        lf = lambda r: r["target_load_factor"]
        line = lambda r: f"C = {r['chunk']:3d}" + (" quadratic" if quad(r) else "")  # padded: sorts by C
        palette = {c: f"C{i % 10}" for i, c in enumerate(chunks)}
        style = lambda l: dict(color=palette.get(int(l.split()[2]), "C0"),
                               **({"linestyle": "--", "marker": "s"} if l.endswith("quadratic") else {}))
        fig, axes = new_figure(ncols=3, width=5.2, height=4.6)
        for ax, (y, label) in zip(axes, [(lambda r: r["round_trips_per_op"], "round trips per find-or-put"),
                                          (lambda r: r["chunks_per_op"], "chunk READs per find-or-put"),
                                          (lambda r: r["latency_us"]["p50"], "median latency (µs)")]):
            ser = series(pr, line, lf, y)
            plot_lines(ax, ser, style=style)
            lf_axis(ax, pr)
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)
        legend(axes[0])
        orders = " (linear chunks solid, quadratic dashed)" if any(quad(r) for r in pr) else ""
        title(fig, "Seed 001 Table 1 / Fig. 2 — find-or-put over load factor and chunk size" + orders, pr, omit=("lf",))
        made.append((save(fig, out, f"seed001_chunks{suffix(keys, ctx, list(parts))}.png"),
                     "find-or-put round trips, chunk READs and p50 latency vs load factor per chunk size — "
                     + describe(pr, ("lf",))))
    if not made:
        raise Skip("needs find-or-put rows of a --chunk sweep at 2+ load factors")
    return made

def seed000_table2(rows, out):
    """Seed 000 Table 2: lookup throughput of the model's read size when the load factor it assumes
    (--assumed-load-factor, columns) differs from the table's (rows); each cell beside the diagonal
    of its row (the paper's "drops by at most 20 %"), and the read size and round trips that carry
    over between machines. Writes table2.csv."""
    rows = [r for r in lookup_rows(rows) if r.get("read_size_policy") == "model" and r.get("assumed_load_factor")]
    keys = tuple(k for k in BASE_CONTEXT if k != "workload") + ("slot_bytes_key",)
    for r in rows:
        r["slot_bytes_key"] = r.get("scheme_detail")
    parts = partitions(rows, keys, lambda pr: len({r["assumed_load_factor"] for r in pr}) >= 2 and n_lfs(pr) >= 2)
    made, csv_rows = [], []
    for ctx, pr in parts.items():
        actual = sorted({r["target_load_factor"] for r in pr})
        assumed = sorted({r["assumed_load_factor"] for r in pr})
        cell = {}
        for r in pr:
            cell.setdefault((r["target_load_factor"], r["assumed_load_factor"]), []).append(r)
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 3, figsize=(14, 4.6), squeeze=False, layout="constrained")
        panels = [("throughput (million lookups/s)", lambda rs: Stat([mops(r) for r in rs]).med, "{:.2f}"),
                  ("throughput / the row's diagonal", None, "{:.2f}"),
                  ("read size R (slots) · round trips per lookup",
                   lambda rs: Stat([r["read_size"] for r in rs]).med, "{:.0f}")]
        for ax, (label, fn, fmt) in zip(axes[0], panels):
            grid = []
            for a in actual:
                line = []
                for b in assumed:
                    rs = cell.get((a, b))
                    if not rs:
                        line.append(float("nan"))
                    elif fn is not None:
                        line.append(fn(rs))
                    else:
                        diag = cell.get((a, a))
                        line.append(Stat([mops(r) for r in rs]).med / Stat([mops(r) for r in diag]).med
                                    if diag else float("nan"))
                grid.append(line)
            ax.imshow(grid, cmap="viridis", aspect="auto")
            for i, a in enumerate(actual):
                for j, b in enumerate(assumed):
                    v = grid[i][j]
                    if v != v:
                        continue
                    text = fmt.format(v)
                    if fn is panels[2][1]:
                        text += f" · {Stat([r['round_trips_per_op'] for r in cell[(a, b)]]).med:.2f}"
                    ax.text(j, i, text, ha="center", va="center", color="white", fontsize=9,
                            bbox=dict(facecolor="black", alpha=0.35, linewidth=0))
            ax.set_xticks(range(len(assumed)), [f"{b:g}" for b in assumed])
            ax.set_yticks(range(len(actual)), [f"{a:g}" for a in actual])
            ax.set_xlabel("assumed load factor (--assumed-load-factor)")
            ax.set_ylabel("actual load factor")
            ax.set_title(label, fontsize=10)
        for (a, b), rs in sorted(cell.items()):
            diag = cell.get((a, a))
            csv_rows.append([describe(pr, ("lf",)), a, b, Stat([mops(r) for r in rs]).med,
                             (Stat([mops(r) for r in rs]).med / Stat([mops(r) for r in diag]).med) if diag else "",
                             Stat([r["read_size"] for r in rs]).med, Stat([r["round_trips_per_op"] for r in rs]).med,
                             Stat([r["bytes_per_op"] for r in rs]).med, len(rs)])
        ser = {k: [(0, Stat([1] * len(v)))] for k, v in cell.items()}
        title(fig, "Seed 000 Table 2 — lookups when the model assumes another load factor", pr,
              omit=("lf",), extra=repeat_note([ser]) + " · numbers in table2.csv")
        made.append((save(fig, out, f"seed000_table2{suffix(keys, ctx, list(parts))}.png"),
                     "lookup throughput, its ratio to the row's diagonal, read size and round trips per actual "
                     "× assumed load factor — " + describe(pr, ("lf",))))
    if not made:
        raise Skip("needs linear get rows with --read-size model at 2+ --assumed-load-factor values and 2+ load factors")
    with open(os.path.join(out, "table2.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["context", "actual_load_factor", "assumed_load_factor", "mops_median", "vs_diagonal",
                    "read_size", "round_trips_per_op", "bytes_per_op", "repeats"])
        w.writerows(csv_rows)
    return made


SEED004_OPS = (("find-or-put", "insertion (find-or-put of new keys)"), ("get", "search (get of present keys)"),
               ("update", "update (present keys)"), ("erase", "deletion (present keys)"))


def seed004_ops(rows, out):
    """Seed 004's per-operation figures (insertion, search, update, deletion): throughput and round
    trips per op against the number of client processes, one line per scheme (rows of
    scripts/fig_seed004_ops.sh: one mpirun per scheme and client count)."""
    names = [w for w, _ in SEED004_OPS]
    rows = [r for r in rows if r.get("workload") in names and r.get("fabric") != "local"]
    keys = ("fabric", "ucx_tls", "memory_nodes", "symmetric", "depth", "value_bytes", "records", "distribution",
            "zipf_theta", "target_load_factor")
    parts = partitions(rows, keys, lambda pr: len({r["clients"] for r in pr}) >= 2)
    made = []
    for ctx, pr in parts.items():
        present = [(w, label) for w, label in SEED004_OPS if any(r["workload"] == w for r in pr)]
        import matplotlib.pyplot as plt
        fig, grid = plt.subplots(2, len(present), figsize=(4.2 * len(present), 7.0), squeeze=False,
                                 layout="constrained")
        for col, (w, label) in enumerate(present):
            wr = [r for r in pr if r["workload"] == w]
            line = lambda r: f"{r['scheme_detail']} k={r['key_bytes']}"
            ser = series(wr, line, lambda r: r["clients"], mops)
            ax = grid[0][col]
            plot_lines(ax, ser)
            ax.set_title(label, fontsize=10)
            ax.set_ylabel("throughput (million ops/s)")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.set_xticks(sorted({r["clients"] for r in wr}))
            ax = grid[1][col]
            plot_lines(ax, series(wr, line, lambda r: r["clients"], lambda r: r["round_trips_per_op"]))
            ax.set_xlabel("client processes")
            ax.set_ylabel("round trips per op")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.set_xticks(sorted({r["clients"] for r in wr}))
        legend(grid[0][0])
        title(fig, "Seed 004 — insertion, search, update and deletion vs clients, per scheme", pr,
              omit=("workload", "clients", "ranks", "key_bytes"))
        made.append((save(fig, out, f"seed004_ops{suffix(keys, ctx, list(parts))}.png"),
                     "throughput and round trips per op vs client processes for insertion, search, update "
                     "and deletion, one line per scheme — " + describe(pr, ("workload", "clients", "ranks", "key_bytes"))))
    if not made:
        raise Skip("needs find-or-put/get/update/erase rows over UCX at 2+ client counts (scripts/fig_seed004_ops.sh)")
    return made


def fig6(rows, out):
    rows = [r for r in throughput_rows(rows) if r["scheme"] == "cuckoo"]
    if not rows:
        raise Skip("no cuckoo lookup rows")
    return lf_figure(rows, out, "fig6_cuckoo_throughput_vs_load",
                     "Fig. 6 — Cuckoo lookups: parallel vs sequential, 1 vs 4 slots per bucket",
                     "cuckoo lookup throughput vs load factor per variant (parallel/sequential, slots per bucket)")


def fig7(rows, out):
    rows = throughput_rows(rows)
    if not rows:
        raise Skip("no lookup (get/get-all, uniform) rows")
    return lf_figure(rows, out, "fig7_throughput_vs_load",
                     "Fig. 7 — Lookup throughput vs load factor per scheme and read-size policy",
                     "lookup throughput vs load factor, one line per scheme / read-size policy")


def fig8(rows, out):
    rows = throughput_rows(rows)
    keys = BASE_CONTEXT
    parts = partitions(rows, keys, lambda pr: n_lfs(pr) >= 2)
    made = []
    for ctx, pr in parts.items():
        lf = lambda r: r["target_load_factor"]
        bytes_ser = series(pr, variant, lf, lambda r: r["bytes_per_op"])
        bw_ser = series(pr, variant, lf, lambda r: r["bytes_per_op"] * r["throughput_ops_per_s"] / 1e9)
        fig, (a, b) = new_figure(2, width=5.6)
        plot_lines(a, bytes_ser)
        a.set_ylabel("payload bytes per lookup (B)")
        log_axis(a, "y")
        a.set_title("(a) bytes read per lookup", fontsize=10)
        plot_lines(b, bw_ser)
        b.set_ylabel("effective bandwidth (GB/s of payload)")
        b.set_ylim(bottom=0)
        b.set_title("(b) bytes/lookup × lookups/s", fontsize=10)
        for ax in (a, b):
            lf_axis(ax, pr)
        legend(b, outside=True)
        title(fig, "Fig. 8 — Effective bytes per lookup and bandwidth utilisation", pr, omit=("lf",),
              extra=repeat_note([bytes_ser, bw_ser]) + " · payload only (no message headers; atomics count 8 B)")
        made.append((save(fig, out, f"fig8_bytes_per_lookup{suffix(keys, ctx, list(parts))}.png"),
                     "payload bytes per lookup and effective bandwidth vs load factor — " + describe(pr, ("lf",))))
    if not made:
        raise Skip("needs lookup rows at 2+ load factors")
    return made


def fig9(rows, out):
    rows = [r for r in lookup_rows(rows) if r["depth"] == 1
            and all(p in r["latency_us"] for p in PERCENTILES)]
    if not rows:
        raise Skip("no depth-1 lookup rows (run the bench with --depth 1)")
    keys = BASE_CONTEXT
    parts = partitions(rows, keys)
    made = []
    for ctx, pr in parts.items():
        lfs = sorted({r["target_load_factor"] for r in pr})
        lines = sorted({variant(r) for r in pr}, key=variant_order)
        # median over repeats of each percentile
        stats = {}
        for r in pr:
            stats.setdefault((variant(r), r["target_load_factor"]), []).append(r["latency_us"])
        width = 0.8 / len(lines)
        fig, (ax,) = new_figure(width=max(7.5, 1.2 + 0.35 * len(lines) * len(lfs)), height=4.8)
        labelled = set()
        for i, line in enumerate(lines):
            c = color_of(line)
            for j, lf in enumerate(lfs):
                lat = stats.get((line, lf))
                if not lat:
                    continue
                p = {k: statistics.median(l[k] for l in lat) for k in PERCENTILES}
                x = j - 0.4 + width * (i + 0.5)
                ax.bar(x, p["p50"], width * 0.85, color=c, alpha=0.55, label=None if line in labelled else line)
                labelled.add(line)
                ax.vlines(x, p["p25"], p["p75"], color="black", linewidth=2.2)
                ax.errorbar(x, p["p50"], yerr=[[p["p50"] - p["p10"]], [p["p90"] - p["p50"]]],
                            fmt="none", ecolor="black", elinewidth=0.8, capsize=3)
        ax.set_xticks(range(len(lfs)))
        ax.set_xticklabels([f"{lf:g}" for lf in lfs])
        ax.set_xlabel("load factor (records / slots)")
        ax.set_ylabel("lookup latency (µs)")
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", alpha=0.3)
        legend(ax, outside=True)
        n = max(len(v) for v in stats.values())
        title(fig, "Fig. 9 — Lookup latency at depth 1 per scheme and load factor", pr, omit=("lf",),
              extra="bar: median (p50) · thick line: p25–p75 · whiskers: p10–p90"
                    + (f" · percentiles: median of up to {n} runs" if n > 1 else ""))
        made.append((save(fig, out, f"fig9_latency_depth1{suffix(keys, ctx, list(parts))}.png"),
                     "latency p10/p25/p50/p75/p90 of depth-1 lookups per scheme and load factor — "
                     + describe(pr, ("lf",))))
    return made


def table1(rows, out):
    rows = throughput_rows(rows)
    if not rows:
        raise Skip("no lookup rows")
    keys = BASE_CONTEXT
    parts = partitions(rows, keys, lambda pr: n_lfs(pr) >= 2)
    made = []
    csv_rows = []
    for ctx, pr in parts.items():
        lf = lambda r: r["target_load_factor"]
        rt = series(pr, variant, lf, lambda r: r["round_trips_per_op"])
        rd = series(pr, variant, lf, lambda r: r["requests_per_op"].get("read", 0.0))
        rs = series(pr, variant, lf, lambda r: float(r["read_size"]))
        fig, (a, b, c) = new_figure(3, width=4.4)
        plot_lines(a, rt)
        a.set_ylabel("round trips per lookup")
        a.set_ylim(bottom=0)
        a.set_title("(a) round trips on a lookup's critical path", fontsize=10)
        plot_lines(b, rd)
        b.set_ylabel("READ requests per lookup")
        b.set_ylim(bottom=0)
        b.set_title("(b) READ requests per lookup", fontsize=10)
        plot_lines(c, rs)
        c.set_ylabel("read size R (slots per READ)")
        log_axis(c, "y")
        c.set_title("(c) slots per READ (cuckoo: per bucket)", fontsize=10)
        for ax in (a, b, c):
            lf_axis(ax, pr)
        legend(c, outside=True)
        title(fig, "Table 1 — Round trips, READs per lookup and read size per load factor", pr, omit=("lf",),
              extra=repeat_note([rt, rd, rs]) + " · numbers in table1.csv")
        made.append((save(fig, out, f"table1_round_trips_read_size{suffix(keys, ctx, list(parts))}.png"),
                     "Table 1 as panels: round trips and READ requests per lookup, read size (slots) vs load factor — "
                     + describe(pr, ("lf",))))
        groups = {}
        for r in pr:
            groups.setdefault((variant(r), r["target_load_factor"]), []).append(r)
        for (line, lfv), g in sorted(groups.items(), key=lambda kv: (variant_order(kv[0][0]), kv[0][1])):
            med = lambda f: statistics.median(f(r) for r in g)
            csv_rows.append({
                "fabric": g[0]["fabric"], "ranks": g[0]["ranks"], "memory_nodes": g[0]["memory_nodes"],
                "clients": g[0]["clients"], "depth": g[0]["depth"], "workload": g[0]["workload"],
                "key_bytes": g[0]["key_bytes"], "value_bytes": g[0]["value_bytes"], "records": g[0]["records"],
                "variant": line, "load_factor": f"{lfv:g}",
                "round_trips_per_op": f"{med(lambda r: r['round_trips_per_op']):.3f}",
                "reads_per_op": f"{med(lambda r: r['requests_per_op'].get('read', 0)):.3f}",
                "read_size_slots": f"{med(lambda r: r['read_size']):g}",
                "bytes_per_op": f"{med(lambda r: r['bytes_per_op']):.1f}",
                "throughput_ops_per_s": f"{med(lambda r: r['throughput_ops_per_s']):.0f}",
                "runs": len(g)})
    if not made:
        raise Skip("needs lookup rows at 2+ load factors")
    with open(os.path.join(out, "table1.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(csv_rows[0]))
        w.writeheader()
        w.writerows(csv_rows)
    return made


def find_rdmahash(explicit):
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    cands = [os.environ.get("RDMAHASH_BIN")]
    if os.environ.get("RDMAHASH_BUILD"):
        cands.append(os.path.join(os.environ["RDMAHASH_BUILD"], "rdmahash"))
    cands += [os.path.join(root, "build", "release", "rdmahash"), os.path.join(root, "build", "rdmahash"),
              shutil.which("rdmahash")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def model_curve(binary, records, slots, slot_bytes, r_max, present_fraction=0.0):
    """`rdmahash model --curve 1-R --json` for one table, or a reason string if it cannot run.
    `present_fraction`: the share of lookups the bench's model rows priced as stopping at their key."""
    cmd = [binary, "model", "--records", str(records), "--slots", str(slots), "--slot-bytes", f"{slot_bytes:g}",
           "--curve", f"1-{r_max}", "--present-fraction", f"{present_fraction:g}", "--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run {binary}: {e}"
    if p.returncode != 0:
        return f"`{' '.join(cmd[1:4])} ... --curve` failed: {(p.stderr or p.stdout).strip().splitlines()[-1:] or p.returncode}"
    try:
        out = json.loads(p.stdout)
        if not out.get("curve"):
            return "`rdmahash model --json` printed no curve"
        return out
    except json.JSONDecodeError:
        return "`rdmahash model --json` did not print JSON"


def slot_bytes_of(r):
    d = r["scheme_detail"]
    if "slot=" in d:
        try:
            return float(d.split("slot=")[1].split("B")[0])
        except ValueError:
            pass
    return 8.0


def fig10(rows, out, binary):
    rows = [r for r in lookup_rows(rows) if r["scheme"] == "linear" and not is_heap(r)]
    deep = [r for r in rows if r["depth"] > 1]
    rows = deep or rows
    fixed = [r for r in rows if r["read_size_policy"].startswith("fixed")]
    model_rows = [r for r in rows if r["read_size_policy"] in ("model", "model-unconstrained")
                  and not r.get("assumed_load_factor")]
    keys = BASE_CONTEXT
    parts = partitions(fixed, keys, lambda pr: max(len({r["read_size"] for r in pr if r["target_load_factor"] == lf})
                                                    for lf in {r["target_load_factor"] for r in pr}) >= 3)
    made = []
    model_skip = None
    for ctx, pr in parts.items():
        lf_label = lambda r: f"load factor {r['target_load_factor']:g}"
        ser = series(pr, lf_label, lambda r: r["read_size"], mops)
        ser = {k: v for k, v in ser.items() if len(v) >= 2}
        mr = [r for r in model_rows if tuple(r.get(k) for k in keys) == ctx]
        # the model panel
        curves = {}
        if binary is None:
            model_skip = "no rdmahash binary found (--rdmahash BIN or RDMAHASH_BIN)"
        else:
            for lf in sorted({r["target_load_factor"] for r in pr}):
                at = [r for r in pr if r["target_load_factor"] == lf]
                mn = max(1, at[0]["memory_nodes"])
                r_max = max(64, 2 * max(r["read_size"] for r in at))
                # price the curve as the model rows did (0, seed 000's model, when the run has none);
                # the fraction used is in the figure's note
                fractions = {r.get("model_present_fraction") or 0.0 for r in mr if r["target_load_factor"] == lf}
                if len(fractions) > 1:
                    model_skip = f"the model rows priced different present fractions {sorted(fractions)}"
                    curves = {}
                    break
                res = model_curve(binary, at[0]["records"] // mn, at[0]["slots"] // mn, slot_bytes_of(at[0]), r_max,
                                  fractions.pop() if fractions else 0.0)
                if isinstance(res, str):
                    model_skip = res
                    curves = {}
                    break
                curves[lf] = res
        fig, axes = new_figure(2 if curves else 1, width=5.6 if curves else 7.5)
        a = axes[0]
        plot_lines(a, ser)
        labelled = set()
        for line in ser:  # mark the R the model picked, at its own measured throughput
            lf = float(line.split()[-1])
            for pol, mk, lab in (("model", "o", "read-size model R*"), ("model-unconstrained", "s", "R* unconstrained")):
                pts = series([r for r in mr if r["target_load_factor"] == lf and r["read_size_policy"] == pol],
                             lambda r: 0, lambda r: r["read_size"], mops).get(0, [])
                for x, s in pts:
                    a.plot([x], [s.med], mk, markersize=12, markerfacecolor="none", markeredgewidth=1.8,
                           color=color_of(line))
                    if lab not in labelled:  # one black legend entry per marker kind
                        a.plot([], [], mk, markersize=10, markerfacecolor="none", color="black", label=lab)
                        labelled.add(lab)
        log_axis(a, "x", base=2, ticks=sorted({r["read_size"] for r in pr}))
        a.set_xlabel("read size R (slots per READ)")
        a.set_ylabel("lookup throughput (million lookups/s)")
        a.set_ylim(bottom=0)
        a.grid(True, alpha=0.3, which="both")
        a.set_title("(a) measured throughput", fontsize=10)
        legend(a)
        extra = repeat_note([ser])
        if curves:
            b = axes[1]
            for lf, res in curves.items():
                line = f"load factor {lf:g}"
                c = color_of(line)
                cv = res["curve"]
                b.plot([p["read_size"] for p in cv], [p["cost_ns"] / 1000 for p in cv], color=c, label=line)
                b.plot([res["read_size"]], [res["cost_ns"] / 1000], "o", markersize=10, markerfacecolor="none",
                       markeredgewidth=1.8, color=c)
                if res.get("max_read_size_by_bandwidth"):
                    b.axvline(res["max_read_size_by_bandwidth"], color=c, linestyle="--", linewidth=1)
            log_axis(b, "x", base=2, ticks=[t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
                                            if t <= max(p["read_size"] for res in curves.values() for p in res["curve"])])
            log_axis(b, "y")
            b.set_xlabel("read size R (slots per READ)")
            b.set_ylabel("predicted cost E[X(R)]·T(R) (µs)")
            b.grid(True, alpha=0.3, which="both")
            b.set_title("(b) model's predicted cost (circle: R*, dashed: bandwidth bound)", fontsize=10)
            legend(b)
            any_res = next(iter(curves.values()))
            extra += (f" · model: c={any_res.get('c_ns', 0):g} ns, α={any_res.get('alpha_ns_per_byte', 0):g} ns/B, "
                      f"l={any_res.get('link_bytes_per_s', 0) / 1e9:g} GB/s, slot {slot_bytes_of(pr[0]):g} B, "
                      f"present fraction {any_res.get('present_fraction', 0):g}")
        else:
            extra += " · model curve skipped"
        title(fig, "Fig. 10 — Throughput vs read size R, and the model's predicted cost", pr,
              omit=("lf",), extra=extra)
        made.append((save(fig, out, f"fig10_throughput_vs_read_size{suffix(keys, ctx, list(parts))}.png"),
                     "throughput vs fixed read size R per load factor (circles: the model's R*)"
                     + (", next to the model's predicted cost curve" if curves else "") + " — "
                     + describe(pr, ("lf",))))
    if not made:
        raise Skip("needs linear get rows with 3+ fixed read sizes at one load factor (--read-size 4,8,16,...)")
    if model_skip:
        note(f"fig10: model curve skipped: {model_skip}")
    return made


def fig11(rows, out):
    rows = throughput_rows(rows)
    keys = tuple(k for k in BASE_CONTEXT if k not in ("key_bytes", "value_bytes")) + ("target_load_factor",)
    parts = partitions(rows, keys, lambda pr: len({r["key_bytes"] + r["value_bytes"] for r in pr}) >= 2)
    made = []
    for ctx, pr in parts.items():
        line_fn = lambda r: variant(r, with_storage=False) + " · " + storage(r)
        ser = series(pr, line_fn, lambda r: r["key_bytes"] + r["value_bytes"], mops)
        for line in ser:  # same colour for a variant's inline and heap lines
            _colors.setdefault(line, color_of(line.rsplit(" · ", 1)[0]))
        fig, (ax,) = new_figure()
        plot_lines(ax, ser, style=lambda l: {} if l.endswith("inline") else
                   {"linestyle": "--" if l.endswith("heap") else ":", "markerfacecolor": "white"})
        sizes = sorted({r["key_bytes"] + r["value_bytes"] for r in pr})
        log_axis(ax, "x", base=2, ticks=sizes)
        ax.set_xlabel("record size: key + value bytes (B)")
        ax.set_ylabel("lookup throughput (million lookups/s)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        legend(ax, outside=True)
        heap = any(is_heap(r) for r in pr)
        title(fig, "Fig. 11 — Inline vs heap (out-of-band) records by record size", pr, omit=("record",),
              extra=repeat_note([ser]) + " · solid: inline, dashed/dotted: heap" + ("" if heap else " (no heap runs)"))
        made.append((save(fig, out, f"fig11_inline_vs_heap{suffix(keys, ctx, list(parts))}.png"),
                     "lookup throughput by record size, inline (solid) vs heap (dashed) per scheme — "
                     + describe(pr, ("record",))))
    if not made:
        raise Skip("needs lookup rows at 2+ record sizes (separate runs with --value-bytes V)")
    return made


def fig12(rows, out):
    rows = [r for r in rows if r["workload"] == "get-all" and r["scheme"] == "linear" and not r.get("ycsb")]
    deep = [r for r in rows if r["depth"] > 1]
    rows = deep or rows
    keys = tuple(k for k in BASE_CONTEXT if k not in ("distribution", "zipf_theta")) + ("target_load_factor",)
    parts = partitions(rows, keys, lambda pr: any(r.get("zipf_theta") for r in pr))
    made = []
    for ctx, pr in parts.items():
        theta = lambda r: r.get("zipf_theta") or 0.0
        ms = series(pr, variant, theta, lambda r: r.get("matches_per_s", 0) / 1e6)
        rt = series(pr, variant, theta, lambda r: r["round_trips_per_op"])
        fig, (a, b) = new_figure(2, width=5.6)
        plot_lines(a, ms)
        a.set_ylabel("matching records returned (million/s)")
        a.set_ylim(bottom=0)
        a.set_title("(a) rate of reading matching records", fontsize=10)
        plot_lines(b, rt)
        b.set_ylabel("round trips per lookup")
        log_axis(b, "y")
        b.set_title("(b) round trips per get-all lookup", fontsize=10)
        for ax in (a, b):
            ax.set_xlabel("zipf θ of key frequencies (0 = uniform)")
            value_ticks(ax, {theta(r) for r in pr})
            ax.grid(True, alpha=0.3)
        legend(b, outside=True)
        title(fig, "Fig. 12 — Cluster tracking under skew: matching records/s vs zipf θ", pr, omit=("zipf",),
              extra=repeat_note([ms, rt]))
        made.append((save(fig, out, f"fig12_cluster_skew{suffix(keys, ctx, list(parts))}.png"),
                     "matching records/s and round trips vs zipf θ for get-all, per read-size policy "
                     "(model vs cluster hints) — " + describe(pr, ("zipf",))))
    if not made:
        raise Skip("needs linear get-all rows with --distribution zipf:θ")
    return made


# ---------------------------------------------------------------------------------------------
# Figures for any rows: YCSB phases, and a bar chart of each point

LAYOUT = ("fabric", "ucx_tls", "ranks", "memory_nodes", "clients", "symmetric", "depth")
BAR_PERCENTILES = ("p50", "p90", "p99")


def scheme_label(r):
    """The scheme as the bench describes it ("linear/heap slot=8B", "cuckoo/heap S=4 par")."""
    return r["scheme_detail"]


def ycsb_name(r):
    """YCSB workload: the file's name (workloada) plus its summary when files share a name."""
    f = r.get("ycsb_file") or "ycsb"
    return os.path.basename(f)


def grouped_bars(ax, groups, bars, stat_of, scale=1.0):
    """Bars per group (x) and bar label (colour): median with min-max whiskers over repeats."""
    width = 0.8 / max(len(bars), 1)
    for i, bar in enumerate(bars):
        xs, ys, lo, hi = [], [], [], []
        for g, group in enumerate(groups):
            st = stat_of(group, bar)
            if st is None:
                continue
            xs.append(g - 0.4 + width * (i + 0.5))
            ys.append(st.med * scale)
            lo.append((st.med - st.lo) * scale)
            hi.append((st.hi - st.med) * scale)
        if xs:
            ax.bar(xs, ys, width * 0.92, yerr=[lo, hi], capsize=2, label=bar, color=color_of(bar),
                   error_kw={"linewidth": 0.8})
    ax.set_xticks(range(len(groups)))


def ycsb_figure(rows, out):
    """Throughput per YCSB workload and phase per scheme, and the run phase's latency percentiles."""
    rows = [r for r in rows if r["workload"] in ("ycsb-load", "ycsb-run")]
    parts = partitions(rows, LAYOUT)
    made = []
    for ctx, pr in parts.items():
        groups = sorted({(ycsb_name(r), r["workload"]) for r in pr})
        schemes = sorted({scheme_label(r) for r in pr})
        cell = {}
        for r in pr:
            cell.setdefault(((ycsb_name(r), r["workload"]), scheme_label(r)), []).append(r)

        def stat(key):
            return lambda g, b: Stat([key(r) for r in cell[(g, b)]]) if (g, b) in cell else None

        fig, (ax_t, ax_l) = new_figure(ncols=2, width=6.5)
        grouped_bars(ax_t, groups, schemes, stat(mops))
        ax_t.set_xticklabels([f"{w}\n{phase.split('-')[1]}" for w, phase in groups], fontsize=8)
        ax_t.set_ylabel("throughput (million ops/s)")
        ax_t.set_title("throughput per workload and phase", fontsize=10)
        ax_t.grid(True, axis="y", alpha=0.3)
        # Latency: run phases only (a load phase is all inserts), p50/p90/p99 per scheme.
        runs = [g for g in groups if g[1] == "ycsb-run"] or groups
        bars = [f"{s} {p}" for s in schemes for p in BAR_PERCENTILES]
        for s in schemes:
            for p, shade in zip(BAR_PERCENTILES, (1.0, 0.7, 0.45)):
                base = color_of(s)
                _colors.setdefault(f"{s} {p}", tuple(min(1.0, c * shade + (1 - shade)) for c in base[:3]))
        grouped_bars(ax_l, runs, bars,
                     lambda g, b: Stat([r["latency_us"][b.rsplit(" ", 1)[1]] for r in cell[(g, b.rsplit(" ", 1)[0])]])
                     if (g, b.rsplit(" ", 1)[0]) in cell else None)
        ax_l.set_xticklabels([f"{w}\n{phase.split('-')[1]}" for w, phase in runs], fontsize=8)
        ax_l.set_yscale("log")
        ax_l.set_ylabel("latency (µs), p50 / p90 / p99")
        ax_l.set_title("latency percentiles" + (" (run phase)" if runs is not groups else ""), fontsize=10)
        ax_l.grid(True, axis="y", alpha=0.3, which="both")
        ax_t.legend(fontsize=7, loc="best")
        ax_l.legend(fontsize=6, loc="best", ncol=max(1, len(schemes) // 2))
        ser = {b: [(0, Stat([1] * len(cell[k])))] for k in cell for b in [k[1]]}
        title(fig, "YCSB — throughput and latency per workload and scheme", pr,
              omit=("records", "record", "workload", "lf"),
              extra=repeat_note([ser]) + " · " + "; ".join(sorted({f"{ycsb_name(r)}: {r['ycsb']}" for r in pr})))
        made.append((save(fig, out, f"ycsb{suffix(LAYOUT, ctx, list(parts))}.png"),
                     "YCSB throughput per workload, phase and scheme, and run-phase latency p50/p90/p99 — "
                     + describe(pr, ("records", "record", "workload", "lf"))))
    if not made:
        raise Skip("needs YCSB rows (rdmahash bench --ycsb FILE)")
    return made


def point_label(r):
    """Everything that tells one point of a run from another, on two lines."""
    what = r["workload"]
    if r["workload"] == "raw-read":
        what += f" {r.get('read_bytes', '?')} B"
    elif r["workload"] in LOOKUPS:
        what += f" R={r['read_size_policy'].replace('fixed:', '')}"
    return f"{what}\nlf {r['target_load_factor']:g}"


def points_figure(rows, out):
    """A bar chart of every point (at most 40 per layout): throughput, latency, round trips and
    bytes per op. Draws any rows, so a single point or a short mixed run gets a figure too."""
    rows = [r for r in rows if r["workload"] not in ("ycsb-load", "ycsb-run")]
    parts = partitions(rows, LAYOUT + ("key_bytes", "value_bytes", "records"))
    made = []
    for ctx, pr in parts.items():
        schemes = sorted({scheme_label(r) for r in pr})
        order = []
        for r in pr:  # the order the points ran in
            if point_label(r) not in order:
                order.append(point_label(r))
        if len(order) * len(schemes) > 40:
            continue  # a sweep: the seed figures draw it
        cell = {}
        for r in pr:
            cell.setdefault((point_label(r), scheme_label(r)), []).append(r)

        def stat(key):
            return lambda g, b: Stat([key(r) for r in cell[(g, b)]]) if (g, b) in cell else None

        import matplotlib.pyplot as plt
        width = min(20.0, max(8.0, 1.2 * len(order) * max(1, len(schemes)) + 3))
        fig, axes = plt.subplots(2, 2, figsize=(width, 7.5), squeeze=False, layout="constrained")
        panels = [(mops, "throughput (million ops/s)"), (lambda r: r["latency_us"]["p50"], "latency p50 (µs)"),
                  (lambda r: r["round_trips_per_op"], "round trips per op"), (lambda r: r["bytes_per_op"], "bytes per op")]
        for ax, (key, label) in zip([a for row in axes for a in row], panels):
            grouped_bars(ax, order, schemes, stat(key))
            ax.set_xticklabels(order, fontsize=7)
            ax.set_ylabel(label, fontsize=9)
            ax.grid(True, axis="y", alpha=0.3)
        axes[0][0].legend(fontsize=7, loc="best")
        ser = {k: [(0, Stat([1] * len(v)))] for k, v in cell.items()}
        lfs = sorted({(r["load_factor_start"], r["load_factor_end"]) for r in pr if "load_factor_start" in r})
        grew = [f"{a:.3f}→{b:.3f}" for a, b in lfs if b > a]
        extra = repeat_note([ser]) + (" · load factor during inserts " + ", ".join(grew[:4]) if grew else "")
        if any("table_bytes" in r for r in pr):
            r0 = pr[0]
            extra += (f" · table {r0['table_bytes'] / 2**20:.1f} MiB, LLC {r0.get('llc_bytes', 0) / 2**20:.0f} MiB"
                      + (", cold" if r0.get("cold") else f", warmed in {r0.get('warmup_seconds', 0):.2f} s"))
        title(fig, "Benchmark points — throughput, latency, round trips and bytes per op", pr,
              omit=("workload", "lf"), extra=extra)
        made.append((save(fig, out, f"points{suffix(LAYOUT + ('key_bytes', 'value_bytes', 'records'), ctx, list(parts))}.png"),
                     "every point as bars: throughput, p50 latency, round trips and bytes per op — "
                     + describe(pr, ("workload", "lf"))))
    if not made:
        raise Skip("more than 40 points per layout: a sweep (see the figures above)" if parts else "no non-YCSB rows")
    return made


# ---------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="Plot `rdmahash bench --json` results (seed 000 §5 figures).")
    ap.add_argument("results", nargs="+", metavar="RESULTS.jsonl", help="JSON Lines written by rdmahash bench --json")
    ap.add_argument("--out", required=True, metavar="DIR", help="directory for the PNGs, table1.csv and index.md")
    ap.add_argument("--rdmahash", metavar="BIN",
                    help="rdmahash binary for Fig. 10's model curve (default: $RDMAHASH_BIN, "
                         "$RDMAHASH_BUILD/rdmahash, build/release/rdmahash, PATH)")
    args = ap.parse_args(argv)
    try:
        rows = load_rows(args.results)
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401
        except ImportError:
            raise InputError(f"matplotlib is not installed for {sys.executable} "
                             "(Debian: apt-get install python3-matplotlib, then run with /usr/bin/python3)")
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create --out {args.out}: {e.strerror or e}")
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2

    binary = find_rdmahash(args.rdmahash)
    figures = [("fig6", lambda: fig6(rows, args.out)), ("fig7", lambda: fig7(rows, args.out)),
               ("fig8", lambda: fig8(rows, args.out)), ("fig9", lambda: fig9(rows, args.out)),
               ("table1", lambda: table1(rows, args.out)), ("fig10", lambda: fig10(rows, args.out, binary)),
               ("fig11", lambda: fig11(rows, args.out)), ("fig12", lambda: fig12(rows, args.out)),
               ("ycsb", lambda: ycsb_figure(rows, args.out)),
               ("seed001_chunks", lambda: seed001_chunks(rows, args.out)),
               ("seed004_ops", lambda: seed004_ops(rows, args.out)),
               ("seed000_table2", lambda: seed000_table2(rows, args.out))]
    made = []
    for name, draw in figures:
        try:
            made += draw()
        except Skip as s:
            note(f"{name}: skipped: {s}")
    # Rows that none of the sweep figures above could draw (a single point, a short mixed run) get
    # a bar chart of every point.
    if not any(not png.startswith("ycsb") for png, _ in made):
        try:
            made += points_figure(rows, args.out)
        except Skip as s:
            note(f"points: skipped: {s}")
    if not made:
        print(f"{PROG}: error: none of the figures can be drawn from these {plural(len(rows), 'row')} "
              "(workloads: " + ", ".join(sorted({r['workload'] for r in rows})) + ")", file=sys.stderr)
        return 2
    with open(os.path.join(args.out, "index.md"), "w", encoding="utf-8") as f:
        f.write("# rdmahash bench figures\n\n")
        f.write(f"Drawn by `python/plot.py` from {len(rows)} rows of: "
                + ", ".join(f"`{p}`" for p in args.results) + ".\n\n")
        for png, what in made:
            f.write(f"- [`{png}`]({png}): {what}\n")
        if any(p.startswith("seed000_table2") for p, _ in made):
            f.write("- [`table2.csv`](table2.csv): seed 000 Table 2's numbers (throughput, its ratio to the row's "
                    "diagonal, read size, round trips and bytes per lookup) per actual and assumed load factor\n")
        if any(p.startswith("table1") for p, _ in made):
            f.write("- [`table1.csv`](table1.csv): Table 1's numbers (round trips, READs, read size, bytes and "
                    "throughput per lookup, medians over repeats) per variant and load factor\n")
    for png, _ in made:
        print(os.path.join(args.out, png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
