// rdmahash/level.h — level hashing (Zuo et al., OSDI'18, "Write-Optimized and High-Performance
// Hashing Index Scheme for Persistent Memory"), seed 002's main comparison, on (remote) persistent
// memory: lookups are one-sided READs of the key's candidate buckets in one batch; writes are
// two-sided requests (schemes/write_rpc.h) applied by the memory node's CPU through the same
// persist choke point (PersistentRegion) as continuity, log-free with per-slot tokens.
//
// Memory layout of a shard (one memory node)
// -----------------------------------------
//   [0, 64)     LevelHeader: magic, format version, geometry, node, checksum of the header
//   [64, 72)    the level word: top level index t (bits 0..7), RESIZING (bit 8), seq (bits 32..60)
//   [72, 80)    the records word: LevelConfig::records of the run that formatted it (0: not recorded)
//   [128, ...)  level areas. Level i has N·2^i buckets (N = base_buckets) and lives at
//               128 + (2^i - 1)·N·bucket_bytes(); the region has room for levels 0..max_resizes+1.
//   Bucket: [token:8][4 slots]. Token word: bits 0..3 = valid bit of each slot ("token" of the
//   paper), bits 32..60 = seq, the bucket's publication counter (29 bits, wraps), bumped by every
//   token store. Slot: the record format of schemes/record.h, 8-byte keys:
//   [ctrl:8 = OCC | pub (29 bits) << 32 | 32-bit fingerprint][key:8][value, padded][check:8],
//   check = hash(pub, key, value), pub = the token seq that published the slot.
//   The table is the top level t (2N·2^(t-1) buckets) and the bottom level t-1 (half as many):
//   at creation t = 1, i.e. a top of 2N and a bottom of N buckets. Key k has two hashes h1, h2 and
//   in level i the buckets h1 % (N·2^i) and h2 % (N·2^i): four candidate buckets, two per level.
//
// Write protocol (the node's CPU, one mutex per shard; "persist" = flush + fence, the choke point)
//   insert(k, v): a free slot of a candidate bucket — the top's two first (the emptier), then the
//                 bottom's; write the item with pub = seq+1; persist(slot); token ← bits | bit,
//                 seq+1 (one 8-byte store); persist(token).                              2 persists
//                 No free slot: one-step movement — an item x of a candidate bucket (top level,
//                 then bottom) whose other bucket in the same level has a free slot is moved
//                 there (write x there, persist, set that token, persist, clear x's old token,
//                 persist: 3 persists) and k takes its slot. Still none: the top level is resized
//                 (below) while max_resizes allows, else kFull.
//   update(k, v): out of place in k's bucket: write the new item into a free slot of that bucket,
//                 persist; token ← bits ^ bit(old) ^ bit(new), seq+1 — both bits in one store;
//                 persist.                                                                2 persists
//                 A full bucket first moves one other item out (one-step movement); if none can
//                 move, the new item goes to another candidate bucket with a free slot: written,
//                 persisted, published by that bucket's token store (persist), then the old slot
//                 cleared (persist) — 3 persists; the update takes effect at the clear. Only when
//                 all four candidate buckets are full: kFull (the old value stays).
//   erase(k):     token ← bits & ~bit(slot), seq+1; persist(token).                      1 persist
//   A slot is only written while its valid bit is clear. Persists are counted per operation
//   (LevelResult.persists, LevelStats) as for continuity: 2 / 2 / 1, plus 3 per movement (an
//   update moved to another bucket: 3). An in-bucket update flips both bits in one store, so it
//   never has two visible copies.
//   resize():     new top = level t+1 (4N·2^(t-1) buckets, never used before: tokens zero).
//                 level word ← (t, RESIZING), persist; for every valid item x of the bottom level
//                 t-1: insert x into level t+1 unless it is already there (a resumed resize), then
//                 clear x's token in level t-1 (persist) — insert-then-delete, log-free; finally
//                 level word ← (t+1, not resizing), persist. The old top t is the new bottom.
//
// Invariants (at every instant, in memory and in every crash image of the media)
//   I1 every valid slot holds a consistent item (check matches) of one of its key's candidate
//      buckets of a level in use (t-1, t, and t+1 while RESIZING);
//   I2 a key has one valid copy between operations; two only inside a movement or a rehash (one
//      value: the copy is published before the original is cleared) or inside an update moved to
//      another bucket (the new value published before the old one is cleared);
//   I3 every acknowledged write is durable: the reply follows the token persist.
//   What a crash leaves: an operation before its token store is absent (its slot has a clear bit);
//   a token store is one aligned 8-byte word, so it is wholly in or out; an interrupted movement
//   or rehash leaves two valid copies of one item (I2) and nothing lost; an interrupted moved
//   update leaves the old and the new value, either of which the unacknowledged update may leave.
//   Recovery: validate the header (level_check_image: length, magic, version, checksum, geometry);
//   scan every level; refuse (PmemError) any valid slot that breaks I1 or valid bits in a level not
//   in use — all before the first write, so a refused image is left untouched; clear the redundant
//   copy of a duplicated key (found by sorting the valid keys, its copies looked up among its
//   candidate buckets: the copy kept is the one in the higher level, else the first in scan order;
//   1 persist each); finish an interrupted
//   resize (the level word says RESIZING). Formatting writes the magic last, so an interrupted
//   format is refused (no magic), never taken for a table.
//
// On a file (`--pm-path FILE`, bench and serve; include/rdmahash/pmem.h): the region is FILE mapped
//   with pmem_map_file, persists are pmem_persist on real PM and pmem_msync elsewhere (JSON
//   `persistence`: pmem / msync). A new file — one this run created (O_CREAT|O_EXCL) — is
//   formatted and bulk-loaded; an existing one, whatever its bytes (zeros too), is checked before
//   any fabric maps it (a continuity image, a zeroed header, a truncated or corrupt file, another
//   geometry, another --records: exit 2, nothing written) and recovered as above, never
//   bulk-loaded. The header's checksum is checked before any of its fields is believed (the bench
//   reads max_resizes from it: a corrupt one is "FILE: level image header is corrupt"). The file
//   has one owner at a time: PmemFile holds an exclusive flock while it is mapped (a second serve
//   or bench: exit 2, the holder's pid named). The geometry is
//   --records / --load-factor / --value-bytes / --seed plus the resizes the table's capacity needs
//   (level_resizes_for; serve: --capacity) of the first run: a reopened image keeps the room for
//   resizes its header records.
//   What clients see when the memory node dies: their requests fail (the connection closes); a
//   write whose reply was not received may or may not have happened. Restarted on the same FILE,
//   the node recovers exactly the state of the last persisted token of every bucket (an in-flight
//   movement or rehash: one copy kept; an interrupted resize: finished) and every acknowledged
//   write is there (tests/serve_pm_kill_test.sh, ctest serve_pm_kill_level).
//
// Reads (clients, one-sided, while the node writes)
//   A lookup READs, in one batch (one round trip), the level word and the key's candidate buckets
//   of the levels its cached level word names (4, or 6 while RESIZING). If the level word read
//   differs from the cached one, it is cached and the batch is re-issued.
//   Torn slots (reuse of continuity's approach): a valid slot is accepted only if its ctrl is OCC,
//   its check matches pub, key and value, and pub ≤ the seq of the token word read with it (mod
//   2^29); otherwise it is torn or was republished after the token was read, and the batch is
//   re-issued. The token word precedes its slots, so a READ that copies in address order reads it
//   first; a slot rewritten after that carries pub > seq. (Residual, as continuity's: a READ whose
//   words arrive out of address order could pair an old slot with a newer token.)
//   Old items: the window bounds how far a rewrite can run ahead of a token read, not an item's
//   age. An item left alone while 2^28 stores hit its bucket (a cold key beside a hot one) falls
//   outside it for 2^28 of every 2^29 stores. A slot that fails only the window is therefore
//   taken when the next batch reads the SAME level word and token words and the same slot bytes:
//   no store to those buckets came between the two token reads (2^29 stores within one lookup
//   aside), so a slot valid in them held one content throughout, and the first batch's copy
//   (read after its token, before the second batch) is that content. Equal bytes alone prove
//   nothing: a freed slot keeps its bytes, and after a wrap a re-put writes the same bytes
//   (continuity.h, "Old items"; LevelOldItems.StaleBytesEqualToARewrite...). When the buckets
//   change between every two batches, the lookup asks the node after kOldItemReads (4) such
//   batches (write_rpc kGet, answered under the shard lock). Recovery does not compare pub with
//   seq (no writer runs; an old item is intact).
//   A hit is the item present when its token word was read. Two valid copies of one key with
//   different values (an update moved to another bucket, between its publication and its clear)
//   make the batch re-read; one value (a movement or rehash) is the key's value either way.
//   A miss is not trusted from one batch: a movement or rehash can publish the copy in a bucket
//   already read and clear the original in a bucket read later. So a miss re-issues the batch and
//   is returned only when two successive batches read the same level word and the same token
//   words (each has seq): then nothing of those buckets changed between the last READ of the first
//   batch and the first READ of the second, so at that instant the key was absent. A hit costs
//   one round trip (after the first lookup of a client, which reads the level word alone), a miss
//   two or more.
//
// Safety mechanisms (each removed by a mutant of tests/mutants/level.json, which the tests kill)
//  * the item is persisted before the token store that publishes it (level-drop-slot-persist)
//  * the token store is persisted before the reply (level-drop-token-persist)
//  * a reader that sees two copies of a key with different values re-reads (not a mutant: no
//    deterministic interleaving exposes it yet; covered by history_level_* and LevelConcurrency)
//  * a movement publishes the copy before clearing the original (level-move-clear-first)
//  * a rehash inserts into the new top before clearing the old bottom (level-resize-clear-first)
//  * a reader accepts a slot only if its check word matches (level-reader-skip-checksum)
//  * a reader rejects a slot published after the token word it read (level-reader-skip-seq),
//    unless the next batch reads the same token words and the same bytes (an old item:
//    level-reader-old-item-unchecked, level-reader-old-item-any-tokens; without the rule it is
//    never found, level-reader-old-item-refused), and asks the node after a few batches that
//    cannot settle (level-reader-old-item-never-asks)
//  * a miss is confirmed by a second batch with the same token words (level-reader-trust-miss)
//  * recovery refuses a valid slot that is not a consistent item of its bucket
//    (level-recovery-skip-slot-check)
//  * an image whose header checksum does not match is refused (level-header-skip-checksum;
//    check_image_frame, src/pmem, shared with continuity)
//  * an image of another format is refused as such, by its magic (level-pm-refuse-foreign-magic)
//  * bench/serve check an existing --pm-path file's header before a fabric maps it
//    (level-pm-check-before-fabric); only a file this run created is formatted, an existing one
//    with a zero header area is refused, not formatted over (level-pm-formats-existing-zero-header;
//    pmem-existing-file-taken-as-created, pmem-file-lock: continuity.json, shared src/pmem)
//  * an image loaded with another --records of the same geometry is refused (the records word:
//    level-pm-records-unchecked); the header's checksum is checked before its max_resizes field is
//    used (level-pm-header-fields-before-checksum)
//  * an existing --pm-path image is recovered, never bulk-loaded over (level-pm-recover-not-bulk-load)
//  * a reload between points writes the image as loaded back into the file
//    (level-pm-reload-restores-image)
//  * recovery finishes an interrupted top-level resize (level-recovery-finish-resize)
//  * recovery clears the redundant copy of a key left twice (level-recovery-keep-duplicates)
//  * a reload (restore_image, pmem.h) clears the magic word before rewriting the file and restores
//    it last: an interrupted reload is refused on reopen, never read as a mix (pmem-restore-magic-last)
//
// Thread safety: LevelClient belongs to one Engine; LevelShard and the RPC handler are
// thread-safe (one mutex per shard); readers never lock.
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

inline constexpr uint16_t kLevelRpcFirst = 0x0E00;  // RPC ids reserved for level tables
inline constexpr uint16_t kLevelRpcLast = 0x0E0F;
inline constexpr uint64_t kLevelMagic = 0x314c56454c484452ULL;  // "RDHLEVL1"
inline constexpr uint32_t kLevelFormatVersion = 1;
inline constexpr uint64_t kLevelHeaderBytes = 64;
inline constexpr uint64_t kLevelWordOffset = 64;
inline constexpr uint64_t kLevelRecordsOffset = 72;  // the records word (LevelConfig::records)
inline constexpr uint64_t kLevelAreaOffset = 128;

struct LevelConfig {
  uint32_t memory_nodes = 1;
  uint64_t base_buckets = 16;  // N: the bottom level's buckets at creation (the top has 2N)
  uint32_t max_resizes = 2;    // the region has room for this many top-level resizes (<= 8)
  uint32_t value_bytes = 8;    // 0..120
  uint64_t hash_seed = 0x1E7E1A5EEDULL;
  // The data set a --pm-path image is bulk-loaded with (the bench's --records; 0: none, e.g. a test
  // table). Not part of the geometry (--records 20000 and 20001 give the same buckets) but of the
  // image: format() stores it in the records word and level_check_image refuses an image loaded
  // with another record count (its keys would not be the data set the run asks for).
  uint64_t records = 0;
  // Memory node only: format() leaves the magic word 0 (as ContinuityConfig::format_unpublished:
  // the bench publishes a new --pm-path file's magic after its bulk load).
  bool format_unpublished = false;

  // Base buckets for `records` at `load_factor` of the initial two levels (12·N slots).
  static LevelConfig for_records(uint64_t records, double load_factor, uint32_t memory_nodes, uint32_t max_resizes = 1);
  void validate() const;  // throws InvalidArgument naming the bad field
  uint32_t slot_bytes() const;
  uint32_t bucket_bytes() const { return 8 + 4 * slot_bytes(); }
  uint32_t levels() const { return max_resizes + 2; }
  uint64_t level_buckets(uint32_t level) const { return base_buckets << level; }
  uint64_t level_offset(uint32_t level) const {
    return kLevelAreaOffset + ((uint64_t{1} << level) - 1) * base_buckets * bucket_bytes();
  }
  uint64_t region_bytes() const { return level_offset(levels()); }
};
std::string level_config_error(const LevelConfig& cfg);
// The resizes a table of `cfg` needs to hold `capacity` records (all nodes) at a load factor of at
// most 0.75 of its two levels in use (level hashing fills ~0.9 before a resize): at least 1, at
// most 8. The bench sizes --pm-path files and served tables with it (--capacity).
uint32_t level_resizes_for(const LevelConfig& cfg, uint64_t capacity);

struct LevelHeader {
  uint64_t magic;
  uint32_t format_version, header_bytes;
  uint64_t base_buckets;
  uint32_t max_resizes, value_bytes;
  uint64_t hash_seed;
  uint32_t node, memory_nodes;
  uint64_t region_bytes;
  uint64_t checksum;  // of the 56 bytes before it
};
static_assert(sizeof(LevelHeader) == kLevelHeaderBytes);
static_assert(offsetof(LevelHeader, format_version) == 8);  // check_image_frame reads bytes 8..11

// Validates an existing image (a --pm-path file) for node `node` of `cfg` without writing to it:
// its length covers the header, then magic (another format, e.g. a continuity image, is named by
// its magic), format version, header checksum, geometry, the records word (when both `cfg.records`
// and the image's are set: the record count it was loaded with), and a length covering the table. Throws
// PmemError saying what is wrong. LevelShard's recovery starts with it; the bench calls it before
// the file is given to a fabric, so that a foreign or truncated file is refused as such.
void level_check_image(std::span<const std::byte> image, const LevelConfig& cfg, uint32_t node);

struct LevelPlacement {
  uint32_t node;
  uint64_t h1, h2;  // bucket in level i: h % level_buckets(i)
  uint32_t kbits;   // fingerprint in the slot's ctrl
};
LevelPlacement level_place(const LevelConfig& cfg, uint64_t key);

// The level word: top level, RESIZING, seq.
struct LevelWord {
  uint32_t top;
  bool resizing;
  uint64_t seq;
  static LevelWord decode(uint64_t w);
  uint64_t encode() const;
};

struct LevelResult {
  Status status;
  uint32_t persists = 0;  // persist calls the operation made (a resize it triggered excluded)
};

struct LevelStats {
  uint64_t inserts = 0, updates = 0, erases = 0, full = 0, moves = 0, resizes = 0, rehashed = 0;
  uint64_t moved_updates = 0;  // updates whose new item went to another bucket (3 persists)
  uint64_t insert_persists = 0, update_persists = 0, erase_persists = 0, resize_persists = 0;
};

class LevelShard {
 public:
  LevelShard(const LevelConfig& cfg, uint32_t node, PersistentRegion& region);
  LevelShard(const LevelShard&) = delete;
  LevelShard& operator=(const LevelShard&) = delete;

  LevelResult find_or_put(uint64_t key, std::span<const std::byte> value);
  LevelResult put(uint64_t key, std::span<const std::byte> value);
  LevelResult update(uint64_t key, std::span<const std::byte> value);
  LevelResult erase(uint64_t key);
  // Resizes the top level now (see above); throws InvalidArgument when max_resizes is used up.
  void resize();

  bool owns(uint64_t key) const;
  std::optional<std::vector<std::byte>> find(uint64_t key) const;
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> items() const;  // every valid item, once
  uint64_t records() const;
  uint64_t capacity() const;  // slots of the two levels in use
  uint32_t top_level() const;
  bool recovered() const { return recovered_; }
  uint64_t recovery_repairs() const { return repairs_; }  // duplicate copies cleared, resizes finished
  bool finished_resize() const { return finished_resize_; }  // recovery finished an interrupted resize
  LevelStats stats() const;
  uint32_t node() const { return node_; }

 private:
  struct Loc { uint32_t level; uint64_t bucket; uint32_t slot; };
  void format();
  void recover();
  uint64_t bucket_off(uint32_t level, uint64_t bucket) const;
  uint64_t slot_off(uint32_t level, uint64_t bucket, uint32_t slot) const;
  std::vector<uint32_t> levels_in_use() const;
  std::optional<Loc> locate(uint64_t key, const LevelPlacement& p) const;
  std::optional<Loc> locate_in(uint64_t key, const LevelPlacement& p, uint32_t level) const;
  int free_slot(uint32_t level, uint64_t bucket) const;
  void read_item(const Loc& at, uint64_t* key, std::vector<std::byte>* value) const;
  void write_slot(const Loc& at, uint64_t key, uint32_t kbits, std::span<const std::byte> value);
  void set_token(uint32_t level, uint64_t bucket, uint64_t bits);
  void clear_bit(const Loc& at);
  bool place_new(uint64_t key, const LevelPlacement& p, std::span<const std::byte> value);
  bool place_in_level(uint64_t key, const LevelPlacement& p, uint32_t level, std::span<const std::byte> value);
  bool move_out(uint32_t level, uint64_t bucket, uint32_t except_slot);
  void rehash_bottom(uint32_t old_bottom, uint32_t new_top);
  void resize_locked();
  void check_kv(uint64_t key, std::span<const std::byte> value, bool exact) const;
  LevelResult insert_new(uint64_t key, const LevelPlacement& p, std::span<const std::byte> value);
  LevelResult replace(const Loc& at, uint64_t key, const LevelPlacement& p, std::span<const std::byte> value);

  LevelConfig cfg_;
  uint32_t node_;
  PersistentRegion& region_;
  mutable std::mutex mu_;
  uint64_t records_ = 0;
  bool recovered_ = false;
  uint64_t repairs_ = 0;
  bool finished_resize_ = false;
  LevelStats stats_;
};

class LevelServer {
 public:
  LevelServer(Fabric& fabric, const LevelConfig& cfg, PersistMode mode = PersistMode::kVolatile,
              uint16_t rpc_id = kLevelRpcFirst);
  ~LevelServer();
  LevelServer(const LevelServer&) = delete;
  LevelServer& operator=(const LevelServer&) = delete;
  bool hosts(uint32_t node) const;
  LevelShard& shard(uint32_t node);  // throws InvalidArgument if not hosted here
  PersistentRegion& region(uint32_t node);  // idem
  bool bulk_insert(uint64_t key, std::span<const std::byte> value);  // false if not hosted here
  uint64_t records() const;
  LevelStats stats() const;
  bool recovered() const;  // every hosted shard was recovered from an existing image
  // What recovery did on the hosted shards: "top level T[, N duplicate copies cleared][, an
  // interrupted resize finished]" (one clause per shard, "; "-separated).
  std::string recovery_summary() const;
  const LevelConfig& config() const { return cfg_; }

 private:
  struct State;
  LevelConfig cfg_;
  std::shared_ptr<State> state_;
};

// Lookups: one batch of READs (level word + candidate buckets); writes: RPCs.
// OpResult.chunks = batches of bucket READs issued.
class LevelClient final : public KvClient {
 public:
  LevelClient(const LevelConfig& cfg, Engine& engine, uint16_t rpc_id = kLevelRpcFirst);
  // Integer keys only: the byte-key overloads are KvClient's, which reject them naming the scheme.
  const char* scheme_name() const override { return "level"; }
  Task<OpResult> find_or_put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> get(uint64_t key, std::span<std::byte> value_out) override;
  Task<OpResult> update(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> put(uint64_t key, std::span<const std::byte> value) override;
  Task<OpResult> erase(uint64_t key) override;
  Task<OpResult> get_all(uint64_t key, std::vector<std::byte>* values_out) override;  // get(): one record a key
  const LevelConfig& config() const { return cfg_; }
  uint64_t persists() const { return persists_; }

 private:
  Task<OpResult> remote(uint8_t op, uint64_t key, std::span<const std::byte> value);
  void check_value(std::span<const std::byte> value, bool exact) const;
  LevelConfig cfg_;
  Engine& engine_;
  uint16_t rpc_id_;
  uint32_t cfg_tag_;
  uint64_t persists_ = 0;
  std::vector<uint64_t> level_word_;  // per node, cached; 0 = not read yet
};

}  // namespace rdmahash
