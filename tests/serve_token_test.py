#!/usr/bin/env python3
"""`rdmahash serve --token-file`: the challenge-response handshake (issue 16 item 2).

usage: serve_token_test.py RDMAHASH

Starts a server on 127.0.0.1:0 with --token-file (missing: the server creates it, mode 0600), a
client with the token running meanwhile, then:
  - a client without --token-file and one with a wrong token: exit 2 and exactly
    "rdmahash bench: error: memory node ADDR refused the connection: bad token";
  - a handshake done here in Python with the right token: welcomed (the proof is
    HMAC-SHA256(token, label | client nonce | server nonce), as in ucx_service.h);
  - that handshake's hello and proof replayed on a new connection: refused "bad token" (the server's
    nonce is fresh per connection, so an old proof is worthless);
  - a random proof: "bad token"; half a proof then close, and a proof one byte per second: dropped;
  - every refusal is one log line, the running client finishes, a client afterwards runs, and both
    histories together are linearizable.
"""
import hashlib
import hmac
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import LABEL, fail, hello, listening_sockets, read_reply, start_server  # noqa: E402



def main():
    rdmahash = sys.argv[1]
    work = tempfile.mkdtemp(prefix="rdmahash-token.")
    tok = os.path.join(work, "token")
    log = open(os.path.join(work, "serve.log"), "w+")
    server, host, port = start_server(rdmahash, ["--records", "1000", "--slot-format", "set", "--token-file", tok], log)
    expected_refusals = 0
    try:
        addr = f"{host}:{port}"
        st = os.stat(tok)
        if stat.S_IMODE(st.st_mode) != 0o600:
            fail(f"the token file was created with mode {oct(st.st_mode)}")
        token = open(tok, "rb").read()
        if not re.fullmatch(rb"[0-9a-f]{64}\n", token):
            fail(f"the created token is not 64 hex digits: {token!r}")
        token = token.strip()

        run = [rdmahash, "bench", "--connect", addr, "--workload", "kv-mix", "--keys", "16", "--depth", "4", "--quiet"]
        h1, h2 = os.path.join(work, "h1.bin"), os.path.join(work, "h2.bin")
        busy = subprocess.Popen(run + ["--ops", "100000", "--history", h1, "--token-file", tok])
        for _ in range(300):
            log.seek(0)
            if "client 0 connected" in log.read():
                break
            time.sleep(0.1)
        else:
            fail("the client with the token did not connect")

        # Clients without the token and with a wrong one.
        wrong = os.path.join(work, "wrong")
        with open(os.open(wrong, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("f" * 64 + "\n")
        want = f"rdmahash bench: error: memory node {addr} refused the connection: bad token\n"
        for name, extra in (("no token", []), ("a wrong token", ["--token-file", wrong])):
            r = subprocess.run(run + ["--ops", "100"] + extra, capture_output=True, text=True)
            if r.returncode != 2 or r.stderr != want:
                fail(f"a client with {name}: expected exit 2 and {want!r}, got {r.returncode} {r.stderr!r}")
            expected_refusals += 1
            print(f"{name}: {r.stderr.strip()}")

        def connect():
            s = socket.create_connection((host, port), timeout=10)
            s.settimeout(10)
            return s

        # A good handshake, done by hand; record what went over the wire.
        s = connect()
        nc = os.urandom(32)
        s.sendall(hello(nc))
        status, body = read_reply(s)
        if status != 2 or len(body) != 36 or struct.unpack("<I", body[32:])[0] != 1:
            fail(f"expected a challenge asking for the token, got {status} {body!r}")
        ns1 = body[:32]
        proof = hmac.new(token, LABEL + nc + ns1, hashlib.sha256).digest()
        s.sendall(proof)
        status, welcome = read_reply(s)
        if status != 0 or len(welcome) < 64:
            fail(f"the right proof was not welcomed: {status} {welcome[:100]!r}")
        if token in welcome:
            fail("the welcome carries the token")
        s.sendall(b"BYE!")
        if s.recv(1) != b"":
            fail("the server kept the connection after the goodbye")
        s.close()
        print("a handshake with the right token: welcomed")

        # Replay: the same hello and proof on a new connection.
        s = connect()
        s.sendall(hello(nc))
        status, body = read_reply(s)
        if status != 2 or body[:32] == ns1:
            fail("the server's nonce was not fresh: a replayed proof would be accepted")
        s.sendall(proof)
        status, body = read_reply(s)
        if status != 1 or body != b"bad token":
            fail(f"a replayed handshake was not refused with 'bad token': {status} {body[:100]!r}")
        s.close()
        expected_refusals += 1
        print("replayed handshake: refused (bad token)")

        # A random proof.
        s = connect()
        s.sendall(hello(os.urandom(32)))
        read_reply(s)
        s.sendall(os.urandom(32))
        status, body = read_reply(s)
        if status != 1 or body != b"bad token":
            fail(f"a random proof was not refused: {status} {body!r}")
        s.close()
        expected_refusals += 1

        # Half a proof, then close.
        s = connect()
        s.sendall(hello(os.urandom(32)))
        read_reply(s)
        s.sendall(os.urandom(16))
        s.close()
        # A proof one byte per second: the handshake's 5 s deadline drops it.
        s = connect()
        s.sendall(hello(os.urandom(32)))
        read_reply(s)
        t0 = time.time()
        dropped = False
        for b in os.urandom(12):  # 12 s: well past the 5 s deadline
            try:
                s.sendall(bytes([b]))
                s.settimeout(1.0)
                if s.recv(1) == b"":
                    dropped = True
                    break
            except socket.timeout:
                pass
            except OSError:
                dropped = True
                break
        s.close()
        if not dropped:
            fail("a proof sent one byte per second was not dropped")
        print(f"slow proof dropped after {time.time() - t0:.1f} s")

        if busy.wait(timeout=300) != 0:
            fail("the client running during the refusals failed")
        if subprocess.call(run + ["--ops", "5000", "--history", h2, "--token-file", tok]) != 0:
            fail("a client with the token after the refusals failed")
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
    refusals = text.count("refused: bad token")
    if refusals != expected_refusals:
        fail(f"expected {expected_refusals} 'bad token' log lines, got {refusals}")
    for why in ("closed before its proof of the token", "no proof of the token within 5 s"):
        if text.count(why) != 1:
            fail(f"expected one log line '{why}'")
    if text.count("dropped a connection") != expected_refusals + 2:
        fail("one log line per dropped connection expected")
    for c in ("client 0 finished", "client 1 finished", "client 2 finished"):
        if c not in text:
            fail(f"missing '{c}'")
    public_address(rdmahash, work, tok)
    shutil.rmtree(work, ignore_errors=True)  # kept when the test fails: its logs say why
    print("PASS")


def public_address(rdmahash, work, tok):
    """A server on this machine's first non-loopback IPv4 address (with the token): every socket it
    listens on, its own and UCX's, is on that address; a client with the token runs against it."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    ips = [m.group(1) for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+)/", out) if not m.group(1).startswith("127.")]
    if not ips:
        print("no non-loopback IPv4 address on this machine: the public-address part is skipped")
        return
    ip = ips[0]
    log = open(os.path.join(work, "public.log"), "w+")
    server, _, port = start_server(rdmahash, ["--records", "1000", "--slot-format", "set", "--token-file", tok], log,
                                   listen=f"{ip}:0")
    try:
        socks = listening_sockets(server.pid)
        print(f"serve --listen {ip}:0: listening sockets {socks}")
        if (ip, port) not in socks or any(s[0] != ip for s in socks):
            fail(f"a server on {ip} listens elsewhere: {socks}")
        r = subprocess.run([rdmahash, "bench", "--connect", f"{ip}:{port}", "--workload", "kv-mix", "--keys", "16",
                            "--ops", "2000", "--quiet", "--token-file", tok], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"a client with the token against {ip} failed: {r.stderr}")
    finally:
        server.send_signal(signal.SIGTERM)
        if server.wait(timeout=30) != 0:
            fail("the server on the public address did not stop cleanly")


if __name__ == "__main__":
    main()
