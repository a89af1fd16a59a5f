// rdmahash/continuity.h — continuity hashing on (remote) persistent memory (seed 002).
// Lookups are ONE one-sided READ; writes are two-sided requests applied by the memory node's CPU,
// log-free: every write becomes visible and durable with one 8-byte indicator store.
//
// Memory layout of a shard (one memory node; all offsets 8-byte aligned)
// -----------------------------------------------------------------------------------------
//   [0, 64)    ContinuityHeader: magic, format version, geometry, node, checksum of the header
//   [64, 72)   the geometry word (own cache line, up to 128): level L (bits 0..7), RESIZING (bit 8),
//              check (bits 32..63, a hash of the low half). Changed only by one 8-byte store + persist.
//   [72, 80)   the records word: ContinuityConfig::records of the run that formatted it (0: not
//              recorded); an image is refused when both it and the reopening run's are set and differ.
//   [128, ...) tables 0 .. max_resizes, table l of N_l = N·2^l numbered buckets (N_l/2 segment pairs)
//              at table_offset(l) = 128 + the bytes of tables 0..l-1 (cumulative: a table's memory
//              is never reused, so a reader with any older geometry still finds MOVED marks).
//              Pair i of a table:
//                [echo: 8][bucket 2i: 4 slots][indicator: 8][SBuckets: 4·sb slots][bucket 2i+1: 4 slots]
//              (the echo, a copy of the indicator word, brackets the even segment: "Torn reads")
//              then (added SBuckets on) groups_at(l) added groups of added_slots() slots each
//              (see "Added SBuckets").
//   A *segment* is a numbered bucket plus the SBuckets beside it: segment 2i = the echo, bucket 2i,
//   the indicator and the SBuckets; segment 2i+1 = the indicator, the SBuckets and bucket 2i+1. The
//   two segments of a pair overlap on the indicator and the SBuckets. In table l key k has bucket
//   b = h(k) % N_l (eq. 1) and its segment starts, relative to the table, at
//       b even:  b/2 · (size_se + size_bu)                    (eq. 2)
//       b odd:   (b-1)/2 · (size_se + size_bu) + 8 + size_bu  (eq. 3, past the echo)
//   where size_se + size_bu + 8 = pair_bytes() (seed 002's sizes, plus the echo word). A lookup
//   READs segment_bytes() there (+ 8 for an even segment, its echo): every slot the key can occupy
//   and the indicator that says which slots are valid.
//
//   Slot (the record format of schemes/record.h, 8-byte keys):
//     [ctrl:8 = OCC | pub (the 17-bit seq, in a 29-bit field) << 32 | 32-bit key fingerprint][key:8]
//     [value, padded to 8][check:8], check = hash(pub, key, value). `pub` is the indicator sequence
//     number that published the slot.
//   Indicator (one aligned 8-byte word): bits 0..pair_slots()-1 = valid bit of each slot of the
//     pair (bit j: slots 0-3 bucket 2i, 4..4+4sb-1 the SBuckets, then bucket 2i+1); bits 24..31 =
//     zero (format 3's generations of bucket 2i, replaced by the echo; recovery refuses them set);
//     bits 32..43 = claim bits: bit 32+x = this pair holds an item in slot x of its added group
//     ("Added SBuckets"); bits 44..60 = seq, the pair's publication counter (17 bits, wraps),
//     bumped by every indicator store; bit 61 = MOVED (this pair of table l was migrated to table
//     l+1: no valid or claim bits); bit 62 = UNBORN (this pair of table l+1 has not received its
//     items from table l yet: no valid or claim bits); bit 63 = 0 (recovery refuses it set).
//     pair_slots() = 8 + 4·sb ≤ 24, so sb ≤ 4 (seed 002: 3, a 20-bit indicator).
//     Why 17 bits of seq suffice: seq only orders publications against ONE reader's indicator,
//     within one lookup (pub ≤ s, compared mod 2^17 in a window of 2^16). A slot rewritten after
//     the reader's indicator READ is taken for an old one only if 2^16 = 65 536 indicator stores
//     of that one pair land between the reader's indicator word and its slot words — 65 536 write
//     requests to one pair, each with two persists, inside one READ of < 1 KiB (or between the
//     two READs of a lookup). Format 2 had 29 bits; 12 went to the claim bits.
//     The window does NOT bound an item's age: an item left alone while 2^16 stores hit its pair
//     (a cold key beside a hot one) falls outside it for 2^16 of every 2^17 stores — see "Old
//     items" below for how readers take it, and recovery does not compare pub with seq at all.
//
// Write protocol (the memory node's CPU, one mutex per shard; every store and persist goes through
// PersistentRegion, the persist choke point; "persist" = flush the lines + fence)
//   insert(k, v): pick a free slot (bit clear) of k's segment — home bucket first, then SBuckets,
//                 then (added SBuckets on) a slot of the pair's added group that no pair claims;
//                 write ctrl/key/value/check with pub = seq+1; persist(slot);
//                 indicator ← bits | bit(slot), seq+1; persist(indicator).            2 persists
//   update(k, v): out of place: write the new item into a free slot of k's segment (pub = seq+1);
//                 persist(slot); indicator ← bits ^ bit(old) ^ bit(new), seq+1 — both bits flip in
//                 one store; persist(indicator).                                       2 persists
//                 If k's segment has no free slot the update reports kFull and changes nothing.
//   erase(k):     indicator ← bits & ~bit(slot), seq+1; persist(indicator).            1 persist
//   (seed 002 Table I: 2 / 2 / 1.) A slot is only ever written while its bit is clear. Every
//   indicator store is followed by the same word into the pair's echo, not persisted: the echo is
//   for readers only (a crash may leave it behind; recovery rewrites every echo from its indicator).
//
// Invariants (at every instant, in memory and in every crash image of the media)
//   I1 a key is present iff exactly one valid slot holds it, in its own segment;
//   I2 a valid slot's bytes are exactly what was written before its bit was set (they were
//      persisted before the indicator store that set the bit, and are not written while valid);
//   I3 every acknowledged write is durable: the reply is sent after the indicator persist.
//   Crash states: a crash before the indicator store leaves the indicator (and so the table) as
//   before the operation — the half-written slot has a clear bit and is garbage nobody reads;
//   between the store and its persist the media hold the old or the new indicator word (an
//   aligned 8-byte PM store is failure-atomic; a line evicted early carries the new one), so the
//   in-flight operation is wholly absent or wholly present — its slot was persisted before the
//   store was issued; after the persist it is complete and acknowledged. Formatting writes the
//   magic word last, in its own persist: an image whose formatting was interrupted is refused,
//   never taken for a table (delete it). Recovery is therefore a
//   scan: validate the header and the geometry word, count the valid bits, check each valid slot
//   (checksum, fingerprint, segment, no key twice) and the resize marks; a violation means media
//   corruption and is reported, never "repaired". Its one write: the children of an interrupted
//   pair migration are reset to UNBORN (see "Online resizing"), after the image was validated.
//
// Torn reads (the server writes while clients READ; a READ of more than 8 bytes is not atomic)
//   The indicator is one aligned word, so it is read whole: (bits, seq = s). The argument below
//   assumes a READ observes its words in address order (LocalFabric, UCX over shared memory:
//   memcpy; RDMA NICs in practice, not by specification).
//   Even segment: the READ observes the echo, then bucket 2i, then the indicator, then the
//   SBuckets. It is accepted only if echo == indicator (the whole word, seq included); otherwise
//   the pair changed during the READ and the lookup READs again (after kOldItemReads (4) such
//   READs it asks the node, as for old items). Why equal words suffice: the echo is stored after
//   its indicator, so an echo read at t_a equal to the indicator read at t_b > t_a means the
//   indicator held that word throughout [t_a, t_b] (seq only grows; 2^17 stores inside one READ
//   aside, the window's own assumption). A valid slot is not written while valid, and every item
//   it published was written before the indicator store, so every valid slot copied in between —
//   bucket 2i, and whatever an implementation of the READ copies early (glibc's memcpy loads the
//   tail first) — is the published item: bucket 2i needs no seq test, old items included. The
//   SBuckets follow the indicator and get the odd segment's tests below, as before.
//   (Format 3 guarded the slots of bucket 2i with 2-bit generations
//   in the indicator; four rewrites of one slot during one READ wrapped them — a client preempted
//   inside its READ on a loaded machine — and the lookup returned an older value or missed a
//   present key. Found by ContinuityConcurrency.ReadersDuringWritesSeeWholeMonotoneValues in CI.)
//   Slots after the indicator (the odd segment's, the even segment's SBuckets): a valid slot is
//   accepted only if its ctrl is OCC, `check` matches its pub, key and value, and pub ≤ s (mod
//   2^17). Then:
//   * a slot torn across two writes fails the check (each write has its own pub, and check covers
//     it); a slot rewritten after the indicator was read carries pub > s (its publication needs a
//     later indicator store): both are "unstable" and the lookup READs the segment again;
//   * a slot read after the indicator with pub ≤ s is the content published by the indicator the
//     reader saw (every rewrite after that indicator has pub > s), so a hit is the item present at
//     the instant the indicator was read, and a miss (every valid slot stable, none holds k) is
//     the absence of k at that instant.
//   * old items: a slot that fails only the window (pub ≤ s false) is either republished after
//     the indicator was read or an item older than 2^16 publications of its pair (a cold key
//     beside a hot one). The lookup READs the segment again; it accepts the slot if that READ
//     shows the SAME indicator word and the same slot bytes (group slots likewise, from the two
//     group READs). Why: an unchanged indicator word (seq included) means no indicator store of
//     the pair came between the two indicator reads (2^17 stores within one lookup aside, the
//     window's own assumption), so a slot valid in it held one content C throughout; the first
//     READ's copy was read between the two indicator reads (the odd segment's slots follow its
//     indicator; a group is READ after its segment), so equal copies are C, the item present at
//     both indicator reads. Equal bytes alone prove nothing: a freed slot keeps its bytes, and once
//     seq has wrapped a re-put of the same item writes the same bytes (found by review, with a
//     test: ContinuityOldItems.StaleBytesEqualToARewrite...). Under a pair whose indicator
//     changes between every two READs, two equal indicators may never come: after kOldItemReads
//     (4) such READs the lookup asks the node (write_rpc kGet, answered under the shard lock; the
//     lookup linearizes inside it). Cost: one more READ for an old item on a quiet pair, 4 READs
//     and an RPC on a busy one; none for items inside the window.
//   * a READ whose words arrive in an arbitrary order is not covered: it would need the echo
//     after the last slot of each segment too (a second word per segment).
//
// What a client sees if the memory node dies at any instruction: lookups keep returning the
// state published by the last indicator store (a half-written slot is invisible); a write whose
// reply was not received may or may not have happened (its transport request fails); after the
// node restarts on the same file, recovery yields exactly the state of the last persisted
// indicator of every pair. A client that dies only loses its own in-flight requests. While a
// resize runs, lookups keep following MOVED / UNBORN marks; a resize interrupted by the node's
// death continues after recovery (the next write or the background thread).
//
// Online resizing (log-free; the memory node's CPU; readers and writers keep going)
//   Table l of N_l buckets grows into table l+1 of 2·N_l. Since h % 2N_l is h % N_l or that + N_l,
//   the items of pair P of table l go to pairs P and P + N_l/2 of table l+1, and nothing else goes
//   there: those two pairs are *P's children*, and they hold at most P's 20 items with every
//   segment within its 16 slots, so a migration never finds a full segment.
//   start (a write found its segment full and max_resizes allows another level, or start_resize):
//     every indicator of table l+1 ← UNBORN (seq 0); persist table l+1; geometry ← (l, RESIZING);
//     persist. A crash before the geometry store leaves table l alone in charge (table l+1 is junk
//     nobody reads).
//   migrate pair P (one critical section of the shard's mutex; writes are served between pairs):
//     for each valid item of P: write it into a free slot of its child (home bucket first, pub =
//     seq+1), persist it; then each child's indicator ← its bits (UNBORN cleared), persist;
//     INSERT-BEFORE-ERASE: only then P's indicator ← MOVED with no valid bits — the clear of P's
//     bits and the MOVED mark are ONE 8-byte store — persist. Each write request first migrates
//     its key's pair (if not yet MOVED), then `migrate_pairs_per_write` more pairs in order, then
//     applies itself in table l+1: while P is not MOVED, its children receive nothing but P's own
//     items, all in P's critical section.
//   With background_migration, a ContinuityServer thread also migrates one pair at a time (taking
//   the shard's mutex per pair, so writes interleave) while a resize is in progress: a resize
//   finishes even if the writes stop, and lookups return to one READ.
//   finish (every pair of table l MOVED): geometry ← (l+1, not RESIZING); persist. Table l stays
//     (all MOVED) for readers with an older geometry.
//   Where a key is (the server): in table l unless its pair there is MOVED, then in table l+1.
//   Reader (one-sided): caches a level per node (starts at 0, only grows). It READs the key's
//   segment in its level; MOVED → the pair's items are in the next table: cached level + 1, READ
//   there; UNBORN → the pair was not migrated yet: READ the previous table (level - 1, the cache
//   stays). A segment neither MOVED nor UNBORN is authoritative at the instant its indicator was
//   read: a not-MOVED pair of table l holds every item of its keys (writes to them go to table l+1
//   only after the MOVED store), and a born pair of table l+1 holds either the items of a MOVED
//   parent or, inside the parent's migration, exact copies of the parent's (no write in between).
//   So 1 READ when no resize is in progress and the cache is current; 2 (MOVED then the new
//   table, or UNBORN then the old one) for a pair moved since the reader last learned the level,
//   or for a not-yet-migrated pair once the reader has learned the new level.
//   Crash during a migration: recovery sees geometry (l, RESIZING); a pair of table l+1 that is
//   born while its parent is not MOVED is the leftover of the interrupted migration (copies of
//   items still valid in the parent): recovery resets it to UNBORN (one 8-byte store + persist,
//   after the whole image was validated) and the migration restarts at that pair on the next
//   write or resize_step. Nothing else is repaired; every acknowledged write is in exactly one
//   of: a not-MOVED pair of table l, a born pair of table l+1 under a MOVED parent.
//   A write whose segment is full in the newest table: if another level is allowed, the running
//   resize is finished (every pair migrated), the next one started, and the write retried; with
//   max_resizes levels used the write reports kFull and changes nothing.
//   Offline: `resize_into` moves every item into another shard (insert-into-new, then erase-here).
//
// Added SBuckets (seed 002 Fig. 10; ContinuityConfig::added_group_pairs = D, 0: off; --added-sbuckets 1/D)
//   Seed 002 gives "a small percentage (1/10) of segment pairs" at most one added SBucket group
//   before resizing, published through the pair's own indicator (log-free as before), with clients
//   told where the group is. Here the place is deterministic, so clients need no directory:
//   layout: after the pairs of table l, groups_at(l) added groups of A = 4·min(sb, 3) slots (one
//     SBucket group; 12 claim bits). Table 0 has M0 = ceil(P0 / D) groups (P0 = its pairs); table
//     l+1 keeps table l's count while that leaves at most D pairs per group, else doubles it
//     (ContinuityConfig::group_of): every group is shared by at most D pairs (at least 1/D of the
//     pairs "have" a group), and the children of the pairs of one group of table l are the pairs
//     of one (no doubling) or two (doubling: g and g + M_l) whole groups of table l+1.
//   ownership: a group's slots belong to the pairs sharing it, one slot to one pair at a time: slot
//     x is the pair p's while p's indicator has claim bit 32+x. The server (the only writer, under
//     its shard mutex) gives a pair a slot none of the group's pairs claims (it ORs their
//     indicators: at most D loads), writes and persists the item there with pub = p.seq+1, and
//     claims it with p's one indicator store, persisted. Insert / update / erase are unchanged
//     otherwise: an update moves k between own and added slots (in either direction) by flipping
//     both bits in one store; an erase clears the claim bit; 2 / 2 / 1 persists still. A freed
//     slot may be given to another pair of the group by the very next write.
//   reader: READ the segment (as before). If the key is in a stable own slot, or the pair claims
//     no added slot, done in 1 READ. Else READ the pair's whole group (a second READ, issued after
//     the first completed, so every word of it is observed after the indicator) and accept each
//     claimed slot x only if it holds a whole item (OCC, check word) of THIS pair (its key's pair
//     at this level is p) published no later than the indicator (pub ≤ s). Otherwise x is
//     UNSTABLE and the lookup starts again (never a miss): after our indicator READ, p may have
//     moved k out of x (the update's one store) and x may then have been given to another pair
//     (its item is not p's) or back to p (pub > s). A slot claimed by p at the indicator's
//     instant is not rewritten while p claims it, and any rewrite after that instant is either
//     another pair's item or p's with pub > s; so an accepted slot holds what it held at that
//     instant, and a hit / miss is the state at the instant the indicator was read, as before.
//     Cost: a second READ only for lookups of keys that are in an added slot or absent, on pairs
//     that claim added slots (none until segments overflow).
//   resizing: a migration moves the parent's added items too (each takes its home bucket, then
//     the SBuckets, then the child's added group); the one MOVED store clears the parent's
//     claims with its valid bits. The parent's own items alone always fit the children's own
//     slots (the argument above), and the count that reaches the children's groups does not
//     depend on the order, so a parent sends at most its own claim count to the groups. Writes
//     during a resize get no added slot of the new table (a write whose segment is full then
//     finishes the resize and retries, with them): so while a resize runs, a group of table l+1
//     receives only the overflow of the parents of ONE group of table l, whose claims total at
//     most A — a migration never finds a full group. A resize starts only when a segment AND its
//     group are full (seed 002 Fig. 10: the load at each resize rises from ~0.5 to ~0.7).
//   recovery: each claimed slot is checked like any other (valid item, checksum,
//     fingerprint, its key's pair is this pair, no key twice in the pair); so no slot is claimed
//     by two pairs (its one key has one pair). The leftover reset clears a leftover child's claims.
//   The header records D (format version 3; images of version 2 are refused by their version).
//
// Safety mechanisms (each removed by a mutant of tests/mutants/continuity.json, which the tests must
// kill: scripts/mutants.sh, docs/testing.md):
//  * the item is persisted before the indicator store that publishes it (invariant I2)
//    (continuity-drop-slot-persist)
//  * the indicator store is persisted before the reply (acknowledged writes are durable, I3)
//    (continuity-drop-indicator-persist)
//  * an update flips the old and the new valid bit in one 8-byte indicator store
//    (continuity-update-two-stores)
//  * a reader accepts a slot only if its check word matches pub, key and value (torn slot)
//    (continuity-reader-skip-checksum)
//  * a reader rejects a slot published after the indicator it read (pub <= seq)
//    (continuity-reader-skip-seq), unless a second READ shows the same indicator word and the
//    same slot bytes (an old item, "Old items": continuity-reader-old-item-unchecked without the
//    bytes, continuity-reader-old-item-any-indicator without the indicator;
//    continuity-reader-old-item-refused drops the rule and the old item is never found), and asks
//    the node after a few READs that cannot settle (continuity-reader-old-item-never-asks)
//  * a reader takes an even segment only if its echo equals its indicator (the pair did not change
//    during the READ) (continuity-reader-ignores-echo); the server stores the echo after every
//    indicator store (continuity-echo-not-stored) and recovery rewrites every echo
//    (continuity-recovery-keeps-stale-echo)
//  * recovery refuses a valid slot that is not a consistent item of its segment
//    (continuity-recovery-skip-slot-check)
//  * an image whose header checksum does not match is refused (continuity-header-skip-checksum;
//    check_image_frame, src/pmem, shared with level)
//  * only a --pm-path file this run created (O_CREAT|O_EXCL) is formatted: an existing file must
//    be a continuity image whatever its bytes — a zeroed header, a data file starting with zeros:
//    refused before any fabric maps it, exit 2, untouched (continuity-pm-formats-existing-file,
//    pmem-existing-file-taken-as-created); a mapped file has one owner at a time, an exclusive
//    flock held by PmemFile (pmem-file-lock; a second serve or bench on it: exit 2, the holder's
//    pid named). An image loaded with another --records of the same geometry is refused (the
//    records word: continuity-pm-records-unchecked). Formatting clears the magic first and writes it last (clear_image_magic,
//    write_image_header); a new file is formatted without its magic (format_unpublished), which
//    the bench writes only after the bulk load (bench-new-file-magic-kept-while-loading).
//  * recovery refuses an indicator with a reserved bit (24..31) set
//    (continuity-recovery-skip-reserved-bits)
//  * a resize inserts an item into the new table before erasing it from the old one (log-free
//    resizing) (continuity-resize-erase-before-insert)
//  * online migration publishes the children's indicators before the parent's MOVED store
//    (continuity-migrate-moved-before-children)
//  * the parent's bits are cleared and MOVED set in one 8-byte store (continuity-migrate-two-stores)
//  * a write migrates its key's pair before applying itself in the new table
//    (continuity-write-skips-own-pair)
//  * a reader follows MOVED to the next table (continuity-reader-ignores-moved) and UNBORN to the
//    previous one (continuity-reader-ignores-unborn)
//  * recovery resets a born child whose parent is not MOVED (continuity-recovery-keeps-leftover)
//  * an image whose geometry word fails its check is refused (continuity-geometry-skip-check)
//  Added SBuckets:
//  * a reader takes a claimed added slot holding another pair's item as unstable, never a miss
//    (continuity-added-reader-foreign-as-miss), and rejects one published after its indicator
//    (continuity-added-reader-skip-seq) unless two group READs under the same indicator word
//    return the same bytes (continuity-added-reader-old-item-unchecked), or torn (continuity-added-reader-skip-checksum); it READs
//    the group before a miss when its pair claims added slots (continuity-added-reader-skips-group)
//  * the server gives a pair only a slot no pair of its group claims
//    (continuity-added-slot-ignores-other-pairs)
//  * writes during a resize take no added slot of the new table
//    (continuity-added-resize-writes-take-new-groups); a write whose segment is full during a
//    resize finishes it and retries with them (continuity-added-full-during-resize-finishes-it)
//  * a migration moves the parent's added items (continuity-added-migrate-skips-added-items)
//  * recovery refuses a claimed slot holding another pair's item, and so a slot claimed by two
//    pairs (continuity-added-recovery-skip-pair-check)
//  (Not a safety mechanism: writing the new table's UNBORN marks before the geometry word. A
//  crash image with RESIZING and an all-zero new table is healed by the leftover reset, and no
//  reader goes to the new table before some pair of the old one is MOVED.)
//
// Thread safety: ContinuityClient belongs to one Engine; ContinuityShard and the RPC handler are
// thread-safe (one mutex per shard), readers never lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/pmem.h"
#include "rdmahash/table.h"

namespace rdmahash {

inline constexpr uint16_t kContinuityRpcFirst = 0x0D00;  // RPC ids reserved for continuity tables
inline constexpr uint16_t kContinuityRpcLast = 0x0D0F;
inline constexpr uint64_t kContinuityMagic = 0x31544e4f43484452ULL;  // "RDHCONT1"
// 2: geometry word, growing tables; 3: added SBuckets; 4: each pair starts with an echo of its indicator
inline constexpr uint32_t kContinuityFormatVersion = 4;
inline constexpr uint64_t kContinuityHeaderBytes = 64;
inline constexpr uint64_t kContinuityGeometryOffset = 64;  // the geometry word
inline constexpr uint64_t kContinuityRecordsOffset = 72;   // the records word (ContinuityConfig::records)
inline constexpr uint64_t kContinuityTableBase = 128;      // table 0

// SBuckets per segment pair: 1..4 (the indicator word has 24 valid bits; --sbuckets).
inline constexpr uint32_t kMaxSBuckets = 4;

struct ContinuityConfig {
  uint32_t memory_nodes = 1;
  uint64_t buckets_per_node = 64;  // N numbered buckets, even, >= 2
  uint32_t sbuckets = 3;           // SBuckets per segment pair, 1..4
  uint32_t value_bytes = 8;        // 0..120
  uint64_t hash_seed = 0xC0417157A5EEDULL;
  uint32_t max_resizes = 0;        // online doublings allowed (0: a full segment reports kFull), <= 16
  uint32_t migrate_pairs_per_write = 2;  // memory node only (not part of the clients' config tag)
  bool background_migration = false;     // memory node only: ContinuityServer runs a migration thread
  // Added SBuckets (seed 002 Fig. 10): one added group of added_slots() slots per this many segment
  // pairs, shared by them (0: none). Seed 002's choice is 1/10 of the pairs: 10. <= 65535.
  uint32_t added_group_pairs = 0;
  // Memory node only: format() leaves the magic word 0 (write_image_header, publish = false): the
  // bench, for a new --pm-path file, publishes it once the bulk load is complete, so no instant of
  // the file's creation shows a valid table that is not the loaded data set.
  bool format_unpublished = false;
  // The data set a --pm-path image is bulk-loaded with (the bench's --records; 0: none). Not part
  // of the geometry (--records 19999 and 20000 give the same buckets) but of the image: format()
  // stores it in the records word and recovery refuses an image loaded with another count.
  uint64_t records = 0;

  // Buckets for `records` at `load_factor` (records / all slots, SBuckets included).
  static ContinuityConfig for_records(uint64_t records, double load_factor, uint32_t memory_nodes,
                                      uint32_t sbuckets = 3);
  void validate() const;  // throws InvalidArgument naming the bad field
  uint32_t slot_bytes() const;
  uint32_t bucket_bytes() const { return 4 * slot_bytes(); }
  uint32_t pair_slots() const { return 8 + 4 * sbuckets; }
  uint64_t pair_bytes() const { return uint64_t{pair_slots()} * slot_bytes() + 16; }  // echo + indicator
  uint32_t segment_bytes() const { return (4 + 4 * sbuckets) * slot_bytes() + 8; }
  // Byte offset of slot `bit` (< 4 + 4 * sbuckets + 4: bucket 2i, SBuckets, bucket 2i+1) from its
  // pair's start: [echo][bucket 2i][indicator][SBuckets][bucket 2i+1]. The one formula the node's
  // stores and a reader's parse of its READ share.
  uint64_t slot_in_pair(uint32_t bit) const {
    return bit < 4 ? 8 + uint64_t{bit} * slot_bytes() : 16 + bucket_bytes() + uint64_t{bit - 4} * slot_bytes();
  }
  // Where the odd segment (its indicator, SBuckets, bucket 2i+1) starts in the pair.
  uint64_t odd_segment_in_pair() const { return 8 + bucket_bytes(); }
  uint64_t buckets_at(uint32_t level) const { return buckets_per_node << level; }
  // Added groups: added_slots() slots each (one SBucket group of the pair's size, at most 3 SBuckets:
  // the indicator has 12 claim bits), groups_at(level) of them after the pairs of table `level`.
  // Table 0 has ceil(P0 / added_group_pairs) groups (P0 = its pairs); table l+1 keeps table l's
  // number of groups while that leaves at most added_group_pairs pairs per group, else doubles it.
  uint32_t added_slots() const { return added_group_pairs ? 4 * (sbuckets < 3 ? sbuckets : 3) : 0; }
  uint64_t group_bytes() const { return uint64_t{added_slots()} * slot_bytes(); }
  uint64_t groups_at(uint32_t level) const;
  // The added group of pair `pair` of table `level`. Pair r + P0·t (r < P0) of table l is in group
  // (r mod M0) + the sum of M_{i-1} over the levels i <= l that doubled the groups and whose bit
  // i-1 of t is set. So a pair P of table l and its children P and P + P_l in table l+1 are in
  // groups g, and g (no doubling) or g + M_l (doubling): every group of table l+1 is shared by
  // children of the pairs of ONE group of table l (the migration argument in the header comment).
  uint64_t group_of(uint32_t level, uint64_t pair) const;
  uint64_t table_bytes(uint32_t level) const {
    return (buckets_at(level) / 2) * pair_bytes() + groups_at(level) * group_bytes();
  }
  uint64_t table_offset(uint32_t level) const;
  uint64_t group_offset(uint32_t level, uint64_t group) const {
    return table_offset(level) + (buckets_at(level) / 2) * pair_bytes() + group * group_bytes();
  }
  // Slots of table 0, added ones included (they are storage: the load factor counts them).
  uint64_t slots_per_node() const { return buckets_per_node / 2 * pair_slots() + groups_at(0) * added_slots(); }
  uint64_t slots_at(uint32_t level) const {  // table `level` (its groups need not double)
    return (buckets_at(level) / 2) * pair_slots() + groups_at(level) * added_slots();
  }
  uint64_t region_bytes() const { return table_offset(max_resizes + 1); }
};
std::string continuity_config_error(const ContinuityConfig& cfg);

struct ContinuityHeader {
  uint64_t magic;
  uint32_t format_version;
  uint16_t header_bytes, added_group_pairs;
  uint64_t buckets;
  uint32_t sbuckets, value_bytes;
  uint64_t hash_seed;
  uint32_t node, memory_nodes;
  uint64_t region_bytes;
  uint64_t checksum;  // of the 56 bytes before it
};
static_assert(sizeof(ContinuityHeader) == kContinuityHeaderBytes);
static_assert(offsetof(ContinuityHeader, format_version) == 8);  // check_image_frame reads bytes 8..11

// Where a key lives: pure function of the config.
struct ContinuityPlacement {
  uint32_t node;
  uint64_t bucket;          // eq. (1)
  uint64_t segment_offset;  // eqs. (2)/(3), from the start of the region (header included)
  uint64_t pair;
  uint32_t first_bit;       // the segment's slots are bits first_bit .. first_bit + 4 + 4sb - 1
  uint32_t indicator_pos;   // the indicator's byte offset inside the READ
  uint32_t read_bytes;      // the lookup's READ: segment_bytes(), + 8 for an even segment (its echo)
  uint32_t kbits;
  uint32_t level;
};
// In table `level` (0: the initial one).
ContinuityPlacement continuity_place(const ContinuityConfig& cfg, uint64_t key, uint32_t level = 0);

struct ContinuityResult {
  Status status;
  uint32_t persists = 0;  // persist calls the operation made
};

struct ContinuityStats {
  uint64_t inserts = 0, updates = 0, erases = 0, full = 0;
  uint64_t insert_persists = 0, update_persists = 0, erase_persists = 0;
  uint64_t resizes = 0, migrated_pairs = 0, migrated_items = 0, migrate_persists = 0;
  uint64_t cleaned_leftovers = 0;  // born children of a not-MOVED parent reset by recovery
  uint64_t added_writes = 0;       // inserts / updates / migrated items placed in an added slot
  uint64_t added_vacated = 0;      // updates / erases that freed an added slot
  uint64_t migrated_added_items = 0;  // items migrated out of an added slot
};

// Memory-node side: one shard on a PersistentRegion. A region whose header is all zero is
// formatted; one holding a continuity header is validated and recovered (`recovered()`); anything
// else is refused with PmemError before a single byte is written.
class ContinuityShard {
 public:
  ContinuityShard(const ContinuityConfig& cfg, uint32_t node, PersistentRegion& region);
  ContinuityShard(const ContinuityShard&) = delete;
  ContinuityShard& operator=(const ContinuityShard&) = delete;

  ContinuityResult find_or_put(uint64_t key, std::span<const std::byte> value);
  ContinuityResult put(uint64_t key, std::span<const std::byte> value);
  ContinuityResult update(uint64_t key, std::span<const std::byte> value);
  ContinuityResult erase(uint64_t key);

  // Log-free resizing (seed 002), offline (no client may use either table meanwhile): moves every
  // valid item of this shard into `dst` (a table with the same node, values and hash seed, e.g.
  // twice the buckets), each by insert-into-dst, then erase-here. At every instant every key is in
  // this shard or in `dst` (briefly both, with one value), so a crash at any point loses nothing,
  // and calling resize_into again after restart — the seed's recovery: an item already in `dst`
  // is erased here, any other is rehashed — completes the move. Returns the items moved; throws
  // InvalidArgument if a segment of `dst` is full (both tables stay consistent; retry with a
  // larger `dst`). The application switches to `dst` (e.g. renames its file) once this shard is
  // empty.
  uint64_t resize_into(ContinuityShard& dst);

  // Online resizing (see the top of this file). start_resize: false if a resize is running or
  // max_resizes levels are used. resize_step: migrates the next not-MOVED pair, or finishes the
  // resize; false once no resize is running. finish_resize: steps until done.
  bool start_resize();
  bool resize_step();
  void finish_resize();
  uint32_t level() const;  // the table in charge (the old one while resizing)
  bool resizing() const;

  bool owns(uint64_t key) const;
  std::optional<std::vector<std::byte>> find(uint64_t key) const;
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> items() const;  // every valid item
  uint64_t records() const;
  uint64_t capacity() const;  // slots of the newest table
  bool recovered() const { return recovered_; }
  ContinuityStats stats() const;
  uint32_t node() const { return node_; }

 private:
  struct Loc { uint64_t pair; uint32_t bit; };
  enum class Kind { kFindOrPut, kPut, kUpdate, kErase };
  void format();
  void recover();
  uint64_t indicator_off(uint32_t level, uint64_t pair) const;
  uint64_t echo_off(uint32_t level, uint64_t pair) const;  // the pair's first word
  // The indicator and its echo, not persisted (formatting and the start of a resize persist them
  // with the rest of their range).
  void store_indicator(uint32_t level, uint64_t pair, uint64_t word);
  uint64_t slot_off(uint32_t level, uint64_t pair, uint32_t bit) const;
  std::optional<Loc> locate(uint64_t key, const ContinuityPlacement& p) const;
  // A free slot for a key of `p` given the pair's next indicator bits `low`: its home bucket, then
  // the SBuckets, then (with_added) a slot of the pair's added group no pair's indicator claims.
  int free_bit(const ContinuityPlacement& p, uint64_t low, bool with_added) const;
  uint64_t group_claims(uint32_t level, uint64_t pair, uint64_t low) const;
  bool added_allowed() const { return cfg_.added_group_pairs != 0 && !resizing_; }
  // Writes and persists the item into free slot `bit` of (level, pair) with publication number
  // `pub`; `low` = valid bits | claims of the indicator to come; returns it with the slot's bit set.
  uint64_t write_slot(uint32_t level, uint64_t pair, uint32_t bit, uint64_t key, uint32_t kbits, uint64_t pub,
                      uint64_t low, std::span<const std::byte> value);
  void set_indicator(uint32_t level, uint64_t pair, uint64_t bits, uint64_t flags = 0);
  void store_geometry(uint32_t level, bool resizing);
  uint32_t write_level() const { return resizing_ ? level_ + 1 : level_; }
  ContinuityResult write(Kind kind, uint64_t key, std::span<const std::byte> value);
  void migrate_pair(uint64_t pair);  // of table level_, into level_ + 1 (no-op if MOVED)
  bool start_locked();
  bool step_locked();
  bool grow_locked(uint64_t key);
  void check_kv(uint64_t key, std::span<const std::byte> value, bool exact) const;
  ContinuityResult insert_new(uint64_t key, const ContinuityPlacement& p, std::span<const std::byte> value);
  ContinuityResult replace(const Loc& at, uint64_t key, const ContinuityPlacement& p, std::span<const std::byte> value);

  ContinuityConfig cfg_;
  uint32_t node_;
  PersistentRegion& region_;
  mutable std::mutex mu_;
  uint64_t records_ = 0;
  bool recovered_ = false;
  uint32_t level_ = 0;
  bool resizing_ = false;
  uint64_t cursor_ = 0;  // resizing: pairs of table level_ below it are MOVED
  ContinuityStats stats_;
};

// Memory-node side on a fabric: a shard for every node hosted here (on `fabric.local_region(n)`,
// persisted in `mode`), and the RPC handler serving them under `rpc_id`.
class ContinuityServer {
 public:
  ContinuityServer(Fabric& fabric, const ContinuityConfig& cfg, PersistMode mode = PersistMode::kVolatile,
                   uint16_t rpc_id = kContinuityRpcFirst);
  ~ContinuityServer();
  ContinuityServer(const ContinuityServer&) = delete;
  ContinuityServer& operator=(const ContinuityServer&) = delete;
  bool hosts(uint32_t node) const;
  ContinuityShard& shard(uint32_t node);      // throws InvalidArgument if not hosted here
  PersistentRegion& region(uint32_t node);    // idem
  bool bulk_insert(uint64_t key, std::span<const std::byte> value);  // false if not hosted here
  uint64_t records() const;
  ContinuityStats stats() const;
  bool recovered() const;  // every hosted shard was recovered from an existing image
  const ContinuityConfig& config() const { return cfg_; }

 private:
  struct State;
  ContinuityConfig cfg_;
  std::shared_ptr<State> state_;
};

// One READ per lookup, RPCs for writes. OpResult.chunks = segment READs issued.
class ContinuityClient final : public KvClient {
 public:
  ContinuityClient(const ContinuityConfig& cfg, Engine& engine, uint16_t rpc_id = kContinuityRpcFirst);
  // Integer keys only: the byte-key overloads are KvClient's, which reject them naming the scheme.
  const char* scheme_name() const override { return "continuity"; }
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
  Task<OpResult> update(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> erase(uint64_t key) override;
  Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) override;  // get(): one record a key
  // Reads and validates node's header (one READ).
  Task<ContinuityHeader> read_header(uint32_t node);
  const ContinuityConfig& config() const { return cfg_; }
  uint64_t persists() const { return persists_; }  // persists the server reported for this client's writes
  uint32_t cached_level(uint32_t node) const { return levels_.at(node); }  // the table this client READs first

 private:
  Task<OpResult> remote(uint8_t op, uint64_t key, std::span<const std::byte> value);
  void check_value(std::span<const std::byte> value, bool exact) const;
  ContinuityConfig cfg_;
  Engine& engine_;
  uint16_t rpc_id_;
  uint32_t cfg_tag_;
  uint64_t persists_ = 0;
  std::vector<uint32_t> levels_;  // per node: the newest table this client knows of
};

}  // namespace rdmahash
