#!/usr/bin/env python3
"""The same-host fast path changes time, not counting: runs one `rdmahash bench --fabric ucx`
command twice, with --direct-access on and off, and checks that every point reports the same
round trips, requests, bytes, lines read, chunks and outcomes per operation (one client: the workload and the
batching are deterministic, so the figures must be identical, not merely close).

The same for --read-coalescing on/off (`--option read-coalescing`): coalescing a batch's one-sided
requests to a node into one message changes the messages on the wire, never what the engine counts
per operation.

--expect-direct-rounds (with direct-access): the rows with direct access on must have taken the
multi-get's direct reads (direct_read_rounds_per_op > 0) and those with it off must not, so that
"identical" compares the two paths and not one path with itself.

usage: direct_access_counters.py [--option direct-access|read-coalescing] [--expect-direct-rounds] -- COMMAND...
       (COMMAND without that option and --json)"""
import json
import os
import subprocess
import sys
import tempfile

COUNTED = ["round_trips_per_op", "requests_per_op", "bytes_per_op", "lines_read_per_op", "chunks_per_op", "outcomes", "ops",
           "records_start", "records_end", "workload", "load_factor"]


OPTION = "direct-access"


def run(cmd, mode, d):
    path = os.path.join(d, f"{mode}.jsonl")
    proc = subprocess.run(cmd + [f"--{OPTION}", mode, "--json", path], capture_output=True, text=True, timeout=280)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"FAIL: --{OPTION} {mode}: exit status {proc.returncode}")
        sys.exit(1)
    rows = [json.loads(line) for line in open(path)]
    key = OPTION.replace("-", "_")
    for r in rows:
        if r.get(key) != mode:
            print(f"FAIL: the JSON records {key}={r.get(key)!r}, the run used {mode}")
            sys.exit(1)
    return rows


def main():
    global OPTION
    args = sys.argv[1:sys.argv.index("--")]
    expect_direct = "--expect-direct-rounds" in args
    if expect_direct:
        args.remove("--expect-direct-rounds")
    if args[:1] == ["--option"] and len(args) == 2 and args[1] in ("direct-access", "read-coalescing"):
        OPTION = args[1]
    elif args:
        print(__doc__)
        sys.exit(2)
    cmd = sys.argv[sys.argv.index("--") + 1:]
    with tempfile.TemporaryDirectory() as d:
        on, off = run(cmd, "on", d), run(cmd, "off", d)
    if len(on) != len(off) or not on:
        print(f"FAIL: {len(on)} points with --{OPTION} on, {len(off)} off")
        sys.exit(1)
    for a, b in zip(on, off):
        if expect_direct and not (a.get("direct_read_rounds_per_op", 0) > 0 and b.get("direct_read_rounds_per_op") == 0):
            print(f"FAIL: {a['workload']}: direct read rounds per op {a.get('direct_read_rounds_per_op')} with "
                  f"direct access on, {b.get('direct_read_rounds_per_op')} off: expected > 0 and 0")
            sys.exit(1)
        for k in COUNTED:
            if a.get(k) != b.get(k):
                print(f"FAIL: {a['workload']}: {k} is {a.get(k)} with --{OPTION} on, {b.get(k)} off")
                sys.exit(1)
        print(f"ok: {a['workload']}: {a['round_trips_per_op']} RT/op, {a['requests_per_op']} requests/op, "
              f"{a['bytes_per_op']} bytes/op on and off")
    print(f"--{OPTION} on/off: counters identical: {len(on)} points")


if __name__ == "__main__":
    main()
