#!/usr/bin/env python3
"""--fabric sim (src/fabric/sim_fabric.cpp): one check per invocation, named by the first argument.

  counters  BIN   round trips, requests and bytes per op (and outcomes) equal to --fabric local's
                  for several schemes and workloads (one client: the same key stream on both)
  determinism BIN two runs of a contended multi-client run give identical rows (throughput,
                  latencies, counters), wall-clock fields aside
  closed-form BIN single-client raw READs against the profile's constants: depth 1 (latency + CPU)
                  and a bandwidth-bound batch, throughput equal to the closed form to 1e-9
  bad-options BIN bad --sim-profile files and values, options that do not apply: exit 2 + message
  measured  BIN   client_cpu = measured: the client's CPU is charged (the depth-1 period exceeds the
                  fixed closed form, sim_client_cpu_ns > 0 and at most the process's CPU time,
                  client_cpu_scale multiplies it), counters equal to fixed mode's; no wall-clock bounds
  race-helping BIN 64 simulated clients inserting into a growing RACE table (32 splits, edr, deterministic)
                  spend at most 2x the CASes per insert of one client: a client that meets another's split
                  waits for its release (help_patience) instead of repeating its copy (100x before)
  calibrated BIN  `calibrate --write-sim-profile`: the profile's client_batch_ns / client_request_ns are
                  the calibration's measured Transport::execute CPU (per batch, per READ), not c and 1/rho0;
                  the profile runs (client_cpu = measured) with the local fabric's counters
"""
import json
import os
import resource
import subprocess
import sys
import tempfile

# Fields that measure the machine, not the simulation.
WALL_FIELDS = {"sim_wall_seconds", "sim_events_per_s", "client_cpu_ns_per_op", "warmup_seconds", "llc_bytes",
               "memory_limit_ops_per_s", "memory_limit_after_ops_per_s", "host", "hostname", "timestamp", "cpu_model", "git"}


def run(binary, args, tmp, name):
    path = os.path.join(tmp, name + ".json")
    if os.path.exists(path):
        os.remove(path)
    cmd = [binary, "bench", "--no-progress", "--quiet", "--json", path] + args
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr))
    with open(path) as f:
        return [json.loads(line) for line in f]


def protocol(row):
    keys = ["round_trips_per_op", "requests_per_op", "bytes_per_op", "chunks_per_op", "ops", "errors",
            "matches_per_op", "found", "inserted", "full", "missing", "value_mismatches"]
    return {k: row.get(k) for k in keys if k in row}


def counters(binary, tmp):
    cases = [
        ["--scheme", "linear", "--workload", "get,find-or-put", "--read-size", "4"],
        ["--scheme", "linear", "--storage", "heap", "--value-bytes", "16", "--workload", "get,find-or-put,update,erase"],
        ["--scheme", "cuckoo", "--value-bytes", "16", "--workload", "get,find-or-put"],
        ["--scheme", "race", "--workload", "get,find-or-put"],
        ["--scheme", "hopscotch", "--value-bytes", "16", "--load-factor", "0.8", "--workload", "get,find-or-put"],
        ["--scheme", "cluster", "--value-bytes", "16", "--workload", "get,find-or-put"],
        ["--scheme", "level", "--value-bytes", "16", "--workload", "get,find-or-put"],
    ]
    common = ["--clients", "1", "--depth", "8", "--ops", "3000", "--records", "20000"]
    for i, case in enumerate(cases):
        local = run(binary, ["--fabric", "local"] + common + case, tmp, "local%d" % i)
        sim = run(binary, ["--fabric", "sim"] + common + case, tmp, "sim%d" % i)
        if len(local) != len(sim) or not local:
            sys.exit("FAIL: %s: %d local rows, %d sim rows" % (case, len(local), len(sim)))
        for a, b in zip(local, sim):
            if b["fabric"] != "sim" or b.get("sim_profile") != "edr":
                sys.exit("FAIL: sim row without fabric sim / profile edr: %s" % b)
            if protocol(a) != protocol(b):
                sys.exit("FAIL: %s %s: local %s != sim %s" % (case, a["workload"], protocol(a), protocol(b)))
        print("ok: %s: %s" % (" ".join(case), [(r["workload"], r["round_trips_per_op"], r["bytes_per_op"]) for r in sim]))
    # Gets on a loaded table do not depend on interleaving: several clients agree too.
    args = ["--clients", "6", "--depth", "4", "--ops", "2000", "--records", "20000", "--scheme", "cuckoo", "--workload", "get"]
    a = run(binary, ["--fabric", "local"] + args, tmp, "local_mc")[0]
    b = run(binary, ["--fabric", "sim"] + args, tmp, "sim_mc")[0]
    if protocol(a) != protocol(b):
        sys.exit("FAIL: 6 clients cuckoo get: local %s != sim %s" % (protocol(a), protocol(b)))
    print("ok: 6 clients cuckoo get")


def determinism(binary, tmp):
    args = ["--fabric", "sim", "--clients", "48", "--memory-nodes", "3", "--depth", "4", "--ops", "1500",
            "--records", "20000", "--scheme", "race", "--workload", "find-or-put,get", "--same-keys"]
    a = run(binary, args, tmp, "det_a")
    b = run(binary, args, tmp, "det_b")
    for x, y in zip(a, b):
        fx = {k: v for k, v in x.items() if k not in WALL_FIELDS}
        fy = {k: v for k, v in y.items() if k not in WALL_FIELDS}
        if fx != fy:
            diff = {k: (fx.get(k), fy.get(k)) for k in set(fx) | set(fy) if fx.get(k) != fy.get(k)}
            sys.exit("FAIL: two identical sim runs differ: %s" % diff)
    if len(a) != 2 or a[0]["sim_events"] == 0:
        sys.exit("FAIL: expected 2 rows with events: %s" % a)
    if any(r["sim_client_cpu"] != "fixed" or r["sim_client_cpu_ns"] != 0 for r in a):
        sys.exit("FAIL: the edr profile's client CPU is not fixed: %s" % [(r["sim_client_cpu"], r["sim_client_cpu_ns"]) for r in a])
    print("ok: identical: %s" % [(r["workload"], r["throughput_ops_per_s"], r["latency_us"]["p99"], r["sim_events"]) for r in a])


PROFILE = {"latency_ns": 700.0, "nic_ops_per_s": 50e6, "link_bytes_per_s": 5e9, "header_bytes": 40.0,
           "qp_depth": 16, "rpc_ns": 1000.0, "client_batch_ns": 150.0, "client_request_ns": 35.0}


def write_profile(tmp, name, fields, extra=""):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("# test profile\n")
        for k, v in fields.items():
            f.write("%s = %r\n" % (k, v))
        f.write(extra)
    return path


def closed_form(binary, tmp):
    prof = write_profile(tmp, "p.txt", PROFILE)
    P = PROFILE
    occ = lambda nbytes: max(1e9 / P["nic_ops_per_s"], (P["header_bytes"] + nbytes) * 1e9 / P["link_bytes_per_s"])
    common = ["--fabric", "sim", "--sim-profile", prof, "--clients", "1", "--workload", "raw-read"]
    # Depth 1, an 8-byte READ: each op is one batch of one request: CPU + 2 L + NIC service.
    row = run(binary, common + ["--depth", "1", "--read-bytes", "8", "--records", "1000", "--ops", "4000"], tmp, "cf1")[0]
    period = P["client_batch_ns"] + P["client_request_ns"] + 2 * P["latency_ns"] + occ(8)
    want = 1e9 / period
    got = row["throughput_ops_per_s"]
    if abs(got - want) > 1e-9 * want:
        sys.exit("FAIL: depth 1: throughput %.6f, closed form %.6f" % (got, want))
    if abs(row["latency_us"]["p50"] - period / 1000) > 2e-3:
        sys.exit("FAIL: depth 1: p50 latency %s us, closed form %.4f us" % (row["latency_us"]["p50"], period / 1000))
    print("ok: depth 1: %.3f ops/s (closed form %.3f)" % (got, want))
    # Bandwidth-bound: batches of 8 READs of 64 KiB; the NIC serves them one after the other.
    row = run(binary, common + ["--depth", "8", "--read-bytes", "65536", "--records", "100000", "--ops", "800"], tmp, "cf2")[0]
    if occ(65536) <= 1e9 / P["nic_ops_per_s"]:
        sys.exit("FAIL: test setup: 64 KiB READs are not link-bound")
    period = P["client_batch_ns"] + 8 * P["client_request_ns"] + 2 * P["latency_ns"] + 8 * occ(65536)
    want = 8e9 / period
    got = row["throughput_ops_per_s"]
    if abs(got - want) > 1e-9 * want:
        sys.exit("FAIL: bandwidth-bound: throughput %.6f, closed form %.6f" % (got, want))
    print("ok: bandwidth-bound: %.3f ops/s (closed form %.3f; link %.2f GB/s of payload)" % (got, want, got * 65536 / 1e9))
    # Queue pair depth 2: the 8 READs go in 4 waves of 2.
    prof2 = write_profile(tmp, "p2.txt", dict(P, qp_depth=2))
    row = run(binary, ["--fabric", "sim", "--sim-profile", prof2, "--clients", "1", "--workload", "raw-read",
                       "--records", "1000", "--ops", "800", "--depth", "8", "--read-bytes", "8"], tmp, "cf3")[0]
    # Wave 1 posted after the CPU; a READ of a later pair is posted when one of the previous pair's
    # replies arrives (2L + service after it was posted, L > service): 4 round trips, and the
    # second READ of the last pair waits one service time behind the first.
    period = P["client_batch_ns"] + 8 * P["client_request_ns"] + 4 * (2 * P["latency_ns"] + occ(8)) + occ(8)
    want = 8e9 / period
    got = row["throughput_ops_per_s"]
    if abs(got - want) > 1e-9 * want:
        sys.exit("FAIL: qp depth 2: throughput %.6f, closed form %.6f" % (got, want))
    print("ok: qp depth 2: %.3f ops/s (closed form %.3f)" % (got, want))


def children_cpu_ns():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (u.ru_utime + u.ru_stime) * 1e9


def measured(binary, tmp):
    P = PROFILE
    occ = max(1e9 / P["nic_ops_per_s"], (P["header_bytes"] + 8) * 1e9 / P["link_bytes_per_s"])
    fixed_period = P["client_batch_ns"] + P["client_request_ns"] + 2 * P["latency_ns"] + occ
    ops = 4000
    common = ["--fabric", "sim", "--clients", "1", "--workload", "raw-read", "--depth", "1", "--read-bytes", "8",
              "--records", "1000", "--ops", str(ops)]
    fixed = run(binary, common + ["--sim-profile", write_profile(tmp, "f.txt", P)], tmp, "mf")[0]
    cpu0 = children_cpu_ns()
    row = run(binary, common + ["--sim-profile", write_profile(tmp, "m.txt", P, "client_cpu = measured\n")], tmp, "m1")[0]
    cpu = children_cpu_ns() - cpu0
    if row["sim_client_cpu"] != "measured" or fixed["sim_client_cpu"] != "fixed":
        sys.exit("FAIL: sim_client_cpu %r / %r" % (row["sim_client_cpu"], fixed["sim_client_cpu"]))
    charged = row["sim_client_cpu_ns"]
    if not 0 < charged <= cpu:
        sys.exit("FAIL: sim_client_cpu_ns %s not in (0, the process's CPU time %s ns]" % (charged, cpu))
    period = 1e9 / row["throughput_ops_per_s"]
    # The fixed costs are still charged, the measured CPU on top: every op takes longer than the
    # closed form (whose 2 L is the round trip), and so does every op's latency (p10; the closed-form
    # check's resolution of 2 ns).
    if not period > fixed_period or not row["latency_us"]["p10"] >= fixed_period / 1000 - 2e-3:
        sys.exit("FAIL: measured period %.3f ns / p10 latency %s us, fixed closed form %.3f ns"
                 % (period, row["latency_us"]["p10"], fixed_period))
    if protocol(row) != protocol(fixed):
        sys.exit("FAIL: measured mode changed the counters: %s vs %s" % (protocol(row), protocol(fixed)))
    print("ok: measured: period %.1f ns (fixed %.1f), %.1f ns of client CPU charged per op, process CPU %.0f ns"
          % (period, fixed_period, charged / ops, cpu))
    # client_cpu_scale 1000: each op's measured CPU (surely >= 1 ns) is charged 1000 times.
    big = run(binary, common + ["--sim-profile", write_profile(tmp, "m2.txt", P,
                                                               "client_cpu = measured\nclient_cpu_scale = 1000\n")],
              tmp, "m2")[0]
    big_period = 1e9 / big["throughput_ops_per_s"]
    if not big_period >= fixed_period + 1000:
        sys.exit("FAIL: client_cpu_scale 1000: period %.1f ns, fixed closed form %.1f ns" % (big_period, fixed_period))
    print("ok: client_cpu_scale 1000: period %.1f ns" % big_period)


def expect_refused(binary, args, needle):
    p = subprocess.run([binary, "bench", "--no-progress", "--quiet", "--ops", "10", "--records", "100"] + args,
                       capture_output=True, text=True)
    if p.returncode != 2 or needle not in p.stderr:
        sys.exit("FAIL: %s: exit %d (want 2), stderr %r (want %r)" % (args, p.returncode, p.stderr, needle))
    print("ok: refused %s: %s" % (" ".join(args), p.stderr.strip()))


def bad_options(binary, tmp):
    sim = ["--fabric", "sim", "--sim-profile"]
    expect_refused(binary, sim + [os.path.join(tmp, "missing.txt")], "is not 'edr' and not a readable file")
    expect_refused(binary, sim + [write_profile(tmp, "b1", PROFILE, "bogus = 1\n")], "unknown field 'bogus'")
    expect_refused(binary, sim + [write_profile(tmp, "b2", {k: v for k, v in PROFILE.items() if k != "rpc_ns"})],
                   "field 'rpc_ns' is missing")
    expect_refused(binary, sim + [write_profile(tmp, "b3", dict(PROFILE, latency_ns=-1.0))], "latency_ns must be")
    expect_refused(binary, sim + [write_profile(tmp, "b4", dict(PROFILE, nic_ops_per_s=0.0))], "nic_ops_per_s must be")
    expect_refused(binary, sim + [write_profile(tmp, "b5", dict(PROFILE, qp_depth=1.5))], "not a whole number")
    expect_refused(binary, sim + [write_profile(tmp, "b6", dict(PROFILE, link_bytes_per_s="fast"))], "is not a number")
    expect_refused(binary, sim + [write_profile(tmp, "b7", PROFILE, "latency_ns = 5\n")], "given twice")
    expect_refused(binary, sim + [write_profile(tmp, "b8", PROFILE, "just words\n")], "expected 'key = value'")
    expect_refused(binary, sim + [write_profile(tmp, "b9", dict(PROFILE, rpc_ns=float("inf")))], "rpc_ns must be")
    expect_refused(binary, sim + [write_profile(tmp, "b10", PROFILE, "client_cpu = sometimes\n")],
                   "client_cpu: 'sometimes' is not 'fixed' or 'measured'")
    expect_refused(binary, sim + [write_profile(tmp, "b11", PROFILE, "client_cpu_scale = 0\n")],
                   "client_cpu_scale must be a finite number > 0")
    expect_refused(binary, ["--fabric", "local", "--sim-profile", "edr"], "--sim-profile applies to --fabric sim")
    expect_refused(binary, ["--fabric", "sim", "--clients", "70000"], "--clients must be at most 65536")
    expect_refused(binary, ["--fabric", "simulated"], "--fabric must be 'local', 'ucx' or 'sim'")
    expect_refused(binary, ["--fabric", "sim", "--serve-mode", "event"], "--serve-mode")


def read_profile(path):
    fields = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line:
            k, v = (x.strip() for x in line.split("=", 1))
            fields[k] = v
    return fields


def calibrated(binary, tmp):
    cal, prof = os.path.join(tmp, "cal.json"), os.path.join(tmp, "local.simprofile")
    cmd = [binary, "calibrate", "--fabric", "local", "--region-bytes", "1048576", "--iterations", "300",
           "--sizes", "8,4096", "--rate-depth", "64", "--out", cal, "--write-sim-profile", prof]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr))
    c = json.load(open(cal))
    x = c["measurements"]["execute_cpu"]
    f = read_profile(prof)
    if float(f["client_request_ns"]) != x["per_request_ns"] or float(f["client_batch_ns"]) != x["per_batch_ns"]:
        sys.exit("FAIL: profile client_request_ns %s / client_batch_ns %s, calibration's execute CPU %s / %s"
                 % (f["client_request_ns"], f["client_batch_ns"], x["per_request_ns"], x["per_batch_ns"]))
    if not x["batch_of_d_ns"] > x["batch_of_1_ns"] > 0 or x["depth"] != 16:
        sys.exit("FAIL: execute CPU %s" % x)
    # The old constants (1/rho0 and c less it) held the engine's code too, which the simulation
    # times itself: a batch of 1 READ through execute() alone is cheaper than c, the engine's
    # depth-1 round trip around the same execute().
    if not x["batch_of_1_ns"] < c["c_ns"]:
        sys.exit("FAIL: execute() of 1 READ %.1f ns of CPU, not below c = %.1f ns" % (x["batch_of_1_ns"], c["c_ns"]))
    if f["client_cpu"] != "measured" or float(f["nic_ops_per_s"]) != 1e12 or float(f["latency_ns"]) != 0:
        sys.exit("FAIL: profile %s" % f)
    common = ["--clients", "1", "--memory-nodes", "1", "--scheme", "linear", "--workload", "get", "--depth", "4",
              "--records", "2000", "--ops", "2000"]
    sim = run(binary, ["--fabric", "sim", "--sim-profile", prof] + common, tmp, "cs")[0]
    local = run(binary, ["--fabric", "local"] + common, tmp, "cl")[0]
    if sim["sim_client_cpu"] != "measured" or protocol(sim) != protocol(local):
        sys.exit("FAIL: the calibrated profile's run: %s / %s vs local %s"
                 % (sim["sim_client_cpu"], protocol(sim), protocol(local)))
    print("ok: calibrated: execute() %.1f ns per batch + %.1f ns per READ (batch of 1 %.1f ns, of 16 %.1f ns; c %.1f ns)"
          % (x["per_batch_ns"], x["per_request_ns"], x["batch_of_1_ns"], x["batch_of_d_ns"], c["c_ns"]))


def race_helping(binary, tmp):
    cas = {}
    for n in (1, 64):
        row = run(binary, ["--fabric", "sim", "--sim-profile", "edr", "--memory-nodes", "1", "--clients", str(n),
                           "--depth", "1", "--ops", str(32000 // n), "--records", "20000", "--load-factor", "0.25",
                           "--scheme", "race", "--workload", "find-or-put"], tmp, "rh%d" % n)[0]
        if row["outcomes"]["inserted"] != 32000 or row["split_load_factor"]["splits"] < 16:
            sys.exit("FAIL: race with %d clients: %s, %s splits" % (n, row["outcomes"], row["split_load_factor"]["splits"]))
        cas[n] = row["requests_per_op"]["cas"]
    if not cas[64] <= 2 * cas[1]:
        sys.exit("FAIL: 64 clients %.2f CASes per insert, one client %.2f: helpers repeat the splits' copies" % (cas[64], cas[1]))
    print("ok: race-helping: %.2f CASes per insert with 64 clients, %.2f with one" % (cas[64], cas[1]))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    check, binary = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        {"counters": counters, "determinism": determinism, "closed-form": closed_form,
         "bad-options": bad_options, "measured": measured,
         "calibrated": calibrated, "race-helping": race_helping}[check](binary, tmp)


if __name__ == "__main__":
    main()
