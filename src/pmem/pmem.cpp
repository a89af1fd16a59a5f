// The persist choke point and libpmem file mappings (see include/rdmahash/pmem.h).
#include "rdmahash/pmem.h"

#include <libpmem.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "common/hash.h"

namespace rdmahash {

const char* to_string(PersistMode m) {
  switch (m) {
    case PersistMode::kVolatile: return "volatile";
    case PersistMode::kPmem: return "pmem";
    case PersistMode::kMsync: return "msync";
  }
  return "?";
}

PersistentRegion::PersistentRegion(std::span<std::byte> bytes, PersistMode mode) : bytes_(bytes), mode_(mode) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % kCacheLine != 0)
    throw std::invalid_argument("persistent region must be cache-line aligned");
}

uint64_t PersistentRegion::load(uint64_t offset) const {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(bytes_.data() + offset)).load(std::memory_order_relaxed);
}

void PersistentRegion::store(uint64_t offset, uint64_t value) {
  if (offset % 8 != 0 || offset + 8 > bytes_.size())
    throw std::logic_error("persistent store outside the region or unaligned at " + std::to_string(offset));
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(bytes_.data() + offset)).store(value, std::memory_order_release);
  if (observer_) observer_->on_store(offset, value);
}

void PersistentRegion::persist(uint64_t offset, uint64_t len) {
  if (offset + len > bytes_.size() || len == 0)
    throw std::logic_error("persist outside the region at " + std::to_string(offset));
  ++persists_;
  if (observer_) observer_->on_persist(offset, len);
  switch (mode_) {
    case PersistMode::kPmem: pmem_persist(bytes_.data() + offset, len); break;
    case PersistMode::kMsync:
      if (pmem_msync(bytes_.data() + offset, len) != 0)
        throw PmemError(std::string("pmem_msync failed: ") + pmem_errormsg());
      break;
    case PersistMode::kVolatile: std::atomic_thread_fence(std::memory_order_seq_cst); break;
  }
}

void restore_image(PersistentRegion& region, std::span<const std::byte> saved) {
  const auto img = region.bytes();
  if (saved.size() != img.size() || img.size() < 8 || img.size() % 8 != 0)
    throw std::logic_error("restore_image: the saved image has " + std::to_string(saved.size()) + " bytes, the region " +
                           std::to_string(img.size()));
  region.store(0, 0);  // no magic: an image caught between two states is refused, never read
  region.persist(0, 8);
  for (uint64_t off = 8; off < img.size(); off += 8) {
    uint64_t w;
    std::memcpy(&w, saved.data() + off, 8);
    if (region.load(off) != w) region.store(off, w);
  }
  region.persist(8, img.size() - 8);
  uint64_t magic;
  std::memcpy(&magic, saved.data(), 8);
  region.store(0, magic);  // only once everything else is durable
  region.persist(0, 8);
}

namespace {
// A magic word as text: its 8 bytes if printable ("RDHCONT1"), else hex.
std::string magic_text(uint64_t m) {
  std::string s(8, ' ');
  std::memcpy(s.data(), &m, 8);
  for (char ch : s)
    if (ch < 0x20 || ch > 0x7e) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(m));
      return buf;
    }
  return "\"" + s + "\"";
}
}  // namespace

uint64_t image_header_checksum(const void* header, uint64_t magic) {
  uint64_t words[7];
  std::memcpy(words, header, sizeof words);
  uint64_t x = hash::mix64(magic);
  for (uint64_t w : words) x = hash::mix64(x ^ w);
  return x;
}

void check_image_frame(const void* header, const char* scheme, uint64_t magic, uint32_t version) {
  uint64_t words[8];
  std::memcpy(words, header, sizeof words);
  const std::string name(scheme);
  if (std::all_of(words, words + 8, [](uint64_t w) { return w == 0; }))
    throw PmemError("not a " + name + " table image: its header is all zero (no table was ever completed in it, or it "
                    "is another kind of file; only a file this run creates is formatted: delete it to make a new table)");
  if (words[0] == 0 && std::any_of(words + 1, words + 8, [](uint64_t w) { return w != 0; }))
    throw PmemError("not a " + name + " table image: it has a header but no magic word (its formatting, bulk load or "
                    "reload was interrupted: it holds no complete table; delete it)");
  if (words[0] != magic)
    throw PmemError("not a " + name + " table image (its magic is " + magic_text(words[0]) + ", a " + name + " image's " +
                    magic_text(magic) + ")");
  const auto have = static_cast<uint32_t>(words[1]);
  if (have != version)
    throw PmemError(name + " image of format version " + std::to_string(have) + ", this build reads " +
                    std::to_string(version));
  if (words[7] != image_header_checksum(words, magic)) throw PmemError(name + " image header is corrupt (checksum mismatch)");
}

void clear_image_magic(PersistentRegion& region) {
  if (region.load(0) == 0) return;
  region.store(0, 0);
  region.persist(0, 8);
}

void write_image_header(PersistentRegion& region, const void* header, bool publish) {
  uint64_t words[8];
  std::memcpy(words, header, sizeof words);
  for (uint32_t i = 1; i < 8; ++i) region.store(8 * i, words[i]);
  region.persist(0, kImageHeaderBytes);
  if (!publish) return;  // the caller publishes it (a new file: after its bulk load)
  region.store(0, words[0]);  // the magic last, in its own persist
  region.persist(0, 8);
}

namespace {
// Who holds the flock on (dev, ino), from /proc/locks ("1: FLOCK ADVISORY WRITE PID MAJ:MIN:INO ..."):
// "pid N (COMM)", or "" when the system does not tell (another pid namespace, no /proc).
std::string lock_holder(dev_t dev, ino_t ino) {
  std::FILE* f = std::fopen("/proc/locks", "re");
  if (!f) return {};
  char want[64];
  std::snprintf(want, sizeof want, "%02x:%02x:%llu", major(dev), minor(dev), static_cast<unsigned long long>(ino));
  char line[512];
  std::string holder;
  while (holder.empty() && std::fgets(line, sizeof line, f)) {
    char kind[32], id[64];
    long pid = 0;
    // "N: FLOCK ADVISORY WRITE PID DEV:INO START END" ("N: -> ..." lines are waiters: skipped)
    if (std::sscanf(line, "%*d: %31s %*s %*s %ld %63s", kind, &pid, id) != 3) continue;
    if (std::strcmp(kind, "FLOCK") != 0 || std::strcmp(id, want) != 0 || pid <= 0) continue;
    holder = "pid " + std::to_string(pid);  // ", COMM" appended below
    if (std::FILE* c = std::fopen(("/proc/" + std::to_string(pid) + "/comm").c_str(), "re")) {
      char comm[64] = {};
      if (std::fgets(comm, sizeof comm, c)) {
        std::string name(comm);
        while (!name.empty() && name.back() == '\n') name.pop_back();
        if (!name.empty()) holder += ", " + name;
      }
      std::fclose(c);
    }
  }
  std::fclose(f);
  return holder;
}
}  // namespace

PmemFile PmemFile::open(const std::string& path, uint64_t create_bytes) {
  if (path.empty()) throw PmemError("--pm-path: empty path");
  PmemFile f;
  f.path_ = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) throw PmemError(path + ": not a regular file");
    f.fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (f.fd_ < 0) throw PmemError(path + ": cannot open: " + std::strerror(errno));
  } else {
    if (errno != ENOENT) throw PmemError(path + ": " + std::strerror(errno));
    if (create_bytes == 0) throw PmemError(path + ": nothing to create (0 bytes)");
    // Created by this run (O_EXCL: it did not exist): the only kind of file a scheme may format.
    f.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f.fd_ < 0)
      throw PmemError(path + ": cannot create: " + std::strerror(errno) +
                      (errno == EEXIST ? " (another process created it meanwhile)" : ""));
    f.created_ = true;
  }
  // One owner at a time (as PMDK's pools): an exclusive lock on the open file, held for as long as
  // it is mapped (released when fd_ is closed, or when the process dies).
  if (::flock(f.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) throw PmemError(path + ": cannot lock: " + std::strerror(err));
    struct stat held {};
    const std::string who = ::fstat(f.fd_, &held) == 0 ? lock_holder(held.st_dev, held.st_ino) : std::string();
    throw PmemError(path + ": in use by another process (" + (who.empty() ? "the system does not say which" : who) +
                    "): a persistent table image has one owner at a time; nothing was changed");
  }
  if (::fstat(f.fd_, &st) != 0) throw PmemError(path + ": " + std::strerror(errno));
  if (f.created_) {
    if (const int err = ::posix_fallocate(f.fd_, 0, static_cast<off_t>(create_bytes)); err != 0) {
      ::unlink(path.c_str());  // ours: created above and locked
      throw PmemError(path + ": cannot create " + std::to_string(create_bytes) + " bytes: " + std::strerror(err));
    }
  } else if (st.st_size == 0) {
    throw PmemError(path + ": empty file (not a persistent table image); remove it to create a new one");
  }
  size_t len = 0;
  int is_pmem = 0;
  void* p = pmem_map_file(path.c_str(), 0, 0, 0, &len, &is_pmem);
  if (!p) throw PmemError(path + ": cannot map: " + pmem_errormsg());
  f.base_ = static_cast<std::byte*>(p);
  f.len_ = len;
  f.is_pmem_ = is_pmem != 0;
  struct stat mapped {};
  if (::stat(path.c_str(), &mapped) != 0 || mapped.st_dev != st.st_dev || mapped.st_ino != st.st_ino)
    throw PmemError(path + ": replaced by another file while it was opened");
  return f;
}

PmemFile::PmemFile(PmemFile&& o) noexcept
    : path_(std::move(o.path_)), base_(std::exchange(o.base_, nullptr)), len_(o.len_), fd_(std::exchange(o.fd_, -1)),
      created_(o.created_), is_pmem_(o.is_pmem_) {}

PmemFile::~PmemFile() {
  if (base_) pmem_unmap(base_, len_);
  if (fd_ >= 0) ::close(fd_);  // releases the lock, after the mapping is gone
}

}  // namespace rdmahash
