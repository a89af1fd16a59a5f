#!/usr/bin/env python3
"""Mutation harness: proves the tests fail when a safety mechanism is removed.

Reads every tests/mutants/*.json (a JSON array of
  {"id", "mechanism", "file", "find", "replace", "tests"}),
and for each mutant: applies it to a persistent copy of the tree (so the build directory beside it
rebuilds incrementally), rebuilds, runs the mutant's tests (`ctest -R <tests>`; `--full`: the whole
suite), restores the file and prints killed / survived with the tests that killed it.

Exit status: 0 when every mutant was killed; 1 when any survived, did not compile (a mutant that
does not build proves nothing: "invalid"), or no longer applies (`find` must occur exactly once);
2 on bad usage or a malformed mutant file. Before the mutants, the unmutated copy is built and the
selected tests run once: a test that fails without a mutant would "kill" everything.

Usage: scripts/mutants.py [--only ID[,ID]] [--file GLOB] [--repeat N] [--full] [--jobs N]
                          [--workers N] [--workdir DIR] [--list] [--no-baseline]

--workers N builds and tests N mutants at once, each in its own copy of the tree (w0, w1, ... under
the work directory), each build and ctest with --jobs parallelism. The builds leave out debug
information and use ccache and mold when they are installed: a restored file then compiles from the
cache, and the copies share their unmutated objects.
"""
import argparse
import fnmatch
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import traceback
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = ("id", "mechanism", "file", "find", "replace", "tests")
# Not copied into the mutant tree: build outputs and VCS metadata.
SKIP_DIRS = {".git", "build", "__pycache__", ".venv", ".mutants"}


def die(msg, status=2):
    print(f"mutants: error: {msg}", file=sys.stderr)
    sys.exit(status)


def load_mutants(pattern):
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "mutants", "*.json")))
    files = [f for f in files if fnmatch.fnmatch(os.path.basename(f), pattern)]
    if not files:
        die(f"no mutant files match tests/mutants/{pattern}")
    mutants, seen = [], {}
    for path in files:
        rel = os.path.relpath(path, ROOT)
        try:
            with open(path, encoding="utf-8") as f:
                entries = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            die(f"{rel}: {e}")
        if not isinstance(entries, list):
            die(f"{rel}: must hold a JSON array of mutants")
        for i, m in enumerate(entries):
            where = f"{rel}[{i}]"
            if not isinstance(m, dict):
                die(f"{where}: each mutant must be a JSON object")
            # Every field is a string; only `replace` may be empty (a deletion).
            bad = [k for k in FIELDS if not isinstance(m.get(k), str) or (k != "replace" and not m[k])]
            if bad:
                die(f"{where}: missing or empty field(s): {', '.join(bad)}")
            extra = set(m) - set(FIELDS)
            if extra:
                die(f"{where}: unknown field(s): {', '.join(sorted(extra))}")
            if m["find"] == m["replace"]:
                die(f"{where} ({m['id']}): replace equals find (not a mutant)")
            if m["id"] in seen:
                die(f"{where}: id {m['id']} is also used by {seen[m['id']]}")
            try:
                re.compile(m["tests"])
            except re.error as e:
                die(f"{where} ({m['id']}): tests is not a regex: {e}")
            seen[m["id"]] = where
            mutants.append(dict(m, source=rel))
    return mutants


def check_applies(m, text):
    n = text.count(m["find"])
    if n != 1:
        return f"'find' occurs {n} times in {m['file']} (must be exactly once)"
    return None


def sync_tree(src, dst):
    """Mirror src into dst, rewriting only files whose bytes differ (so ninja rebuilds little)."""
    wanted = set()
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
        rel_dir = os.path.relpath(dirpath, src)
        os.makedirs(os.path.join(dst, rel_dir), exist_ok=True)
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            wanted.add(rel)
            s, d = os.path.join(src, rel), os.path.join(dst, rel)
            with open(s, "rb") as f:
                data = f.read()
            try:
                with open(d, "rb") as f:
                    same = f.read() == data
            except OSError:
                same = False
            if not same:
                with open(d, "wb") as f:
                    f.write(data)
                shutil.copymode(s, d)
    for dirpath, _dirnames, filenames in os.walk(dst):
        for name in filenames:
            rel = os.path.normpath(os.path.relpath(os.path.join(dirpath, name), dst))
            if rel not in wanted:
                os.remove(os.path.join(dirpath, name))


def run(cmd, log, timeout=None, env=None):
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env)
            return p.returncode
        except subprocess.TimeoutExpired:
            f.write(f"\n[mutants] timed out after {timeout} s\n")
            return None


# ctest's line for a finished test that failed: "3/15 Test #130: <name> [# GetParam() = ...] ...***Failed"
# (or ***Timeout, ***Exception: ...); "***Skipped" (GTEST_SKIP) and "***Not Run" are not failures.
FAILED_LINE = re.compile(r"Test +#\d+: (\S+).*\*\*\*(?!Skipped|Not Run)")
TIMEOUT_LINE = re.compile(r"Test +#\d+: (\S+).*\*\*\*Timeout")


def run_until_failure(cmd, log, env):
    """Runs ctest and stops it, with every test it started, at the first failed test: that failure
    kills the mutant, and the tests still running may spin for minutes under it. Returns True if
    it stopped ctest."""
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                             errors="replace", start_new_session=True)
        stopped = False
        for line in p.stdout:
            f.write(line)
            if FAILED_LINE.search(line):
                f.write("[mutants] first failure: stopping the other tests\n")
                stopped = True
                break
        if stopped:
            # SIGTERM first: mpirun forwards it to its ranks (which then release their shared memory).
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
        p.stdout.close()
        p.wait()
        return stopped


def timed_out(log):
    """The tests of a ctest log that failed by their timeout."""
    with open(log, encoding="utf-8", errors="replace") as f:
        return set(TIMEOUT_LINE.findall(f.read()))


def ctest(build, regex, jobs, log, test_timeout, stop_on_failure=False):
    """Runs the tests; returns (tests run, failed test names). `stop_on_failure`: a mutant is killed
    by its first failing test, so ctest stops there (see run_until_failure)."""
    cmd = ["ctest", "--test-dir", build, "-j", str(jobs), "--timeout", str(test_timeout), "--output-on-failure"]
    if regex:
        cmd += ["-R", regex]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if stop_on_failure:
        stopped = run_until_failure(cmd, log, env)
    else:
        stopped = False
        run(cmd, log, env=env)
    with open(log, encoding="utf-8", errors="replace") as f:
        out = f.read()
    if stopped:
        failed = list(dict.fromkeys(FAILED_LINE.findall(out)))
        return max(len(re.findall(r"Test +#\d+:", out)), 1), failed
    total = re.search(r"tests passed, (\d+) tests? failed out of (\d+)", out)
    if not total:
        return 0, []
    # The summary lists "<n> - <name> [# GetParam() = ...] (Failed|Timeout|SEGFAULT|...)".
    summary = out.split("The following tests FAILED:", 1)
    failed = re.findall(r"^\s*\d+ - (\S+)", summary[1], re.M) if len(summary) == 2 else []
    if int(total.group(1)) and not failed:
        failed = ["(unparsed)"]
    return int(total.group(2)), failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--file", default="*.json", help="glob of mutant files under tests/mutants (default *.json)")
    ap.add_argument("--repeat", type=int, default=1, help="run each mutant's tests N times (killed = every run)")
    ap.add_argument("--full", action="store_true", help="run the whole suite for every mutant")
    ap.add_argument("--jobs", type=int, default=2, help="build and ctest parallelism of each worker (default 2)")
    ap.add_argument("--workers", type=int, default=1,
                    help="mutants built and tested at once, each in its own copy of the tree (default 1)")
    ap.add_argument("--workdir", default=os.path.join(ROOT, "build", "mutants"),
                    help="persistent copy of the tree and its build (default build/mutants)")
    ap.add_argument("--test-timeout", type=int, default=300, help="ctest timeout per test, seconds")
    ap.add_argument("--list", action="store_true", help="check that every mutant applies, list them, exit")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    ap.add_argument("--sweep", nargs="+", metavar="SOURCE",
                    help="instead of the list: universalmutator's mutants of these sources (scripts/mutants_sweep.sh)")
    ap.add_argument("--sample", type=int, default=0, help="--sweep: run a random sample of N mutants (0: all)")
    ap.add_argument("--seed", type=int, default=1, help="--sweep: sample seed")
    ap.add_argument("--sweep-tests", default="\\.", help="--sweep: ctest regex (default: every in-process gtest)")
    ap.add_argument("--mutate", default="mutate", help="--sweep: universalmutator's mutate command")
    args = ap.parse_args()
    if args.repeat < 1:
        die("--repeat must be at least 1")
    if args.jobs < 1:
        die("--jobs must be at least 1")
    if args.workers < 1:
        die("--workers must be at least 1")
    if args.full and args.workers > 1:
        # The whole suite holds RUN_SERIAL tests (fixed network namespaces, a fixed temp file) that
        # two workers would run at once: false kills.
        die("--full runs one worker at a time (its suite has RUN_SERIAL tests): drop --workers")

    if args.sweep:
        return sweep(args)
    mutants = load_mutants(args.file)
    if args.only:
        ids = [i for i in args.only.split(",") if i]
        unknown = [i for i in ids if i not in {m["id"] for m in mutants}]
        if unknown:
            die(f"unknown mutant id(s): {', '.join(unknown)}")
        mutants = [m for m in mutants if m["id"] in ids]

    stale = []
    for m in mutants:
        path = os.path.join(ROOT, m["file"])
        if not os.path.isfile(path):
            stale.append((m, f"file {m['file']} does not exist"))
            continue
        with open(path, encoding="utf-8") as f:
            err = check_applies(m, f.read())
        if err:
            stale.append((m, err))
    for m, err in stale:
        print(f"STALE    {m['id']:32} {m['source']}: {err}")
    if args.list:
        for m in mutants:
            print(f"{m['id']:32} {m['file']:40} tests: {m['tests']}")
        return 1 if stale else 0
    if stale:
        print(f"mutants: {len(stale)} mutant(s) no longer apply: fix their 'find' text", file=sys.stderr)
        return 1

    return run_mutants(args, mutants)


def build_env(workdir):
    """ccache, when installed, under the work directory: a restored file compiles from the cache, and
    every worker's copy of the tree compiles each unmutated source once. The copies sit at the same
    depth (w<i>/tree, w<i>/build), so with base_dir the compile commands are the same text."""
    env = dict(os.environ)
    if shutil.which("ccache"):
        env.update(CCACHE_DIR=os.path.join(os.path.abspath(workdir), "ccache"),
                   CCACHE_BASEDIR=os.path.abspath(workdir), CCACHE_NOHASHDIR="1", CCACHE_MAXSIZE="8G")
    return env


def configure_args():
    """The mutants' build: the suite's build type and optimisation without debug information (a
    fifth of each compile and most of each link), ccache and mold when installed. (Not Release:
    pybind11 then links the Python module with LTO, for every mutant that relinks it.) Warnings are
    not errors here: a mutant that only trips -Werror still tests the behaviour."""
    cmd = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG",
           "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG", "-DRDMAHASH_WERROR=OFF"]
    if shutil.which("ccache"):
        cmd += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
    if shutil.which("mold"):
        cmd += [f"-DCMAKE_{kind}_LINKER_FLAGS=-fuse-ld=mold" for kind in ("EXE", "SHARED", "MODULE")]
    return cmd


def run_mutants(args, mutants):
    """Applies, builds and tests each mutant in one of --workers persistent copies of the tree (each
    with its own build); prints each verdict as it is reached and returns the exit status.
    A mutant carries either find/replace or `content` (a whole mutated file, from the sweep)."""
    logs = os.path.join(args.workdir, "logs")
    os.makedirs(logs, exist_ok=True)
    nworkers = max(1, min(args.workers, len(mutants)))
    slots = [(os.path.join(args.workdir, f"w{i}", "tree"), os.path.join(args.workdir, f"w{i}", "build"))
             for i in range(nworkers)]
    env = build_env(args.workdir)
    print(f"mutants: {len(mutants)} mutant(s); {nworkers} worker(s) in {args.workdir}/w*; logs {logs}", flush=True)
    for i, (tree, build) in enumerate(slots):
        sync_tree(ROOT, tree)
        if run(["cmake", "-S", tree, "-B", build] + configure_args(), os.path.join(logs, f"configure-w{i}.log"),
               env=env) != 0:
            die(f"configure failed: see {logs}/configure-w{i}.log", 1)

    def build_tree(build, log, jobs, target=None):
        cmd = ["cmake", "--build", build, "-j", str(jobs)]
        return run(cmd + (["--target", target] if target else []), log, env=env) == 0

    def count_tests(build, regex, label=None):
        cmd = ["ctest", "--test-dir", build, "-N"] + (["-R", regex] if regex else []) + (["-L", label] if label else [])
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
        m = re.search(r"Total Tests: (\d+)", out)
        return int(m.group(1)) if m else 0

    def target_for(build, regex):
        """rdmahash_tests alone when every selected test is in it (label inprocess): a much
        smaller rebuild than the CLI, the mpirun tests and the install check."""
        if args.full or count_tests(build, regex) != count_tests(build, regex, "inprocess"):
            return None
        return "rdmahash_tests"

    # The first copy is built with every core; the others then mostly from ccache.
    all_jobs = args.jobs * nworkers
    for i, (_tree, build) in enumerate(slots):
        if not build_tree(build, os.path.join(logs, f"baseline-build-w{i}.log"), all_jobs):
            die(f"the unmutated tree does not build: see {logs}/baseline-build-w{i}.log", 1)
    build0 = slots[0][1]
    if not args.no_baseline:
        # ctest's regex dialect (cmsys::RegularExpression) has no (?:...) and at most 9 groups in one
        # expression ("Too many parentheses", and then no test runs): plain alternations of the
        # patterns, in as many ctest runs as the groups need.
        batches = [None]
        if not args.full:
            batches, groups = [[]], 0
            for pattern in dict.fromkeys(m["tests"] for m in mutants):
                g = pattern.count("(")
                if batches[-1] and groups + g > 9:
                    batches.append([])
                    groups = 0
                batches[-1].append(pattern)
                groups += g
        n, failed, logs_used = 0, [], []
        for i, batch in enumerate(batches):
            log = os.path.join(logs, f"baseline-test-{i + 1}.log")
            logs_used.append(log)
            k, f = ctest(build0, None if batch is None else "|".join(batch), all_jobs, log, args.test_timeout)
            if k == 0 and not f:
                f = ["(no test matched: see the log)"]
            n += k
            failed += f
        if n == 0 or failed:
            die(f"the unmutated tree fails its tests ({n} run, failed: {' '.join(failed) or '?'}): see "
                f"{' '.join(logs_used)}", 1)
        print(f"baseline: {n} test(s) pass unmutated ({len(batches)} ctest run(s))", flush=True)

    verdicts = {}  # mutant index -> verdict
    todo = list(enumerate(mutants))
    lock = threading.Lock()
    fatal = []

    def one(slot, m, jobs):
        """The mutant's verdict, and whether it was killed by timeouts alone (which another worker's
        spinning tests could have caused: such a kill is run again with the machine to itself)."""
        tree, build = slot
        start = time.monotonic()
        logname = re.sub(r"[^A-Za-z0-9_.:-]", "_", m["id"])  # sweep ids name a source path
        path = os.path.join(tree, m["file"])
        with open(path, encoding="utf-8") as f:
            original = f.read()
        if "content" in m:
            mutated = m["content"]
        else:
            err = check_applies(m, original)
            if err:  # sync_tree copied the same text we checked above
                raise RuntimeError(f"{m['id']}: {err}")
            mutated = original.replace(m["find"], m["replace"], 1)
        with open(path, "w", encoding="utf-8") as f:
            f.write(mutated)
        try:
            only_timeouts = False
            if not build_tree(build, os.path.join(logs, f"{logname}-build.log"), jobs,
                              target_for(build, m["tests"])):
                verdict, detail = "invalid", f"does not build (see logs/{logname}-build.log)"
            else:
                killers, runs = set(), []
                for rep in range(args.repeat):
                    log = os.path.join(logs, f"{logname}-test{rep}.log")
                    n, failed = ctest(build, None if args.full else m["tests"], jobs, log, args.test_timeout,
                                      stop_on_failure=True)
                    if n == 0:
                        raise RuntimeError(f"{m['id']}: tests regex '{m['tests']}' matches no test")
                    runs.append(bool(failed))
                    killers.update(failed)
                    if failed and set(failed) <= timed_out(log):
                        only_timeouts = True
                if all(runs):
                    names = sorted(killers)
                    more = f" (+{len(names) - 2} more)" if len(names) > 2 else ""
                    verdict, detail = "killed", f"by {' '.join(names[:2])}{more}"
                else:
                    verdict = "survived"
                    detail = f"killed in {sum(runs)} of {len(runs)} runs" if any(runs) else f"{n} test(s) pass"
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
        secs = time.monotonic() - start
        reps = f" [{args.repeat}x]" if args.repeat > 1 else ""
        again = verdict == "killed" and only_timeouts and nworkers > 1 and jobs == args.jobs
        if again:
            detail += "; by timeout only: run again alone after the others"
        with lock:
            print(f"{verdict.upper():8} {m['id']:32} {detail}{reps} ({secs:.0f} s)", flush=True)
            if verdict == "survived" and "diff" in m:
                print(f"         {m['diff']}", flush=True)
        return "again" if again else verdict

    def worker(slot):
        while True:
            with lock:
                if not todo or fatal:
                    return
                index, m = todo.pop(0)
            try:
                verdicts[index] = one(slot, m, args.jobs)
            except Exception:  # a broken mutant list or tree: stop every worker, report it
                with lock:
                    fatal.append(traceback.format_exc())
                return

    # Not daemon threads: on Ctrl-C each finishes its mutant and restores its file.
    threads = [threading.Thread(target=worker, args=(slot,)) for slot in slots]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        with lock:
            todo.clear()
        print("mutants: interrupted: waiting for the running mutants to finish and restore their files",
              file=sys.stderr, flush=True)
        for t in threads:
            t.join()
        return 130
    if fatal:
        die(fatal[0], 1)
    # A kill by timeouts alone while another worker ran: again, alone, with every core.
    for index, m in enumerate(mutants):
        if verdicts.get(index) == "again":
            verdicts[index] = one(slots[0], m, all_jobs)
    results = {"killed": [], "survived": [], "invalid": []}
    for index, m in enumerate(mutants):
        results[verdicts[index]].append(m["id"])

    k, s, i = (len(results[x]) for x in ("killed", "survived", "invalid"))
    print(f"mutants: {k} killed, {s} survived, {i} invalid of {len(mutants)}")
    for x in ("survived", "invalid"):
        if results[x]:
            print(f"mutants: {x}: {' '.join(results[x])}")
    return 0 if s == 0 and i == 0 else 1


def sweep(args):
    """universalmutator (https://github.com/agroce/universalmutator) mutants of each source, a random
    sample of them run like the list's mutants against --sweep-tests. Never run in CI: a full sweep
    is thousands of mutants."""
    import difflib
    import random
    out = os.path.join(args.workdir, "sweep")
    mutants = []
    for src in args.sweep:
        rel = os.path.relpath(os.path.abspath(src), ROOT)
        base = os.path.splitext(os.path.basename(rel))[0]
        mdir = os.path.join(out, rel.replace("/", "_"))
        if not os.path.isdir(mdir):
            os.makedirs(mdir)
            if run([args.mutate, os.path.join(ROOT, rel), "--noCheck", "--mutantDir", mdir],
                   os.path.join(out, rel.replace("/", "_") + ".log")) != 0:
                die(f"{args.mutate} failed on {rel}: see {out}", 1)
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            original = f.read().splitlines()
        for name in sorted(os.listdir(mdir)):
            if not name.startswith(base + ".mutant."):
                continue
            with open(os.path.join(mdir, name), encoding="utf-8") as f:
                content = f.read()
            changed = [l for l in difflib.unified_diff(original, content.splitlines(), lineterm="", n=0)
                       if l[:1] in "+-" and not l.startswith(("+++", "---"))]
            mutants.append({"id": f"{rel}:{name.split('.')[-2]}", "file": rel, "content": content,
                            "tests": args.sweep_tests, "diff": " | ".join(changed)[:300]})
    made = len(mutants)
    if args.sample and args.sample < made:
        mutants = random.Random(args.seed).sample(mutants, args.sample)
    print(f"sweep: {made} mutant(s) made by universalmutator; running {len(mutants)}", flush=True)
    return run_mutants(args, mutants)


if __name__ == "__main__":
    sys.exit(main())
