#!/usr/bin/env python3
"""Runs an `rdmahash bench` command with --json and checks every line it appends.

usage: check_bench_json.py [--same-keys] -- COMMAND...

Checks the documented fields exist and that the numbers are consistent with what each
workload must do (the bench loads keys 0..records-1 and inserts new keys beyond them)."""
import json
import os
import subprocess
import sys
import tempfile

REQUIRED = ["scheme", "fabric", "ranks", "memory_nodes", "clients", "records", "slots", "load_factor",
            "workload", "ops", "seconds", "throughput_ops_per_s", "latency_us", "round_trips_per_op",
            "requests_per_op", "bytes_per_op", "outcomes"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    args = sys.argv[1:]
    same_keys = "--same-keys" in args[: args.index("--")]
    cmd = args[args.index("--") + 1:]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.jsonl")
        proc = subprocess.run(cmd + ["--json", path], capture_output=True, text=True, timeout=280)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            fail(f"exit status {proc.returncode}")
        lines = open(path).read().splitlines()
    if not lines:
        fail("no JSON lines written")
    for line in lines:
        r = json.loads(line)
        for k in REQUIRED:
            if k not in r:
                fail(f"missing field {k}")
        for k in ["p50", "p90", "p99"]:
            if k not in r["latency_us"]:
                fail(f"missing latency_us.{k}")
        for k in ["read", "write", "cas", "faa", "rpc"]:
            if k not in r["requests_per_op"]:
                fail(f"missing requests_per_op.{k}")
        w, ops, o = r["workload"], r["ops"], r["outcomes"]
        if ops <= 0 or r["throughput_ops_per_s"] <= 0:
            fail(f"{w}: no progress")
        if r["errors"] or r["value_mismatches"]:
            fail(f"{w}: {r['errors']} errors, {r['value_mismatches']} wrong values")
        if not (r["latency_us"]["p50"] <= r["latency_us"]["p90"] <= r["latency_us"]["p99"]):
            fail(f"{w}: percentiles out of order")
        if w == "raw-read":
            if abs(r["round_trips_per_op"] - 1) > 1e-9 or abs(r["requests_per_op"]["read"] - 1) > 1e-9:
                fail("raw-read must be one READ and one round trip per op")
            if abs(r["bytes_per_op"] - r["read_bytes"]) > 1e-9:
                fail("raw-read bytes per op must equal --read-bytes")
        elif w == "get":
            if o["found"] != ops:
                fail(f"get of present keys: found {o['found']} of {ops}")
            if r["round_trips_per_op"] < 1:
                fail("get needs at least one round trip")
        elif w == "get-all":
            if r["distribution"] == "uniform" and (o["found"] != ops or abs(r["matches_per_op"] - 1) > 1e-9):
                fail(f"get-all on distinct keys: found {o['found']} of {ops}, {r['matches_per_op']} matches per op")
            if r["distribution"] == "zipf" and r["matches_per_op"] < 1:
                fail("get-all on a zipf multimap returns at least one record per lookup on average")
            if r["read_size_policy"].startswith("fixed") is False and r["read_size"] < 1:
                fail("model read size must be at least one slot")
        elif w == "ycsb-load":
            if o["inserted"] != ops:
                fail(f"ycsb load phase must insert every record: {o}")
        elif w == "ycsb-run":
            if o["not_found"] != 0:
                fail(f"ycsb run phase asked for a record that is not there: {o}")
            if sum(o.values()) != ops:
                fail(f"ycsb run outcomes do not add up to ops: {o}")
        else:
            if o["found"] + o["inserted"] + o["full"] != ops:
                fail(f"{w}: outcomes do not add up to ops: {o}")
            if w == "find-or-put":
                per_client = ops // r["clients"]
                want = per_client if same_keys else ops
                if o["inserted"] + o["full"] != want:
                    fail(f"find-or-put inserted {o['inserted']} (+{o['full']} full), expected {want}")
                if r["scheme"] == "linear" and r["requests_per_op"]["cas"] < 1:
                    fail("every new linear-probing key needs a CAS")
                if r["scheme"] == "cuckoo" and abs(r["requests_per_op"]["rpc"] - 1) > 1e-9:
                    fail("cuckoo inserts are one request to the memory node")
        if r["scheme"] == "continuity":
            # Seed 002: a lookup is one READ of the segment; insert/update persist twice, delete once.
            if "persists_per_op" not in r or r.get("persistence") not in ("volatile", "pmem", "msync"):
                fail("continuity runs report persistence and persists_per_op")
            if w == "get" and (abs(r["round_trips_per_op"] - 1) > 1e-9 or abs(r["requests_per_op"]["read"] - 1) > 1e-9):
                fail("a continuity lookup is one READ in one round trip")
            if w in ("find-or-put", "mixed", "ycsb-load"):
                if abs(r["persists_per_op"] * ops - 2 * o["inserted"]) > 1e-6:
                    fail(f"continuity inserts persist twice: {r['persists_per_op']} per op, {o['inserted']} inserted")
        print(f"ok: {w} lf={r['load_factor']:.2f} ops={ops} rt/op={r['round_trips_per_op']:.2f} "
              f"outcomes={o}")
    print(f"{len(lines)} passed, 0 failed")


if __name__ == "__main__":
    main()
