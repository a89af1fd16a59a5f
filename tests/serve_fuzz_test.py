#!/usr/bin/env python3
"""Handshake fuzzing against a running `rdmahash serve` (issue 16 item 3).

usage: serve_fuzz_test.py RDMAHASH [MESSAGES]

Starts a server with --token-file on 127.0.0.1:0 and, while kv-mix clients with the token run
back to back (each with --history), sends MESSAGES (default 100000) random and mutated handshake
messages, one connection each (the protocol drops a connection at its first bad message, so
messages cannot share one): random bytes of random length (up to 4 KiB), hellos with bytes flipped,
cut short or extended, hellos with a random version or flags, hellos followed by a random,
truncated or mutated proof, and good hellos followed by a proof made with a wrong token. Sockets
close with SO_LINGER 0 (a reset: no TIME_WAIT, so 10^5 connections do not exhaust the ports) from
source addresses spread over 127.0.0.0/8. Every 100 messages (fewer than the listen backlog of 128) a correct handshake (HMAC with the
right token) must be welcomed: the server keeps answering while being fuzzed.
Then: every client exited 0, a client after the fuzzing runs (after good handshakes that bring the
server's next client id to the first client's plus a multiple of 1 024, so that its index among the bench's client ids is the
first client's and only its id tells them apart), all histories together are
linearizable, the server counted every fuzz connection as dropped and none as connected, and it
stops on SIGTERM with exit 0.
"""
import hashlib
import hmac
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import LABEL, fail, hello, read_reply, start_server  # noqa: E402

LINGER0 = struct.pack("ii", 1, 0)


def mutate(rng, msg):
    b = bytearray(msg)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        if op == 0 and b:  # flip a byte
            b[rng.randrange(len(b))] ^= rng.randint(1, 255)
        elif op == 1 and b:  # cut
            del b[rng.randrange(len(b)):]
        elif op == 2:  # extend
            b += rng.randbytes(rng.randint(1, 64))
        elif op == 3 and b:  # set a 32-bit field to an edge value
            i = rng.randrange(max(1, len(b) - 3))
            b[i:i + 4] = struct.pack("<I", rng.choice([0, 1, 2, 3, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 20, (1 << 20) + 1]))
    return bytes(b)


def fuzz_message(rng):
    kind = rng.randrange(8)
    if kind == 0:
        return rng.randbytes(rng.randint(0, 100))
    if kind == 1:
        return rng.randbytes(rng.randint(100, 4096))
    if kind == 2:
        return mutate(rng, hello())
    if kind == 3:
        return b"RDMAHASH" + struct.pack("<II", rng.getrandbits(32), rng.getrandbits(32)) + rng.randbytes(32)
    if kind == 4:
        return hello() + rng.randbytes(32)  # a proof made without the token
    if kind == 5:
        return hello() + rng.randbytes(rng.randint(0, 31))  # a truncated proof
    if kind == 6:
        return mutate(rng, hello() + rng.randbytes(32))
    wrong = rng.randbytes(32)  # a proof with a wrong token over a guessed server nonce
    nc = os.urandom(32)
    return hello(nc) + hmac.new(wrong, LABEL + nc + rng.randbytes(32), hashlib.sha256).digest() + rng.randbytes(rng.randint(0, 8))


def main():
    rdmahash = sys.argv[1]
    messages = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    work = tempfile.mkdtemp(prefix="rdmahash-fuzz.")
    tok = os.path.join(work, "token")
    log = open(os.path.join(work, "serve.log"), "w+")
    server, host, port = start_server(rdmahash, ["--records", "1000", "--slot-format", "set", "--token-file", tok], log)
    histories, client_failures = [], []
    stop_clients = threading.Event()
    synced = 0
    try:
        addr = f"{host}:{port}"
        token = open(tok, "rb").read().strip()
        run = [rdmahash, "bench", "--connect", addr, "--workload", "kv-mix", "--keys", "16", "--depth", "4", "--quiet",
               "--token-file", tok]

        def good_handshake():
            with socket.create_connection((host, port), timeout=10) as s:
                nc = os.urandom(32)
                s.sendall(hello(nc))
                status, body = read_reply(s, strict=False) or (None, None)
                if status != 2:
                    fail(f"no challenge to a good hello during the fuzzing: {status}")
                s.sendall(hmac.new(token, LABEL + nc + body[:32], hashlib.sha256).digest())
                status, body = read_reply(s, strict=False) or (None, None)
                if status != 0:
                    fail(f"a good handshake was not welcomed during the fuzzing: {status} {body!r}")
                s.sendall(b"BYE!")
                s.recv(1)

        def last_client_id():  # the server numbers welcomed clients 0, 1, ... and logs each
            log.flush()
            with open(log.name) as f:
                ids = [int(m.group(1)) for m in re.finditer(r"client (\d+) connected", f.read())]
            return ids[-1] if ids else -1

        first = os.path.join(work, "first.bin")
        if subprocess.call(run + ["--ops", "2000", "--history", first]) != 0:
            fail("the first client failed")
        histories.append(first)
        first_id = last_client_id()

        def clients():  # one connected client at all times while the fuzzer runs
            i = 0
            while not stop_clients.is_set():
                h = os.path.join(work, f"h{i}.bin")
                r = subprocess.run(run + ["--ops", "20000", "--history", h], capture_output=True, text=True)
                histories.append(h)
                if r.returncode != 0:
                    client_failures.append(f"client {i}: exit {r.returncode}: {r.stderr.strip()}")
                i += 1

        t = threading.Thread(target=clients)
        t.start()

        t0 = time.time()
        kinds = 0
        for i in range(messages):
            msg = fuzz_message(rng)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER0)
            s.bind((f"127.0.{(i >> 8) & 255}.{(i & 255) or 1}", 0))
            s.connect((host, port))
            if msg:
                try:
                    s.sendall(msg)
                except OSError:
                    pass  # the server may drop it before it is all sent
            s.close()
            kinds += 1
            if i % 100 == 99:
                good_handshake()
                synced += 1
        good_handshake()
        synced += 1
        elapsed = time.time() - t0
        print(f"{kinds} fuzz messages and {synced} good handshakes in {elapsed:.1f} s")
        stop_clients.set()
        t.join(timeout=300)
        if client_failures:
            fail("clients failed during the fuzzing: " + "; ".join(client_failures))
        # The last client's id is the first's plus a multiple of 1 024: the same index in the bench's
        # client index space, and it must still be named apart from it in its history.
        for _ in range((first_id - last_client_id() - 1) % 1024):
            good_handshake()
            synced += 1
        if (last_client_id() + 1) % 1024 != first_id % 1024:
            fail(f"the next client id is not the first's ({first_id}) plus a multiple of 1024")
        last = os.path.join(work, "last.bin")
        if subprocess.call(run + ["--ops", "5000", "--history", last]) != 0:
            fail("a client after the fuzzing failed")
        histories.append(last)
        check = subprocess.run([rdmahash, "check-history"] + histories, capture_output=True, text=True)
        print(check.stdout.strip())
        if check.returncode != 0 or not check.stdout.startswith("linearizable"):
            fail("the clients' history is not linearizable: " + check.stdout + check.stderr)
        if server.poll() is not None:
            fail("the server died")
    finally:
        stop_clients.set()
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        rc = server.wait(timeout=60)
    rest = server.stdout.read()
    print(rest.strip())
    if rc != 0 or "stopped by SIGTERM" not in rest:
        fail(f"the server exited {rc} on SIGTERM")
    m = re.search(r"(\d+) clients served \((\d+) finished, (\d+) lost\), (\d+) connections dropped", rest)
    served, finished, lost, dropped = map(int, m.groups())
    want_served = synced + len(histories)
    if served != want_served or finished != want_served or lost != 0:
        fail(f"expected {want_served} clients served and finished (good handshakes and bench clients), none lost; "
             f"got {served} served, {finished} finished, {lost} lost")
    if dropped != kinds:
        fail(f"expected every one of the {kinds} fuzz connections dropped, the server counted {dropped}")
    shutil.rmtree(work)  # ~40 MB of histories; kept when the test fails
    print("PASS")


if __name__ == "__main__":
    main()
