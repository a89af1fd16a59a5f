// Cluster hashing (rdmahash/cluster.h) on LocalFabric: the mechanisms the conformance suite does
// not see. Random operations against an std::unordered_map oracle near full with chained buckets,
// a hit is two READs in two round trips, a reader holding a slot across an erase and the reuse of
// its entry (by another key, or by the same key not yet published) never accepts it, a published
// slot's entry is always complete, a corrupt entry is never returned, shuffled READs with writes
// between their words never miss or tear, and the pool bound answers kFull.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "rdmahash/cluster.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::value_for;

struct Table {
  ClusterConfig cfg;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<ClusterServer> server;
  explicit Table(const ClusterConfig& c) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes()));
    server = std::make_unique<ClusterServer>(*fabric, c);
  }
};

ClusterConfig small(uint64_t main_buckets, uint64_t pool, uint64_t entries, uint32_t vb) {
  ClusterConfig c;
  c.main_buckets_per_node = main_buckets;
  c.pool_buckets_per_node = pool;
  c.entries_per_node = entries;
  c.value_bytes = vb;
  return c;
}

std::vector<uint64_t> distinct_keys(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::unordered_set<uint64_t> seen;
  std::vector<uint64_t> keys;
  while (keys.size() < n) {
    const uint64_t k = rng() >> 1;
    if (seen.insert(k).second) keys.push_back(k);
  }
  return keys;
}

// Random find_or_put / put / update / erase / get through the client (RPC writes, one-sided gets)
// against an oracle, on tables small enough to chain and to run out of entries and pool buckets.
TEST(Cluster, RandomOperationsMatchAnOracleNearFullWithChains) {
  for (uint32_t vb : {0u, 16u, 120u, 17u}) {
    ClusterConfig c = small(12, 10, 120, vb);  // 84 main slots, 70 pool slots, 120 entries
    c.memory_nodes = 2;
    c.location_cache = vb == 17 ? 16 : 0;  // the last round through a location cache smaller than the table
    Table t(c);
    auto transport = t.fabric->connect();
    Engine engine(*transport);
    ClusterClient client(c, engine);
    const auto universe = distinct_keys(300, vb + 1);
    std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
    std::mt19937_64 rng(vb * 31 + 7);
    uint64_t full = 0, hits = 0;
    std::vector<std::byte> out(vb);
    for (int step = 0; step < 20000; ++step) {
      const uint64_t k = universe[rng() % universe.size()];
      const auto v = value_for(k, static_cast<uint32_t>(step), vb);
      const bool present = oracle.count(k) > 0;
      switch (rng() % 5) {
        case 0: {
          const Status s = engine.run(client.find_or_put(k, v)).status;
          if (present) ASSERT_EQ(s, Status::kFound);
          else if (s == Status::kFull) ++full;
          else {
            ASSERT_EQ(s, Status::kInserted);
            oracle[k] = v;
          }
          break;
        }
        case 1: {
          const Status s = engine.run(client.put(k, v)).status;
          if (present) {
            ASSERT_EQ(s, Status::kUpdated);
            oracle[k] = v;
          } else if (s == Status::kFull) ++full;
          else {
            ASSERT_EQ(s, Status::kInserted);
            oracle[k] = v;
          }
          break;
        }
        case 2: {
          const Status s = engine.run(client.update(k, v)).status;
          ASSERT_EQ(s, present ? Status::kUpdated : Status::kNotFound);
          if (present) oracle[k] = v;
          break;
        }
        case 3: {
          if (rng() % 2) break;  // erase less often than insert: stay near full
          ASSERT_EQ(engine.run(client.erase(k)).status, present ? Status::kErased : Status::kNotFound);
          oracle.erase(k);
          break;
        }
        default: {
          const Status s = engine.run(client.get(k, out)).status;
          ASSERT_EQ(s, present ? Status::kFound : Status::kNotFound) << "key " << k << " step " << step;
          if (present) {
            ASSERT_EQ(out, oracle[k]);
            ++hits;
          }
        }
      }
      if (step % 2000 == 1999) {
        std::set<uint64_t> seen, want;
        for (uint32_t n = 0; n < 2; ++n)
          for (uint64_t key : t.server->shard(n).keys()) ASSERT_TRUE(seen.insert(key).second) << "key " << key << " twice";
        for (const auto& [key, val] : oracle) want.insert(key);
        ASSERT_EQ(seen, want);
        ASSERT_EQ(t.server->records(), oracle.size());
      }
    }
    EXPECT_GT(full, 0u) << "the table must fill up";
    EXPECT_GT(t.server->stats().pool_used, 4u) << "chains must form";
    EXPECT_GT(hits, 1000u);
    for (uint64_t k : universe) {
      const Status s = engine.run(client.get(k, out)).status;
      ASSERT_EQ(s, oracle.count(k) ? Status::kFound : Status::kNotFound);
      if (oracle.count(k)) {
        ASSERT_EQ(out, oracle[k]);
      }
    }
  }
}

TEST(Cluster, HitIsTwoReadsInTwoRoundTrips) {
  for (double lf : {0.5, 0.8}) {
    ClusterConfig c = ClusterConfig::for_records(4000, lf, 2);
    c.value_bytes = 16;
    Table t(c);
    const auto keys = distinct_keys(4000, 5);
    for (uint64_t k : keys) (void)t.server->bulk_insert(k, value_for(k, 0, 16));
    auto transport = t.fabric->connect();
    Engine engine(*transport);
    ClusterClient client(c, engine);
    std::vector<std::byte> out(16);
    uint64_t in_main = 0;
    for (uint64_t k : keys) {
      const uint32_t node = cluster_place(c, k).node;
      const uint32_t pos = t.server->shard(node).chain_position(k).value();
      OpStats st;
      const uint64_t reads = transport->counters().reads, bytes = transport->counters().bytes_read;
      const OpResult r = engine.run(client.get(k, out), &st);
      ASSERT_EQ(r.status, Status::kFound);
      ASSERT_EQ(out, value_for(k, 0, 16));
      ASSERT_EQ(st.round_trips, 2u + pos);
      ASSERT_EQ(transport->counters().reads - reads, 2u + pos);
      ASSERT_EQ(transport->counters().bytes_read - bytes, (1u + pos) * kClusterBucketBytes + c.entry_bytes());
      in_main += pos == 0;
    }
    std::printf("load %.1f: %.3f of the hits in the main bucket (2 READs)\n", lf, double(in_main) / keys.size());
    EXPECT_EQ(engine.run(client.read_header(0)).records + engine.run(client.read_header(1)).records, keys.size());
    EXPECT_GT(in_main, keys.size() * 7 / 10);
    // A miss reads the key's chain of header buckets and nothing else.
    OpStats st;
    ASSERT_EQ(engine.run(client.get(keys.back() ^ 0x5555, out), &st).status, Status::kNotFound);
    EXPECT_GE(st.reads, 1u);
    EXPECT_EQ(st.bytes, st.reads * uint64_t{kClusterBucketBytes});
  }
}

// A reader READs k1's header bucket (the slot: entry e, incarnation i); then k1 is erased and e is
// reused by k2. The reader's entry READ at the stale offset must not return k2's value as k1's.
TEST(Cluster, StaleSlotAfterEraseAndReuseByAnotherKeyIsRejected) {
  const ClusterConfig c = small(4, 4, 28, 16);
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  ClusterClient client(c, engine);
  const auto keys = distinct_keys(2, 11);
  const uint64_t k1 = keys[0], k2 = keys[1];
  ASSERT_EQ(shard.put(k1, value_for(k1, 1, 16)), Status::kInserted);
  const ClusterSlotRef stale = engine.run(client.find_slot(k1));
  ASSERT_NE(stale.meta, 0u);
  ASSERT_EQ(shard.erase(k1), Status::kErased);
  ASSERT_EQ(shard.put(k2, value_for(k2, 2, 16)), Status::kInserted);
  ASSERT_EQ(static_cast<uint32_t>(engine.run(client.find_slot(k2)).meta), static_cast<uint32_t>(stale.meta))
      << "the free list must hand k1's entry to k2 (LIFO)";
  std::vector<std::byte> out(16);
  EXPECT_EQ(engine.run(client.read_entry(k1, stale, out)), ClusterEntryRead::kStale);
  EXPECT_EQ(engine.run(client.get(k1, out)).status, Status::kNotFound);
  EXPECT_EQ(engine.run(client.get(k2, out)).status, Status::kFound);
  EXPECT_EQ(out, value_for(k2, 2, 16));
}

// The same with k1 itself re-inserted into its old entry, the reader's entry READ taken after the
// new entry is written and before its slot is published: k1 is absent at that instant (a fresh
// lookup misses it), so the stale slot must not accept the entry although its key is k1 and its
// check word is good. Only the incarnation tells them apart.
TEST(Cluster, StaleSlotAfterEraseAndReinsertOfTheSameKeyIsRejected) {
  const ClusterConfig c = small(4, 4, 28, 16);
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  ClusterClient client(c, engine);
  const uint64_t k1 = distinct_keys(1, 13)[0];
  ASSERT_EQ(shard.put(k1, value_for(k1, 1, 16)), Status::kInserted);
  const ClusterSlotRef stale = engine.run(client.find_slot(k1));
  ASSERT_NE(stale.meta, 0u);
  ASSERT_EQ(shard.erase(k1), Status::kErased);
  std::vector<std::byte> out(16);
  bool ran = false;
  shard.set_publish_hook([&] {
    ran = true;
    EXPECT_EQ(engine.run(client.find_slot(k1)).meta, 0u) << "k1 is not published yet";
    EXPECT_EQ(engine.run(client.read_entry(k1, stale, out)), ClusterEntryRead::kStale)
        << "a slot read before the erase accepted the entry's next incarnation";
  });
  ASSERT_EQ(shard.put(k1, value_for(k1, 2, 16)), Status::kInserted);
  shard.set_publish_hook(nullptr);
  ASSERT_TRUE(ran);
  EXPECT_EQ(static_cast<uint32_t>(engine.run(client.find_slot(k1)).meta), static_cast<uint32_t>(stale.meta));
  EXPECT_EQ(engine.run(client.get(k1, out)).status, Status::kFound);
  EXPECT_EQ(out, value_for(k1, 2, 16));
}

// Between an insert's entry write and its publish, a reader walking the key's chain must either
// not find the slot or find a slot whose entry it accepts: a published slot's entry is complete.
TEST(Cluster, PublishedSlotAlwaysHasItsEntry) {
  const ClusterConfig c = small(3, 6, 60, 24);
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  ClusterClient client(c, engine);
  const auto keys = distinct_keys(60, 17);
  std::vector<std::byte> out(24);
  uint64_t pending = 0, checked = 0, rejected = 0;
  shard.set_publish_hook([&] {
    const ClusterSlotRef s = engine.run(client.find_slot(pending));
    if (s.meta == 0) return;
    ++checked;
    if (engine.run(client.read_entry(pending, s, out)) != ClusterEntryRead::kHit) ++rejected;
  });
  std::mt19937_64 rng(5);
  std::vector<uint64_t> in;
  for (int i = 0; i < 400; ++i) {
    const uint64_t k = keys[rng() % keys.size()];
    if (std::find(in.begin(), in.end(), k) != in.end()) {
      if (rng() % 2) {
        ASSERT_EQ(shard.erase(k), Status::kErased);
        in.erase(std::find(in.begin(), in.end(), k));
      }
      continue;
    }
    pending = k;
    const Status s = shard.put(k, value_for(k, static_cast<uint32_t>(i), 24));
    if (s == Status::kInserted) in.push_back(k);
    // After the insert returned, the reader finds it at once.
    if (s == Status::kInserted) {
      ASSERT_EQ(engine.run(client.get(k, out)).status, Status::kFound);
      ASSERT_EQ(out, value_for(k, static_cast<uint32_t>(i), 24));
    }
  }
  shard.set_publish_hook(nullptr);
  EXPECT_EQ(rejected, 0u) << "a reader found a published slot whose entry was not yet written";
  std::printf("%llu readers found the slot during its insert\n", static_cast<unsigned long long>(checked));
}

TEST(Cluster, CorruptEntryIsNeverReturned) {
  ClusterConfig c = small(4, 4, 28, 16);
  c.retry_budget = std::chrono::milliseconds(20);
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  ClusterClient client(c, engine);
  const uint64_t k = distinct_keys(1, 19)[0];
  ASSERT_EQ(shard.put(k, value_for(k, 1, 16)), Status::kInserted);
  const uint32_t e = static_cast<uint32_t>(engine.run(client.find_slot(k)).meta);
  std::byte* value = t.fabric->local_region(0).data() + c.entries_offset() + uint64_t{e} * c.entry_bytes() + 16;
  value[3] ^= std::byte{0x40};  // a flipped bit the check word must catch
  std::vector<std::byte> out(16);
  EXPECT_THROW(engine.run(client.get(k, out)), RetryBudgetExceeded);
  value[3] ^= std::byte{0x40};
  EXPECT_EQ(engine.run(client.get(k, out)).status, Status::kFound);
  EXPECT_EQ(out, value_for(k, 1, 16));
}

// Every client can WRITE the whole region, so the words the node's CPU follows may be anything. A
// link past the pool, a link cycle or a slot naming an entry past the entry array used to send
// the node's walk outside the region or around the cycle forever, holding the shard's lock. Each
// is refused (the RPC fails with a message), and the shard goes on serving other chains.
TEST(Cluster, AHostileChainFailsItsRpcAndLeavesTheShardUsable) {
  const ClusterConfig c = small(16, 8, 64, 8);
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  ClusterClient client(c, engine);
  std::byte* base = t.fabric->local_region(0).data();
  // k, an absent key of k's bucket, and a key of another bucket.
  const auto keys = distinct_keys(400, 77);
  const uint64_t k = keys[0], home = cluster_place(c, k).bucket;
  uint64_t absent = 0, other = 0;
  for (uint64_t x : keys) {
    if (x != k && cluster_place(c, x).bucket == home && absent == 0) absent = x;
    if (cluster_place(c, x).bucket != home && other == 0) other = x;
  }
  ASSERT_NE(absent, 0u);
  ASSERT_NE(other, 0u);
  ASSERT_EQ(shard.put(k, value_for(k, 1, 8)), Status::kInserted);
  ASSERT_EQ(shard.put(other, value_for(other, 1, 8)), Status::kInserted);
  auto word = [&](uint64_t off) { return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + off)); };
  auto link_of = [&](uint64_t bucket) { return c.buckets_offset() + bucket * kClusterBucketBytes + uint64_t{kClusterSlotsPerBucket - 1} * 16; };
  const uint64_t slot0 = c.buckets_offset() + home * kClusterBucketBytes;  // k's slot: its bucket's first
  const uint64_t saved_link = word(link_of(home)).load(), saved_slot = word(slot0).load();
  ASSERT_EQ(saved_link, 0u) << "k's bucket has no chain yet";
  ASSERT_NE(saved_slot & (1ULL << 63), 0u) << "k is in its bucket's first slot";
  const uint64_t to_pool0 = 1ULL << 62;  // a link word naming pool bucket 0
  struct Case {
    const char* what;
    uint64_t link, slot, key;  // k's bucket's link and first slot; the key whose put meets them
    const char* error;         // what the refusal says
  };
  for (const Case& x : {Case{"a link past the pool", to_pool0 | c.pool_buckets_per_node, saved_slot, absent, "pool buckets"},
                        Case{"a link cycle", to_pool0, saved_slot, absent, "a cycle"},
                        Case{"an entry past the entries", saved_link, (saved_slot & ~0xffffffffULL) | c.entries_per_node, k,
                             "entries"}}) {
    word(link_of(home)).store(x.link);
    word(slot0).store(x.slot);
    word(link_of(c.main_buckets_per_node)).store(to_pool0);  // pool bucket 0 links to itself
    try {
      test::ends_within(std::chrono::seconds(20), x.what, [&] { engine.run(client.put(x.key, value_for(x.key, 2, 8))); });
      ADD_FAILURE() << x.what << ": the put succeeded";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(x.error), std::string::npos) << x.what << ": " << e.what();
    }
    EXPECT_EQ(engine.run(client.put(other, value_for(other, 2, 8))).status, Status::kUpdated) << x.what;
    word(link_of(home)).store(saved_link);
    word(slot0).store(saved_slot);
    word(link_of(c.main_buckets_per_node)).store(0);
  }
  std::vector<std::byte> out(8);
  EXPECT_EQ(engine.run(client.get(k, out)).status, Status::kFound);
  EXPECT_EQ(out, value_for(k, 1, 8));
}

// Splits every READ into its 8-byte words in shuffled or descending order, with one memory-node
// write (`hook`) between some of them: header-bucket and entry READs are torn every way.
class ShuffledTransport final : public Transport {
 public:
  ShuffledTransport(std::unique_ptr<Transport> inner, std::function<void()> hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead && r.len >= 16) {
        const uint32_t words = r.len / 8;
        std::vector<uint32_t> order(words);
        for (uint32_t w = 0; w < words; ++w) order[w] = words - 1 - w;
        if (rng_() % 2) std::shuffle(order.begin(), order.end(), rng_);
        for (uint32_t w : order) {
          Request piece = r;
          piece.addr.offset += w * 8;
          piece.buf = static_cast<std::byte*>(r.buf) + w * 8;
          piece.len = 8;
          inner_->execute(std::span<Request>(&piece, 1));
          if (rng_() % (words + 4) < 4) hook_();
        }
      } else {
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<void()> hook_;
  std::mt19937_64 rng_{23};
};

TEST(Cluster, ShuffledReadsWithWritesBetweenWordsNeverMissOrTear) {
  const ClusterConfig c = small(40, 30, 400, 40);
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  const auto all = distinct_keys(420, 41);
  const std::vector<uint64_t> pool(all.begin(), all.begin() + 240);  // never erased
  // Every salt each key's value has had, in order: a lookup must return one it had while it ran.
  std::unordered_map<uint64_t, std::vector<uint32_t>> salts;
  for (uint64_t k : pool) {
    ASSERT_EQ(shard.put(k, value_for(k, 0, 40)), Status::kInserted);
    salts[k] = {0};
  }
  std::mt19937_64 rng(7);
  std::vector<uint64_t> churn_in, churn_out(all.begin() + 240, all.end());
  uint32_t next_salt = 1;
  auto hook = [&] {
    const uint64_t x = rng();
    if (x % 4 == 0) {
      const uint64_t k = pool[(x >> 8) % pool.size()];
      salts[k].push_back(next_salt);
      ASSERT_EQ(shard.update(k, value_for(k, next_salt++, 40)), Status::kUpdated);
    } else if ((x % 4 == 1 && !churn_out.empty()) || churn_in.empty()) {
      const size_t j = (x >> 8) % churn_out.size();
      const uint64_t k = churn_out[j];
      if (shard.put(k, value_for(k, 0, 40)) == Status::kInserted) {
        churn_in.push_back(k);
        churn_out.erase(churn_out.begin() + static_cast<std::ptrdiff_t>(j));
      }
    } else {
      const size_t j = (x >> 8) % churn_in.size();
      ASSERT_EQ(shard.erase(churn_in[j]), Status::kErased);
      churn_out.push_back(churn_in[j]);
      churn_in.erase(churn_in.begin() + static_cast<std::ptrdiff_t>(j));
    }
  };
  auto transport = std::make_unique<ShuffledTransport>(t.fabric->connect(), hook);
  Engine engine(*transport);
  ClusterClient client(c, engine);
  std::vector<std::byte> out(40);
  uint64_t missed = 0, torn = 0;
  for (int i = 0; i < 6000; ++i) {
    const uint64_t k = pool[rng() % pool.size()];
    const std::vector<uint32_t>& had = salts.at(k);  // a map's elements stay where they are
    const size_t at_start = had.size() - 1;
    const OpResult r = engine.run(client.get(k, out));
    // The value of some instant of the lookup: the one at its start or one the hook wrote since.
    if (r.status != Status::kFound) ++missed;
    else {
      bool ok = false;
      for (size_t s = at_start; s < had.size() && !ok; ++s) ok = out == value_for(k, had[s], 40);
      torn += !ok;
    }
  }
  EXPECT_EQ(missed, 0u) << "a present key was reported absent";
  EXPECT_EQ(torn, 0u) << "a torn value was returned";
  EXPECT_GT(t.server->stats().pool_used, 0u);
}

// Runs `hook` before every READ of `len` bytes (an entry READ), outside the shard's lock.
class BeforeReadTransport final : public Transport {
 public:
  BeforeReadTransport(std::unique_ptr<Transport> inner, uint32_t len, std::function<void()> hook)
      : inner_(std::move(inner)), len_(len), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead && r.len == len_) hook_();
      inner_->execute(std::span<Request>(&r, 1));
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint32_t len_;
  std::function<void()> hook_;
};

// The key is erased and put again (into the same entry, the next incarnation) before every entry
// READ: every slot the lookup reads is stale by the time it READs the entry. After 16 attempts the
// lookup asks the owner (kGet), which answers under the shard's lock with the latest value.
TEST(Cluster, ALookupWhoseSlotKeepsGoingStaleAsksTheOwner) {
  const ClusterConfig c = small(4, 4, 28, 16);
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  const uint64_t k = distinct_keys(1, 37)[0];
  ASSERT_EQ(shard.put(k, value_for(k, 0, 16)), Status::kInserted);
  uint32_t salt = 0;
  auto transport = std::make_unique<BeforeReadTransport>(t.fabric->connect(), c.entry_bytes(), [&] {
    ASSERT_EQ(shard.erase(k), Status::kErased);
    ASSERT_EQ(shard.put(k, value_for(k, ++salt, 16)), Status::kInserted);
  });
  Engine engine(*transport);
  ClusterClient client(c, engine);
  std::vector<std::byte> out(16);
  OpStats st;
  const OpResult r = engine.run(client.get(k, out), &st);
  ASSERT_EQ(r.status, Status::kFound);
  EXPECT_EQ(out, value_for(k, salt, 16));
  EXPECT_EQ(st.rpcs, 1u);
  EXPECT_EQ(st.reads, 32u) << "16 attempts of a header READ and an entry READ";
}

// One main bucket and two pool buckets: exactly 21 keys fit (7 entry slots each), the rest are
// kFull, and every placed key stays readable (the chain never runs past the pool).
TEST(Cluster, PoolBoundAnswersKFull) {
  const ClusterConfig c = small(1, 2, 64, 16);
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  ClusterClient client(c, engine);
  const auto keys = distinct_keys(40, 23);
  std::vector<uint64_t> placed;
  for (uint64_t k : keys) {
    const Status s = shard.put(k, value_for(k, 1, 16));
    if (s == Status::kInserted) placed.push_back(k);
    else ASSERT_EQ(s, Status::kFull);
  }
  EXPECT_EQ(placed.size(), 21u);
  EXPECT_EQ(shard.stats().pool_used, 2u);
  std::vector<std::byte> out(16);
  for (uint64_t k : placed) {
    ASSERT_EQ(engine.run(client.get(k, out)).status, Status::kFound);
    ASSERT_EQ(out, value_for(k, 1, 16));
  }
  // Erasing one frees a slot on the chain: the next insert reuses it without a new pool bucket.
  ASSERT_EQ(shard.erase(placed[3]), Status::kErased);
  EXPECT_EQ(shard.put(keys.back(), value_for(keys.back(), 1, 16)), Status::kInserted);
  EXPECT_EQ(shard.stats().pool_used, 2u);
}

// DrTM's location cache: a hit on a cached bucket is one READ (the entry); a stale cached slot
// (its key erased, re-inserted elsewhere, or its entry reused) costs READs, never a wrong answer.
TEST(Cluster, LocationCacheHitIsOneReadAndStaleLinesAreNeverBelieved) {
  ClusterConfig c = ClusterConfig::for_records(2000, 0.8, 1);
  c.value_bytes = 16;
  Table t(c);
  ClusterShard& shard = t.server->shard(0);
  const auto keys = distinct_keys(2000, 29);
  for (uint64_t k : keys) ASSERT_TRUE(t.server->bulk_insert(k, value_for(k, 0, 16)));
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  c.location_cache = 1u << 12;  // larger than the table's header buckets: every line stays
  ClusterClient client(c, engine);
  std::vector<std::byte> out(16);
  for (uint64_t k : keys) ASSERT_EQ(engine.run(client.get(k, out)).status, Status::kFound);
  for (uint64_t k : keys) {
    OpStats st;
    ASSERT_EQ(engine.run(client.get(k, out), &st).status, Status::kFound);
    ASSERT_EQ(out, value_for(k, 0, 16));
    ASSERT_EQ(st.reads, 1u) << "a cached hit READs the entry only";
    ASSERT_EQ(st.bytes, c.entry_bytes());
  }
  // Behind the cache's back: erase half the keys, put new keys (reusing their entries), re-insert
  // some erased keys (new entries, new slots), update the rest.
  std::unordered_map<uint64_t, uint32_t> want;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t k = keys[i];
    if (i % 2 == 0) {
      ASSERT_EQ(shard.erase(k), Status::kErased);
    } else {
      ASSERT_EQ(shard.update(k, value_for(k, 1, 16)), Status::kUpdated);
      want[k] = 1;
    }
  }
  const auto fresh = distinct_keys(3000, 31);
  for (size_t i = 0; i < 300; ++i) {
    if (want.count(fresh[i]) || std::find(keys.begin(), keys.end(), fresh[i]) != keys.end()) continue;
    ASSERT_EQ(shard.put(fresh[i], value_for(fresh[i], 2, 16)), Status::kInserted);
    want[fresh[i]] = 2;
  }
  for (size_t i = 0; i < keys.size(); i += 8) {
    ASSERT_EQ(shard.put(keys[i], value_for(keys[i], 3, 16)), Status::kInserted);
    want[keys[i]] = 3;
  }
  for (int round = 0; round < 2; ++round)
    for (uint64_t k : keys) {
      const OpResult r = engine.run(client.get(k, out));
      if (!want.count(k)) {
        ASSERT_EQ(r.status, Status::kNotFound) << "key " << k;
      } else {
        ASSERT_EQ(r.status, Status::kFound) << "key " << k;
        ASSERT_EQ(out, value_for(k, want[k], 16)) << "key " << k;
      }
    }
  ClusterConfig bad = c;
  bad.location_cache = kClusterMaxLocationCache + 1;
  EXPECT_THROW(bad.validate(), InvalidArgument);
}

TEST(Cluster, BadConfigurationsAndValuesAreRefused) {
  EXPECT_THROW(small(4, 4, 28, 121).validate(), InvalidArgument);
  EXPECT_THROW(small(0, 4, 28, 8).validate(), InvalidArgument);
  EXPECT_THROW(small(4, 4, 0, 8).validate(), InvalidArgument);
  EXPECT_THROW(ClusterConfig::for_records(100, 1.0, 1), InvalidArgument);
  EXPECT_THROW(ClusterConfig::for_records(0, 0.5, 1), InvalidArgument);
  const ClusterConfig c = small(4, 4, 28, 16);
  Table t(c);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  ClusterClient client(c, engine);
  const std::vector<std::byte> big(17), ok(16);
  EXPECT_THROW(engine.run(client.put(1, big)), InvalidArgument);
  EXPECT_THROW(t.server->shard(0).put(1, big), InvalidArgument);
  EXPECT_THROW(t.server->shard(0).find_or_put(1, big), InvalidArgument);
  EXPECT_EQ(engine.run(client.put(1, ok)).status, Status::kInserted);
}

}  // namespace
}  // namespace rdmahash
