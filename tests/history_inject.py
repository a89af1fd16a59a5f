#!/usr/bin/env python3
"""Breaks a linearizable rdmahash history on purpose (the checker must then reject it).

usage: history_inject.py stale-read|torn-read|lost-insert IN OUT

stale-read:  a get that found the value of write w is rewritten to have read the value of an older
             write w0 of the same key, where w0 completed before w was invoked (so w overwrote it)
             and w completed before the get was invoked: no linearization can order that read.
torn-read:   a found get's value digest is replaced by one no write wrote (a torn or corrupt read).
lost-insert: a find_or_put that answered `found` is rewritten to answer `inserted` of a new value
             while its key was present (a duplicate insert).
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
        # A find_or_put that found its key, followed on that key by a get that found another value,
        # with no other write of the key overlapping them: an insert there contradicts the get too,
        # so even a model that let an insert overwrite a present key rejects it.
        def is_write(x):
            return x[0] and ((x[6] in (PUT, UPDATE) and x[7] in (INSERTED, UPDATED)) or
                             (x[6] == FIND_OR_PUT and x[7] == INSERTED) or (x[6] == ERASE and x[7] == ERASED))
        by_key = {}
        for j, x in enumerate(events):
            if x[0]:
                by_key.setdefault(x[2], []).append(j)
        for i, e in enumerate(events):
            if not (e[0] and e[6] == FIND_OR_PUT and e[7] == FOUND and e[3]):
                continue
            after = [j for j in by_key[e[2]] if events[j][0] > e[1]]
            if not after:
                continue
            g = events[min(after, key=lambda j: events[j][0])]
            if g[6] != GET or g[7] != FOUND or g[4] == e[3]:
                continue
            if any(j != i and is_write(events[j]) and events[j][0] < g[1] and events[j][1] > e[0] for j in by_key[e[2]]):
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
