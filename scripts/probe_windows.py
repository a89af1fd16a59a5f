#!/usr/bin/env python3
"""How many R-slot windows a linear-probing get needs (issue 12, get's p99 at load 0.8).

usage: scripts/probe_windows.py [RECORDS] [LOAD] [R]   (defaults 2000000 0.8 8)
Inserts RECORDS keys with uniformly random home slots into RECORDS/LOAD home slots (plus the
tail, as LinearConfig: max(4096, S/32)), without wrap-around, and prints the share of keys whose
slot lies in window k (k READs of R slots from home), with the cumulative share.
"""
import random
import sys

records = int(sys.argv[1]) if len(sys.argv) > 1 else 2000000
load = float(sys.argv[2]) if len(sys.argv) > 2 else 0.8
R = int(sys.argv[3]) if len(sys.argv) > 3 else 8
S = round(records / load)
occ = bytearray(S + max(4096, S // 32))
random.seed(1)
windows = {}
for _ in range(records):
    home = random.randrange(S)
    s = home
    while occ[s]:
        s += 1
    occ[s] = 1
    k = (s - home) // R + 1
    windows[k] = windows.get(k, 0) + 1
cum = 0
mean = sum(k * c for k, c in windows.items()) / records
print(f"{records} keys, {S} home slots, R = {R}: mean windows per get {mean:.4f}")
for k in sorted(windows):
    cum += windows[k]
    print(f"  {k:3d} windows: {windows[k] / records:.6f}  cumulative {cum / records:.6f}")
