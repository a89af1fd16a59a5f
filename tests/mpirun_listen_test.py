#!/usr/bin/env python3
"""Where a one-host `mpirun` job listens (issue 16 item 1).

usage: mpirun_listen_test.py MPIRUN RDMAHASH

Runs `mpirun -n 2 RDMAHASH bench --fabric ucx ...` with UCX_TLS=tcp (so UCX opens TCP listeners
in every rank) and, while it runs, collects every listening TCP socket of the rdmahash processes
that this mpirun started (/proc/PID/fd and /proc/net/tcp, as serve_util.py does). All
must be bound to 127.0.0.0/8: every rank is on this host, so UcxFabric restricts UCX to "lo".
What this checks: the sockets held by the rdmahash ranks. Open MPI's own sockets are MPI's
configuration: mpirun is told to keep them on shared memory and the loopback (btl self,vader,
oob_tcp_if_include lo), as the README's one-host commands do; those of mpirun/orted themselves are
not checked. The test fails if it saw no listening socket at all (it would prove nothing).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import listening_sockets  # noqa: E402


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def descendants(root):
    """PIDs of the processes below `root`."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def run_job(mpirun, rdmahash, ops):
    """Runs the job once; returns (rank pids seen, {socket: pid}). Fails at once on a socket
    outside the loopback or a failed job."""
    env = dict(os.environ, UCX_TLS="tcp", UCX_WARN_UNUSED_ENV_VARS="n", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("UCX_NET_DEVICES", None)  # the job's own choice is what is tested
    cmd = [mpirun, "--oversubscribe", "-n", "2", "--mca", "btl", "self,vader", "--mca", "pml", "ob1", "--mca",
           "oob_tcp_if_include", "lo", rdmahash, "bench", "--fabric", "ucx", "--memory-nodes", "1", "--records", "20000",
           "--workload", "get", "--ops", str(ops), "--quiet"]
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = {}
    ranks = set()
    while job.poll() is None:
        for pid in descendants(job.pid):
            try:
                if os.path.realpath(f"/proc/{pid}/exe") != rdmahash:
                    continue
                socks = listening_sockets(pid)
            except OSError:
                continue
            ranks.add(pid)
            for s in socks:
                seen.setdefault(s, pid)
                if not s[0].startswith("127."):  # no need to wait for the end of the job
                    job.terminate()  # mpirun forwards SIGTERM to its ranks
                    try:
                        job.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        job.kill()
                    fail(f"a one-host job listens outside the loopback: {s} (rank pid {pid})")
        time.sleep(0.01)
    out = job.stdout.read()
    if job.returncode != 0:
        fail(f"the mpirun job failed ({job.returncode}):\n{out}")
    return ranks, seen


def main():
    mpirun, rdmahash = sys.argv[1], os.path.realpath(sys.argv[2])
    # A fast machine can finish a job between two looks at /proc: then run a longer one (a job
    # that never shows a socket in three tries still fails, as proving nothing).
    for ops in (30000, 300000, 3000000):
        ranks, seen = run_job(mpirun, rdmahash, ops)
        print(f"--ops {ops}: rdmahash ranks seen: {len(ranks)}; their listening sockets: {sorted(seen)}")
        if len(ranks) >= 2 and seen:
            break
    if len(ranks) < 2:
        fail("did not see both ranks while the job ran")
    if not seen:
        fail("saw no listening socket of the ranks (UCX over TCP should open some): the check proved nothing")
    outside = [s for s in seen if not s[0].startswith("127.")]
    if outside:
        fail(f"a one-host job listens outside the loopback: {outside}")
    print("PASS")


if __name__ == "__main__":
    main()
