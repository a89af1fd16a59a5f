#!/usr/bin/env python3
"""Connection churn against one `rdmahash serve` without leaks (issue 16 item 4).

usage: serve_churn_test.py RDMAHASH [SECONDS] [CLIENTS]

One server (linear set, --token-file, 127.0.0.1:0). Clients (kv-mix with --history, the token)
connect, run and disconnect, CONCURRENT (4: the machine has 2 cores) at a time, for SECONDS
(default 60) and at least CLIENTS (default 64) clients; every fourth one is killed with SIGKILL at
a random moment of its run. After a warm-up of 8 clients, with no client connected, the server's
open descriptors (/proc/PID/fd) and resident memory (VmRSS) are the baseline; at the end, again
with no client connected, the descriptors must be exactly the baseline and the resident memory
within RSS_SLACK of it. Every client not killed must exit 0, and all the histories together
(a killed client's operations in flight are pending) must be linearizable.
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import fail, start_server  # noqa: E402

CONCURRENT = 4
WARMUP = 8
RSS_SLACK_KIB = 4096
# Launches are paced so that one run makes at most MAX_CLIENTS clients, however fast they are
# (the same-host fast path finishes a client in ~0.2 s: 1 000 clients a minute). Two bounds need
# it: a --connect client's history ids and value tags are its id modulo 1024 (kConnectClientIds),
# distinct only below that within one server life; and Porcupine's memory grows faster than
# linearly with a key's operations (5 M events on 16 keys took 24 GB and the OOM killer).
MAX_CLIENTS = 250


def fds(pid):
    return sorted(os.listdir(f"/proc/{pid}/fd"), key=int)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))


def history_events(path):
    """The event count in a history file's header (0 while it is not written yet)."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError:
        return 0
    return int.from_bytes(head[16:24], "little") if len(head) == 24 else 0


def main():
    rdmahash = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60
    at_least = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    work = tempfile.mkdtemp(prefix="rdmahash-churn.")
    tok = os.path.join(work, "token")
    logpath = os.path.join(work, "serve.log")
    log = open(logpath, "w+")
    server, host, port = start_server(rdmahash, ["--records", "1000", "--slot-format", "set", "--token-file", tok], log)
    started = 0
    killed_names = set()
    histories = []
    try:
        addr = f"{host}:{port}"
        run = [rdmahash, "bench", "--connect", addr, "--workload", "kv-mix", "--keys", "64", "--depth", "4", "--quiet",
               "--token-file", tok]

        def ended():  # clients the server saw leave (goodbye or lost)
            log.seek(0)
            text = log.read()
            return len(re.findall(r"client \d+ (finished|lost)", text))

        def quiet():
            """Waits until the server saw every started client leave; returns (fds, rss)."""
            for _ in range(600):
                if ended() == started:
                    break
                time.sleep(0.1)
            else:
                fail(f"the server saw {ended()} of {started} clients leave")
            time.sleep(1.0)  # let UCX close the endpoints of the last clients
            return fds(server.pid), rss_kib(server.pid)

        live = []  # (Popen, victim, earliest kill, name)

        def events(name):
            return history_events(os.path.join(work, name + ".bin"))

        def reap(block):
            nonlocal live
            kept = []
            for p, victim, kill_at, name in live:
                # Killed at a random moment after its first operation (its history's header, 16 init
                # events, then operations: an earlier kill would leave a file without a header).
                if victim and p.poll() is None and events(name) >= kill_at:
                    p.kill()
                    killed_names.add(name)
                if p.poll() is None and block:
                    try:
                        p.wait(timeout=0.05)
                    except subprocess.TimeoutExpired:
                        pass
                if p.poll() is None:
                    kept.append((p, victim, kill_at, name))
                    continue
                if name not in killed_names and p.returncode != 0:
                    fail(f"client {name} (not killed) exited {p.returncode}: {open(os.path.join(work, name + '.err')).read()}")
            live = kept

        def start(victim):
            nonlocal started
            name = f"c{started}"
            h = os.path.join(work, name + ".bin")
            err = open(os.path.join(work, name + ".err"), "w")
            ops = rng.randint(2000, 8000)
            p = subprocess.Popen(run + ["--ops", str(ops), "--history", h], stdout=err, stderr=err)
            histories.append(h)
            started += 1
            # A victim dies once its history holds a random number of its operations, however fast
            # the machine runs it (16 init events come first).
            live.append((p, victim, 16 + rng.randint(1, ops), name))

        for _ in range(WARMUP):
            while len(live) >= CONCURRENT:
                reap(True)
            start(False)
        while live:
            reap(True)
        base_fds, base_rss = quiet()
        print(f"baseline after {WARMUP} clients: {len(base_fds)} fds, VmRSS {base_rss} KiB")

        t0 = time.time()
        churned = 0
        gap = seconds / (MAX_CLIENTS - WARMUP)
        while (time.time() - t0 < seconds or churned < at_least) and started < MAX_CLIENTS:
            while len(live) >= CONCURRENT or time.time() < t0 + churned * gap:
                reap(True)
                if not live:
                    time.sleep(0.005)
            start(churned % 4 == 3)
            churned += 1
        while live:
            reap(True)
        end_fds, end_rss = quiet()
        print(f"after {churned} more clients ({len(killed_names)} killed with SIGKILL) in {time.time() - t0:.0f} s: {len(end_fds)} fds, "
              f"VmRSS {end_rss} KiB ({end_rss - base_rss:+d} KiB)")
        if end_fds != base_fds:
            fail(f"descriptors leaked: baseline {base_fds}, now {end_fds}")
        if end_rss - base_rss > RSS_SLACK_KIB:
            fail(f"resident memory grew by {end_rss - base_rss} KiB (slack {RSS_SLACK_KIB} KiB)")
        if server.poll() is not None:
            fail("the server died")
        check = subprocess.run([rdmahash, "check-history", "--timeout-per-key", "120"] + histories, capture_output=True,
                               text=True)
        verdict = check.stdout.strip().splitlines()[-1] if check.stdout.strip() else ""
        print(f"{check.stdout.count('recording not finished')} histories of killed clients; {verdict}")
        if check.returncode != 0 or not verdict.startswith("linearizable"):
            fail("the clients' histories are not linearizable: " + check.stdout[-2000:] + check.stderr)
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        rc = server.wait(timeout=60)
    rest = server.stdout.read()
    print(rest.strip())
    if rc != 0 or "stopped by SIGTERM" not in rest:
        fail(f"the server exited {rc} on SIGTERM")
    shutil.rmtree(work, ignore_errors=True)  # kept when the test fails: its logs say why
    print("PASS")


if __name__ == "__main__":
    main()
