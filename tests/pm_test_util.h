// Shared scaffolding of the persistent-memory schemes' tests (continuity, level): crash images
// rebuilt from a recorded store/persist log, the acknowledged-state oracle they are checked
// against, stamped values that reveal torn or stale reads, the forced-interleaving reader trial,
// and real-file helpers (temporary directories, refused images left untouched).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/pmem.h"
#include "test_util.h"

namespace rdmahash::test {

// Key → value: what a table holds (std::map, so two states compare in one ==).
using State = std::map<uint64_t, std::vector<std::byte>>;

// `n` bytes aligned to a cache line (persists are tracked by line).
struct AlignedImage {
  std::vector<std::byte> storage;
  std::span<std::byte> bytes;
  explicit AlignedImage(uint64_t n) : storage(n + kCacheLine) {
    const auto mis = reinterpret_cast<uintptr_t>(storage.data()) % kCacheLine;
    bytes = {storage.data() + (mis ? kCacheLine - mis : 0), n};
  }
};

struct Event {
  bool persist;
  uint64_t off, value;  // store: word offset and value; persist: offset and length
};

// Every store and persist through the choke point (PersistentRegion::set_observer), in order.
struct Recorder final : PersistObserver {
  std::vector<Event> log;
  void on_store(uint64_t off, uint64_t v) override { log.push_back({false, off, v}); }
  void on_persist(uint64_t off, uint64_t len) override { log.push_back({true, off, len}); }
};

// One server-side operation and the acknowledged state after it.
struct Step {
  size_t begin, end;  // log positions: events [begin, end) belong to this operation
  State after;
};

// The items a (recovered) shard holds; throws if a key is valid twice or the record count
// disagrees with the valid items.
template <class Shard>
State state_of(Shard& shard) {
  State out;
  for (auto& [k, v] : shard.items())
    if (!out.emplace(k, v).second) throw std::runtime_error("key " + std::to_string(k) + " valid twice");
  if (shard.records() != out.size()) throw std::runtime_error("record count differs from the valid items");
  return out;
}

// A crash right before each event e of `log` (and after the last), replayed over `initial`:
// `check(e, image, mode)` with mode 0 = only persisted lines, 1 = plus a random prefix of each
// line's unpersisted stores, 2 = plus all of them. `stop()` true ends the replay early.
template <class Check, class Stop>
void replay_crashes(const std::vector<std::byte>& initial, const std::vector<Event>& log, uint64_t seed, Check&& check,
                    Stop&& stop) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> durable = initial;
  std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> pending;  // line -> stores in order
  for (size_t e = 0; e <= log.size() && !stop(); ++e) {
    for (int mode = 0; mode < 3; ++mode) {
      if (mode > 0 && pending.empty()) break;
      AlignedImage img(durable.size());
      std::memcpy(img.bytes.data(), durable.data(), durable.size());
      if (mode > 0)
        for (auto& [line, stores] : pending) {
          const size_t keep = mode == 2 ? stores.size() : rng() % (stores.size() + 1);
          for (size_t i = 0; i < keep; ++i) std::memcpy(img.bytes.data() + stores[i].first, &stores[i].second, 8);
        }
      check(e, img.bytes, mode);
    }
    if (e == log.size()) break;
    const Event& ev = log[e];
    if (!ev.persist) {
      pending[ev.off / kCacheLine].emplace_back(ev.off, ev.value);
    } else {
      for (uint64_t line = ev.off / kCacheLine; line * kCacheLine < ev.off + ev.value; ++line) {
        auto it = pending.find(line);
        if (it == pending.end()) continue;
        for (auto& [off, v] : it->second) std::memcpy(durable.data() + off, &v, 8);
        pending.erase(it);
      }
    }
  }
}

// A shard on an aligned, volatile image whose every store and persist from construction on is
// recorded (a crash while formatting leaves an image that is refused): `initial` is the durable
// image the log starts from.
template <class Shard, class Config>
struct RecordedShard {
  AlignedImage live;
  PersistentRegion region;
  Shard shard;
  std::vector<std::byte> initial;
  Recorder rec;
  explicit RecordedShard(const Config& c)
      : live(c.region_bytes()), region(live.bytes, PersistMode::kVolatile), shard(c, 0, region),
        initial(live.bytes.begin(), live.bytes.end()) {
    region.set_observer(&rec);
  }
};

// The acknowledged state after a write that answered `s` (key k, value v); kinds counts
// inserted, updated, erased and full answers.
inline void acknowledge(State& state, uint64_t (&kinds)[4], uint64_t k, const std::vector<std::byte>& v, Status s) {
  if (s == Status::kInserted) state[k] = v, ++kinds[0];
  else if (s == Status::kUpdated) state[k] = v, ++kinds[1];
  else if (s == Status::kErased) state.erase(k), ++kinds[2];
  else if (s == Status::kFull) ++kinds[3];
}

// The oracle of a crash before event e: every step that ended at or before e is acknowledged
// (`start` if none); the step containing e is in flight and may or may not have taken effect.
// Returns "" if `got` is one of the two, else what differs.
inline std::string acknowledged_mismatch(const State& got, const std::vector<Step>& steps, const State& start, size_t e) {
  const State* acked = &start;
  const State* next = nullptr;
  for (const Step& s : steps) {
    if (s.end <= e) acked = &s.after;
    else if (s.begin <= e) { next = &s.after; break; }
    else break;
  }
  if (got == *acked || (next && got == *next)) return "";
  return "recovered " + std::to_string(got.size()) + " items, acknowledged state has " + std::to_string(acked->size()) +
         (next ? " (in-flight op: " + std::to_string(next->size()) + ")" : "");
}

inline std::string crash_label(size_t e, int mode) {
  return "crash before event " + std::to_string(e) + " (mode " + std::to_string(mode) + ")";
}

// --- tables on a LocalFabric -------------------------------------------------------------------

// A formatted, empty table of a scheme whose memory nodes run a Server (continuity, level).
template <class Server, class Config>
struct ServedTable {
  Config cfg;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<Server> server;
  explicit ServedTable(const Config& c) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes()));
    server = std::make_unique<Server>(*fabric, c);
  }
};

// A client with its own transport and engine; `last` holds the last operation's statistics.
template <class Client, class Config>
struct SyncClientOf {
  std::unique_ptr<Transport> transport;
  Engine engine;
  Client client;
  OpStats last;
  SyncClientOf(Fabric& f, const Config& c) : transport(f.connect()), engine(*transport), client(c, engine) {}
  OpResult run(Task<OpResult> t) {
    last = {};
    return engine.run(std::move(t), &last);
  }
};

// --- values a reader can check ------------------------------------------------------------------

inline std::vector<uint64_t> distinct_keys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::unordered_set<uint64_t> seen;
  std::vector<uint64_t> keys;
  while (keys.size() < n)
    if (uint64_t k = rng(); seen.insert(k).second) keys.push_back(k);
  return keys;
}

// Values that say which key and which write they belong to, so a reader can tell a torn or stale
// value from a real one.
inline std::vector<std::byte> stamped(uint64_t key, uint64_t version, uint32_t bytes) {
  std::vector<std::byte> v(bytes);
  for (uint32_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t w = (i == 0) ? version : key * 0x9E3779B97F4A7C15ULL + version * (i + 1);
    std::memcpy(v.data() + i, &w, 8);
  }
  return v;
}
inline bool intact(uint64_t key, const std::vector<std::byte>& v, uint64_t* version) {
  uint64_t ver;
  std::memcpy(&ver, v.data(), 8);
  *version = ver;
  return v == stamped(key, ver, static_cast<uint32_t>(v.size()));
}

// Forced interleavings: node-side writes run between the words of every READ of `reads` lookups
// (InterleavingTransport). Each write updates a stable key (never erased: a lookup must find it,
// whole and no older than before) or inserts/erases a churn key (found or not, but never torn).
struct InterleavedReads {
  uint64_t missed = 0, torn = 0, stale = 0, churn_torn = 0, writes = 0;
};
template <class Client, class Shard, class Config>
InterleavedReads reads_between_node_writes(Fabric& fabric, Shard& shard, const Config& c, const std::vector<uint64_t>& stable,
                                           const std::vector<uint64_t>& churn, int reads, uint32_t value_bytes) {
  std::unordered_map<uint64_t, uint64_t> version;
  for (uint64_t k : stable) version[k] = 0;
  std::mt19937_64 rng(9);
  std::unordered_set<uint64_t> churn_in;
  InterleavedReads n;
  auto hook = [&] {
    const uint64_t x = rng();
    if (x % 2 == 0) {
      const uint64_t k = stable[(x >> 8) % stable.size()];
      if (shard.update(k, stamped(k, version[k] + 1, value_bytes)).status == Status::kUpdated) ++version[k], ++n.writes;
    } else {
      const uint64_t k = churn[(x >> 8) % churn.size()];
      if (churn_in.count(k)) {
        ASSERT_EQ(shard.erase(k).status, Status::kErased);
        churn_in.erase(k);
      } else if (shard.put(k, stamped(k, 0, value_bytes)).status == Status::kInserted) {
        churn_in.insert(k);
      }
      ++n.writes;
    }
  };
  auto transport = std::make_unique<InterleavingTransport>(fabric.connect(), hook);
  Engine engine(*transport);
  Client client(c, engine);
  std::unordered_map<uint64_t, uint64_t> seen;
  std::vector<std::byte> out(value_bytes);
  for (int i = 0; i < reads; ++i) {
    const bool st = rng() % 3 != 0;
    const uint64_t k = st ? stable[rng() % stable.size()] : churn[rng() % churn.size()];
    const OpResult r = engine.run(client.get(k, out));
    uint64_t ver = 0;
    if (st) {
      if (r.status != Status::kFound) { ++n.missed; continue; }
      if (!intact(k, out, &ver)) { ++n.torn; continue; }
      if (seen.count(k) && ver < seen[k]) ++n.stale;
      seen[k] = std::max(seen[k], ver);
    } else if (r.status == Status::kFound && !intact(k, out, &ver)) {
      ++n.churn_torn;
    }
  }
  return n;
}

// --- real files -----------------------------------------------------------------------------------

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const char* prefix = "rdmahash-pmem") {
    std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

inline std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// Opening `path` as a Shard of config `c` must throw PmemError and leave the file as it was.
template <class Shard, class Config>
void expect_refused(const std::filesystem::path& path, const Config& c, const std::string& what) {
  const auto before = slurp(path);
  try {
    PmemFile f = PmemFile::open(path, c.region_bytes());
    PersistentRegion region(f.bytes(), f.mode());
    Shard shard(c, 0, region);
    ADD_FAILURE() << what << ": the image was accepted";
  } catch (const PmemError& e) {
    EXPECT_FALSE(std::string(e.what()).empty());
  }
  EXPECT_EQ(slurp(path), before) << what << ": the refused file was modified";
}

}  // namespace rdmahash::test
