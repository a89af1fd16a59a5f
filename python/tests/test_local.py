"""The Python module on the in-process fabric: every scheme against a dict oracle, byte keys (race),
and the error mapping. Run: PYTHONPATH=<dir of rdmahash*.so> /usr/bin/python3 -m pytest python/tests/test_local.py"""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import rdmahash

SCHEMES = rdmahash.schemes()


def test_registry_names():
    assert {"linear", "cuckoo", "race", "continuity", "level", "hopscotch", "cluster"} <= set(SCHEMES)


def val(keys, version, vb):
    """The value a key holds: its key and a version, in vb bytes."""
    words = np.stack([keys, np.full(len(keys), version, dtype=np.uint64)], axis=1)
    return np.ascontiguousarray(words.view(np.uint8)[:, :vb])


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("memory_nodes", [1, 2])
def test_oracle(scheme, memory_nodes):
    vb = 16
    t = rdmahash.local_table(scheme, capacity=4000, value_bytes=vb, load_factor=0.3, memory_nodes=memory_nodes)
    assert t.scheme == scheme and t.value_bytes == vb
    oracle = {}  # key -> value bytes
    rng = np.random.default_rng(7)
    version = 0
    for rnd in range(60):
        n = int(rng.choice([1, 3, 16, 100, 700]))
        # distinct keys within a batch (operations of one batch run concurrently)
        keys = rng.choice(np.arange(0, 2500, dtype=np.uint64), size=n, replace=False).astype(np.uint64)
        version += 1
        op = rnd % 5
        present = np.array([int(k) in oracle for k in keys])
        if op == 0:
            v = val(keys, version, vb)
            st = t.put(keys, v)
            assert st.dtype == np.uint8 and st.shape == (n,)
            want = np.where(present, rdmahash.UPDATED, rdmahash.INSERTED)
            np.testing.assert_array_equal(st, want, err_msg=f"{scheme} put")
            for k, row in zip(keys, v):
                oracle[int(k)] = row.tobytes()
        elif op == 1:
            v = val(keys, version, vb)
            st = t.update(keys, v)
            np.testing.assert_array_equal(st, np.where(present, rdmahash.UPDATED, rdmahash.NOT_FOUND), err_msg=f"{scheme} update")
            for k, row, p in zip(keys, v, present):
                if p:
                    oracle[int(k)] = row.tobytes()
        elif op == 2 and rnd % 3 == 0:
            st = t.erase(keys)
            np.testing.assert_array_equal(st, np.where(present, rdmahash.ERASED, rdmahash.NOT_FOUND), err_msg=f"{scheme} erase")
            for k in keys:
                oracle.pop(int(k), None)
        elif op == 3:
            v = val(keys, version, vb)
            st = t.find_or_put(keys, v)
            np.testing.assert_array_equal(st, np.where(present, rdmahash.FOUND, rdmahash.INSERTED), err_msg=f"{scheme} find_or_put")
            for k, row, p in zip(keys, v, present):
                if not p:
                    oracle[int(k)] = row.tobytes()
        else:
            st, got = t.get(keys)
            assert got.dtype == np.uint8 and got.shape == (n, vb)
            np.testing.assert_array_equal(st, np.where(present, rdmahash.FOUND, rdmahash.NOT_FOUND), err_msg=f"{scheme} get")
            for k, row, p in zip(keys, got, present):
                if p:
                    assert row.tobytes() == oracle[int(k)], f"{scheme}: get({k}) returned another value"
                else:
                    assert not row.any()
    # a final full check
    keys = np.arange(0, 2500, dtype=np.uint64)
    st, got = t.get(keys)
    for k, s, row in zip(keys, st, got):
        if int(k) in oracle:
            assert s == rdmahash.FOUND and row.tobytes() == oracle[int(k)]
        else:
            assert s == rdmahash.NOT_FOUND
    t.close()
    assert t.closed


def test_set_table_and_uint64_values():
    t = rdmahash.local_table("linear", capacity=1000, value_bytes=0)
    keys = np.array([5, 6, 5, 7], dtype=np.uint64)
    st = t.find_or_put(keys[:2])
    assert list(st) == [rdmahash.INSERTED] * 2
    assert list(t.find_or_put(keys[2:])) == [rdmahash.FOUND, rdmahash.INSERTED]
    st, vals = t.get(np.array([5, 8], dtype=np.uint64))
    assert list(st) == [rdmahash.FOUND, rdmahash.NOT_FOUND] and vals.shape == (2, 0)
    # 8-byte values as a uint64 array (one row of 8 bytes per key)
    u = rdmahash.local_table("cuckoo", capacity=1000, value_bytes=8)
    k = np.arange(1, 101, dtype=np.uint64)
    assert (u.put(k, k * 3) == rdmahash.INSERTED).all()
    st, got = u.get(k)
    assert (st == rdmahash.FOUND).all()
    np.testing.assert_array_equal(got.view(np.uint64).ravel(), k * 3)
    # non-contiguous keys are fine (copied), the answer is the same
    st2, got2 = u.get(np.arange(1, 201, dtype=np.uint64)[::2])
    np.testing.assert_array_equal(got2.view(np.uint64).ravel()[:50], np.arange(1, 101, 2, dtype=np.uint64) * 3)


def test_byte_keys_race():
    t = rdmahash.local_table("race", capacity=5000, value_bytes=16, memory_nodes=2)
    assert t.byte_keys
    oracle = {}
    rng = np.random.default_rng(3)
    for rnd in range(40):
        keys = list({bytes(rng.integers(97, 100, size=int(rng.integers(1, 6)), dtype=np.uint8)) for _ in range(50)})
        present = [k in oracle for k in keys]
        op = rnd % 4
        if op == 0:
            vals = [bytes(rng.integers(0, 256, size=int(rng.integers(0, 300)), dtype=np.uint8)) for _ in keys]
            st = t.put(keys, vals)
            assert list(st) == [rdmahash.UPDATED if p else rdmahash.INSERTED for p in present]
            oracle.update(zip(keys, vals))
        elif op == 1:
            vals = [k * 3 for k in keys]
            st = t.find_or_put(keys, vals)
            assert list(st) == [rdmahash.FOUND if p else rdmahash.INSERTED for p in present]
            for k, v, p in zip(keys, vals, present):
                if not p:
                    oracle[k] = v
        elif op == 2 and rnd % 3 == 0:
            st = t.erase(keys)
            assert list(st) == [rdmahash.ERASED if p else rdmahash.NOT_FOUND for p in present]
            for k in keys:
                oracle.pop(k, None)
        else:
            st, vals = t.get(keys)
            assert list(st) == [rdmahash.FOUND if p else rdmahash.NOT_FOUND for p in present]
            assert vals == [oracle.get(k) for k in keys]
    # race takes uint64 keys too
    st = t.find_or_put(np.array([1, 2], dtype=np.uint64))
    assert list(st) == [rdmahash.INSERTED] * 2


def test_errors_input():
    with pytest.raises(ValueError, match="no scheme 'nope'.*linear"):
        rdmahash.local_table("nope")
    with pytest.raises(TypeError, match="unknown option 'bogus'"):
        rdmahash.local_table("linear", bogus=1)
    with pytest.raises(ValueError, match="storage"):
        rdmahash.local_table("linear", storage="tape")
    with pytest.raises(ValueError, match="load_factor"):
        rdmahash.local_table("linear", load_factor=1.5)
    with pytest.raises(ValueError, match="capacity"):
        rdmahash.local_table("linear", capacity=0)
    # a limit of the registry (check_table_options): an InvalidArgument, which is a ValueError too
    with pytest.raises(rdmahash.InvalidArgument, match="value_bytes"):
        rdmahash.local_table("linear", value_bytes=5000)
    with pytest.raises(rdmahash.InvalidArgument):
        rdmahash.local_table("hopscotch", neighborhood=1)
    assert issubclass(rdmahash.InvalidArgument, ValueError) and issubclass(rdmahash.InvalidArgument, rdmahash.Error)
    assert issubclass(rdmahash.RetryBudgetExceeded, rdmahash.FabricError)

    t = rdmahash.local_table("linear", capacity=100, value_bytes=8)
    with pytest.raises(TypeError, match="dtype uint64"):
        t.get(np.array([1, 2], dtype=np.int64))
    with pytest.raises(TypeError, match="dtype uint64"):
        t.get(np.array([1.0]))
    with pytest.raises(TypeError, match="numpy array"):
        t.get(5)
    with pytest.raises(ValueError, match="1-D"):
        t.get(np.zeros((2, 2), dtype=np.uint64))
    with pytest.raises(ValueError, match="rows of value_bytes"):
        t.put(np.array([1, 2], dtype=np.uint64), np.zeros(3, dtype=np.uint64))
    with pytest.raises(ValueError, match="rows of value_bytes"):
        t.put(np.array([1, 2], dtype=np.uint64), np.zeros((2, 4), dtype=np.uint8))
    with pytest.raises(ValueError, match="C-contiguous"):
        t.put(np.array([1, 2], dtype=np.uint64), np.zeros((2, 16), dtype=np.uint8)[:, ::2])
    with pytest.raises(ValueError, match="values are required"):
        t.put(np.array([1], dtype=np.uint64), None)
    c = rdmahash.local_table("cuckoo", capacity=100, value_bytes=8)  # 63-bit keys
    with pytest.raises(rdmahash.InvalidArgument, match=r"key 9223372036854775808 \(index 1\) is outside the table's key range"):
        c.find_or_put(np.array([1, 1 << 63], dtype=np.uint64), np.zeros(2, dtype=np.uint64))
    # nothing of the refused batch was issued
    st, _ = c.get(np.array([1], dtype=np.uint64))
    assert list(st) == [rdmahash.NOT_FOUND]
    with pytest.raises(rdmahash.InvalidArgument, match="8-byte integer keys"):
        t.get([b"abc"])
    with pytest.raises(ValueError, match="depth"):
        t.depth = 0
    t.close()
    with pytest.raises(ValueError, match="closed"):
        t.get(np.array([1], dtype=np.uint64))

    s = rdmahash.local_table("linear", capacity=100, value_bytes=0)
    with pytest.raises(ValueError, match="no values"):
        s.find_or_put(np.array([1], dtype=np.uint64), np.zeros(1, dtype=np.uint64))

    r = rdmahash.local_table("race", capacity=100, value_bytes=8)
    with pytest.raises(TypeError, match=r"keys\[1\] must be bytes"):
        r.get([b"a", "b"])
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        r.put([b"a", b"b"], [b"x"])
    with pytest.raises(rdmahash.InvalidArgument, match="1 to 256"):
        r.put([b"", b"b"], [b"x", b"y"])
    with pytest.raises(rdmahash.InvalidArgument, match="at most"):
        r.put([b"a"], [bytes(20000)])


def test_full_is_a_status():
    # a tiny linear table: inserts past its probe bound report FULL, never raise
    t = rdmahash.local_table("linear", capacity=64, value_bytes=0, load_factor=0.9, max_chunks=1, chunk=1, tail_slots=0)
    st = t.find_or_put(np.arange(1, 2000, dtype=np.uint64))
    assert (st == rdmahash.FULL).any() and (st == rdmahash.INSERTED).any()
    assert set(np.unique(st)) <= {rdmahash.FULL, rdmahash.INSERTED}


def test_gil_released_during_batch():
    t = rdmahash.local_table("linear", capacity=300000, value_bytes=8, depth=4)
    keys = np.arange(1, 200001, dtype=np.uint64)
    ticks = []
    done = threading.Event()

    def batch():
        t.find_or_put(keys, keys)
        done.set()

    th = threading.Thread(target=batch)
    th.start()
    while not done.is_set():
        ticks.append(1)  # runs only while the batch thread has released the GIL
        done.wait(0.001)
    th.join()
    assert len(ticks) > 1
    st, got = t.get(keys)
    assert (st == rdmahash.FOUND).all() and (got.view(np.uint64).ravel() == keys).all()


def run_child(code):
    """Runs `code` in a fresh interpreter (a crash or an allocation limit stays there); returns it."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONFAULTHANDLER="1"))


def test_close_while_a_call_waits_for_the_table():
    # A call checks the table is open, then waits for the table's lock (held by another thread's
    # batch); a close() from a third thread that takes the lock first empties the client under it.
    # Made deterministic: the waiting call's keys (a list subclass) run the close() in another
    # thread, to its end, after the call's first check and before it takes the lock. Without the
    # check under the lock the batch runs on the emptied client (SIGSEGV); in a child process so
    # that a crash fails this test only.
    p = run_child("""
        import threading
        import rdmahash
        class ClosingKeys(list):
            def __getitem__(self, i):
                if i == 0:
                    closer = threading.Thread(target=t.close)
                    closer.start()
                    closer.join()
                    assert t.closed and repr(t) == "<rdmahash.Table closed>"
                return list.__getitem__(self, i)

        for call in (lambda k: t.get(k), lambda k: t.find_or_put(k, [b"x"] * len(k)), lambda k: t.erase(k)):
            t = rdmahash.local_table("race", capacity=1000, value_bytes=8)
            assert list(t.find_or_put([b"a", b"b"], [b"1", b"2"])) == [rdmahash.INSERTED] * 2
            try:
                call(ClosingKeys([b"a", b"b"]))
            except ValueError as e:
                assert str(e) == "the table is closed", e
            else:
                raise AssertionError("a call on a table closed before it took the lock did not raise")
        print("ok")
        """)
    assert p.returncode == 0 and p.stdout == "ok\n", f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"


def test_close_from_another_thread_during_a_batch():
    # The report's scenario: a long batch in one thread, close() in another, then a third call.
    # Whichever order the lock gives, the calls after close() raise, nothing crashes, and
    # __repr__ / closed answer at once while the batch holds the lock.
    p = run_child("""
        import threading
        import numpy as np
        import rdmahash
        t = rdmahash.local_table("linear", capacity=600000, value_bytes=8, depth=4)
        keys = np.arange(1, 400001, dtype=np.uint64)
        started = threading.Event()
        errors = []

        def batch():
            started.set()
            t.find_or_put(keys, keys)

        def late_get():
            try:
                t.get(keys[:10])
            except ValueError as e:
                errors.append(str(e))

        a = threading.Thread(target=batch)
        a.start()
        started.wait()
        assert "linear" in repr(t) and not t.closed
        b = threading.Thread(target=t.close)
        b.start()
        c = threading.Thread(target=late_get)
        c.start()
        for th in (a, b, c):
            th.join()
        assert t.closed and repr(t) == "<rdmahash.Table closed>"
        assert errors in ([], ["the table is closed"]), errors
        try:
            t.get(keys[:10])
        except ValueError as e:
            assert str(e) == "the table is closed"
        else:
            raise AssertionError("get after close did not raise")
        for call in (t.barrier, lambda: t._native_loop("get", keys[:10], 4)):
            try:
                call()
            except ValueError as e:
                assert str(e) == "the table is closed"
            else:
                raise AssertionError("a call after close did not raise")
        print("ok")
        """)
    assert p.returncode == 0 and p.stdout == "ok\n", f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"


def test_table_past_mem_available_is_refused_up_front():
    # 64 shards of 4.1 GiB: refused by the bench's MemAvailable check (which an address-space
    # limit lowers) before any region is allocated and zero-filled. In a child process under a
    # limit of what it already maps plus 1 GiB: without the check the first region's allocation
    # fails (std::bad_alloc, a MemoryError), it never fills the machine's memory.
    p = run_child("""
        import resource
        import rdmahash

        def vm_bytes():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + (1 << 30), hard))
        try:
            rdmahash.local_table("linear", capacity=2**34, value_bytes=0, memory_nodes=64)
        except rdmahash.InvalidArgument as e:
            print(e)
        else:
            print("built")
        """)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert p.stdout.startswith("the table does not fit in memory: 64 shard(s) of 4.1 GiB"), p.stdout + p.stderr
    assert "but MemAvailable is" in p.stdout and "use a lower capacity" in p.stdout, p.stdout
    # a table that fits is still built
    t = rdmahash.local_table("linear", capacity=1000, value_bytes=0, memory_nodes=64)
    assert list(t.find_or_put(np.array([3], dtype=np.uint64))) == [rdmahash.INSERTED]


def test_values_must_be_plain_data():
    t = rdmahash.local_table("linear", capacity=100, value_bytes=8)
    keys = np.array([1, 2], dtype=np.uint64)
    # an object array's bytes are its elements' addresses: 2 x 8 bytes, the shape of two values
    objs = np.array([[object()], [object()]])
    assert objs.nbytes == 16
    for op in (t.put, t.find_or_put):
        with pytest.raises(TypeError, match="plain numbers or bytes.*dtype object"):
            op(keys, objs)
    with pytest.raises(TypeError, match="dtype <U2"):
        t.put(keys, np.array([["ab"], ["cd"]]))  # 8 bytes of code points per row
    with pytest.raises(TypeError, match="dtype datetime64"):
        t.put(keys, np.array(["2020-01-01", "2021-01-01"], dtype="datetime64[D]"))
    with pytest.raises(TypeError, match="dtype"):
        t.put(keys, np.zeros(2, dtype=[("a", np.int32), ("o", object)]))
    with pytest.raises(TypeError, match="dtype object"):
        t.update(keys, objs)
    st, _ = t.get(keys)
    assert list(st) == [rdmahash.NOT_FOUND] * 2  # nothing of the refused batches was stored
    # plain data of any width is taken as its bytes
    for v in (np.arange(16, dtype=np.uint8).reshape(2, 8), np.array([1.5, -2.0]), np.array([b"abcdefgh", b"ABCDEFGH"]),
              np.zeros(2, dtype=[("a", np.int32), ("b", np.float32)]), np.array([[True] * 8, [False] * 8])):
        assert set(t.put(keys, v)) <= {rdmahash.INSERTED, rdmahash.UPDATED}
        st, got = t.get(keys)
        assert (st == rdmahash.FOUND).all() and got.tobytes() == v.tobytes()


@pytest.mark.parametrize("scheme", ["cuckoo", "hopscotch", "cluster", "level", "continuity"])
def test_native_loop_checks_the_key_range(scheme):
    # 63-bit keys (the top bit is the scheme's own): _native_loop refuses a larger key as run() does
    t = rdmahash.local_table(scheme, capacity=1000, value_bytes=8)
    keys = np.array([1, 1 << 63], dtype=np.uint64)
    with pytest.raises(rdmahash.InvalidArgument, match=r"key 9223372036854775808 \(index 1\) is outside the table's key range"):
        t.find_or_put(keys)
    for op in ("find_or_put", "put", "get", "erase"):
        with pytest.raises(rdmahash.InvalidArgument, match=r"key 9223372036854775808 \(index 1\) is outside the table's key range"):
            t._native_loop(op, keys, 1)
    st, _ = t.get(np.array([0, 1], dtype=np.uint64))
    assert list(st) == [rdmahash.NOT_FOUND] * 2  # nothing of the refused loops was issued
    assert t._native_loop("find_or_put", keys[:1], 1) >= 0
    assert list(t.get(keys[:1])[0]) == [rdmahash.FOUND]
