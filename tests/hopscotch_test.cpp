// Hopscotch hashing (rdmahash/hopscotch.h) on LocalFabric: the mechanisms the conformance suite
// does not see. Every key stays within H of its home (memory scanned), a hit is one READ in one
// round trip, a reader's READ between the steps of a displacement still finds every present key,
// shuffled READs with displacements between their words never miss or tear, a corrupt record is
// never returned, and values larger than the table's are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "rdmahash/hopscotch.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::value_for;

struct Table {
  HopscotchConfig cfg;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<HopscotchServer> server;
  explicit Table(const HopscotchConfig& c) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes()));
    server = std::make_unique<HopscotchServer>(*fabric, c);
  }
  // Every live (slot, key) of node n, read straight from its memory.
  std::vector<std::pair<uint64_t, uint64_t>> scan(uint32_t n) const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    const auto region = fabric->local_region(n);
    const uint32_t rb = cfg.record_bytes();
    for (uint64_t s = 0; s < cfg.slots_per_node(); ++s) {
      uint64_t ctrl = 0, key = 0;
      std::memcpy(&ctrl, region.data() + 64 + s * rb, 8);
      std::memcpy(&key, region.data() + 64 + s * rb + 8, 8);
      if (ctrl >> 63) out.emplace_back(s, key);
    }
    return out;
  }
};

HopscotchConfig small(uint64_t home_slots, uint32_t H, uint32_t vb) {
  HopscotchConfig c;
  c.home_slots_per_node = home_slots;
  c.neighborhood = H;
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

bool intact(uint64_t key, std::span<const std::byte> v, const std::unordered_map<uint64_t, uint32_t>& salt) {
  const auto want = value_for(key, salt.at(key), static_cast<uint32_t>(v.size()));
  return std::equal(want.begin(), want.end(), v.begin());
}

TEST(Hopscotch, EveryKeyStaysWithinItsNeighbourhood) {
  for (uint32_t H : {4u, 8u, 32u}) {
    Table t(small(512, H, 16));
    HopscotchShard& shard = t.server->shard(0);
    const auto universe = distinct_keys(560, H);
    std::set<uint64_t> present;
    std::mt19937_64 rng(H * 7 + 1);
    uint64_t full = 0;
    for (int step = 0; step < 30000; ++step) {
      const uint64_t k = universe[rng() % universe.size()];
      if (present.count(k) && rng() % 3 == 0) {
        ASSERT_EQ(shard.erase(k).status, Status::kErased);
        present.erase(k);
      } else {
        const Status s = shard.put(k, value_for(k, 0, 16)).status;
        if (s == Status::kFull) ++full;
        else present.insert(k);
      }
      if (step % 1000 == 999) {
        std::set<uint64_t> seen;
        for (const auto& [slot, key] : t.scan(0)) {
          const uint64_t home = hopscotch_place(t.cfg, key).home;
          ASSERT_GE(slot, home) << "key " << key << " before its home (H=" << H << ")";
          ASSERT_LT(slot - home, H) << "key " << key << " at distance " << slot - home << " from home (H=" << H << ")";
          ASSERT_TRUE(seen.insert(key).second) << "key " << key << " live twice outside a move";
        }
        ASSERT_EQ(seen, present);
      }
    }
    EXPECT_GT(shard.stats().displacements, 100u) << "H=" << H << ": the churn must displace records";
    std::printf("H=%u: %zu present of 512 home slots, %llu displacements, %llu kFull\n", H, present.size(),
                static_cast<unsigned long long>(shard.stats().displacements), static_cast<unsigned long long>(full));
  }
}

TEST(Hopscotch, HitIsOneReadInOneRoundTrip) {
  HopscotchConfig c = small(1250, 8, 16);
  c.memory_nodes = 2;
  Table t(c);
  const auto keys = distinct_keys(1600, 5);  // load 0.64
  for (uint64_t k : keys) (void)t.server->bulk_insert(k, value_for(k, 0, 16));
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  std::vector<std::byte> out(16);
  for (uint64_t k : keys) {
    OpStats st;
    const uint64_t reads = transport->counters().reads, bytes = transport->counters().bytes_read;
    const OpResult r = engine.run(client.get(k, out), &st);
    ASSERT_EQ(r.status, Status::kFound);
    ASSERT_EQ(out, value_for(k, 0, 16));
    ASSERT_EQ(st.round_trips, 1u);
    ASSERT_EQ(transport->counters().reads - reads, 1u);
    ASSERT_EQ(transport->counters().bytes_read - bytes, c.read_bytes());
    ASSERT_EQ(r.chunks, 1u);
  }
  // A miss once the moves word is cached: the neighbourhood READ and the 8-byte moves READ.
  (void)engine.run(client.read_header(0));
  (void)engine.run(client.read_header(1));
  OpStats st;
  ASSERT_EQ(engine.run(client.get(keys.back() ^ 0x5555, out), &st).status, Status::kNotFound);
  EXPECT_EQ(st.reads, 2u);
  EXPECT_EQ(st.round_trips, 2u);
}

// The move hook runs between the copy and the clear of every move, and after the clear: a reader's
// single READ taken at each of those instants must find every present key (copy-then-clear).
TEST(Hopscotch, ReaderBetweenDisplacementStepsFindsEveryPresentKey) {
  const HopscotchConfig c = small(400, 8, 24);
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  const auto universe = distinct_keys(420, 9);
  std::unordered_map<uint64_t, uint32_t> salt;  // present keys and their values' salt
  std::mt19937_64 rng(3);
  uint64_t steps = 0, missed = 0, torn = 0;
  std::vector<std::byte> out(24);
  shard.set_move_hook([&] {
    ++steps;
    for (const auto& [k, s] : salt) {
      const auto r = engine.run(client.probe_once(k, out));
      if (!r || *r != Status::kFound) ++missed;
      else if (!intact(k, out, salt)) ++torn;
    }
  });
  for (int i = 0; i < 6000 && steps < 400; ++i) {
    const uint64_t k = universe[rng() % universe.size()];
    if (salt.count(k) && rng() % 2 == 0) {
      ASSERT_EQ(shard.erase(k).status, Status::kErased);
      salt.erase(k);
    } else if (!salt.count(k)) {
      const uint32_t s = static_cast<uint32_t>(i + 1);
      if (shard.put(k, value_for(k, s, 24)).status == Status::kInserted) salt[k] = s;
    }
  }
  EXPECT_GT(steps, 100u) << "displacements must happen";
  EXPECT_EQ(missed, 0u) << "a present key was absent from its neighbourhood between the steps of a move";
  EXPECT_EQ(torn, 0u);
}

// Splits every READ into its 8-byte words, performed in descending or shuffled order, with one
// memory-node write (`hook`) between some of them: a neighbourhood READ is not atomic, and a key
// moving forward is missed when its new slot is read before the copy and its old one after the
// clear. The moves counter must make the reader retry.
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
        hook_();
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

TEST(Hopscotch, ShuffledReadsWithDisplacementsBetweenWordsNeverMissOrTear) {
  const HopscotchConfig c = small(600, 8, 40);
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const auto all = distinct_keys(700, 41);
  const std::vector<uint64_t> pool(all.begin(), all.begin() + 480);  // load 0.8, never erased
  std::unordered_map<uint64_t, uint32_t> salt;
  for (uint64_t k : pool) {
    ASSERT_EQ(shard.put(k, value_for(k, 0, 40)).status, Status::kInserted);
    salt[k] = 0;
  }
  std::mt19937_64 rng(7);
  std::vector<uint64_t> churn_in, churn_out(all.begin() + 480, all.end());
  uint32_t next_salt = 1;
  auto hook = [&] {
    const uint64_t x = rng();
    if (x % 4 == 0) {
      const uint64_t k = pool[(x >> 8) % pool.size()];
      salt[k] = next_salt;
      ASSERT_EQ(shard.update(k, value_for(k, next_salt++, 40)).status, Status::kUpdated);
    } else if ((x % 4 == 1 && !churn_out.empty()) || churn_in.empty()) {
      const size_t j = (x >> 8) % churn_out.size();
      const uint64_t k = churn_out[j];
      if (shard.put(k, value_for(k, 0, 40)).status == Status::kInserted) {
        churn_in.push_back(k);
        churn_out.erase(churn_out.begin() + static_cast<std::ptrdiff_t>(j));
      }
    } else {
      const size_t j = (x >> 8) % churn_in.size();
      ASSERT_EQ(shard.erase(churn_in[j]).status, Status::kErased);
      churn_out.push_back(churn_in[j]);
      churn_in.erase(churn_in.begin() + static_cast<std::ptrdiff_t>(j));
    }
  };
  auto transport = std::make_unique<ShuffledTransport>(t.fabric->connect(), hook);
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  const uint64_t moved_before = shard.stats().displacements;
  std::vector<std::byte> out(40);
  uint64_t missed = 0, torn = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t k = pool[rng() % pool.size()];
    const OpResult r = engine.run(client.get(k, out));
    // The value read is the one of some instant of the lookup: the hook may have updated it since.
    if (r.status != Status::kFound) ++missed;
    else {
      bool ok = false;
      for (uint32_t s = 0; s < next_salt && !ok; ++s) ok = out == value_for(k, s, 40);
      torn += !ok;
    }
  }
  EXPECT_EQ(missed, 0u) << "a present key was reported absent while records were moving";
  EXPECT_EQ(torn, 0u) << "a torn value was returned";
  EXPECT_GT(shard.stats().displacements - moved_before, 100u) << "displacements must overlap the lookups";
}

// The miss the moves counter exists for, forced: the reader's one READ of y's neighbourhood is
// performed slot by slot from the top, and between the first slot (y's destination, still free)
// and the rest (y's old slot, cleared by then) an insert moves y. The READ sees y nowhere; the
// moves word changed meanwhile, so the lookup must read again and find y.
class DescendingOnceTransport final : public Transport {
 public:
  DescendingOnceTransport(std::unique_ptr<Transport> inner, uint32_t record_bytes, uint32_t read_bytes,
                          std::function<void()> hook)
      : inner_(std::move(inner)), rb_(record_bytes), len_(read_bytes), hook_(std::move(hook)) {}
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead && r.len == len_ && hook_) {
        for (uint32_t i = len_ / rb_; i-- > 0;) {
          Request piece = r;
          piece.addr.offset += i * rb_;
          piece.buf = static_cast<std::byte*>(r.buf) + i * rb_;
          piece.len = rb_;
          inner_->execute(std::span<Request>(&piece, 1));
          if (hook_) std::exchange(hook_, nullptr)();
        }
      } else {
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint32_t rb_, len_;
  std::function<void()> hook_;
};

TEST(Hopscotch, MissDuringAMoveIsReadAgain) {
  const HopscotchConfig c = small(64, 4, 16);
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  auto homed = [&](uint64_t home, size_t n) {
    std::vector<uint64_t> out;
    for (uint64_t k = 1; out.size() < n; ++k)
      if (hopscotch_place(c, k * 0x9E3779B97F4A7C15ULL >> 1).home == home) out.push_back(k * 0x9E3779B97F4A7C15ULL >> 1);
    return out;
  };
  const auto at10 = homed(10, 5);
  const uint64_t y = homed(12, 1)[0];
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(shard.put(at10[i], value_for(at10[i], 0, 16)).status, Status::kInserted);
  ASSERT_EQ(shard.put(y, value_for(y, 0, 16)).status, Status::kInserted);
  auto slot_of = [&](uint64_t key) -> uint64_t {
    for (const auto& [s, k] : t.scan(0))
      if (k == key) return s;
    return ~0ULL;
  };
  ASSERT_EQ(slot_of(y), 14u) << "slots 10..13 hold the four keys homed at 10, y (home 12) probes to 14";
  // Inserting a fifth key homed at 10 finds slot 15 free, moves y from 14 to 15 (its neighbourhood
  // [12, 16) still holds it), then finds nothing to move into 14 and answers kFull.
  const uint64_t x = at10[4];
  auto hook = [&] {
    const uint64_t moved = shard.stats().displacements;
    EXPECT_EQ(shard.put(x, value_for(x, 0, 16)).status, Status::kFull);
    EXPECT_EQ(shard.stats().displacements, moved + 1);
  };
  auto transport = std::make_unique<DescendingOnceTransport>(t.fabric->connect(), c.record_bytes(), c.read_bytes(), hook);
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  (void)engine.run(client.read_header(0));  // the moves word cached: a miss could be trusted at once
  std::vector<std::byte> out(16);
  OpStats st;
  const OpResult r = engine.run(client.get(y, out), &st);
  EXPECT_EQ(slot_of(y), 15u);
  EXPECT_EQ(r.status, Status::kFound) << "y was present throughout, but the READ met it in neither slot";
  EXPECT_EQ(out, value_for(y, 0, 16));
  EXPECT_EQ(r.chunks, 2u) << "the neighbourhood READ, then once more after the moves word changed";
}

TEST(Hopscotch, CorruptRecordIsNeverReturned) {
  HopscotchConfig c = small(256, 8, 16);
  c.retry_budget = std::chrono::milliseconds(5);
  Table t(c);
  const auto keys = distinct_keys(100, 77);
  for (uint64_t k : keys) ASSERT_TRUE(t.server->bulk_insert(k, value_for(k, 0, 16)));
  auto region = t.fabric->local_region(0);
  // Flip one value byte of a present record (its check word now disagrees): the state a torn READ
  // of an update would show.
  const auto [slot, key] = t.scan(0).at(10);
  region[64 + slot * c.record_bytes() + 16 + 3] ^= std::byte{0x40};
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  std::vector<std::byte> out(16);
  EXPECT_FALSE(engine.run(client.probe_once(key, out)).has_value()) << "the corrupt record must read as unstable";
  EXPECT_THROW(engine.run(client.get(key, out)), RetryBudgetExceeded);
  // The others are untouched.
  for (uint64_t k : keys) {
    if (k == key) continue;
    ASSERT_EQ(engine.run(client.get(k, out)).status, Status::kFound);
  }
}

TEST(Hopscotch, ValuesLargerThanTheTableAreRefused) {
  const HopscotchConfig c = small(256, 8, 16);
  Table t(c);
  HopscotchShard& shard = t.server->shard(0);
  const uint64_t k = distinct_keys(1, 3)[0];
  const std::vector<std::byte> big(24, std::byte{1});
  EXPECT_THROW(shard.find_or_put(k, big), InvalidArgument);
  EXPECT_THROW(shard.put(k, big), InvalidArgument);
  EXPECT_THROW(shard.update(k, big), InvalidArgument);
  EXPECT_EQ(shard.records(), 0u);
  auto transport = t.fabric->connect();
  Engine engine(*transport);
  HopscotchClient client(c, engine);
  EXPECT_THROW(engine.run(client.find_or_put(k, big)), InvalidArgument);
  EXPECT_EQ(transport->counters().batches, 0u);
  EXPECT_THROW(HopscotchConfig(small(256, 65, 16)).validate(), InvalidArgument);
  EXPECT_THROW(HopscotchConfig(small(256, 1, 16)).validate(), InvalidArgument);
}

}  // namespace
}  // namespace rdmahash
