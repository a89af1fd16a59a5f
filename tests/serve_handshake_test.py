#!/usr/bin/env python3
"""`rdmahash serve` under bad handshakes, and where it listens (issues 10 and 16).

usage: serve_handshake_test.py RDMAHASH

Starts a server on 127.0.0.1:0, then:
  - checks every TCP socket the server listens on (its own and UCX's, from /proc/net/tcp and the
    process's fds) is bound to 127.0.0.1 only;
  - sends garbage, a truncated hello, an empty connection, a hello with a bad version, and a slow
    hello (one byte per second: the 5 s deadline drops it), with a good client connected and
    running meanwhile;
  - checks the bad version gets a refusal with a reason, the others are dropped with one log line
    each, the running client and a client started afterwards both finish, and their history is
    linearizable;
  - stops the server with SIGTERM: exit 0 and "stopped by SIGTERM".
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import fail, listening_sockets, start_server  # noqa: E402


def main():
    rdmahash = sys.argv[1]
    work = tempfile.mkdtemp(prefix="rdmahash-hs.")
    log = open(os.path.join(work, "serve.log"), "w+")
    server, host, port = start_server(rdmahash, ["--records", "1000", "--slot-format", "inline", "--value-bytes", "16"],
                                      log)
    try:
        addr = f"{host}:{port}"

        socks = listening_sockets(server.pid)
        print("listening sockets:", socks)
        if (host, port) not in socks:
            fail(f"{addr} is not among the server's listening sockets {socks}")
        outside = [s for s in socks if s[0] != "127.0.0.1"]
        if outside:
            fail(f"the server listens outside the loopback: {outside}")

        run = [rdmahash, "bench", "--connect", addr, "--workload", "kv-mix", "--keys", "16", "--depth", "4",
               "--quiet"]
        h1, h2 = os.path.join(work, "h1.bin"), os.path.join(work, "h2.bin")
        busy = subprocess.Popen(run + ["--ops", "150000", "--history", h1])
        for _ in range(300):  # connected before the bad handshakes begin
            log.seek(0)
            if "client 0 connected" in log.read():
                break
            time.sleep(0.1)
        else:
            fail("the first client did not connect")

        def connect():
            return socket.create_connection((host, port), timeout=10)

        # Garbage: 16 bytes that are not a hello.
        s = connect(); s.sendall(b"GET / HTTP/1.0\r\n"); s.settimeout(10)
        if s.recv(100) != b"":
            fail("garbage got an answer")
        s.close()
        # Truncated: half a hello, then close.
        s = connect(); s.sendall(b"RDMAHASH\x01\x00"); s.close()
        # Empty: connect and close.
        connect().close()
        # Bad version: a refusal with its reason.
        s = connect(); s.sendall(b"RDMAHASH" + struct.pack("<II", 99, 0))
        head = b""
        while len(head) < 16:
            chunk = s.recv(16 - len(head))
            if not chunk:
                fail("no reply to a hello of version 99")
            head += chunk
        magic, status, n = head[:8], *struct.unpack("<II", head[8:])
        body = b""
        while len(body) < n:
            body += s.recv(n - len(body))
        s.close()
        if magic != b"RDMAHASH" or status != 1 or b"version 2" not in body:
            fail(f"version 99: expected a refusal naming version 2, got {magic!r} {status} {body!r}")
        print("version 99 refused:", body.decode())
        # Slow: one byte a second; the deadline (5 s) drops it before the hello is whole.
        s = connect()
        t0 = time.time()
        dropped = False
        for b in (b"RDMAHASH" + struct.pack("<II", 2, 0) + os.urandom(32))[:12]:  # 12 s: well past the deadline
            try:
                s.sendall(bytes([b]))
            except OSError:
                dropped = True
                break
            s.settimeout(1.0)
            try:
                if s.recv(1) == b"":
                    dropped = True
                    break
            except socket.timeout:
                pass
        s.close()
        if not dropped:
            fail("a hello sent one byte per second was not dropped")
        print(f"slow hello dropped after {time.time() - t0:.1f} s")

        if busy.wait(timeout=300) != 0:
            fail("the client running during the bad handshakes failed")
        if subprocess.call(run + ["--ops", "5000", "--history", h2]) != 0:
            fail("a client after the bad handshakes failed")
        # A client with a token refuses a server that asks for none: it cannot prove who it is.
        tok = os.path.join(work, "token")
        with open(os.open(tok, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("0123456789abcdef0123456789abcdef\n")
        r = subprocess.run(run + ["--ops", "100", "--token-file", tok], capture_output=True, text=True)
        want = f"rdmahash bench: error: memory node {addr} asks for no token"
        if r.returncode != 2 or not r.stderr.startswith(want):
            fail(f"a client with a token against a server without one: expected exit 2 and {want!r}, got "
                 f"{r.returncode} {r.stderr!r}")
        print(r.stderr.strip())
        check = subprocess.run([rdmahash, "check-history", h1, h2], capture_output=True, text=True)
        print(check.stdout.strip())
        if check.returncode != 0 or not check.stdout.startswith("linearizable"):
            fail("the clients' history is not linearizable: " + check.stdout + check.stderr)
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        rc = server.wait(timeout=30)
    rest = server.stdout.read()
    log.seek(0)
    text = log.read()
    print(text.strip())
    if rc != 0 or "stopped by SIGTERM" not in rest:
        fail(f"the server exited {rc} on SIGTERM: {rest!r}")
    drops = text.count("dropped a connection")
    if drops != 6:
        fail(f"expected 6 dropped connections (garbage, truncated, empty, version 99, slow, the client with a "
             f"token whose proof the server closed on), logged {drops}")
    if "client 0 finished" not in text or "client 1 finished" not in text:
        fail("the good clients did not finish")
    shutil.rmtree(work, ignore_errors=True)  # kept when the test fails: its logs say why
    print("PASS")


if __name__ == "__main__":
    main()
