#!/usr/bin/python3
"""Breadth-first search of the pancake graph over MPI ranks with batched find_or_put into one
table spread over all of them (rdmahash.mpi_table, PGAS): the Python twin of
examples/state_space (run_rdmahash). A state is a permutation of N pancakes, 4 bits per position;
its successors are the N-1 prefix reversals. Each rank expands the states it inserted; a
successor is new exactly when its find_or_put says INSERTED (once over all ranks). Checked
against the known answer: N! states in P(N)+1 levels (P: the pancake numbers).

    mpirun -n 2 --oversubscribe /usr/bin/python3 examples/python/state_space.py --n 8
"""
import argparse
import math
import sys
import time

import numpy as np
from mpi4py import MPI

import rdmahash

DIAMETER = [0, 0, 1, 3, 4, 5, 7, 8, 9, 10, 11, 13, 14, 15]  # P(N), N = 0..13


def successors(states, n):
    """Every prefix reversal (top k, k = 2..n) of every state: len(states) * (n-1) states."""
    shifts = np.arange(n, dtype=np.uint64) * np.uint64(4)
    digits = (states[:, None] >> shifts[None, :]) & np.uint64(15)  # (m, n): position i's pancake
    out = []
    for k in range(2, n + 1):
        d = digits.copy()
        d[:, :k] = d[:, k - 1::-1]
        out.append(np.bitwise_or.reduce(d << shifts[None, :], axis=1))
    return np.concatenate(out) if out else np.empty(0, dtype=np.uint64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8, help="pancakes (2..13; 8: 40 320 states)")
    ap.add_argument("--scheme", default="linear")
    ap.add_argument("--batch", type=int, default=8192, help="successors per find_or_put batch")
    a = ap.parse_args()
    if not 2 <= a.n <= 13:
        raise SystemExit("state_space.py: error: --n must be in [2, 13]")
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n = a.n
    states = math.factorial(n)
    root = np.array([sum(i << (4 * i) for i in range(n))], dtype=np.uint64)
    with rdmahash.mpi_table(comm, a.scheme, capacity=states, value_bytes=0, load_factor=0.5) as t:
        t0 = time.perf_counter()
        frontier = np.empty(0, dtype=np.uint64)
        if rank == 0 and t.find_or_put(root)[0] == rdmahash.INSERTED:
            frontier = root
        found, levels = 1, 1
        while True:
            nxt = []
            step = max(1, a.batch // (n - 1))
            for lo in range(0, len(frontier), step):
                succ = successors(frontier[lo:lo + step], n)
                st = t.find_or_put(succ)
                if (st == rdmahash.FULL).any():
                    raise SystemExit(f"rank {rank}: the table is full")
                nxt.append(succ[st == rdmahash.INSERTED])
            t.barrier()  # every rank's find_or_puts are complete (serving this rank's shard meanwhile)
            frontier = np.concatenate(nxt) if nxt else np.empty(0, dtype=np.uint64)
            level_size = comm.allreduce(len(frontier))
            if level_size == 0:
                break
            found += level_size
            levels += 1
        seconds = time.perf_counter() - t0
    ok = found == states and levels == DIAMETER[n] + 1
    if rank == 0:
        print(f"pancake-{n} {a.scheme}: {size} ranks, {found} states (known {states}), {levels} levels "
              f"(known {DIAMETER[n] + 1}), {seconds:.3f} s, {found / seconds:.0f} states/s: {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
