#!/usr/bin/python3
"""Distributed dedup with find_or_put: every rank holds a numpy array of uint64 items (with
duplicates within and across ranks); each inserts its items into one table spread over all ranks
(rdmahash.mpi_table, PGAS). A key is INSERTED exactly once over all ranks, so the INSERTED
items are the distinct items, each kept by exactly one rank. Checked against numpy.unique.

    mpirun -n 2 --oversubscribe /usr/bin/python3 examples/python/dedup.py [--items N] [--scheme linear]
"""
import argparse
import sys
import time

import numpy as np
from mpi4py import MPI

import rdmahash


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200000, help="items per rank")
    ap.add_argument("--universe", type=int, default=300000, help="items are drawn from [0, universe)")
    ap.add_argument("--scheme", default="linear")
    ap.add_argument("--batch", type=int, default=4096)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    items = np.random.default_rng(1000 + rank).integers(0, a.universe, size=a.items, dtype=np.uint64)

    with rdmahash.mpi_table(comm, a.scheme, capacity=min(a.universe, a.items * size), value_bytes=0, load_factor=0.5) as t:
        t.barrier()
        t0 = time.perf_counter()
        kept = []
        for lo in range(0, len(items), a.batch):
            chunk = items[lo:lo + a.batch]
            st = t.find_or_put(chunk)
            if (st == rdmahash.FULL).any():
                raise SystemExit(f"rank {rank}: the table is full")
            kept.append(chunk[st == rdmahash.INSERTED])
        t.barrier()
        seconds = time.perf_counter() - t0
    kept = np.concatenate(kept)
    # the known answer: numpy.unique of every rank's items
    all_items = comm.gather(items, root=0)
    all_kept = comm.gather(kept, root=0)
    ok = True
    if rank == 0:
        want = np.unique(np.concatenate(all_items))
        got = np.concatenate(all_kept)
        ok = len(got) == len(want) and np.array_equal(np.sort(got), want)
        print(f"dedup {a.scheme}: {size} ranks x {a.items} items -> {len(got)} distinct kept "
              f"(numpy.unique: {len(want)}) in {seconds:.3f} s: {'ok' if ok else 'WRONG'}")
    ok = comm.bcast(ok, root=0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
