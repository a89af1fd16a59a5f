#include "check/history.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "schemes/hash.h"

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
  uint64_t reserved;
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

std::vector<std::byte> HistoryBuffer::serialize() const {
  std::vector<std::byte> out(events_.size() * sizeof(HistoryEvent));
  if (!out.empty()) std::memcpy(out.data(), events_.data(), out.size());
  return out;
}

std::vector<HistoryEvent> HistoryBuffer::deserialize(std::span<const std::byte> bytes) {
  if (bytes.size() % sizeof(HistoryEvent) != 0)
    throw std::runtime_error("history part of " + std::to_string(bytes.size()) + " bytes is not a whole number of events");
  std::vector<HistoryEvent> ev(bytes.size() / sizeof(HistoryEvent));
  if (!ev.empty()) std::memcpy(ev.data(), bytes.data(), bytes.size());
  return ev;
}

void write_history(const std::string& path, std::span<const HistoryEvent> init,
                   std::span<const std::vector<HistoryEvent>* const> clients) {
  uint64_t count = init.size();
  for (const auto* c : clients) count += c->size();
  if (count > kMaxEvents)
    throw std::runtime_error("history of " + std::to_string(count) + " events exceeds the bound of " +
                             std::to_string(kMaxEvents));
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (!f) throw std::runtime_error("cannot open --history file '" + path + "' for writing");
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.event_bytes = sizeof(HistoryEvent);
  h.count = count;
  bool ok = std::fwrite(&h, sizeof h, 1, f.get()) == 1;
  if (ok && !init.empty()) ok = std::fwrite(init.data(), sizeof(HistoryEvent), init.size(), f.get()) == init.size();
  for (const auto* c : clients)
    if (ok && !c->empty()) ok = std::fwrite(c->data(), sizeof(HistoryEvent), c->size(), f.get()) == c->size();
  if (!ok || std::fclose(f.release()) != 0) throw std::runtime_error("cannot write --history file '" + path + "'");
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
  if (std::fgetc(f.get()) != EOF) throw std::runtime_error(path + ": trailing bytes after the events");
  return ev;
}

}  // namespace rdmahash::check
