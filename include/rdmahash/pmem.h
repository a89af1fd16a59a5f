// rdmahash/pmem.h — persistent memory for the memory node: the persist choke point and files mapped
// with PMDK's libpmem.
//
// Every store a persistent scheme makes to its table goes through `PersistentRegion::store` (one
// 8-byte-aligned word, an atomic release store, because one-sided readers load the same words), and
// every flush + fence goes through `PersistentRegion::persist` — the one persist choke point of the
// project. A test attaches a `PersistObserver` and sees both streams in program order, which is
// enough to rebuild the durable image at any instant: a store is durable once a later persist
// covered its cache line; a store not yet covered may or may not have reached the media (a cache
// line can be evicted at any moment), so a crash image keeps, per line, some prefix of the line's
// unpersisted stores.
//
// Modes:
//   kPmem      the mapping is real persistent memory (pmem_is_pmem): pmem_persist (CLWB/CLFLUSHOPT +
//              SFENCE, no system call);
//   kMsync     a file mapping on an ordinary file system: pmem_msync (msync of the covered pages);
//   kVolatile  ordinary memory (no --pm-path): a release fence only, so the same code runs without
//              a file; persists are still counted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace rdmahash {

// A persistent image that cannot be used: missing/unreadable file, another format, a corrupt header.
class PmemError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class PersistMode : uint8_t { kVolatile, kPmem, kMsync };
const char* to_string(PersistMode m);

inline constexpr uint64_t kCacheLine = 64;

// Receives every store and persist of a region, in program order (tests: crash images).
class PersistObserver {
 public:
  virtual ~PersistObserver() = default;
  virtual void on_store(uint64_t offset, uint64_t value) = 0;
  virtual void on_persist(uint64_t offset, uint64_t len) = 0;
};

// The table memory of one memory node and the only path by which a scheme changes or persists it.
// Not thread-safe for writers (the scheme serialises its writers); loads by readers are fine.
class PersistentRegion {
 public:
  PersistentRegion(std::span<std::byte> bytes, PersistMode mode);
  std::span<std::byte> bytes() const { return bytes_; }
  PersistMode mode() const { return mode_; }
  uint64_t load(uint64_t offset) const;             // relaxed atomic 8-byte load
  void store(uint64_t offset, uint64_t value);      // release 8-byte store (offset 8-aligned)
  void persist(uint64_t offset, uint64_t len);      // THE choke point: flush [offset, offset+len) + fence
  uint64_t persists() const { return persists_; }   // persist calls so far
  void set_observer(PersistObserver* o) { observer_ = o; }

 private:
  std::span<std::byte> bytes_;
  PersistMode mode_;
  uint64_t persists_ = 0;
  PersistObserver* observer_ = nullptr;
};

// Writes `saved` (an earlier copy of the whole region, same size) back into `region`, for an image
// whose first 8-byte word is its magic (continuity, level): the magic word is cleared and persisted
// first, every other word stored and persisted, the magic restored and persisted last. A crash at
// any point leaves the image as it was, or without its magic (refused on reopen, never taken for a
// table), or as saved. (Bench reloads between points: --pm-path without --keep-table.)
void restore_image(PersistentRegion& region, std::span<const std::byte> saved);

// The frame every scheme's 64-byte image header shares (continuity, level): word 0 the magic,
// bytes 8..11 the format version, word 7 a checksum of words 0..6 seeded by the magic; the rest
// is the scheme's geometry, which the scheme checks itself after check_image_frame.
inline constexpr uint64_t kImageHeaderBytes = 64;
uint64_t image_header_checksum(const void* header, uint64_t magic);
// Refuses, with a PmemError naming `scheme`, an all-zero header (an existing file is never taken
// for a blank one to format), a header whose magic is not `magic` (a foreign image
// is named by its own magic), whose format version is not `version`, or whose checksum fails.
void check_image_frame(const void* header, const char* scheme, uint64_t magic, uint32_t version);
// Every format starts with it: word 0 (the magic) cleared, in its own persist, unless already 0 —
// so a region formatted over (a reused volatile region) is never read as a table while its body
// is rewritten; write_image_header puts the magic back last.
void clear_image_magic(PersistentRegion& region);
// Stores a formatted header: words 1..7 persisted first, the magic last in its own persist, so an
// interrupted format leaves no magic (or a checksum mismatch) and is refused, never read.
// publish = false: the magic is not written (word 0 stays 0); the caller stores and persists it
// later (a new --pm-path file: after its bulk load).
void write_image_header(PersistentRegion& region, const void* header, bool publish = true);

// A file mapped with pmem_map_file. `open` maps an existing file at its size, or creates one of
// `create_bytes` bytes (zero-filled) when none exists (O_CREAT|O_EXCL: `created()` says this run
// made it — the only kind of file a scheme may format; an existing file must already be a valid
// image, whatever its bytes: the bench refuses it otherwise). The mapping is 4 KiB aligned.
//
// One owner at a time: `open` takes an exclusive flock (LOCK_EX|LOCK_NB, as PMDK's pools) on the
// file and holds it until the PmemFile is destroyed (or the process dies); a second opener, in this
// process or another, gets a PmemError naming the file and, where /proc/locks tells, the holder's
// pid — never a second mapping that both would write.
class PmemFile {
 public:
  static PmemFile open(const std::string& path, uint64_t create_bytes);
  PmemFile(PmemFile&& o) noexcept;
  PmemFile& operator=(PmemFile&&) = delete;
  ~PmemFile();
  std::span<std::byte> bytes() const { return {base_, len_}; }
  bool created() const { return created_; }       // false: an existing file was opened
  bool is_pmem() const { return is_pmem_; }       // pmem_is_pmem of the mapping
  PersistMode mode() const { return is_pmem_ ? PersistMode::kPmem : PersistMode::kMsync; }
  const std::string& path() const { return path_; }

 private:
  PmemFile() = default;
  std::string path_;
  std::byte* base_ = nullptr;
  uint64_t len_ = 0;
  int fd_ = -1;  // open for as long as the file is mapped: holds the flock
  bool created_ = false;
  bool is_pmem_ = false;
};

}  // namespace rdmahash
