#!/usr/bin/env python3
"""Runs an `rdmahash bench` command with --json and checks every line it appends.

usage: check_bench_json.py [--same-keys] [--expect FIELD=VALUE]... -- COMMAND...

Checks the documented fields exist and that the numbers are consistent with what each
workload must do (the bench loads keys 0..records-1 and inserts new keys beyond them), that every
row states its table state (load factor at start and end, table bytes, cache size, warm-up), and
that repetitions of a point (--repeat) report the same outcomes: each starts from the same state."""
import json
import os
import subprocess
import sys
import tempfile

REQUIRED = ["scheme", "fabric", "ranks", "memory_nodes", "clients", "records", "slots", "load_factor",
            "workload", "ops", "seconds", "throughput_ops_per_s", "client_cpu_ns_per_op", "latency_us", "round_trips_per_op",
            "requests_per_op", "bytes_per_op", "lines_read_per_op", "outcomes", "load_factor_start", "load_factor_end",
            "table_bytes", "llc_bytes", "warmup_seconds", "cold", "keep_table", "records_start", "records_end",
            "huge_pages"]

# Fraction of new keys each insert workload draws (OpStream).
INSERT_FRACTION = {"mixed": 0.5, "read-intensive": 0.2, "write-intensive": 0.8}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    args = sys.argv[1:]
    opts = args[: args.index("--")]
    same_keys = "--same-keys" in opts
    # --expect FIELD=VALUE: every row's FIELD (a top-level string field) is VALUE.
    expect = [opts[i + 1].split("=", 1) for i, a in enumerate(opts) if a == "--expect"]
    # --chunk-sweep: the find-or-put rows of each load factor sweep --chunk, and a larger chunk
    # needs fewer chunk READs per insert (seed 001 Table 1): C_min's at least 1.2x C_max's.
    chunk_sweep = "--chunk-sweep" in opts
    # --assumed-sweep: get rows of each load factor sweep --assumed-load-factor (with 0, the table's):
    # a model read size depends only on the load factor it assumes, so the row assuming the table's
    # own load factor reads as the row with 0, and one assumed value reads the same at every load
    # factor; two assumed values must not all read alike (the value reached the clients).
    assumed_sweep = "--assumed-sweep" in opts
    # --memory-limit: every row carries the probe's limit, measured on a region of the table's size.
    memory_limit = "--memory-limit" in opts
    # --expect-unspun: hybrid clients on contended CPUs slept without spinning (client_unspun_sleeps_per_op > 0).
    expect_unspun = "--expect-unspun" in opts
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
    same_point = {}  # the point without its repetition -> outcomes of its first repetition
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
        for field, value in expect:
            if str(r.get(field)) != value:
                fail(f"{field} is {r.get(field)!r}, expected {value!r}")
        # How UCX clients waited (ClientWait): poll never sleeps, event sleeps whenever progress finds
        # nothing (over TCP a reply is never there at once), and neither has a spin to skip.
        if "client_wait" in r:
            for k in ["client_sleeps_per_op", "client_unspun_sleeps_per_op"]:
                if k not in r:
                    fail(f"missing field {k}")
            sleeps, unspun = r["client_sleeps_per_op"], r["client_unspun_sleeps_per_op"]
            if r["client_wait"] == "poll" and sleeps != 0:
                fail(f"client_wait poll slept {sleeps} times per op")
            if r["client_wait"] == "event" and "tcp" in r.get("ucx_transports", "") and r["ops"] and sleeps <= 0:
                fail("client_wait event over TCP never slept")
            if r["client_wait"] in ("poll", "event") and unspun != 0:
                fail(f"client_wait {r['client_wait']} counted sleeps without its spin, which it does not have ({unspun} per op)")
            if expect_unspun and not unspun > 0:
                fail("hybrid clients on contended CPUs never slept without spinning first")
            if unspun > sleeps:
                fail(f"{unspun} sleeps without a spin per op but {sleeps} sleeps in all")
        w, ops, o = r["workload"], r["ops"], r["outcomes"]
        # The table state the row states: the end is the start plus what the point inserted.
        # (race grows: `slots` is the count at the end and load_factor_start used the count at the start)
        if r["records_end"] - r["records_start"] != o["inserted"] - o["erased"]:
            fail(f"{w}: {r['records_start']} -> {r['records_end']} records but {o['inserted']} inserts, {o['erased']} erases")
        if r["slots"] <= 0 or abs(r["load_factor_end"] - r["records_end"] / r["slots"]) > 1e-9:
            fail(f"{w}: load factor at the end {r['load_factor_end']} is not {r['records_end']} records / {r['slots']} slots")
        if r.get("resizes", 0) == 0 and abs(r["load_factor_start"] - r["records_start"] / r["slots"]) > 1e-9:
            fail(f"{w}: load factor at the start {r['load_factor_start']} is not {r['records_start']} / {r['slots']} slots")
        if not r["keep_table"]:
            want_start = 0 if w == "ycsb-load" else r["records"]  # YCSB loads into an empty table
            if r["records_start"] != want_start:
                fail(f"{w}: starts with {r['records_start']} records, not from the loaded table ({want_start})")
            if r["scheme"] != "race" and w != "ycsb-load" and abs(r["load_factor_start"] - r["load_factor"]) > 1e-9:
                fail(f"{w}: starts at load factor {r['load_factor_start']}, not the loaded {r['load_factor']}")
        if r["table_bytes"] < r["slots"] * 8 or r["llc_bytes"] < 0:
            fail(f"{w}: table_bytes {r['table_bytes']} smaller than its {r['slots']} slots")
        if (r["warmup_seconds"] > 0) == r["cold"]:
            fail(f"{w}: warmup_seconds {r['warmup_seconds']} with cold={r['cold']}")
        if not same_keys:
            key = json.dumps({k: v for k, v in r.items() if k in (
                "scheme_detail", "target_load_factor", "workload", "read_size_policy", "read_bytes")}, sort_keys=True)
            first = same_point.setdefault(key, o)
            if first != o:
                fail(f"{w}: repetition {r['repeat']} reports {o}, the first repetition {first}")
        if ops <= 0 or r["throughput_ops_per_s"] <= 0:
            fail(f"{w}: no progress")
        # Each client's CPU time is at most its wall time, which is at most `seconds` (the longest).
        cpu = r["client_cpu_ns_per_op"] * ops / 1e9
        if not 0 < cpu <= r["seconds"] * r["clients"] * 1.01 + 0.01:
            fail(f"{w}: client CPU {cpu:.4f} s for {r['clients']} clients of at most {r['seconds']:.4f} s each")
        if r["errors"] or r["value_mismatches"]:
            fail(f"{w}: {r['errors']} errors, {r['value_mismatches']} wrong values")
        if not (r["latency_us"]["p50"] <= r["latency_us"]["p90"] <= r["latency_us"]["p99"]):
            fail(f"{w}: percentiles out of order")
        if w == "raw-read":
            if abs(r["round_trips_per_op"] - 1) > 1e-9 or abs(r["requests_per_op"]["read"] - 1) > 1e-9:
                fail("raw-read must be one READ and one round trip per op")
            if abs(r["bytes_per_op"] - r["read_bytes"]) > 1e-9:
                fail("raw-read bytes per op must equal --read-bytes")
            # 8-byte-aligned READs of B bytes span ceil(B/64) lines, or one more when they cross one
            # (an 8-byte READ never does).
            lo = (r["read_bytes"] + 63) // 64
            hi = lo if r["read_bytes"] <= 8 else lo + 1
            if not lo - 1e-9 <= r["lines_read_per_op"] <= hi + 1e-9:
                fail(f"raw-read of {r['read_bytes']} B: {r['lines_read_per_op']} lines per op, expected {lo}..{hi}")
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
        elif w == "update":
            # Loaded keys only: every update finds its key (the table is reloaded before the point).
            if o["updated"] != ops or sum(o.values()) != ops:
                fail(f"update of loaded keys: {o}, expected {ops} updated")
            if r["records_end"] != r["records_start"]:
                fail(f"update changed the record count: {r['records_start']} -> {r['records_end']}")
        elif w == "erase":
            # Each client erases its own loaded keys (indices c, c + n, ...): all distinct while
            # ops x clients fits the loaded records (with --same-keys one client erases each key).
            loaded = r["records_start"]
            distinct = min(ops // r["clients"] if same_keys else ops, loaded)
            if o["erased"] != distinct or o["erased"] + o["not_found"] != ops or sum(o.values()) != ops:
                fail(f"erase of {ops} loaded keys ({loaded} loaded): {o}, expected {distinct} erased")
            if r["records_end"] != loaded - o["erased"]:
                fail(f"erase: {loaded} -> {r['records_end']} records after {o['erased']} erases")
        elif w == "ycsb-load":
            if o["inserted"] != ops:
                fail(f"ycsb load phase must insert every record: {o}")
        elif w == "ycsb-run":
            if o["not_found"] != 0:
                fail(f"ycsb run phase asked for a record that is not there: {o}")
            if o["full"] != 0:
                fail(f"ycsb run phase found the table (or its heap) full: it is sized for the run: {o}")
            if sum(o.values()) != ops:
                fail(f"ycsb run outcomes do not add up to ops: {o}")
        else:
            # The test tables are sized never to fill: a `full` outcome is a lost insert, not a success.
            if o["full"]:
                fail(f"{w}: {o['full']} operations reported the table full: {o}")
            if o["found"] + o["inserted"] != ops:
                fail(f"{w}: outcomes do not add up to ops: {o}")
            if w in INSERT_FRACTION and ops >= 1000:
                frac = o["inserted"] / ops
                if abs(frac - INSERT_FRACTION[w]) > 0.05:
                    fail(f"{w}: {frac:.3f} of the ops inserted, expected {INSERT_FRACTION[w]}")
            if w == "find-or-put":
                per_client = ops // r["clients"]
                want = per_client if same_keys else ops
                if o["inserted"] != want:
                    fail(f"find-or-put inserted {o['inserted']}, expected {want}")
                # (with --same-keys one client inserts each key; the others may find it CAS-free)
                if r["scheme"] == "linear" and r["requests_per_op"]["cas"] * ops < o["inserted"] - 1e-6:
                    fail("every new linear-probing key needs a CAS")
                if r["scheme"] == "cuckoo" and abs(r["requests_per_op"]["rpc"] - 1) > 1e-9:
                    fail("cuckoo inserts are one request to the memory node")
                if r["scheme"] == "race" and o["full"]:
                    fail("race grows: find-or-put must never answer full")
        if r["scheme"] == "race":
            for k in ("resizes", "directory_depth"):
                if k not in r:
                    fail(f"race: missing field {k}")
            # Memory efficiency: every split of the point reports how full its subtable was.
            sl = r.get("split_load_factor")
            if r["resizes"] and (not sl or sl["splits"] != r["resizes"]):
                fail(f"race: {r['resizes']} splits but split_load_factor {sl}")
            if sl and not (0 < sl["min"] <= sl["mean"] <= sl["max"] <= 1):
                fail(f"race: split load factors out of order or range: {sl}")
            if w == "get" and r["round_trips_per_op"] < 2:
                fail("race get: buckets then blocks, at least 2 round trips")
        if r["scheme"] == "continuity":
            # Seed 002: a lookup is one READ of the segment; insert/update persist twice, delete once.
            if "persists_per_op" not in r or r.get("persistence") not in ("volatile", "pmem", "msync"):
                fail("continuity runs report persistence and persists_per_op")
            if r.get("added_sbuckets", "0") != "0" and r.get("max_resizes", 0) == 0:
                # Added SBuckets: one READ, and a second of the pair's added group when the pair
                # claims added slots and the key is not in its segment.
                if w == "get" and not (1 - 1e-9 <= r["requests_per_op"]["read"] <= 2 + 1e-9
                                       and abs(r["round_trips_per_op"] - r["requests_per_op"]["read"]) < 1e-9):
                    fail(f"continuity lookup with added SBuckets: {r['requests_per_op']['read']} READs per lookup")
            elif r.get("max_resizes", 0) == 0:
                if w == "get" and (abs(r["round_trips_per_op"] - 1) > 1e-9 or abs(r["requests_per_op"]["read"] - 1) > 1e-9):
                    fail("a continuity lookup is one READ in one round trip")
            elif w == "get" and (r.get("resizing_start") is not False or r.get("resizing_end") is not False):
                # A resize in progress (or unknown): a lookup is one READ, or two across a MOVED or
                # UNBORN mark, plus learning the levels.
                if r["requests_per_op"]["read"] > 2 + r["clients"] * r["depth"] * r["memory_nodes"] * r["max_resizes"] / ops:
                    fail(f"continuity get during a resize: {r['requests_per_op']['read']} READs per lookup")
            elif w == "get":
                # No resize is in progress (and a get point starts none): one READ per lookup, plus
                # the READs that teach each client the level: each of its first `depth` lookups per
                # memory node (issued before any learned it) follows one MOVED per level.
                extra = r["requests_per_op"]["read"] * ops - ops
                bound = r["clients"] * r["depth"] * r["memory_nodes"] * r["max_resizes"]
                if r.get("added_sbuckets", "0") != "0":
                    bound += ops  # plus at most one READ of an added group per lookup
                if extra < -1e-6 or extra > bound + 1e-6:
                    fail(f"continuity get with resizes: {r['requests_per_op']['read']} READs per lookup: "
                         f"{extra:.0f} extra READs, more than the {bound} needed to learn the level")
                if r["fabric"] == "local" and not (0 < r.get("resizes", -1) <= r["max_resizes"]):
                    fail(f"continuity with --max-resizes {r['max_resizes']}: resizes {r.get('resizes')} not reported "
                         f"or out of range")
            if w in ("find-or-put", "mixed", "ycsb-load"):
                if abs(r["persists_per_op"] * ops - 2 * o["inserted"]) > 1e-6:
                    fail(f"continuity inserts persist twice: {r['persists_per_op']} per op, {o['inserted']} inserted")
        print(f"ok: {w} lf={r['load_factor']:.2f} ops={ops} rt/op={r['round_trips_per_op']:.2f} "
              f"outcomes={o}")
    if chunk_sweep:
        by_lf = {}
        for line in lines:
            r = json.loads(line)
            if r["workload"] == "find-or-put":
                by_lf.setdefault(r["target_load_factor"], {})[r["chunk"]] = r["chunks_per_op"]
        for lf, per_chunk in by_lf.items():
            if len(per_chunk) < 2:
                fail(f"--chunk sweep at load factor {lf}: rows for chunks {sorted(per_chunk)} only")
            lo, hi = min(per_chunk), max(per_chunk)
            if not per_chunk[lo] >= 1.2 * per_chunk[hi]:
                fail(f"--chunk sweep at load factor {lf}: {per_chunk[lo]:.3f} chunk READs per op at C={lo}, "
                     f"{per_chunk[hi]:.3f} at C={hi}: the chunk size did not reach the clients")
            print(f"ok: chunk sweep lf={lf} chunks/op {per_chunk}")
    # The pages of memory node 0's region, where the reporting process hosts it (not --connect):
    # what smaps says; --huge-pages off asks for 4 KB pages and must get them.
    for line in lines:
        r = json.loads(line)
        if r["fabric"] in ("local", "ucx"):
            if r.get("region_pages") not in ("hugetlb", "thp", "4k"):
                fail(f"row without the region's pages: {r.get('region_pages')}")
            if not 0 <= r["region_huge_fraction"] <= 1 or r["region_page_kb"] < 4:
                fail(f"region pages out of range: {r['region_huge_fraction']}, {r['region_page_kb']} kB")
            if r["huge_pages"] == "off" and (r["region_pages"] != "4k" or r["region_huge_fraction"] != 0):
                fail(f"--huge-pages off, but the region has {r['region_pages']} pages "
                     f"({r['region_huge_fraction']:.2f} huge)")
        elif "region_pages" in r and r["fabric"] != "sim":  # sim: its own in-process regions
            fail(f"fabric {r['fabric']}: region_pages reported for a region this process does not host")
    if memory_limit:
        for line in lines:
            r = json.loads(line)
            m = r.get("memory_limit")
            if not m or not r.get("memory_limit_ops_per_s", 0) > 0 or not m["dependent_ns"] > 0:
                fail(f"row without a measured memory limit: {m}")
            if not (r["table_bytes"] - 64 < m["bytes"] <= r["table_bytes"]):
                fail(f"memory limit probed {m['bytes']} bytes, the table has {r['table_bytes']}")
            # What the kernel gave the probe (from smaps): an anonymous mapping is on THP or 4 KB
            # pages; asked for 4 KB (MADV_NOHUGEPAGE) it must get no huge page.
            if m.get("pages_given") not in ("thp", "4k") or not 0 <= m.get("huge_fraction", -1) <= 1:
                fail(f"memory limit without the pages it was given: {m}")
            if m["pages"] == "4k" and (m["pages_given"] != "4k" or m["huge_fraction"] != 0):
                fail(f"memory limit probe asked for 4 KB pages, got {m['pages_given']} ({m['huge_fraction']:.2f} huge)")
            # Probed again on the same region right after the row's point: both sides of the row.
            after = r.get("memory_limit_after_ops_per_s", 0)
            if not after > 0 or m.get("after_batched_ops_per_s") != after or not m.get("after_dependent_ns", 0) > 0 \
                    or not m.get("after_probe_seconds", 0) > 0:
                fail(f"row without the memory limit measured after its point: {m}")
            if after == r["memory_limit_ops_per_s"]:
                fail(f"the limit after the point is the one before it (not measured again): {m}")
        afters = [json.loads(line)["memory_limit_after_ops_per_s"] for line in lines]
        if len(set(afters)) != len(afters):
            fail(f"rows share one limit-after ({afters}): each point's is measured after it")
        print(f"ok: memory limit {m['batched_ops_per_s'] / 1e6:.1f} M loads/s before, {m['after_batched_ops_per_s'] / 1e6:.1f} after, "
              f"{m['dependent_ns']:.0f} ns dependent, "
              f"{m['pages']} pages asked, {m['pages_given']} given ({m['huge_fraction']:.2f} huge), {m['bytes']} bytes")
    if assumed_sweep:
        rs = {}
        for line in lines:
            r = json.loads(line)
            if r["workload"] == "get":
                rs.setdefault((r["target_load_factor"], r["assumed_load_factor"]), set()).add(r["read_size"])
        for (lf, a), sizes in rs.items():
            if len(sizes) != 1:
                fail(f"load factor {lf}, assumed {a}: read sizes {sorted(sizes)} differ between repetitions")
        lfs = sorted({lf for lf, _ in rs})
        assumed = sorted({a for _, a in rs if a})
        if len(lfs) < 2 or len(assumed) < 2:
            fail(f"--assumed-sweep needs get rows at 2+ load factors and 2+ assumed values: {sorted(rs)}")
        for lf in lfs:
            if (lf, lf) in rs and rs[(lf, lf)] != rs.get((lf, 0.0)):
                fail(f"load factor {lf}: assuming it read {rs[(lf, lf)]}, the table's own read {rs.get((lf, 0.0))}")
        for a in assumed:
            per_lf = {lf: rs[(lf, a)] for lf in lfs if (lf, a) in rs}
            if len({min(v) for v in per_lf.values()}) != 1:
                fail(f"assumed {a}: read sizes {per_lf} differ between load factors")
        if len({min(rs[(lfs[0], a)]) for a in assumed}) < 2:
            fail(f"assumed values {assumed} all read {rs[(lfs[0], assumed[0])]}: the assumption did not reach the clients")
        print(f"ok: assumed-load-factor sweep, read sizes {dict(sorted((k, min(v)) for k, v in rs.items()))}")
    print(f"{len(lines)} passed, 0 failed")


if __name__ == "__main__":
    main()
