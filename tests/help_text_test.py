#!/usr/bin/env python3
"""The --help texts (issue 26 item 7): no CLI11 artefacts, the defaults shown, serve's texts about
serve, check-history's exit statuses.

usage: help_text_test.py RDMAHASH {bench,serve,check-history}
Prints PASS, or FAIL and what is wrong (exit 1).
"""
import re
import subprocess
import sys

# (subcommand) -> [(regex, must_match, why)]
CHECKS = {
    "bench": [
        (r"\{false\}|\{true\}", False, "a CLI11 flag artefact ({false})"),
        (r"BenchOptions::", False, "a source name (BenchOptions::error)"),
        (r"--workload TEXT=\[get\]", True, "the default of --workload"),
        (r"--read-size TEXT=\[8\]", True, "the default of --read-size"),
        (r"--no-progress\s+no progress bar", True, "--no-progress as a plain flag"),
        (r"--tail-slots UINT=0\s", True, "the default of --tail-slots"),
    ],
    "serve": [
        (r"\{false\}|\{true\}", False, "a CLI11 flag artefact ({false})"),
        (r"BenchOptions::", False, "a source name (BenchOptions::error)"),
        (r"a list sweeps", False, "--load-factor sweeping a list (serve builds one table)"),
        (r"between points", False, "--pm-path writing back between points (serve has no points)"),
        (r"--load-factor FLOAT=\[0\.5\] \.\.\.", False, "--load-factor taking a list"),
        (r"--load-factor FLOAT=0\.5\s", True, "--load-factor as one number"),
        (r"ucx: ranks", False, "--memory-nodes in terms of mpirun ranks"),
        (r"operation streams", False, "--seed seeding operation streams (serve runs none)"),
        (r"--memory-nodes UINT=1\s+memory nodes K the table is split over", True, "serve's --memory-nodes text"),
        (r"--capacity UINT\s.*2\^34", True, "the range of --capacity"),
    ],
    "check-history": [
        (r"2 bad input", True, "exit status 2 (bad input)"),
        (r"0 linearizable, 1 violation", True, "exit statuses 0 and 1"),
        (r"3 unknown", True, "exit status 3"),
    ],
}


def main():
    binary, cmd = sys.argv[1], sys.argv[2]
    r = subprocess.run([binary, cmd, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        print(f"FAIL: {cmd} --help exited {r.returncode}")
        return 1
    text = r.stdout
    bad = []
    for regex, must, why in CHECKS[cmd]:
        found = re.search(regex, text) is not None
        if found != must:
            bad.append(f"{'missing' if must else 'present'}: {why} (/{regex}/)")
    if bad:
        print(f"FAIL: rdmahash {cmd} --help:\n  " + "\n  ".join(bad))
        return 1
    print(f"PASS: rdmahash {cmd} --help ({len(CHECKS[cmd])} checks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
