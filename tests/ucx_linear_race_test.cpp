// Linear-probing races over UCX (mpirun): every client inserts the same keys in the same order at
// the same time (so they race for the same empty slots), then updates overlapping keys; afterwards
// each memory node scans its shard and rank 0 checks the union against what the clients were told:
//   * no key is stored twice, and every stored key is one of the pool's;
//   * every key a client was told "inserted" is stored, and exactly one client was told so;
//   * every stored value is one that some client wrote for that key, whole (never torn).
// Usage: mpirun -n N ucx_linear_race_test [--memory-nodes K] [--format inline|heap] [--rounds R] [--direct-access on|off]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/linear.h"
#include "rdmahash/ucx_fabric.h"
#include "schemes/record.h"

using namespace rdmahash;

namespace {

constexpr uint32_t kValueBytes = 16;
constexpr uint32_t kPool = 1500;
constexpr uint32_t kUpdateRounds = 3;

std::vector<std::byte> value_of(uint64_t key, uint32_t client, uint32_t round) {
  std::vector<std::byte> v(kValueBytes);
  uint64_t words[2] = {key * 0x9E3779B97F4A7C15ULL ^ client, (uint64_t{client} << 32) | round};
  std::memcpy(v.data(), words, kValueBytes);
  return v;
}

constexpr uint32_t kGroup = 8;

// Waits ~20 us before every batch holding a CAS: widens the window between reading an empty slot
// and claiming it, where another client can claim it first. (Not a timing assertion: only more
// interleavings; the checks are the same whatever the timing.)
class DelayedCas final : public Transport {
 public:
  explicit DelayedCas(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  void execute(std::span<Request> batch) override {
    if (std::any_of(batch.begin(), batch.end(), [](const Request& r) { return r.kind == ReqKind::kCas; }))
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    inner_->execute(batch);
    ++counters_.batches;
    for (const Request& r : batch) counters_.add(r);
  }

 private:
  std::unique_ptr<Transport> inner_;
};

uint64_t pool_key(uint32_t i) { return (uint64_t{i} + 1) * 0xD6E8FEB86659FD93ULL; }

// (key, value) of every live record of a shard, read node-side (a record must also be consistent).
std::vector<std::pair<uint64_t, std::vector<std::byte>>> scan(const LinearConfig& c, std::span<const std::byte> region,
                                                              std::vector<std::string>& errors) {
  std::vector<std::pair<uint64_t, std::vector<std::byte>>> out;
  const uint32_t sb = c.slot_bytes();
  const record::Layout l(c.key_bytes, c.value_bytes);
  for (uint64_t s = 0; s < c.total_slots(); ++s) {
    const std::byte* slot = region.data() + sizeof(ShardHeader) + s * sb;
    const uint64_t w = record::load64(slot);
    if (c.format == SlotFormat::kHeap) {
      const HeapSlot h = decode_heap_slot(w);
      if (h.empty || h.tombstone) continue;
      auto rec = linear_heap_record(c, region, h.index);
      if (!rec) {
        errors.push_back("slot " + std::to_string(s) + " points to an unpublished or torn record");
        continue;
      }
      out.emplace_back(rec->first, rec->second);
    } else {
      if (!(w & record::kOcc) || (w & record::kDel)) continue;
      if ((w & record::kLock) || !l.consistent(slot)) {
        errors.push_back("slot " + std::to_string(s) + " is locked or inconsistent after every client finished");
        continue;
      }
      out.emplace_back(l.key(slot), std::vector<std::byte>(slot + l.val_off, slot + l.val_off + kValueBytes));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failures = 0;
  LinearConfig c;
  c.format = SlotFormat::kInline;
  c.key_bytes = 8;
  c.value_bytes = kValueBytes;
  uint32_t rounds = 4;
  bool direct = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--memory-nodes") c.memory_nodes = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--format") c.format = v == "heap" ? SlotFormat::kHeap : SlotFormat::kInline;
    else if (a == "--rounds") rounds = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--direct-access") direct = v == "on";
  }
  c.home_slots = 2048 / c.memory_nodes;  // load factor 0.73 after the inserts: long clusters
  {
    auto f = UcxFabric::create(UcxFabricConfig{c.memory_nodes, false, c.region_bytes(), nullptr, {}, direct});
    if (f->is_memory_node()) LinearShardLoader(c, static_cast<uint32_t>(f->rank()), f->local_region(f->rank()));
    f->barrier();
    // Per client: for each key, 1 if this client was told "inserted"; then which rounds it updated.
    std::vector<std::byte> mine;
    const uint32_t me = static_cast<uint32_t>(f->rank()) - c.memory_nodes;
    std::vector<uint8_t> inserted(kPool, 0);
    // The clients start every group of kGroup keys together (a barrier of their own) and each
    // CAS waits a little first, so the clients read the same empty slot and race for it, and the
    // losers take the re-check path, in every run (not only when the scheduler happens to help).
    MPI_Comm clients;
    MPI_Comm_split(MPI_COMM_WORLD, f->is_client() ? 1 : MPI_UNDEFINED, f->rank(), &clients);
    if (f->is_client()) {
      DelayedCas transport(f->connect());
      Engine engine(transport);
      ProbeConfig probe;
      probe.chunk = 8;
      probe.max_chunks = 512;
      LinearClient table(c, probe, engine);
      // Several rounds over fresh parts of the pool, in the same order on every client.
      uint32_t in_group = 0;
      for (uint32_t r = 0; r < rounds; ++r)
        for (uint32_t i = r; i < kPool; i += rounds) {
          if (in_group++ % kGroup == 0) MPI_Barrier(clients);
          const OpResult res = engine.run(table.find_or_put(pool_key(i), value_of(pool_key(i), me, 0)));
          if (res.status == Status::kInserted) inserted[i] = 1;
          else if (res.status != Status::kFound) {
            std::fprintf(stderr, "client %u: find_or_put of key %u: %s\n", me, i, to_string(res.status));
            ++failures;
          }
        }
      for (uint32_t round = 1; round <= kUpdateRounds; ++round)
        for (uint32_t i = me % 3; i < kPool; i += 2) {  // overlapping halves
          const OpResult res = engine.run(table.put(pool_key(i), value_of(pool_key(i), me, round)));
          if (res.status != Status::kUpdated) {
            std::fprintf(stderr, "client %u: put of present key %u: %s\n", me, i, to_string(res.status));
            ++failures;
          }
        }
      mine.assign(reinterpret_cast<const std::byte*>(inserted.data()),
                  reinterpret_cast<const std::byte*>(inserted.data()) + kPool);
      f->client_done();
      MPI_Comm_free(&clients);
    }
    f->serve();
    f->barrier();
    // Memory nodes scan their shards; rank 0 gathers the scans and the clients' acknowledgements.
    std::vector<std::string> errors;
    std::vector<std::byte> shard_bytes;
    if (f->is_memory_node()) {
      for (auto& [k, v] : scan(c, f->local_region(f->rank()), errors)) {
        const auto* kb = reinterpret_cast<const std::byte*>(&k);
        shard_bytes.insert(shard_bytes.end(), kb, kb + 8);
        shard_bytes.insert(shard_bytes.end(), v.begin(), v.end());
      }
    }
    for (const auto& e : errors) std::fprintf(stderr, "rank %d: %s\n", f->rank(), e.c_str());
    failures += static_cast<int>(errors.size());
    const auto shards = f->gather(shard_bytes);
    const auto acks = f->gather(mine);
    if (f->rank() == 0) {
      std::map<uint64_t, uint32_t> pool_index;
      for (uint32_t i = 0; i < kPool; ++i) pool_index[pool_key(i)] = i;
      std::map<uint64_t, int> stored;
      auto fail = [&](const std::string& what) {
        if (failures < 20) std::fprintf(stderr, "FAILED: %s\n", what.c_str());
        ++failures;
      };
      for (const auto& s : shards)
        for (size_t off = 0; off + 8 + kValueBytes <= s.size(); off += 8 + kValueBytes) {
          uint64_t k;
          std::memcpy(&k, s.data() + off, 8);
          std::vector<std::byte> v(s.begin() + static_cast<std::ptrdiff_t>(off + 8),
                                   s.begin() + static_cast<std::ptrdiff_t>(off + 8 + kValueBytes));
          if (++stored[k] > 1) fail("key " + std::to_string(k) + " is stored twice");
          if (!pool_index.count(k)) {
            fail("stored key " + std::to_string(k) + " was never written");
            continue;
          }
          bool known = false;
          for (uint32_t cl = 0; cl < f->client_count() && !known; ++cl)
            for (uint32_t round = 0; round <= kUpdateRounds && !known; ++round) known = v == value_of(k, cl, round);
          if (!known) fail("key " + std::to_string(k) + " holds a value no client wrote");
        }
      for (uint32_t i = 0; i < kPool; ++i) {
        int acked = 0;
        for (const auto& a : acks)
          if (a.size() == kPool && a[i] != std::byte{0}) ++acked;
        if (acked != 1) fail("key " + std::to_string(i) + " was acknowledged as inserted " + std::to_string(acked) + " times");
        if (!stored.count(pool_key(i))) fail("key " + std::to_string(i) + " is missing from every shard");
      }
      std::printf("%s: %zu keys stored, %d failures\n", failures ? "FAILED" : "ok", stored.size(), failures);
    }
    f->barrier();
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    failures = total;
  }
  MPI_Finalize();
  return failures ? 1 : 0;
}
