#!/usr/bin/python3
"""What the Python binding costs: the same batches of get / find_or_put on the same table, issued
from Python (table.get(keys[lo:hi]) per batch) and from C++ (Table._native_loop: one
Engine::run_many per batch, the loop a C++ program using KvClient would run), per batch size.

    PYTHONPATH=build/ci/python /usr/bin/python3 scripts/python_overhead.py [--out FILE.jsonl]
    # over UCX, PGAS (every rank a shard and a client; rank 0 reports its own client):
    mpirun -n 2 --oversubscribe env PYTHONPATH=build/ci/python /usr/bin/python3 scripts/python_overhead.py --fabric mpi
"""
import argparse
import json
import time

import numpy as np

import rdmahash


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fabric", choices=["local", "mpi"], default="local")
    ap.add_argument("--scheme", default="linear")
    ap.add_argument("--keys", type=int, default=200000)
    ap.add_argument("--batches", default="1,16,1024")
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3, help="runs per point; the best is reported")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    comm = None
    if a.fabric == "mpi":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        t = rdmahash.mpi_table(comm, a.scheme, capacity=a.keys * comm.Get_size() * 2, value_bytes=8, depth=a.depth)
        rank = comm.Get_rank()
    else:
        t = rdmahash.local_table(a.scheme, capacity=a.keys * 2, value_bytes=8, depth=a.depth)
        rank = 0
    keys = np.arange(1 + rank * a.keys, 1 + (rank + 1) * a.keys, dtype=np.uint64)
    vals = keys.copy()
    t.put(keys, vals)
    t.barrier()
    rows = []
    for b in [int(x) for x in a.batches.split(",")]:
        n = min(a.keys, 20000 * b)  # batch 1: 20 000 operations
        k = keys[:n]
        for op in ["get", "find_or_put"]:
            best_py = best_cpp = float("inf")
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                if op == "get":
                    for lo in range(0, n, b):
                        t.get(k[lo:lo + b])
                else:
                    for lo in range(0, n, b):
                        t.find_or_put(k[lo:lo + b], vals[lo:lo + b])
                best_py = min(best_py, time.perf_counter() - t0)
                best_cpp = min(best_cpp, t._native_loop(op, k, b))
            row = {"fabric": a.fabric, "scheme": a.scheme, "op": op, "batch": b, "ops": n, "depth": a.depth,
                   "python_ops_per_s": n / best_py, "cpp_ops_per_s": n / best_cpp,
                   "python_us_per_op": best_py / n * 1e6, "cpp_us_per_op": best_cpp / n * 1e6,
                   "binding_us_per_batch": (best_py - best_cpp) / (n / b) * 1e6}
            rows.append(row)
    t.barrier()
    t.close()
    if rank == 0:
        print(f"{'op':12} {'batch':>6} {'python op/s':>12} {'C++ op/s':>12} {'py us/op':>9} {'C++ us/op':>9} {'binding us/batch':>16}")
        for r in rows:
            print(f"{r['op']:12} {r['batch']:6d} {r['python_ops_per_s']:12.0f} {r['cpp_ops_per_s']:12.0f} "
                  f"{r['python_us_per_op']:9.3f} {r['cpp_us_per_op']:9.3f} {r['binding_us_per_batch']:16.2f}")
        if a.out:
            with open(a.out, "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
