#!/usr/bin/env python3
"""Breaks a linearizable rdmahash history on purpose (the checker must then reject it).

usage: history_inject.py stale-read|torn-read|lost-insert IN OUT

stale-read:  a get that found the value of write w is rewritten to have read the value of an older
             write w0 of the same key, where w0 completed before w was invoked (so w overwrote it)
             and w completed before the get was invoked: no linearization can order that read.
torn-read:   a found get's value digest is replaced by one no write wrote (a torn or corrupt read).
lost-insert: a find_or_put that answered `found` is rewritten to answer `inserted` of a new value
             while its key was present (a duplicate insert), where nothing but that presence
             contradicts it.
Exits 1 when the history has no operation to break.
"""
import struct
import sys

HEADER, EVENT = 32, 48
GET, PUT, UPDATE, ERASE, FIND_OR_PUT = 1, 2, 3, 4, 5
FOUND, INSERTED, UPDATED, ERASED = 0, 1, 4, 5


def main():
    mode, src, dst = sys.argv[1:4]
    data = bytearray(open(src, "rb").read())
    (count,) = struct.unpack_from("<Q", data, 16)
    events = [list(struct.unpack_from("<QQQQQIBBH", data, HEADER + i * EVENT)) for i in range(count)]
    # fields: 0 invoke, 1 response, 2 key, 3 written, 4 read, 5 client, 6 op, 7 status
    target = None
    if mode == "stale-read":
        writes = {}  # key -> [(invoke, response, written)] of successful writes
        for e in events:
            if e[0] and ((e[6] in (PUT, UPDATE) and e[7] in (INSERTED, UPDATED)) or (e[6] == FIND_OR_PUT and e[7] == INSERTED)):
                writes.setdefault(e[2], []).append((e[0], e[1], e[3]))
        by_digest = {(e[2], e[3]): e for e in events if e[0] and e[3]}
        for i, e in enumerate(events):
            if e[6] != GET or e[7] != FOUND or (e[2], e[4]) not in by_digest:
                continue
            w = by_digest[(e[2], e[4])]
            if w[1] >= e[0]:
                continue
            older = [x for x in writes.get(e[2], []) if x[1] < w[0] and x[2] != e[4]]
            if older:
                target, events[i][4] = i, older[-1][2]
                break
    elif mode == "torn-read":
        for i, e in enumerate(events):
            if e[6] == GET and e[7] == FOUND and e[4]:
                target, events[i][4] = i, e[4] ^ 0x5A5A5A5A5A5A5A5A
                break
    elif mode == "lost-insert":
        # A find_or_put that found its key, alone on that key during its interval, whose next
        # operation on the key is a write that does not read (put, update, erase), alone during its
        # own interval: the rewritten `inserted` contradicts nothing but the key's presence, so only
        # a model that lets find_or_put insert just an absent key rejects it (mutant
        # history-insert-ignores-presence).
        def overlap(a, b):
            return a[0] < b[1] and b[0] < a[1]
        blind = lambda x: ((x[6] == PUT and x[7] in (INSERTED, UPDATED)) or (x[6] == UPDATE and x[7] == UPDATED) or
                           (x[6] == ERASE and x[7] == ERASED))
        by_key = {}
        for j, x in enumerate(events):
            if x[0]:
                by_key.setdefault(x[2], []).append(j)
        for i, e in enumerate(events):
            if not (e[0] and e[6] == FIND_OR_PUT and e[7] == FOUND):
                continue
            ops = [j for j in by_key[e[2]] if j != i]
            if any(overlap(events[j], e) for j in ops):
                continue
            after = [j for j in ops if events[j][0] > e[1]]
            if not after:
                continue
            n = min(after, key=lambda j: events[j][0])
            if not blind(events[n]) or any(j != n and overlap(events[j], events[n]) for j in ops):
                continue
            target, events[i][7] = i, INSERTED
            break
    else:
        sys.exit("unknown mode " + mode)
    if target is None:
        sys.exit("no operation to break in " + src)
    struct.pack_into("<QQQQQIBBH", data, HEADER + target * EVENT, *events[target])
    open(dst, "wb").write(data)
    print(f"{mode}: event {target} changed")


if __name__ == "__main__":
    main()
