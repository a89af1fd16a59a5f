#!/usr/bin/env python3
"""--multi-get changes how a client posts its gets, not what they cost: runs one `rdmahash bench`
command with --multi-get off and on and checks that each get and raw-read row has the same round
trips, requests and bytes per op (to the last digit: the key sequence is the seed's) and the same
outcomes, every get found with its value, and the JSON says which mode ran and how many ops ran as
a multi-get (multi_get_ops: all of them with on, none with off; --no-multi: the scheme has none, so
its gets run as with off while raw READs still batch). Find-or-put rows (a multi-find-or-put with
on): the same outcomes and WRITEs per op, all ops batched (--no-multi-find-or-put: none).

usage: multi_get_same_cost.py [--no-multi] [--no-multi-find-or-put] [--exact-round-trips] -- COMMAND...   (COMMAND without --multi-get and --json)"""
import json
import os
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(cmd, mode, d):
    path = os.path.join(d, f"{mode}.jsonl")
    proc = subprocess.run(cmd + ["--multi-get", mode, "--json", path], capture_output=True, text=True, timeout=280)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        fail(f"--multi-get {mode}: exit status {proc.returncode}")
    rows = [json.loads(l) for l in open(path)]
    if not rows:
        fail(f"--multi-get {mode}: no rows")
    for r in rows:
        if r.get("multi_get") != mode:
            fail(f"row says multi_get={r.get('multi_get')!r}, ran {mode}")
    return rows


def main():
    cmd = sys.argv[sys.argv.index("--") + 1:]
    has_multi = "--no-multi" not in sys.argv[1:sys.argv.index("--")]
    with tempfile.TemporaryDirectory() as d:
        off, on = run(cmd, "off", d), run(cmd, "on", d)
    if len(off) != len(on):
        fail(f"{len(off)} rows off, {len(on)} on")
    multi = 0
    for a, b in zip(off, on):
        point = (a["workload"], a["load_factor"], a.get("read_size"))
        if point != (b["workload"], b["load_factor"], b.get("read_size")):
            fail(f"rows out of order: {point} vs {(b['workload'], b['load_factor'], b.get('read_size'))}")
        # A multi-find-or-put posts insert's requests, except the READ of a chunk after the one that
        # answers (insert posts it, the batch does not): the outcomes and WRITEs (2 per insert) are
        # the same; round trips too on one client, but --speculative-claim auto decides from the
        # client's recent claims, noted in another order by the rounds, so only outcomes are exact.
        same = ("outcomes", "ops", "errors", "value_mismatches") if a["workload"] == "find-or-put" else (
            "round_trips_per_op", "requests_per_op", "bytes_per_op", "lines_read_per_op", "outcomes", "ops", "errors", "value_mismatches")
        for f in same:
            if a.get(f) != b.get(f):
                fail(f"{point}: {f} off {a.get(f)} != on {b.get(f)}")
        if a["workload"] == "find-or-put":
            # --exact-round-trips: one client, a fixed --speculative-claim: insert's round trips to
            # the last digit, and its CASes (READs may be fewer: insert reads a chunk ahead of the one
            # that answers).
            if "--exact-round-trips" in sys.argv[1:sys.argv.index("--")]:
                for f in ("round_trips_per_op",):
                    if a[f] != b[f]:
                        fail(f"{point}: {f} off {a[f]} != on {b[f]}")
                if a["requests_per_op"]["cas"] != b["requests_per_op"]["cas"]:
                    fail(f"{point}: CASes per op off {a['requests_per_op']['cas']} != on {b['requests_per_op']['cas']}")
                if b["requests_per_op"]["read"] > a["requests_per_op"]["read"]:
                    fail(f"{point}: more READs per op with on ({b['requests_per_op']['read']}) than off ({a['requests_per_op']['read']})")
            if a["requests_per_op"]["write"] != b["requests_per_op"]["write"]:
                fail(f"{point}: WRITEs per op off {a['requests_per_op']['write']} != on {b['requests_per_op']['write']}")
            out = b["outcomes"]
            if out.get("inserted", 0) == 0 or b.get("errors", 0) != 0:
                fail(f"{point}: find-or-puts of new keys must insert: {out}, errors {b.get('errors')}")
            multi += 1
        for mode, r in (("off", a), ("on", b)):
            want = r["ops"] if mode == "on" and (has_multi or r["workload"] == "raw-read") else 0
            if r["workload"] == "find-or-put" and "--no-multi-find-or-put" in sys.argv[1:sys.argv.index("--")]:
                want = 0
            if r.get("multi_get_ops") != want:
                fail(f"{point}: --multi-get {mode}: multi_get_ops {r.get('multi_get_ops')}, expected {want}")
        if a["workload"] == "get":
            out = b["outcomes"]
            if out.get("found") != b["ops"] or b.get("value_mismatches", 0) != 0 or b.get("errors", 0) != 0:
                fail(f"{point}: gets of loaded keys must all be found with their values: {out}")
            multi += 1
        if a["workload"] == "find-or-put":
            print(f"{point}: RT/op off {a['round_trips_per_op']}, on {b['round_trips_per_op']}; "
                  f"ops/s off {a['throughput_ops_per_s']:.0f}, on {b['throughput_ops_per_s']:.0f}")
            continue
        print(f"{point}: RT/op {b['round_trips_per_op']}, bytes/op {b['bytes_per_op']} in both modes; "
              f"ops/s off {a['throughput_ops_per_s']:.0f}, on {b['throughput_ops_per_s']:.0f}")
    if multi == 0:
        fail("no get or find-or-put rows")
    print("OK")


if __name__ == "__main__":
    main()
