#!/usr/bin/env python3
"""Checks a recovered continuity, level or hopscotch image against a client's history (issue 11: kill -9 of the memory node).

    pm_history_verify.py [--self-test] TABLE HISTORY

TABLE is a continuity --pm-path file (include/rdmahash/continuity.h, format 4: 64-byte header, the
geometry word, then the tables of segment pairs [echo][bucket 2i][indicator][SBuckets][bucket 2i+1], each
table followed by its added SBucket groups, if any) or a level one (include/rdmahash/level.h: 64-byte
header, the level word at 64, levels of [token][4 slots] buckets from 128; the levels in use are the
top t and t-1, and a recovered image is not mid-resize), told apart by the magic; HISTORY is the
`bench --connect --history` file
(src/check/history.h: 32-byte header, 48-byte events) of ONE client that ran at --depth 1, so its
operations are sequential and at most its last one is pending (in flight when the memory node died).

Per key of the history: the state it must have now is its initial state (the kInit events) with every
acknowledged write applied in order; a pending write may or may not have happened, so both states are
accepted. The image's valid slots (indicator bits) must hold exactly that: every acknowledged insert
present with its value, every acknowledged erase absent, every update's last value. Also checked: no
key twice in the image. Prints a summary line; exit 0 = consistent, 1 = a violation (listed), 2 = bad
input. --self-test: after a pass, also drop one present item from what was read and require that
the comparison reports it (the check is able to fail).
"""
import struct
import sys

M64 = (1 << 64) - 1
K_INIT, K_GET, K_PUT, K_UPDATE, K_ERASE, K_FOP = 0, 1, 2, 3, 4, 5
FOUND, INSERTED, FULL, NOTFOUND, UPDATED, ERASED = 0, 1, 2, 3, 4, 5
PENDING = 0xFF
CONT_MAGIC = 0x31544E4F43484452  # "RDHCONT1"
LEVEL_MAGIC = 0x314C56454C484452  # "RDHLEVL1"


def mix64(x):
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x


def value_digest(value):  # check::value_digest
    if not value:
        return 0
    h = mix64(len(value))
    for i in range(0, len(value), 8):
        w = int.from_bytes(value[i:i + 8].ljust(8, b"\0"), "little")
        h = (mix64(h ^ w) + 0x9E3779B97F4A7C15) & M64
    return h or 1


def read_history(path):
    data = open(path, "rb").read()
    if len(data) < 32 or data[:8] != b"RDMAHIS1":
        raise ValueError(f"{path}: not a history file")
    version, event_bytes, count, _open = struct.unpack_from("<IIQQ", data, 8)
    if version != 1 or event_bytes != 48 or 32 + count * 48 > len(data):
        raise ValueError(f"{path}: bad history header")
    return [struct.unpack_from("<QQQQQIBBH", data, 32 + 48 * i) for i in range(count)]


GEOMETRY = {}  # of the last image read: table level, resizing


def read_continuity(path):
    """Every valid item of the image: {key: value digest}; raises on a key stored twice.

    Format 3 (continuity.h): the geometry word at 64 (level, RESIZING), table l of N·2^l buckets
    (then its added groups) after tables 0..l-1, from 128. Indicator: own valid bits 0..23, claim
    bits 32..43 (slot x of the pair's added group), MOVED 61, UNBORN 62. Items live in the not-MOVED pairs of table `level` and, while
    resizing, in the born (not UNBORN) pairs of table level+1 whose parent is MOVED (a born pair
    under a not-MOVED parent holds copies that recovery discards)."""
    data = open(path, "rb").read()
    if len(data) < 128:
        raise ValueError(f"{path}: shorter than the continuity header")
    magic, ver, _hb, added, buckets, sb, vb, _seed, _node, _nodes, region = struct.unpack_from(
        "<QIHHQIIQIIQ", data, 0)
    if magic != CONT_MAGIC or ver != 4 or region > len(data):
        raise ValueError(f"{path}: not a continuity image of format 4")
    geo = int.from_bytes(data[64:72], "little")
    level, resizing = geo & 0xFF, (geo >> 8) & 1
    GEOMETRY.update(level=level, resizing=resizing, in_added=0)
    slot = 16 + (vb + 7) // 8 * 8 + 8
    pair_slots = 8 + 4 * sb
    pair_bytes = pair_slots * slot + 16  # [echo][bucket 2i][indicator][SBuckets][bucket 2i+1]
    moved_bit, unborn_bit = 1 << 61, 1 << 62

    p0 = buckets // 2
    added_slots = 4 * min(sb, 3) if added else 0

    def groups(lv):  # ContinuityConfig::groups_at
        if not added:
            return 0
        m = (p0 + added - 1) // added
        for i in range(1, lv + 1):
            if (p0 << i) > m * added:
                m *= 2
        return m

    def group_of(lv, pair):  # ContinuityConfig::group_of
        m = (p0 + added - 1) // added
        g, t = pair % p0 % m, pair // p0
        for i in range(1, lv + 1):
            if (p0 << i) > m * added:
                if (t >> (i - 1)) & 1:
                    g += m
                m *= 2
        return g

    def table(lv):
        return 128 + sum((p0 << i) * pair_bytes + groups(i) * added_slots * slot for i in range(lv))

    def indicator(lv, p):
        off = table(lv) + p * pair_bytes + 8 + 4 * slot
        return int.from_bytes(data[off:off + 8], "little")

    items = {}
    old_pairs = (buckets << level) // 2
    for lv in [level] + ([level + 1] if resizing else []):
        for p in range((buckets << lv) // 2):
            ind = indicator(lv, p)
            if ind & (moved_bit | unborn_bit):
                continue
            if lv > level and not indicator(level, p % old_pairs) & moved_bit:
                continue  # an interrupted migration's copies
            base = table(lv) + p * pair_bytes
            group = table(lv) + (p0 << lv) * pair_bytes + (group_of(lv, p) * added_slots * slot if added else 0)
            for bit in list(range(pair_slots)) + list(range(32, 32 + added_slots)):
                if not (ind >> bit) & 1:
                    continue
                if bit >= 32:  # slot bit-32 of the pair's added group
                    off = group + (bit - 32) * slot
                    GEOMETRY["in_added"] = GEOMETRY.get("in_added", 0) + 1
                else:
                    off = base + 8 + bit * slot + (8 if bit >= 4 else 0)  # after the echo; slots after bucket 2i follow the indicator
                key = int.from_bytes(data[off + 8:off + 16], "little")
                if key in items:
                    raise ValueError(f"{path}: key {key:#x} is valid in two slots")
                items[key] = value_digest(data[off + 16:off + 16 + vb])
    return items


def read_level(path):
    """Every valid item of a level image: {key: value digest}; raises on a key stored twice, valid
    bits in a level not in use, or an image left mid-resize (recover it first)."""
    data = open(path, "rb").read()
    if len(data) < 128:
        raise ValueError(f"{path}: shorter than the level header")
    magic, _ver, _hb, base, resizes, vb, _seed, _node, _nodes, region = struct.unpack_from("<QIIQIIQIIQ", data, 0)
    if magic != LEVEL_MAGIC or region > len(data):
        raise ValueError(f"{path}: not a level image")
    word = int.from_bytes(data[64:72], "little")
    top, resizing = word & 0xFF, (word >> 8) & 1
    GEOMETRY.update(level=top, resizing=resizing, in_added=0)
    if resizing:
        raise ValueError(f"{path}: the image is mid-resize (restart the server on it: recovery finishes the resize)")
    if top < 1 or top >= resizes + 2:
        raise ValueError(f"{path}: level word names top level {top}")
    slot = 16 + (vb + 7) // 8 * 8 + 8
    bucket = 8 + 4 * slot
    items = {}
    for level in range(resizes + 2):
        start = 128 + ((1 << level) - 1) * base * bucket
        for b in range(base << level):
            off = start + b * bucket
            bits = data[off] & 0xF  # the token's valid bits (little endian: the first byte)
            if not bits:
                continue
            if level not in (top, top - 1):
                raise ValueError(f"{path}: level {level} is not in use but bucket {b} has valid slots")
            for s in range(4):
                if not (bits >> s) & 1:
                    continue
                so = off + 8 + s * slot
                key = int.from_bytes(data[so + 8:so + 16], "little")
                if key in items:
                    raise ValueError(f"{path}: key {key:#x} is valid in two slots")
                items[key] = value_digest(data[so + 16:so + 16 + vb])
    return items


HOPSCOTCH_MAGIC = 0x3248435348504F48  # "HOPSCH2"


def read_hopscotch(path):
    """Every live record of a (recovered) hopscotch image (include/rdmahash/hopscotch.h: 128-byte
    header, N+H-1 slots, the chain heads, the pool of [next][B records] blocks): the slots and every
    record reachable from a chain head whose ctrl has OCC (bit 63): {key: value digest}; raises on a
    key stored twice or a chain leaving the pool."""
    data = open(path, "rb").read()
    if len(data) < 128:
        raise ValueError(f"{path}: shorter than the hopscotch header")
    magic, hood, _kb, vb, _node, _nodes, brecs, home = struct.unpack_from("<QIIIIIIQ", data, 0)
    blocks = struct.unpack_from("<Q", data, 64)[0]
    if magic != HOPSCOTCH_MAGIC:
        raise ValueError(f"{path}: not a hopscotch image")
    GEOMETRY.update(level=0, resizing=0, in_added=0)
    rb = 16 + (vb + 7) // 8 * 8 + 8
    heads = 128 + (home + hood - 1) * rb
    groups = (home + hood - 1) // hood
    pool = heads + groups * 8
    bb = 8 + brecs * rb
    items = {}

    def take(off):
        if int.from_bytes(data[off:off + 8], "little") >> 63:
            key = int.from_bytes(data[off + 8:off + 16], "little")
            if key in items:
                raise ValueError(f"{path}: key {key:#x} is live in two records")
            items[key] = value_digest(data[off + 16:off + 16 + vb])

    for s in range(home + hood - 1):
        take(128 + s * rb)
    for g in range(groups):
        b, seen = int.from_bytes(data[heads + g * 8:heads + g * 8 + 8], "little"), 0
        while b:
            if b < pool or b >= pool + blocks * bb or (b - pool) % bb or seen > blocks:
                raise ValueError(f"{path}: the chain of group {g} leaves the pool")
            for i in range(brecs):
                take(b + 8 + i * rb)
            b, seen = int.from_bytes(data[b:b + 8], "little"), seen + 1
    return items


def read_table(path):
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) == 8 and int.from_bytes(head, "little") == LEVEL_MAGIC:
        return read_level(path)
    if len(head) == 8 and int.from_bytes(head, "little") == HOPSCOTCH_MAGIC:
        return read_hopscotch(path)
    return read_continuity(path)


def apply(op, status, written, state):
    """The state after an operation that completed with `status` (None = absent)."""
    if op == K_PUT and status in (INSERTED, UPDATED):
        return written
    if op == K_UPDATE and status == UPDATED:
        return written
    if op == K_ERASE and status == ERASED:
        return None
    if op == K_FOP and status == INSERTED:
        return written
    return state


def if_done(op, written, state):
    """The state after a write whose outcome is unknown, had it taken effect."""
    if op == K_PUT:
        return written
    if op == K_UPDATE:
        return written if state is not None else None
    if op == K_ERASE:
        return None
    if op == K_FOP:
        return state if state is not None else written
    return state


def main(argv):
    self_test = "--self-test" in argv
    argv = [a for a in argv if a != "--self-test"]
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        events = read_history(argv[2])
        table = read_table(argv[1])
    except (OSError, ValueError) as e:
        print(f"pm_history_verify: error: {e}", file=sys.stderr)
        return 2
    allowed = {}  # key -> set of acceptable states (digest or None)
    state = {}
    acked_inserts = pending = 0
    last_response = 0
    for inv, resp, key, written, _read, client, op, status, _ in events:
        if op == K_INIT:
            state[key] = written if status == INSERTED else None
            continue
        if key not in state:
            print(f"pm_history_verify: error: key {key:#x} has no initial state", file=sys.stderr)
            return 2
        if inv < last_response:
            print("pm_history_verify: error: overlapping operations (run the client at --depth 1)", file=sys.stderr)
            return 2
        if status == PENDING:
            if key in allowed:
                print("pm_history_verify: error: two pending operations on one key", file=sys.stderr)
                return 2
            allowed[key] = {state[key], if_done(op, written, state[key])}
            pending += 1
            continue
        last_response = resp
        if key in allowed:  # a later op on a key with a pending one: the client went on after a failure
            print("pm_history_verify: error: an operation after a pending one on the same key", file=sys.stderr)
            return 2
        if status in (INSERTED,) and op in (K_PUT, K_FOP):
            acked_inserts += 1
        state[key] = apply(op, status, written, state[key])
    bad = []
    present = 0
    for key, s in state.items():
        want = allowed.get(key, {s})
        have = table.get(key)
        present += have is not None
        if have not in want:
            bad.append(f"key {key:#x}: image holds {'nothing' if have is None else hex(have)}, expected "
                       + " or ".join("absent" if w is None else hex(w) for w in want))
    ops = sum(1 for e in events if e[6] != K_INIT)
    print(f"{len(state)} keys, {ops} operations ({acked_inserts} acknowledged inserts, {pending} pending): "
          f"{len(state) - len(bad)} keys as acknowledged, {len(bad)} not; {present} present in the image "
          f"of {len(table)} items ({GEOMETRY['in_added']} in added slots; table level {GEOMETRY['level']}"
          f"{', resizing' if GEOMETRY['resizing'] else ''})")
    for line in bad[:20]:
        print("  " + line)
    if not bad and self_test:
        # The check can fail: drop one acknowledged present item from the image read, and one absent
        # key's acknowledged absence, and the same comparison must report each.
        gone = next((k for k, s in state.items() if s is not None and k not in allowed), None)
        if gone is None or table.pop(gone) is None or all(table.get(k) in allowed.get(k, {s}) for k, s in state.items()):
            print("pm_history_verify: self-test failed: a dropped item went unnoticed")
            return 1
        print("self-test: a dropped item is reported")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
