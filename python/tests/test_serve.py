"""The Python module as a client of running `rdmahash serve` memory nodes (connect_table, the path
of `rdmahash bench --connect`), against a dict oracle. RDMAHASH_BIN names the rdmahash executable
(ctest sets it); the servers listen on the loopback.
    RDMAHASH_BIN=build/ci/rdmahash PYTHONPATH=build/ci/python /usr/bin/python3 -m pytest python/tests/test_serve.py"""
import os
import re
import subprocess

import numpy as np
import pytest

import rdmahash

BIN = os.environ.get("RDMAHASH_BIN", "")
pytestmark = pytest.mark.skipif(not BIN, reason="RDMAHASH_BIN is not set")


def start_server(args):
    """`rdmahash serve` on 127.0.0.1 (a free port); returns (Popen, "host:port")."""
    p = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--no-progress", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    m = re.search(r"listening on (\S+:\d+)$", line.strip())
    if not m:
        p.kill()
        p.wait()
        pytest.fail(f"no 'listening on HOST:PORT' line from rdmahash serve: {line!r}")
    return p, m.group(1)


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


@pytest.mark.parametrize("scheme", ["linear", "cuckoo", "race", "hopscotch"])
def test_served_table_oracle(scheme):
    server, addr = start_server(["--scheme", scheme, "--records", "1000", "--value-bytes", "8", "--load-factor", "0.1",
])
    try:
        with rdmahash.connect_table([addr]) as t:
            assert t.scheme == scheme and t.value_bytes == 8
            keys = np.arange(1, 1501, dtype=np.uint64)  # not among the loaded records (a 63-bit bijection of 0..999)
            st, _ = t.get(keys)
            assert (st == rdmahash.NOT_FOUND).all()
            oracle = {}
            rng = np.random.default_rng(5)
            for rnd in range(30):  # FULL never comes: at most 2 500 keys in 10 000 slots
                k = rng.choice(keys, size=200, replace=False)
                present = np.array([int(x) in oracle for x in k])
                v = k * np.uint64(rnd + 7)
                if rnd % 3 == 0:
                    st = t.put(k, v)
                    np.testing.assert_array_equal(st, np.where(present, rdmahash.UPDATED, rdmahash.INSERTED))
                    oracle.update({int(a): int(b) for a, b in zip(k, v)})
                elif rnd % 3 == 1:
                    st = t.find_or_put(k, v)
                    np.testing.assert_array_equal(st, np.where(present, rdmahash.FOUND, rdmahash.INSERTED))
                    for a, b, p in zip(k, v, present):
                        if not p:
                            oracle[int(a)] = int(b)
                else:
                    st = t.erase(k[:50])
                    np.testing.assert_array_equal(st, np.where(present[:50], rdmahash.ERASED, rdmahash.NOT_FOUND))
                    for a in k[:50]:
                        oracle.pop(int(a), None)
                st, got = t.get(keys)
                want_st = np.array([rdmahash.FOUND if int(x) in oracle else rdmahash.NOT_FOUND for x in keys])
                np.testing.assert_array_equal(st, want_st)
                want_v = np.array([oracle.get(int(x), 0) for x in keys], dtype=np.uint64)
                np.testing.assert_array_equal(got.view(np.uint64).ravel(), want_v)
        # a second client sees the first one's writes
        with rdmahash.connect_table([addr]) as t2:
            st, got = t2.get(np.array(sorted(oracle), dtype=np.uint64))
            assert (st == rdmahash.FOUND).all()
            np.testing.assert_array_equal(got.view(np.uint64).ravel(), np.array([oracle[x] for x in sorted(oracle)], dtype=np.uint64))
    finally:
        stop(server)


def test_connect_errors():
    with pytest.raises(ValueError, match="at least one"):
        rdmahash.connect_table([])
    # nobody listens on this port (bound, not listening)
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    try:
        with pytest.raises(rdmahash.FabricError, match=f"127.0.0.1:{port}"):
            rdmahash.connect_table([f"127.0.0.1:{port}"])
    finally:
        s.close()
    with pytest.raises(rdmahash.InvalidArgument, match="token_file"):
        rdmahash.connect_table(["127.0.0.1:1"], token_file="/nonexistent/token")


def test_served_race_byte_keys():
    server, addr = start_server(["--scheme", "race", "--records", "100", "--value-bytes", "8"])
    try:
        with rdmahash.connect_table([addr]) as t:
            assert t.byte_keys
            ks = [b"k%d" % i for i in range(300)]
            vs = [b"v" * (i % 40) for i in range(300)]
            assert (t.put(ks, vs) == rdmahash.INSERTED).all()
            assert (t.find_or_put(ks[:10], [b"x"] * 10) == rdmahash.FOUND).all()
            st, got = t.get(ks + [b"absent"])
            assert list(st) == [rdmahash.FOUND] * 300 + [rdmahash.NOT_FOUND]
            assert got == vs + [None]
    finally:
        stop(server)
