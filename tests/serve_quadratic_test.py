#!/usr/bin/env python3
"""A served quadratic table (issue 28 item 4): its chunk order and chunk size reach --connect
clients in the table spec. A client without --chunk takes the table's C and finds every key it
inserted; a client with another --chunk, or with --chunk-order, is refused (exit 2).

usage: serve_quadratic_test.py RDMAHASH        Prints PASS, or FAIL and what is wrong (exit 1).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import fail, start_server  # noqa: E402

rdmahash = sys.argv[1]
env = dict(os.environ, UCX_TLS=os.environ.get("UCX_TLS", "self,sm,tcp"), UCX_WARN_UNUSED_ENV_VARS="n")
with tempfile.TemporaryDirectory() as tmp, open(os.path.join(tmp, "serve.log"), "w") as log:
    server, host, port = start_server(rdmahash, ["--chunk-order", "quadratic", "--chunk", "16", "--records", "20000",
                                                 "--load-factor", "0.7", "--slot-format", "inline", "--value-bytes", "8"],
                                      log)
    try:
        addr = f"{host}:{port}"
        out = os.path.join(tmp, "rows.jsonl")
        r = subprocess.run([rdmahash, "bench", "--connect", addr, "--workload", "find-or-put,get", "--ops", "2000",
                            "--json", out, "--no-progress"], env=env, capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            fail(f"the client failed ({r.returncode}): {r.stderr}")
        rows = [json.loads(line) for line in open(out)]
        for row in rows:
            if row.get("chunk_order") != "quadratic" or row.get("chunk") != 16:
                fail(f"a row of the client is not quadratic/16: {row.get('chunk_order')}/{row.get('chunk')}")
            o = row["outcomes"]
            if o.get("full") or o.get("not_found") or row.get("value_mismatches"):
                fail(f"{row['workload']}: {o}, {row.get('value_mismatches')} value mismatches")
        for args, want in ((["--chunk", "8"], "probes quadratic chunks of 16 slots"),
                           (["--chunk-order", "linear"], "--chunk-order describes the table")):
            r = subprocess.run([rdmahash, "bench", "--connect", addr, "--ops", "10", *args], env=env,
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 2 or want not in r.stderr:
                fail(f"{args}: exit {r.returncode}, {r.stderr.strip()!r} (want exit 2 and {want!r})")
    finally:
        server.terminate()
        server.wait(timeout=60)
print("PASS")
