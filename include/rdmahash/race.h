// rdmahash/race.h — RACE hashing (seed 004): a one-sided, extendible hash table of byte-string
// keys and values. Every operation is READ/WRITE/CAS after a client's space allocation (one RPC
// per large chunk); the table grows by splitting subtables while clients run, and no operation
// ever waits for a splitter: any client that meets a split finishes it (lock-free splits).
//
// Memory layout (every node: [0,64) RaceNodeHeader, [64, 64+8·2^max_depth) directory, then 256
// bytes of death board (both used on node 0 only; the same layout everywhere keeps offsets
// uniform), then the pool)
// ----------------------------------------------------------------------------------------------
//  * Directory, on node 0 only (not replicated: one writer path, no replica consistency to argue).
//    Header word `global_depth` (GD); entries dir[i], i < 2^GD, one 8-byte word each:
//      bits 0..39 subtable offset/64 | bits 40..45 node | bits 48..53 local depth  (no lock bits).
//    Key k (64-bit hash H) uses dir[H mod 2^GD]. A subtable of local depth L and suffix s holds
//    the keys with H mod 2^L == s and is named by every entry i ≡ s (mod 2^L); dir[s] is its
//    *primary* entry. Entries above 2^GD are 0 until a doubling fills them.
//  * Subtable: G groups of three 64-byte buckets [main0, overflow, main1] (3·64·G bytes). Main
//    bucket m ∈ [0, 2G) is side m%2 of group m/2; its *combined bucket* is [main0, overflow]
//    (group offset 0) or [overflow, main1] (offset 64): one 128-byte READ. Two hash functions of H
//    give the key's two main buckets; both combined buckets are READ in the same batch.
//  * Bucket: 8-byte header (bits 0..7 local depth, bits 8..63 suffix; all ones = RETIRED) + 7
//    slots of 8 bytes:
//      slot = bit 63 KILLED | bits 56..62 fingerprint | 48..55 block length in 64-byte units |
//             bit 47 FROZEN | bit 46 COMMITTED | bits 40..45 node | bits 0..39 block offset/64;
//             0 = empty; FROZEN | COMMITTED with no pointer = RESERVED: a new subtable's slot the
//             split has not copied (freezing never produces it: a frozen empty slot is FROZEN
//             alone, a committed or killed slot has a pointer, so no frozen slot passes for
//             RESERVED); KILLED = a tentative copy another inserter killed (pointer kept: only
//             its owner clears it, to 0; see Helping).
//    7 slots (not 8) because the header shares the 64-byte cache line, as in the RACE authors'
//    code and SMART: one bucket = one line, one combined bucket = two lines.
//  * Split word (node-0 header word `split`): 0, or owner+1 << 48 | address of a 64-byte *split
//    descriptor* block [magic, s, L, entry(S, L), entry(A, L+1), entry(B, L+1), owner, checksum],
//    written before the word names it and never written again. One split is installed at a time.
//  * Death board (node 0, after the directory): bit i set = client i is dead, for good. Only the
//    memory node's CPU sets bits (race_mark_dead: serve, after a client's connection closed and
//    the grace period passed). No client reads it any more: splits and tentative copies are
//    helped, so nothing waits for a dead client (kept in the layout; serve still marks).
//  * Client ids: 0..2047 (kRaceMaxClientId; RaceClient refuses larger), unique among the table's
//    clients over its life, never reused (a reused id of a dead client would read as dead).
//    bench: the client index (in-process, mpirun); --connect: the id memory node 0 gave (refused
//    from 1024 on: restart the server).
//  * KV block, out of place, 64-byte aligned, never written again once a slot may point to it:
//      [key_len:16 | value_len:32 | writer:16][key][value][zero pad to 8][checksum:8] padded to 64·n
//    (writer: the client id that wrote it: who owns a tentative slot pointing to it).
//    checksum = hash of everything before it; a reader accepts a block only if it checks out
//    and the key matches (a slot's 8 fingerprint bits only select candidates).
//  * Pool: the rest of each node. The node's CPU hands out space only through RPC
//    kRaceRpcAlloc (bump pointer in the node header, under a mutex): KV-block chunks of
//    `chunk_bytes` to clients, which carve blocks (and split descriptors) from them, and whole
//    subtables to splitters. Exhausted → the client's operation answers kFull and has changed
//    nothing visible. Initial subtables (2^initial_depth) are placed round-robin over the nodes at
//    fixed offsets; a split's children go to nodes (s mod K) and (s|2^L mod K). A split subtable
//    is retired, not reused (its space is leaked: live subtables plus as many retired ones). A
//    client prepares one split at a time (its other operations that meet a full subtable wait for
//    it), so it holds at most one pair of unpublished children plus one spare pair: earlier, every
//    operation in flight allocated a pair and the losers' pairs leaked (~6 a split in a bulk load).
//
// Protocol (H, two main buckets, fingerprint from the key's bytes; S = subtable from the cache)
//  get:    RT1 READ both combined buckets. Every header must carry the key's suffix at its local
//          depth, else (wrong suffix, or RETIRED) the cache is stale: re-READ the directory (only
//          then) and retry (if the fresh directory still names that subtable, memory is corrupt:
//          FabricError; no interleaving leads there). RT2 READ the blocks of the COMMITTED slots whose fingerprint matches,
//          and dir[H mod 2^GD] and GD (8 bytes each) to validate: if the entry no longer names S,
//          or GD grew (after a doubling the old index's entry may name S for a moment longer),
//          a split published while we read → retry with the new directory.
//  insert (find_or_put, put of an absent key):
//          RT1 WRITE the KV block + READ both combined buckets (+ blocks of matching slots).
//          RT2 CAS an empty slot of the less loaded combined bucket to our pointer, *tentative*
//              (COMMITTED clear; readers ignore tentative slots), and in the same batch re-READ
//              both combined buckets, FENCED behind the CAS (fabric.h: performed after it at the
//              memory node, which holds the slot and both buckets): the view after our copy
//              landed, without a round trip of its own (race-placement-reread-fenced: unfenced,
//              the READ may be performed first, miss our copy, and the owner would take "gone,
//              no marker" for "committed by a helper": kInserted for a copy nobody commits).
//              RT1's view holding COMMITTED fingerprint matches not classified yet (and no
//              tentative one: that is likely a copy of the key, which the resolution should
//              commit, not race with ours): their blocks, the dir entry and GD go in RT2's batch
//              too (speculative placement: the copy is placed before the blocks tell whether the
//              key is there; if a block holds a committed copy,
//              the owner withdraws its own, as after any placement beside a committed copy, and
//              answers kFound: 4 round trips for that hit instead of 2). A client gates it: of
//              its recent first views with such matches (decayed counts), it speculates while at
//              most a third held the key; otherwise the blocks cost a round trip of their own
//              before RT2, as before. A block read once and found to hold another key holds it for
//              good — blocks are immutable, never reused — so its slot costs nothing in later
//              views. Only a first placement speculates: a placement after a kill or withdrawal
//              needs a fresh block first (race-spec-first-placement-only).
//          Duplicate resolution over the view (every read, RT1 included; see Helping):
//              a KILLED marker of ours → CAS it to 0, start over (a new placement: fresh block);
//              our copy COMMITTED (by a helper) → kInserted;
//              ours placed earlier but gone, no marker → a helper committed it and a later
//                  update/erase replaced it: kInserted (after the dir check);
//              another COMMITTED copy → withdraw ours (CAS to 0), kFound (put: update it);
//              tentative copies (ours or not), lowest-addressed t: CAS every other one to 0
//                  (ours: withdraw) or to itself|KILLED (another's: kill); if any, re-read;
//                  else (t is the only copy) RT3 CAS t tentative→COMMITTED: t's owner's insert
//                  takes effect there. t ours → kInserted; another's → kFound (put: update it);
//              no copy → RT2 CAS an empty slot of the less loaded combined bucket, tentative,
//                  with the fenced re-READ (if a copy of ours was placed before — then killed or
//                  withdrawn — first WRITE the block to a fresh address with the next READ: see
//                  "No slot value" below); a lost CAS's batch already holds the fresh view.
//          A find_or_put whose first view holds another client's lone tentative copy commits it:
//          3 round trips (WRITE+READ, block READ + dir check, commit CAS), kFound.
//          A new key: 3 round trips, the paper's count (its RT2 CAS, RT3 re-READ), although its
//          rule (re-read, keep one) cannot tell an inserter that already returned kInserted from
//          one still deciding and ours needs the commit CAS for that: the re-READ rides in the
//          placement CAS's batch, fenced behind it, so the commit CAS takes the round trip the
//          paper's re-READ had. (Until issue 30: 4, the re-READ in a round trip of its own.)
//  update: RT1 WRITE new block + READ buckets; RT2 blocks + dir check; RT3 CAS old slot → new.
//  erase:  RT1 READ buckets; RT2 blocks + dir check; RT3 CAS slot → 0.
//  A lost CAS restarts from a fresh READ (a lost placement CAS: from its batch's fenced READ).
//  No slot value is ever placed twice, so slot CASes have no ABA: blocks are never reused, and an inserter that places the key again after its copy was
//  killed or withdrawn first WRITEs its block to a fresh address (a new pointer: a new value; the
//  old block is leaked). Never reusing a block is not enough by itself: the same value placed
//  again, maybe in the same slot, would take a stalled helper's commit CAS, issued from a view
//  that showed the FIRST placement alone, although a third client committed its own copy since:
//  two committed copies of one key (test RaceFault.LateCommitCasNeverLandsOnTheOwnersNextPlacement).
//  A writer whose view holds a FROZEN slot (its subtable is being split) HELPS: it READs the split
//  word and, if the installed split is of that subtable, polls the word for up to help_patience
//  round trips (RaceConfig: 1024) and, if the split is still installed then, runs it to its end
//  (steps 4-9); either way it then re-reads the directory and retries. It never waits for the
//  splitter beyond that bound: a stalled or dead splitter's split is finished by its helpers.
//
// Split of S (depth L, suffix s; s2 = s | 2^L) into two NEW subtables A (suffix s) and B (s2)
//   1. (the client whose insert found both combined buckets full) re-READ the directory; S still
//      named at depth L < max_depth. READ the split word: a split is installed → poll the word up
//      to help_patience times, help the split to its end (steps 4-9) if it is still installed,
//      retry the insert.
//   2. Allocate A and B (RPCs; kept for this client's next split if they go unused), WRITE their
//      images — every header (L+1, s) / (L+1, s2), every slot RESERVED — and the descriptor block.
//      Nothing is visible yet: a client that stops here leaks space and nothing else.
//   3. Install: CAS the split word 0 → descriptor. Lost: help the installed split (after the same
//      patience), retry the insert.
//   Steps 4-9 are run by the splitter and by every helper, any number at once, each of which may
//   stop at any request. Each begins with READ descriptor + dir[s]:
//      dir[s] == S@L: not published at s; dir[s] == A@L+1: publication began (so did the copy
//      and the doubling, which precede it in every runner: skip to step 6); anything else: the
//      descriptor is VOID (S was split before it was installed): CAS the word → 0, touch nothing.
//   4. Freeze: READ S; CAS each unfrozen slot v → v|FROZEN, again with the new value while a
//      writer's CAS beat ours. S is never unfrozen (it is retired), so a frozen slot keeps its
//      value for good and every runner computes the same copy from it.
//   5. Copy: slot i of S goes to slot i of A or B by bit L of its key's hash (READ its block), the
//      other child's slot i to 0: CAS RESERVED → value. Slots already copied are skipped.
//   6. Double if GD == L: each upper entry CAS 0 → its lower twin, then GD CAS L → L+1.
//   7. Publish: every entry i ≡ s (mod 2^L) below 2^GD: CAS S@L → (bit L of i ? B : A)@L+1.
//   8. Retire S: WRITE RETIRED into each of its bucket headers.
//   9. Release: CAS the split word descriptor → 0 (whoever succeeds adds 2 to `subtables`).
//
// Why every race is safe (linearizability; "late" = a runner still acting on a split after it
// was released, e.g. one stalled for a long time)
//   * No step's change can land twice or late: freeze CASes an unfrozen value of a subtable that is
//     never unfrozen again; copy CASes from RESERVED, which no one ever writes back and no freeze produces (RESERVED ≠ a
//     frozen empty slot: else a late copy CAS into a child frozen for its own split would unfreeze
//     it and put back an item erased since — test RaceFault.LateCopyOfAnOldSplitNeverLandsInAFrozenChild); a doubling
//     CASes upper entries from 0 (they are nonzero before GD grows, and GD grows before any
//     publication) and GD from L; publication CASes from S@L, and S is never named again once
//     retired; RETIRED is a constant written into a subtable nobody else writes; the release
//     CASes from this descriptor's word, and descriptor blocks are never reused. So a late
//     runner's CASes all fail and its WRITEs rewrite RETIRED. (Mutants race-copy-write,
//     race-publish-write, race-double-write turn one of these CASes into a WRITE; the late helper
//     of RaceFault.TwoHelpersAndALateOneAgree then resurrects, reverts or misdirects entries.)
//   * Every runner computes the same values: the frozen contents of S are fixed, blocks are
//     immutable, the directory below 2^GD does not change while the descriptor is installed except
//     by this split's publication, so the lower half a doubling copies is the pre-split one (if
//     publication had begun, the upper half is already nonzero and the late CASes fail).
//   * The VOID test is stable: while a descriptor is installed dir[s] moves only from S@L to A@L+1,
//     by its own publication; a void descriptor's S had been split (retired, every slot frozen),
//     and its runners stop at the test, so A and B are untouched (the splitter reuses them).
//     Only while installed: a runner that reads dir[s] after the release may find A split since
//     (neither S nor A named) although the split was published. So the installer counts its split
//     and keeps A and B as spares only on proof: its own CAS released the word after the test
//     (void), or, when another runner released it, slot 0 of A is still RESERVED (a published
//     split copied every slot of A before publishing; nothing writes RESERVED again). Taking a
//     published split for void would hand live subtables to the next split's image WRITE
//     (RaceFault.InstallerStalledPastItsPublishedSplit..., mutants race-void-by-own-release,
//     race-void-by-reserved-slot).
//   * No write is lost: a writer's CAS on S lands before the freeze of that slot (the copy carries
//     it) or fails (frozen). A writer acts on A or B only through a directory entry naming them,
//     i.e. after publication of that entry, i.e. after the copy: RESERVED is never seen through
//     the directory. An inserter's tentative copy is copied like any slot; its owner's commit CAS
//     on S fails, and it finds its copy (by block identity) in the child and commits it there.
//   * Reads never wait. For key k (index i at the reader's GD) S holds k's current state until
//     dir[i] is CASed to a child: no writer of k acts on the child before that, and S changes only
//     by freezing (readers ignore FROZEN). After it, the reader's RT2 check sees dir[i] changed (or
//     GD grew, for a reader with an older GD) and retries. A READ torn by the freeze is covered the
//     same way. A stale cache naming a retired S is caught by the RETIRED headers (SRCDD) and, had
//     the READ preceded the retirement, by the RT2 check.
//   * A stale writer whose READ of S preceded a whole split and whose CAS followed it fails (every
//     slot of a retired subtable is frozen): no copy is ever stranded in a subtable keys left.
//   * Lock-free: a split is finished by whoever meets it (after at most help_patience polls of the
//     split word, which only reads); a runner only retries a CAS after another
//     client's CAS on that word succeeded (progress), so some operation always completes. Splits
//     are serialized (one split word): simpler to argue, at the price of split concurrency.
// Helping (no inserter waits for another; issue 9)
//   * Rule C: a copy is committed only by a CAS from its exact tentative value, issued by a client
//     (its owner or any helper) whose last view showed it as the ONLY copy of the key — every
//     other copy it saw it had killed or withdrawn, then re-read. Kills and withdrawals are CASes
//     from the exact tentative value too; no slot value is ever placed twice (Protocol), so a
//     value names one placement of one copy for good (no ABA).
//   * At most one copy commits (a copy = one placement of one slot value, which is what a CAS
//     from that value acts on). Say X commits at CAS c_X after a view V_X showing X alone, and
//     Y later at c_Y after V_Y showing Y alone. Y was placed after V_X (else V_X showed it and
//     X would not have been alone), so V_Y, read after Y's placement, shows X unless X left:
//     X tentative or committed in V_Y → Y is not alone (or resolution answers kFound); X gone
//     (updated or erased after c_X) → the key was removed and Y's is a new insert (correct).
//     A copy Z placed between V_X and c_X (e.g. a third client's LOWER copy appearing after a
//     helper's read): whoever resolves for Z sees X tentative and kills it before committing
//     Z; that kill and c_X are CASes on X's slot from the same value, only one lands. Kill
//     first → c_X fails and the helper re-reads; c_X first → the kill fails, Z's side re-reads,
//     sees X committed and withdraws Z (kFound).
//   * A slot frozen by a split holds value|FROZEN: a commit (or kill) CAS from the tentative
//     value fails; the helper re-reads, helps the split and finds the copy (same value, copied
//     by the split) in the child, where it may commit it.
//   * The owner's answer is exact: kInserted iff its copy was committed, by its own CAS or a
//     helper's. After a helper's, the owner's next view shows its copy COMMITTED, or (updated or
//     erased since) no trace of it. A killed copy never vanishes: the kill leaves KILLED with
//     the pointer, only the owner clears it, splits copy it like any slot; so "gone without a
//     marker" means "committed". A helped insert linearizes at the helper's commit CAS, inside
//     the owner's pending operation; the helper's kFound follows it; readers see the key from
//     that CAS on. (Without markers an owner stalled past a help, an erase and a slot reuse
//     could not tell and would insert the key a second time.)
//   * Lock-free: the lowest tentative copy is never killed (a killer kills only copies above the
//     lowest of its view), and committing it needs no one else; every failed CAS means another
//     client's CAS on that slot landed.
//   * Nothing acknowledged is lost: tentative copies are acknowledged by nobody; a committed one
//     changes only by update/erase (CAS from the committed value).
// What another client sees if a client dies (or stalls) at any instruction
//   * Before its CAS: an unreferenced KV block (leaked pool space), nothing else.
//   * Holding a tentative slot: invisible to readers; the next inserter of that key commits it
//     (it is the lowest: the dead client's insert takes effect) or kills it (it is higher). A
//     killed copy of a dead owner stays a KILLED marker for good: one slot leaked per such copy
//     (only its owner clears markers), carried along by splits; nobody waits on it.
//   * A helper that dies (or stalls) between its kills and its commit: its CASes that landed are
//     ones any inserter might have made; the next inserter redoes the resolution. A stalled
//     helper's late commit CAS expects the exact tentative value: after another commit, a kill,
//     a withdrawal or a freeze it fails, also when the owner has placed the key again since, in
//     that very slot: the new copy has another value (fresh block).
//   * An owner that stalls after its tentative CAS: its copy is committed or killed by others;
//     when it resumes it answers kInserted (committed) or starts over (its KILLED marker; a
//     placement after that uses a fresh block).
//   * A request that fails (FabricError) fails its operation only, which leaves what a client
//     stopped at that request (performed or not) leaves; the client's next operations work (a
//     failed chunk RPC leaves no refill pending: test Race.FailedChunkRpcLeavesTheClientUsable).
//     A fresh block whose WRITE failed is never placed: the placement CAS follows the WRITE.
//   * Splitting, before installing (steps 1-3): leaked A, B and descriptor; nothing visible.
//   * Splitting or helping, after installing: nothing to wait for. The next writer that meets a
//     frozen slot of S, or wants to split anything, runs the split to its end; readers never
//     noticed. A stalled runner that resumes later acts as a late runner (all its changes fail).
//   * A leaked KV block, chunk or retired subtable is never reclaimed (no garbage collection; the
//     paper has none). Blocks leak also when an inserter places the key again (one per restart).
//
// Costs (LocalFabric and UCX, tests/race_test.cpp RoundTripsPerOperation): get 2 round trips
// (hit or miss); insert 3, also when its first view holds a fingerprint match of another key
// (speculative placement; +1 when the client's gate is closed: about 1 insert in 10 at load 0.4,
// 28 slots read, 7-bit fingerprints); find_or_put of a present key 2 (4 when it speculated:
// placement and withdrawal); update 3; erase 3. Measured (bench --workload find-or-put, 1 client,
// depth 1, LocalFabric, 200 000 new keys): 3.000 per insert from load 0.36 to 0.44 (no split),
// 3.009 from 0.58 to 0.69 (53 splits), 3.049 with 277 splits at loads up to 0.8; 3.158 when the
// run splits 899 subtables (a split costs about 35 round trips, amortized over the inserts).
// Before issue 30: 4.205, 4.306, 4.357, 4.415. A split: about 3·G·7 freeze CASes + one READ per
// entry + 2·3·G·7 copy CASes, in batches of 256. An inserter that places the key again (after a
// kill or withdrawal: contention only) pays one more round trip (fresh block WRITE + READ).
//
// Threads: RaceClient belongs to one Engine; RaceServer's RPC handler is thread-safe.
//
// Safety mechanisms (each removed by a mutant of tests/mutants/race.json, which the tests must
// kill: scripts/mutants.sh, docs/testing.md):
//  * duplicate resolution: an inserter that finds a committed copy of its key withdraws its own and
//    answers kFound (race-dup-committed)
//  * CAS re-check: a new key is inserted tentative and committed only after re-reading both buckets
//    (race-commit-without-recheck); the re-READ sharing the placement CAS's batch is fenced behind
//    it (race-placement-reread-fenced); only a first placement speculates (its copy placed in the
//    batch that READs its view's matching blocks): a later one needs a fresh block
//    (race-spec-first-placement-only)
//  * stale-cache detection: a bucket header whose suffix disagrees with the key's hash, or that is
//    RETIRED, forces a directory re-read (race-stale-header, race-retire-headers)
//  * stale-read validation: results are confirmed by re-reading the key's directory entry after the
//    bucket READ (race-dir-check)
//  * stale-read validation also compares the global depth: after a doubling the old-index entry
//    may still name the split subtable (race-dir-depth-check)
//  * one split at a time: the split word is installed by CAS from 0 (race-split-word-cas)
//  * a writer that helped and still finds the directory naming a frozen subtable reports the
//    broken invariant instead of spinning (what makes race-freeze-before-install fail fast)
//  * split freeze: every slot of the splitting subtable is CASed FROZEN so no write is lost or
//    applied to a stale copy (race-freeze)
//  * writers do not act on a view containing frozen slots: they help the split, then re-read
//    (race-frozen-wait)
//  * the descriptor is installed before anything is frozen, so whoever meets a frozen slot can
//    finish the split (race-freeze-before-install)
//  * copy by CAS from RESERVED, doubling by CAS from 0, publication by CAS from S@L: a late runner
//    changes nothing (race-copy-write, race-double-write, race-publish-write)
//  * KV block checksum: a block whose bytes do not match its checksum is rejected (race-checksum)
//  * key length bound (1..256 bytes) checked before any request (race-key-bound)
//  * value length bound (15360 bytes) checked before any request (race-value-bound)
//  * helping commits by CAS from the exact tentative value (race-help-commit-write)
//  * no slot value is placed twice: an inserter placing the key again after its copy was killed
//    or withdrawn uses a fresh block, so a stalled helper's commit CAS cannot land on the new
//    placement (race-replace-same-value)
//  * an owner whose copy a helper committed answers kInserted: its committed copy
//    (race-owner-committed-by-helper), or no trace of it (race-owner-gone-means-committed)
//  * withdrawals CAS from the tentative value: never clear a committed copy (race-withdraw-cas)
//  * kills leave a KILLED marker, so an owner tells killed from committed (race-kill-marker)
//  * client ids above kRaceMaxClientId are refused (race-client-id-bound)
//  * the allocation RPC refuses a size that would wrap the pool's end check (race-alloc-size-wraps),
//    and chunk_bytes is bounded (race-chunk-bytes-unbounded)
//  * a client's configuration must be the server's: node 0's header carries a tag of the server's
//    layout, key space and hash seed, checked at every full directory read (refresh(), which every
//    client runs before its first operation, directory cache or not; race-config-tag-unchecked)
//  * a chunk RPC that fails clears the refill flag other operations ride along on, so the client
//    is not wedged (race-refill-kept-on-failure)
//  * a void descriptor (its S split before it was installed) is released untouched, and its
//    installer neither counts it nor loses its children (race-void-check); a split is void only
//    on proof: the runner's own release after the test (race-void-by-own-release) or A's slot 0
//    still RESERVED (race-void-by-reserved-slot)
//  * the global depth grows by CAS L → L+1: a late runner cannot shrink the directory
//    (race-depth-cas-write)
//  * a bucket header that disagrees with a subtable the re-read directory still names is an
//    error, not a view (race-header-dir-error)

#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/table.h"

namespace rdmahash {

inline constexpr uint16_t kRaceRpcAlloc = 0x0D00;
inline constexpr uint64_t kRaceMagic = 0x31454341524852ULL;  // "RHRACE1"
inline constexpr uint32_t kRaceSlots = 7;                     // slots per bucket
inline constexpr uint32_t kRaceBucketBytes = 64;
inline constexpr uint32_t kRaceMaxNodes = 64;                 // 6 node bits in a slot
inline constexpr uint32_t kRaceMaxClientId = 2047;            // 11 owner bits in a directory entry
inline constexpr uint64_t kRaceBoardBytes = 256;              // death board: one bit per client id

// Bucket groups per subtable: at most 4096 (a subtable of 258 KiB; --race-groups).
inline constexpr uint32_t kMaxRaceGroups = 4096;

struct RaceConfig {
  uint32_t memory_nodes = 1;
  uint32_t groups_per_subtable = 64;  // G: 3·G buckets, 21·G slots per subtable (1..kMaxRaceGroups)
  uint32_t initial_depth = 0;         // 2^initial_depth subtables at format time
  uint32_t max_depth = 16;            // directory capacity 2^max_depth entries; at most 28 (one READ < 4 GiB)
  uint64_t chunk_bytes = 1 << 20;     // KV-block space per allocation RPC
  uint32_t key_bytes = 8;             // uint64 keys: 8 bytes, or the 8 bytes + a fixed suffix (≤ 256)
  bool dir_cache = true;              // false: READ the directory entry before every operation
  bool resize = true;                 // false: an insert into two full buckets answers kFull
  // A client that meets another client's installed split first polls the split word (one 8-byte
  // READ per round trip) up to this many times and retries its operation if the split was
  // released meanwhile; only then does it run the split itself. 0: help at once. Helping at once
  // made every client that met a split repeat its thousands of freeze and copy CASes: 256
  // simulated EDR clients inserting ran at 1121 CASes and 53 k inserts/s, 1024 at 9.7 CASes (as
  // one client) and 481 k/s (256: 229 and 157 k/s; docs/results.md). Bounded, so still
  // lock-free: a stalled or dead splitter is finished by its helpers after this many round trips.
  uint32_t help_patience = 1024;
  uint64_t hash_seed = 0x5ACE5ACE12345678ULL;
  // Tests only (serve kill tests): the client process raise(SIGKILL)s at its Nth split step
  // (about 12 a split, counted over its life, helping included), leaving its split installed. 0: never.
  uint64_t test_die_at_step = 0;

  void validate() const;  // InvalidArgument naming the field
  uint64_t subtable_bytes() const { return uint64_t{3} * kRaceBucketBytes * groups_per_subtable; }
  uint64_t directory_offset() const { return 64; }
  uint64_t board_offset() const { return directory_offset() + (uint64_t{8} << max_depth); }  // node 0
  uint64_t pool_offset() const;       // first pool byte on every node
  // Smallest region for the initial subtables plus `pool_bytes` of pool per node.
  uint64_t region_bytes(uint64_t pool_bytes) const;
  // Region per node for `records` of `value_bytes` (blocks, live subtables at >= 1/3 load and as
  // many retired, per-client chunks and child pairs; race.cpp).
  uint64_t region_bytes_for(uint64_t records, uint32_t value_bytes, uint32_t clients) const;
};

// The first 64 bytes of every node.
struct RaceNodeHeader {
  uint64_t magic;
  uint64_t global_depth;  // node 0: the directory's depth
  uint64_t split;         // node 0: 0, or owner+1 << 48 | address of the installed split's descriptor
  uint64_t pool_next;     // next free pool byte (memory-node CPU only)
  uint64_t pool_end;
  uint64_t subtables;     // node 0: subtables created by finished splits (statistics)
  uint64_t config_tag;    // race_config_tag of the server's config: a client's must match (refresh)
  uint64_t pad;
};
static_assert(sizeof(RaceNodeHeader) == 64);

// Memory-node side: formats the nodes hosted by this process and serves allocation RPCs.
// The handler keeps its state alive; the object may be dropped after construction.
class RaceServer {
 public:
  RaceServer(Fabric& fabric, const RaceConfig& cfg);
  const RaceConfig& config() const { return cfg_; }

 private:
  RaceConfig cfg_;
};

class RaceClient;

// Bulk loading on the memory-node side, before any client starts: a RaceClient whose requests go
// straight to the regions hosted by this process (every node must be hosted here: LocalFabric, or
// a UCX job with one memory node on this rank). Format with RaceServer first.
class RaceLoader {
 public:
  RaceLoader(Fabric& fabric, const RaceConfig& cfg);
  ~RaceLoader();
  RaceLoader(const RaceLoader&) = delete;
  RaceLoader& operator=(const RaceLoader&) = delete;
  Engine& engine();
  RaceClient& client();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct RaceClientStats {
  // Splits this client installed and that were published (a void one counts for nobody), so once
  // every client has finished its operations the clients' sum is the live subtables less the
  // initial ones (a client stopped inside a split it installed has not counted it yet).
  uint64_t splits = 0;
  uint64_t dir_refreshes = 0;    // directory re-reads (stale cache, cache off, splits)
  uint64_t stale_detected = 0;   // headers or directory checks that revealed a stale cache
  uint64_t stale_headers = 0;    // of which by a bucket header (wrong suffix or RETIRED: SRCDD)
  uint64_t commits_helped = 0;   // other clients' tentative copies this client committed
  uint64_t commits_by_helper = 0;  // own tentative copies another client committed (answered kInserted)
  uint64_t kills = 0;            // other clients' tentative copies killed (duplicate resolution)
  uint64_t helped = 0;           // other clients' splits this client ran (in part or to the end)
  uint64_t waited = 0;           // other clients' splits this client saw released while it polled (help_patience)
  uint64_t chunk_rpcs = 0;
  std::vector<double> split_load;  // load factor of each subtable this client split (one per counted split; a
                                   // helper may have frozen it: then read back from the frozen subtable)
};

class RaceClient final : public KvClient {
 public:
  RaceClient(const RaceConfig& cfg, Engine& engine, uint32_t client_id = 0);
  ~RaceClient() override;

  // uint64 keys: the key's 8 little-endian bytes, followed by key_bytes-8 fixed bytes.
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
  Task<OpResult> update(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> erase(uint64_t key) override;
  Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) override;

  Task<OpResult> find_or_put(KeyView key, std::span<const std::byte> value) override;
  Task<OpResult> get(KeyView key, std::vector<std::byte>* value_out) override;
  Task<OpResult> update(KeyView key, std::span<const std::byte> value) override;
  Task<OpResult> put(KeyView key, std::span<const std::byte> value) override;
  Task<OpResult> erase(KeyView key) override;
  const char* scheme_name() const override { return "race"; }

  // Re-READs the directory (what a stale header triggers).
  Task<void> refresh_directory();
  uint32_t cached_depth() const;
  const RaceClientStats& stats() const { return stats_; }
  const RaceConfig& config() const { return cfg_; }

 private:
  struct Impl;
  RaceConfig cfg_;
  std::unique_ptr<Impl> impl_;
  RaceClientStats stats_;
};

// Inspection from the memory-node side (tests, bench): walks the directory and subtables of a
// LocalFabric (every node hosted here). `keys` receives every COMMITTED key, one entry per slot.
struct RaceInspection {
  uint32_t global_depth = 0;
  uint64_t subtables = 0;
  uint64_t committed = 0, tentative = 0, frozen = 0, killed = 0;  // killed: kill markers
  uint64_t slots = 0;  // over all subtables
  bool split_word_clear = true;  // node 0's split word is 0: no split installed (none left half-run)
  std::vector<std::vector<std::byte>> keys;
};
RaceInspection race_inspect(Fabric& fabric, const RaceConfig& cfg, bool with_keys = false);
// The death board (node 0, hosted by this process): marks `client_id` dead, for good. The memory
// node calls it when the client's connection closed (serve); tests call it for a stopped client.
// Only a client that will never issue another request may be marked.
void race_mark_dead(Fabric& fabric, const RaceConfig& cfg, uint32_t client_id);
// The table's slots now (distinct subtables in the directory x 3G x kRaceSlots), from node 0's
// directory alone; call where node 0 is hosted and no split runs.
uint64_t race_slot_count(Fabric& fabric, const RaceConfig& cfg);

}  // namespace rdmahash
