#include "check/history.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>
#include <atomic>

#include "common/hash.h"

namespace rdmahash::check {

// Events are written as their in-memory bytes: the format is little-endian.
static_assert(std::endian::native == std::endian::little, "history files are little-endian");

namespace {
constexpr char kMagic[8] = {'R', 'D', 'M', 'A', 'H', 'I', 'S', '1'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t event_bytes;
  uint64_t count;
  uint64_t open;  // 1: a mapped recording not closed (trailing capacity allowed)
};
static_assert(sizeof(Header) == 32);

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
}  // namespace

const char* to_string(HistOp op) {
  switch (op) {
    case HistOp::kInit: return "init";
    case HistOp::kGet: return "get";
    case HistOp::kPut: return "put";
    case HistOp::kUpdate: return "update";
    case HistOp::kErase: return "erase";
    case HistOp::kFindOrPut: return "find_or_put";
  }
  return "?";
}

uint64_t value_digest(std::span<const std::byte> value) {
  if (value.empty()) return 0;
  uint64_t h = hash::mix64(value.size());
  for (size_t i = 0; i < value.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, value.data() + i, std::min<size_t>(8, value.size() - i));
    h = hash::mix64(h ^ w) + 0x9E3779B97F4A7C15ULL;
  }
  return h ? h : 1;
}

HistoryBuffer::HistoryBuffer(HistoryBuffer&& o) noexcept { *this = std::move(o); }

HistoryBuffer& HistoryBuffer::operator=(HistoryBuffer&& o) noexcept {
  if (this == &o) return *this;
  if (mapped_) ::munmap(mapped_, mapped_bytes_);
  events_ = std::move(o.events_);
  mapped_ = std::exchange(o.mapped_, nullptr);
  mapped_bytes_ = std::exchange(o.mapped_bytes_, 0);
  first_ = o.first_;
  count_ = o.count_;
  capacity_ = o.capacity_;
  path_ = std::move(o.path_);
  client_ = o.client_;
  return *this;
}

// An unclosed mapping stays a valid (open) file: the kernel keeps what was stored.
HistoryBuffer::~HistoryBuffer() {
  if (mapped_) ::munmap(mapped_, mapped_bytes_);
}

uint64_t HistoryBuffer::push(const HistoryEvent& e) {
  if (!mapped_) {
    events_.push_back(e);
    return events_.size() - 1;
  }
  if (count_ == capacity_)
    throw std::length_error("--history file '" + path_ + "' is full (" + std::to_string(capacity_) + " events)");
  std::memcpy(mapped_ + sizeof(Header) + count_ * sizeof(HistoryEvent), &e, sizeof e);
  ++count_;
  // The event first, then the count that covers it (one process: program order is what a
  // kill leaves in the page cache).
  std::atomic_ref<uint64_t>(reinterpret_cast<Header*>(mapped_)->count).store(count_, std::memory_order_release);
  return count_ - first_ - 1;
}

void HistoryBuffer::set(uint64_t index, const HistoryEvent& e) {
  if (!mapped_) {
    events_.at(index) = e;
    return;
  }
  if (first_ + index >= count_) throw std::out_of_range("history event index");
  std::memcpy(mapped_ + sizeof(Header) + (first_ + index) * sizeof(HistoryEvent), &e, sizeof e);
}

std::span<const HistoryEvent> HistoryBuffer::events() const {
  if (!mapped_) return events_;
  return {reinterpret_cast<const HistoryEvent*>(mapped_ + sizeof(Header)) + first_, count_ - first_};
}

void HistoryBuffer::map_file(const std::string& path, std::span<const HistoryEvent> init, uint64_t capacity) {
  if (mapped_) throw std::runtime_error("history buffer: already mapped");
  const uint64_t total = init.size() + capacity;
  if (total > kMaxEvents)
    throw std::runtime_error("--history of " + std::to_string(total) + " events exceeds the bound of " + std::to_string(kMaxEvents));
  // O_NONBLOCK: a FIFO put at `path` since the driver's check must not stall the open.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open --history file '" + path + "' for writing: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error("--history file '" + path + "' is not a regular file");
  }
  const uint64_t bytes = sizeof(Header) + total * sizeof(HistoryEvent);
  void* m = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0)
    m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw std::runtime_error("cannot map --history file '" + path + "': " + std::strerror(err));
  mapped_ = static_cast<std::byte*>(m);
  mapped_bytes_ = bytes;
  // Dirty every page now (they are zero already): the timed part then takes no page faults.
  std::memset(mapped_, 0, bytes);
  path_ = path;
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.event_bytes = sizeof(HistoryEvent);
  h.count = init.size();
  h.open = 1;
  if (!init.empty()) std::memcpy(mapped_ + sizeof(Header), init.data(), init.size_bytes());
  std::memcpy(mapped_, &h, sizeof h);
  first_ = count_ = init.size();
  capacity_ = total;
  events_.clear();
}

void HistoryBuffer::close_file() {
  if (!mapped_) return;
  reinterpret_cast<Header*>(mapped_)->open = 0;
  const uint64_t used = sizeof(Header) + count_ * sizeof(HistoryEvent);
  const int rc = ::msync(mapped_, mapped_bytes_, MS_SYNC);
  ::munmap(mapped_, mapped_bytes_);
  mapped_ = nullptr;
  if (rc != 0 || ::truncate(path_.c_str(), static_cast<off_t>(used)) != 0)
    throw std::runtime_error("cannot finish --history file '" + path_ + "': " + std::strerror(errno));
}

std::vector<std::byte> HistoryBuffer::serialize() const {
  const auto ev = events();
  std::vector<std::byte> out(ev.size_bytes());
  if (!out.empty()) std::memcpy(out.data(), ev.data(), out.size());
  return out;
}

std::vector<HistoryEvent> HistoryBuffer::deserialize(std::span<const std::byte> bytes) {
  if (bytes.size() % sizeof(HistoryEvent) != 0)
    throw std::runtime_error("history part of " + std::to_string(bytes.size()) + " bytes is not a whole number of events");
  std::vector<HistoryEvent> ev(bytes.size() / sizeof(HistoryEvent));
  if (!ev.empty()) std::memcpy(ev.data(), bytes.data(), bytes.size());
  return ev;
}

std::string history_target_error(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};  // absent (or unreachable: the open says why)
  if (S_ISREG(st.st_mode)) return {};
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  return "--history file '" + path + "' is " + kind + ", not a regular file: the history replaces its file, so give "
         "a new path or a regular file";
}

void write_history(const std::string& path, std::span<const HistoryEvent> init,
                   std::span<const std::span<const HistoryEvent>> clients) {
  uint64_t count = init.size();
  for (const auto& c : clients) count += c.size();
  if (count > kMaxEvents)
    throw std::runtime_error("history of " + std::to_string(count) + " events exceeds the bound of " +
                             std::to_string(kMaxEvents));
  // Checked again here, after the run: the rename below replaces whatever `path` is by then.
  if (const std::string why = history_target_error(path); !why.empty()) throw std::runtime_error(why);
  // Written beside the file and renamed over it at the end: a run that fails while writing leaves an
  // earlier history whole. The temporary is always a new file (O_EXCL, O_NOFOLLOW), never whatever
  // is found under its name: a symlink planted there would have the history written through it. A
  // leftover (a run killed while writing) is unlinked (the link, never its target) and created anew.
  const std::string tmp = path + ".tmp";
  constexpr int kTmpFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), kTmpFlags, 0666);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) fd = ::open(tmp.c_str(), kTmpFlags, 0666);
  if (fd < 0)
    throw std::runtime_error("cannot create --history file '" + tmp + "' for writing: " + std::strerror(errno));
  std::unique_ptr<std::FILE, FileCloser> f(::fdopen(fd, "wb"));
  if (!f) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write --history file '" + tmp + "': " + std::strerror(err));
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.event_bytes = sizeof(HistoryEvent);
  h.count = count;
  bool ok = std::fwrite(&h, sizeof h, 1, f.get()) == 1;
  if (ok && !init.empty()) ok = std::fwrite(init.data(), sizeof(HistoryEvent), init.size(), f.get()) == init.size();
  for (const auto& c : clients)
    if (ok && !c.empty()) ok = std::fwrite(c.data(), sizeof(HistoryEvent), c.size(), f.get()) == c.size();
  if (!ok || std::fclose(f.release()) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write --history file '" + path + "': " + std::strerror(err));
  }
}

std::vector<HistoryEvent> read_history(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw std::runtime_error("cannot open history file '" + path + "'");
  Header h{};
  if (std::fread(&h, sizeof h, 1, f.get()) != 1 || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    throw std::runtime_error(path + ": not an rdmahash history file (bad header)");
  if (h.version != kVersion || h.event_bytes != sizeof(HistoryEvent))
    throw std::runtime_error(path + ": unsupported history version " + std::to_string(h.version));
  if (h.count > kMaxEvents) throw std::runtime_error(path + ": event count " + std::to_string(h.count) + " exceeds the bound");
  std::vector<HistoryEvent> ev(h.count);
  if (h.count && std::fread(ev.data(), sizeof(HistoryEvent), h.count, f.get()) != h.count)
    throw std::runtime_error(path + ": truncated (header says " + std::to_string(h.count) + " events)");
  // An open recording (its client died) may have unused capacity after the events.
  if (h.open == 0 && std::fgetc(f.get()) != EOF) throw std::runtime_error(path + ": trailing bytes after the events");
  return ev;
}

}  // namespace rdmahash::check
