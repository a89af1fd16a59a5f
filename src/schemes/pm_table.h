// What the persistent schemes' registry entries share (continuity, level): the --pm-path file a
// memory node's table lives in, and the bulk load through the memory node's server.
//
// A new file becomes a table only once its bulk load is complete: it is formatted without its
// magic word (format_unpublished: at no instant is it a valid empty table), which is written, in
// its own persist, after the load. A run killed while formatting or loading leaves an image every
// later run refuses (never a partial table taken for the data set); a load that fails removes the
// file it created. Only a file this run created is formatted: an existing one must be this
// table's image (whatever its bytes: zeros too), else it is refused untouched.
//
// Reloading between points: a persistent table is the file, and its loaded state is what the
// first load left — the bulk-loaded records of a new file, or the recovered image of an existing
// one (which no bulk load could rebuild) — so the first load keeps a copy of the image and a
// reload writes it back, crash-safely (restore_image, pmem.h: the magic word cleared first and
// restored last, each in its own persist). With keep_table nothing is reloaded and no copy is kept.
#pragma once

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <utility>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "rdmahash/fabric.h"
#include "rdmahash/pmem.h"
#include "rdmahash/scheme.h"

namespace rdmahash::scheme_impl {

class PmImage {
 public:
  explicit PmImage(const TableOptions& o) : path_(o.pm_path), command_(o.command), keep_table_(o.keep_table) {}
  bool enabled() const { return !path_.empty(); }
  bool open() const { return file_ != nullptr; }
  bool created() const { return file_ && file_->created(); }
  PersistMode mode() const { return file_ ? file_->mode() : PersistMode::kVolatile; }
  const std::string& path() const { return path_; }

  // The table's memory in the file (opened on first call; empty without a path). An existing file
  // must pass `validate` (throws PmemError) and hold `bytes`; `size_note` says what a shorter one is.
  std::span<std::byte> region(uint64_t bytes, const std::function<void(std::span<std::byte>)>& validate,
                              const char* size_note) {
    if (path_.empty()) return {};
    if (!file_) {
      try {
        file_ = std::make_unique<PmemFile>(PmemFile::open(path_, bytes));
      } catch (const PmemError& e) {
        throw InvalidArgument(std::string("--pm-path: ") + e.what());
      }
      if (!file_->created()) {
        try {
          validate(file_->bytes());
        } catch (const PmemError& e) {
          file_.reset();
          throw InvalidArgument("--pm-path " + path_ + ": " + e.what() + " (nothing was changed)");
        }
      }
      if (file_->bytes().size() < bytes)
        throw InvalidArgument("--pm-path " + path_ + ": the file has " + std::to_string(file_->bytes().size()) +
                              " bytes, this table needs " + std::to_string(bytes) + " (" + size_note +
                              "; nothing was changed)");
    }
    return file_->bytes().first(bytes);
  }

  // A new file's load: `load()`, then the magic word in its own persist; a failed load removes the file.
  template <class Load>
  void load_new(std::span<std::byte> image, uint64_t magic, Load&& load) {
    PersistentRegion region(image, file_->mode());
    try {
      load();
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove(file_->path(), ec);
      std::fprintf(stderr, "%s: the bulk load of the new file %s failed: %s\n", command_.c_str(), file_->path().c_str(),
                   ec ? ("could not remove it: " + ec.message() + "; delete it").c_str() : "removed it");
      throw;
    }
    region.store(0, magic);
    region.persist(0, 8);
  }

  // After the first load: the state a reload writes back (nothing with keep_table).
  void save_loaded(std::span<const std::byte> image) {
    if (file_ && !keep_table_) saved_.assign(image.begin(), image.end());
  }
  // A reload: the saved image written back (magic cleared first, restored last).
  void restore(std::span<std::byte> image, const char* scheme) {
    if (saved_.size() != image.size())
      throw std::logic_error(std::string(scheme) + ": no loaded image to restore (--keep-table?)");
    PersistentRegion region(image, file_->mode());
    restore_image(region, saved_);
  }

  // A server's constructor met a bad image: the caller's message, naming the file.
  InvalidArgument refused(const PmemError& e) const {
    return InvalidArgument("--pm-path " + path_ + ": " + e.what() + " (nothing was changed)");
  }
  const std::string& command() const { return command_; }

 private:
  std::string path_;
  std::string command_;  // "rdmahash bench" or "rdmahash serve", for messages
  bool keep_table_;
  std::unique_ptr<PmemFile> file_;
  std::vector<std::byte> saved_;  // without keep_table: the file after the first load
};

// The load of a persistent scheme's table (continuity, level), as the registry's `load` needs it:
//  * a reload of a --pm-path table writes back the image of the first load and reopens the server;
//  * a volatile table has its shards' headers cleared (a zero header makes a shard format itself);
//  * otherwise the server is opened: over an existing image it has recovered it (validated and
//    scanned; logged with the time it took), over a new one the records are bulk-loaded (a new
//    file: published by its magic word after the load, `load_new`).
// `image()` is the table's memory in the file; `open()` (re)creates the memory node's server; `recovered()` is empty unless the server
// recovered an image, else its records and a note for the log; `bulk()` loads every record.
struct PmTableGeometry {
  const char* scheme;      // for messages
  uint64_t magic;          // the image's magic word
  uint64_t header_bytes;   // cleared on each hosted shard of a volatile table
  uint64_t region_bytes;
  uint32_t memory_nodes;
};
template <class Image, class Open, class Recovered, class Bulk>
void load_persistent_table(PmImage& pm, Fabric& fabric, RecordSource& records, bool reload, const PmTableGeometry& g,
                           Image&& image, Open&& open, Recovered&& recovered, Bulk&& bulk,
                           std::optional<uint64_t>& recovered_records) {
  const uint64_t count = records.count();
  if (reload && pm.open()) {
    pm.restore(image(), g.scheme);  // magic cleared first, restored last (pmem.h)
    open();
    if (records.progress) records.progress(count);
    return;
  }
  if (!pm.open())
    for (uint32_t n = 0; n < g.memory_nodes; ++n) {
      auto region = fabric.local_region(n);
      if (!region.empty()) std::memset(region.data(), 0, std::min<size_t>(region.size(), g.header_bytes));
    }
  const auto t0 = std::chrono::steady_clock::now();
  open();
  if (const auto r = recovered()) {  // an existing image: recovered, not bulk-loaded
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    recovered_records = r->first;
    std::fprintf(stderr, "%s: recovered %llu records from %s (%llu bytes) in %.3f s%s\n", pm.command().c_str(),
                 static_cast<unsigned long long>(r->first), pm.path().c_str(),
                 static_cast<unsigned long long>(g.region_bytes), sec, r->second.c_str());
  } else if (pm.created()) {
    pm.load_new(image(), g.magic, bulk);
  } else {
    bulk();
  }
  if (records.progress) records.progress(count);
  if (pm.open()) pm.save_loaded(image());
}

}  // namespace rdmahash::scheme_impl
