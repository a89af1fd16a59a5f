#!/usr/bin/env python3
"""Every numeric option of every subcommand, at extreme values: never a signal, never a hang.

usage: option_fuzz.py RDMAHASH [--timeout S] [--jobs N] [--only SUBCOMMAND[,...]] [--list]

The numeric options are read from each subcommand's --help (CLI11 prints UINT, INT or FLOAT after
the option's name), so an option added later is covered without editing this file. Each is run
with each of VALUES, the other options kept at tiny settings (few records, few ops), and the run
must exit 0 (accepted, and it finished) or 2 (refused, with `rdmahash <cmd>: error: ...` on stderr).
A signal (a crash), another status, or a run that is still going after --timeout seconds fails.

`serve` runs until it is stopped: a serve that prints "listening on" accepted its options and gets
SIGTERM, after which it must exit 0.

Every run is under an address-space limit (RLIMIT_AS, 6 GiB), which the bench's memory check
honours: values that would make a valid but enormous run (2^31 records, 2^31 ops) are refused as
too large for memory instead of running for hours, on any machine.

Exit status: 0 when every run passed, 1 otherwise (each failure is printed).
"""
import argparse
import concurrent.futures
import os
import re
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time

VALUES = ["0", "-1", str(2**31), str(2**32), str(2**61), str(2**62), str(2**63), str(2**64 - 1),
          "1e-15", "nan", "inf"]
AS_LIMIT = 6 << 30

# Options whose type CLI11 prints as TEXT but that take numbers.
TEXT_NUMERIC = {"bench": ["--read-size"]}
# Options never to pass as the option under test (not numeric in meaning, or not this test's).
SKIP = {"--help"}

# bench and serve: each option under each scheme (their sizes and bounds differ).
SCHEMES = ["linear", "cuckoo", "race", "continuity", "level"]
SUBCOMMANDS = ["bench", "serve", "check-history", "model", "calibrate"]
# The fewest numeric options each --help must show (a guard against the help parser breaking).
MIN_OPTIONS = {"bench": 25, "serve": 15, "check-history": 1, "model": 10, "calibrate": 6}


def base_args(cmd, history):
    """Tiny, valid settings for a subcommand: (args as (name, value) pairs, positionals)."""
    if cmd == "bench":
        return [("--fabric", "local"), ("--records", "100"), ("--ops", "10"), ("--quiet", None),
                ("--no-progress", None)], []
    if cmd == "serve":
        return [("--listen", "127.0.0.1:0"), ("--records", "100"), ("--no-progress", None)], []
    if cmd == "check-history":
        return [("--timeout-per-key", "10")], [history]
    if cmd == "model":
        return [("--records", "1000"), ("--load-factor", "0.5")], []
    if cmd == "calibrate":
        return [("--iterations", "10"), ("--region-bytes", "65536"), ("--sizes", "8,64"), ("--rate-depth", "4"),
                ("--bandwidth-bytes", "4096"), ("--bandwidth-depth", "2")], []
    raise ValueError(cmd)


def numeric_options(binary, cmd):
    out = subprocess.run([binary, cmd, "--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"option_fuzz.py: error: {cmd} --help exited {out.returncode}")
    names = []
    for line in out.stdout.splitlines():
        m = re.match(r"^\s+(?:-\w,)?(--[a-z0-9-]+)\s+(UINT|INT|FLOAT|NUMBER)\b", line)
        if m and m.group(1) not in SKIP:
            names.append(m.group(1))
    names += [n for n in TEXT_NUMERIC.get(cmd, []) if n not in names]
    return names


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_one(binary, cmd, scheme, option, value, history, timeout):
    """Returns (exit status, None) when the run passed, else (status, a description of the failure)."""
    base, positionals = base_args(cmd, history)
    argv = [binary, cmd] + (["--scheme", scheme] if scheme else [])
    for name, v in base:
        if name == option:
            continue
        argv += [name] + ([v] if v is not None else [])
    argv += [option + "=" + value] + positionals  # "=": a value starting with '-' stays the option's
    shown = " ".join(argv[1:])
    if cmd == "serve":
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit_memory)
        deadline = time.monotonic() + timeout
        ready = False
        # The ready line is the first line serve prints on stdout.

        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=0.2):
                if p.poll() is not None:
                    break
                continue
            line = p.stdout.readline()
            if not line:
                break
            if "listening on" in line:
                ready = True
                break
        if ready:
            p.send_signal(signal.SIGTERM)
        try:
            _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()) if not ready else 30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return None, f"hang (no exit within {timeout} s): {shown}"
        rc = p.returncode
    else:
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, preexec_fn=limit_memory)
        except subprocess.TimeoutExpired:
            return None, f"hang (no exit within {timeout} s): {shown}"
        rc, err = r.returncode, r.stderr
    if rc < 0 or rc >= 128:
        return rc, f"signal / crash (status {rc}): {shown}\n    {err.strip()[-400:]}"
    if rc not in (0, 2):
        return rc, f"exit {rc} (expected 0 or 2): {shown}\n    {err.strip()[-400:]}"
    if rc == 2 and not re.search(r"^rdmahash [a-z-]+: error: ", err, re.M):
        return rc, f"exit 2 without 'rdmahash {cmd}: error: ...': {shown}\n    {err.strip()[-400:]}"
    return rc, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=",".join(SUBCOMMANDS))
    ap.add_argument("--list", action="store_true", help="print the options found and exit")
    args = ap.parse_args()
    cmds = args.only.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        history = os.path.join(tmp, "h.bin")
        r = subprocess.run([args.binary, "bench", "--fabric", "local", "--records", "100", "--ops", "20", "--quiet",
                            "--no-progress", "--workload", "kv-mix", "--history", history], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"option_fuzz.py: error: cannot write a history for check-history: {r.stderr}")
            return 1
        runs = []
        for cmd in cmds:
            opts = numeric_options(args.binary, cmd)
            print(f"{cmd}: {len(opts)} numeric options: {' '.join(opts)}", flush=True)
            if len(opts) < MIN_OPTIONS.get(cmd, 1):
                print(f"option_fuzz.py: error: {cmd} --help shows only {len(opts)} numeric options (parser broken?)")
                return 1
            schemes = SCHEMES if cmd in ("bench", "serve") else [None]
            runs += [(cmd, s, o, v) for s in schemes for o in opts for v in VALUES]
        if args.list:
            return 0
        failures = []
        accepted = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futs = {pool.submit(run_one, args.binary, c, s, o, v, history, args.timeout): (c, s, o, v)
                    for c, s, o, v in runs}
            for f in concurrent.futures.as_completed(futs):
                rc, msg = f.result()
                if msg is not None:
                    failures.append(msg)
                    print("FAIL " + msg, flush=True)
                elif rc == 0:
                    c, s, o, v = futs[f]
                    accepted.setdefault(f"{c} {o}", []).append(v if s is None else f"{v} ({s})")
    for k in sorted(accepted):
        print(f"accepted: {k} = {', '.join(sorted(set(accepted[k])))}")
    print(f"option_fuzz.py: {len(runs)} runs, {sum(len(v) for v in accepted.values())} accepted, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
