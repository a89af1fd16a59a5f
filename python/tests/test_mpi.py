"""The Python module over MPI (mpi4py) and UCX: a PGAS table, every rank a shard and a client.
Run under mpirun (2 ranks or more):
    mpirun -n 2 --oversubscribe /usr/bin/python3 -m pytest -q python/tests/test_mpi.py
Every check is collective: ranks meet in t.barrier() (which serves this rank's shard) before any
mpi4py collective, so no rank waits in MPI while a peer needs its worker."""
import numpy as np
import pytest
from mpi4py import MPI

import rdmahash

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


@pytest.mark.parametrize("scheme", ["linear", "cuckoo", "hopscotch", "cluster"])
def test_pgas_oracle(scheme):
    n = 3000
    with rdmahash.mpi_table(comm, scheme, capacity=n * 2, value_bytes=8, load_factor=0.4) as t:
        assert t.rank == rank and t.size == size
        keys = np.arange(n, dtype=np.uint64)
        np.random.default_rng(rank).shuffle(keys)
        # every rank inserts every key, with its own rank as the value: each key is inserted once
        st = t.find_or_put(keys, np.full(n, rank + 1, dtype=np.uint64))
        assert set(np.unique(st)) <= {rdmahash.INSERTED, rdmahash.FOUND}
        t.barrier()
        inserted = np.zeros(n, dtype=np.int64)
        inserted[keys[st == rdmahash.INSERTED].astype(np.int64)] = rank + 1
        winners = comm.allreduce(inserted, op=MPI.SUM)  # the inserter's rank + 1 (one inserter per key)
        counts = comm.allreduce((inserted > 0).astype(np.int64), op=MPI.SUM)
        assert (counts == 1).all(), f"{scheme}: keys inserted {counts.min()}..{counts.max()} times"
        # every rank reads the inserter's value of every key
        st, got = t.get(np.arange(n, dtype=np.uint64))
        assert (st == rdmahash.FOUND).all()
        np.testing.assert_array_equal(got.view(np.uint64).ravel(), winners.astype(np.uint64))
        t.barrier()
        # rank r erases the keys k with k % size == r, then puts the rest with value 1000 + k
        mine = np.arange(rank, n, size, dtype=np.uint64)
        assert (t.erase(mine) == rdmahash.ERASED).all()
        t.barrier()
        st, _ = t.get(np.arange(n, dtype=np.uint64))
        assert (st == rdmahash.NOT_FOUND).all()
        absent = np.arange(n, n + 500, dtype=np.uint64)
        st, _ = t.get(absent)
        assert (st == rdmahash.NOT_FOUND).all()
        t.barrier()


def test_collective_errors():
    with pytest.raises(ValueError, match="no scheme"):
        rdmahash.mpi_table(comm, "nope")
    # A table whose shards do not fit in the host's memory is refused on every rank, before any
    # shard is allocated; then a table that fits opens as usual.
    with pytest.raises(rdmahash.InvalidArgument, match="does not fit in memory: one host's shards"):
        rdmahash.mpi_table(comm, "linear", capacity=1 << 31, value_bytes=8)
    with rdmahash.mpi_table(comm, "linear", capacity=1000, value_bytes=8) as t:
        t.barrier()
    if size > 1:  # race formats its table where every memory node is hosted: refused, collectively, before any MPI call
        with pytest.raises(rdmahash.InvalidArgument, match="race formats its table"):
            rdmahash.mpi_table(comm, "race")
    with pytest.raises(TypeError, match="mpi4py communicator"):
        rdmahash.mpi_table(object())
    if size > 1:
        sub = comm.Split(rank % 2, rank)
        with pytest.raises(ValueError, match="COMM_WORLD"):
            rdmahash.mpi_table(sub)
        sub.Free()
    # a table left open is closed at exit (collectively, before mpi4py finalises MPI)
    t = rdmahash.mpi_table(comm, "linear", capacity=100, value_bytes=0)
    assert (t.find_or_put(np.array([rank], dtype=np.uint64)) == rdmahash.INSERTED).all()
    t.barrier()
