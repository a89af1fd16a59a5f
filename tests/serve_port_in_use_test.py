#!/usr/bin/env python3
"""A second `rdmahash serve` on a port in use exits 2 (bad input) naming --listen, not 1.

usage: serve_port_in_use_test.py RDMAHASH    Prints PASS or FAIL.
"""
import re
import subprocess
import sys

from serve_util import start_server


def main():
    binary = sys.argv[1]
    first, host, port = start_server(binary, ["--records", "100"], subprocess.DEVNULL)
    address = f"{host}:{port}"
    try:
        r = subprocess.run([binary, "serve", "--records", "100", "--no-progress", "--listen", address],
                           capture_output=True, text=True, timeout=60)
    finally:
        first.terminate()
        first.wait(timeout=60)
    if r.returncode != 2:
        print(f"FAIL: serve on {address} (in use) exited {r.returncode}, not 2: {r.stderr.strip()}")
        return 1
    if not re.search(r"^rdmahash serve: error: --listen: cannot listen on .*: Address already in use", r.stderr, re.M):
        print(f"FAIL: message: {r.stderr.strip()}")
        return 1
    print(f"PASS: {r.stderr.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
