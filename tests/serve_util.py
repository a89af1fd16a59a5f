"""Helpers shared by the `rdmahash serve` test scripts (serve_*_test.py).

The wire format they speak is the handshake of include/rdmahash/ucx_service.h (protocol v2): a
hello = "RDMAHASH" | version u32 | flags u32 | client nonce (32 bytes); a reply head = "RDMAHASH" |
status u32 | length u32, then `length` bytes.
"""
import os
import re
import socket
import struct
import subprocess
import sys

# The label of the client's HMAC proof (ucx_service.h).
LABEL = b"rdmahash handshake v2: client proof"


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def recv_exact(s, n):
    """n bytes from socket s, or None if the peer closed first."""
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def read_reply(s, strict=True):
    """(status, body) of one server reply, None if the connection closed first. A reply without the
    magic or cut short fails the test when strict, else reads as None."""
    head = recv_exact(s, 16)
    if head is None:
        return None
    if head[:8] != b"RDMAHASH":
        if strict:
            fail(f"a reply without the magic: {head!r}")
        return None
    status, n = struct.unpack("<II", head[8:])
    body = recv_exact(s, n)
    if body is None:
        if strict:
            fail("a truncated reply")
        return None
    return status, body


def hello(nonce=None):
    """A protocol-v2 hello with the given (or a random) 32-byte client nonce."""
    return b"RDMAHASH" + struct.pack("<II", 2, 0) + (nonce if nonce is not None else os.urandom(32))


def start_server(rdmahash, args, log, listen="127.0.0.1:0"):
    """Starts `rdmahash serve --listen LISTEN --no-progress ARGS` with stderr to the open file log;
    returns (Popen, host, port) once it printed its 'listening on HOST:PORT' line (fails the test
    otherwise). The caller stops it (SIGTERM) in a finally block."""
    server = subprocess.Popen([rdmahash, "serve", "--listen", listen, "--no-progress", *args],
                              stdout=subprocess.PIPE, stderr=log, text=True)
    line = server.stdout.readline()
    m = re.search(r"listening on (\S+):(\d+)$", line.strip())
    want = listen.rsplit(":", 1)[0]
    if not m or m.group(1) != want:
        server.kill()
        server.wait()
        fail(f"no 'listening on {want}:PORT' line: {line!r}")
    print(line.strip())
    return server, m.group(1), int(m.group(2))


def listening_sockets(pid):
    """(address, port) of every listening TCP socket owned by `pid`."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", target)
        if m:
            inodes.add(m.group(1))
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in inodes:  # 0A: LISTEN
                    continue
                addr, port = local.split(":")
                if len(addr) == 8:
                    ip = socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(addr, 16)))
                else:
                    ip = "ipv6:" + addr
                out.append((ip, int(port, 16)))
    return out
