#!/usr/bin/env python3
"""Where a benchmark client's CPU goes, per operation and per layer (issue 12).

usage: scripts/perf_layers.py PERF_DATA CLIENT_CPU_NS_PER_OP [TOP]

PERF_DATA: `perf record -F 4999 -o PERF_DATA -- mpirun ... rdmahash bench ...` (see
scripts/profile_get.sh). CLIENT_CPU_NS_PER_OP: the run's JSON field of that name. Takes the
client process (the one with the most samples in the client's data path: rdmahash::Engine, the
multi-get, UcxTransport::execute), the time window from the end of the bench's warm-up (touch())
to its last such sample, leaves out the samples in Open MPI's libraries (barriers between
--repeat points) and in libc's pthread mutex functions, which only Open MPI's progress loop calls
there (the client waiting in a barrier; the data path takes no mutex), and splits the rest by
symbol into layers; each
layer's share of the samples times CLIENT_CPU_NS_PER_OP is its ns per operation. Self time only:
a function inlined into another counts for the one it was inlined into. copy_in is out of line,
but since a6fe089 an unfenced direct READ of whole aligned words (every lookup window) is copied
inline in UcxTransport::execute, so the table's cache misses show up in that layer; and the
multi-get's hashing (place_key, inlined) shows up in LinearClient. Layer tables from before
a6fe089 are not like for like with later ones in those layers.
"""
import collections
import re
import subprocess
import sys


def layer(s, d):
    if "copy_in" in s or "copy_out" in s or "direct_execute" in s:
        return "fabric: copy_in/out (the table's cache misses)"
    if "UcxTransport" in s or "libuc" in d:
        return "fabric: UcxTransport::execute, validate, UCX"
    if "linear_place" in s or s.startswith("rdmahash::hash::"):
        return "scheme: hashing (linear_place)"
    if "Layout::consistent" in s or "record::" in s:
        return "scheme: check word"
    if "LinearClient" in s:
        return "scheme: LinearClient (get, scan, locate, insert)"
    if any(x in s for x in ("Engine", "root_coro", "FramePool", "Task<", "Pending", "coroutine", "_Function_handler")):
        return "engine (scheduling, coroutines, queue)"
    if any(x in s for x in ("malloc", "free", "operator new", "operator delete", "_int_")):
        return "allocation (malloc/free)"
    if any(x in s for x in ("bench::", "mem", "vector")):
        return "bench driver (do_op, key stream, value check)"
    if d.startswith("[kernel"):
        return "kernel"
    return "other"


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    data, cpu_ns = sys.argv[1], float(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,time,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*?)\s*\(([^()]*)\)\s*$", line)
        if m:
            rows.append((int(m[1]), float(m[2]), m[3].strip(), m[4]))
    client = lambda s: "Engine::" in s or "get_batch" in s or "UcxTransport::execute" in s
    engine = collections.Counter(p for p, t, s, d in rows if client(s))
    if not engine:
        sys.exit(f"{data}: no samples in the client's data path (not a bench client recording?)")
    pid = engine.most_common(1)[0][0]
    ts = [t for p, t, s, d in rows if p == pid and client(s)]
    lo, hi = min(ts), max(ts)
    warm = [t for p, t, s, d in rows if p == pid and "touch" in s]
    if warm:
        lo = max(lo, max(warm))
    window = [(s, d) for p, t, s, d in rows if p == pid and lo <= t <= hi]
    mpi = lambda s, d: ("mca_" in d or "libopen-pal" in d or "libmpi" in d
                        or ("pthread_mutex" in s and ("libc" in d or "unknown" in d)))
    sel = [(s, d) for s, d in window if not mpi(s, d)]
    n = len(sel)
    print(f"client pid {pid}: {hi - lo:.3f} s, {n} samples ({len(window) - n} in Open MPI and its mutexes left out); "
          f"client_cpu_ns_per_op {cpu_ns:.1f}")
    for k, c in collections.Counter(layer(s, d) for s, d in sel).most_common():
        print(f"  {k:52s} {100 * c / n:5.1f} %  {cpu_ns * c / n:6.1f} ns/op")
    print("top symbols:")
    for (s, d), c in collections.Counter(sel).most_common(top):
        print(f"  {100 * c / n:5.1f} %  {cpu_ns * c / n:6.1f} ns/op  {s[:100]} ({d.split('/')[-1]})")


if __name__ == "__main__":
    main()
