// Linear probing on LocalFabric: pipelined calls, READs per lookup, the probe bound, table edges, the
// speculative claim, tombstones, bad input (random operations against std::unordered_map: conformance_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "rdmahash/continuity.h"
#include "rdmahash/cuckoo.h"
#include "rdmahash/level.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::LocalTable;
using test::value_for;

using test::Format;

std::string name_of(const testing::TestParamInfo<Format>& i) {
  return std::string(to_string(i.param.format)) + "_k" + std::to_string(i.param.key_bytes) + "_v" +
         std::to_string(i.param.value_bytes);
}

class LinearOracle : public testing::TestWithParam<Format> {
 protected:
  LinearConfig config(uint64_t home, uint32_t nodes) const {
    LinearConfig c;
    c.format = GetParam().format;
    c.key_bytes = GetParam().key_bytes;
    c.value_bytes = GetParam().value_bytes;
    c.home_slots = home;
    c.memory_nodes = nodes;
    return c;
  }
  uint64_t key_mask() const {
    if (GetParam().format == SlotFormat::kSet) return (1ULL << 63) - 1;
    return GetParam().key_bytes == 4 ? 0xffffffffULL : ~0ULL;
  }
};

// Random operations against std::unordered_map: tests/conformance_test.cpp (Conformance, every format).

TEST_P(LinearOracle, PipelinedCallsMatchSynchronousOnes) {
  LocalTable t(config(4096, 2));
  Client client(*t.fabric, t.cfg);
  const uint32_t vb = t.cfg.format == SlotFormat::kSet ? 0 : t.cfg.value_bytes;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 2000; ++i) keys.push_back(rng() & key_mask());
  keys.push_back(keys[5]);  // a repeat within one batch: inserted once, then found
  std::vector<std::byte> values;
  for (uint64_t k : keys) {
    auto v = value_for(k, 0, vb);
    values.insert(values.end(), v.begin(), v.end());
  }
  auto res = client.find_or_put_many(keys, values, 32);
  uint64_t inserted = 0;
  for (auto& r : res) inserted += r.status == Status::kInserted;
  std::unordered_set<uint64_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(inserted, distinct.size());
  std::vector<std::byte> out(keys.size() * vb);
  const uint64_t batches_before = client.engine().transport().counters().batches;
  auto got = client.get_many(keys, out, 32);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(got[i].status, Status::kFound);
    auto want = value_for(keys[i], 0, vb);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + static_cast<std::ptrdiff_t>(i * vb)));
  }
  // Pipelining: each get waits for >= 1 round trip, but a batch carries up to 32 operations.
  const uint64_t batches = client.engine().transport().counters().batches - batches_before;
  EXPECT_GE(client.last_stats().round_trips, keys.size());
  EXPECT_LT(client.last_stats().round_trips, keys.size() * 1.2);
  EXPECT_LT(batches, keys.size() / 16);
}

// What a lookup costs, against a closed form: a get reads the windows of R slots from its home up
// to the one holding its key (hit) or its first empty slot (miss), each exactly once, one round
// trip each — whether get answers from the first window itself or hands it on to the general scan
// (issue 12's fast path must not read it twice). Oracle: sequential linear probing, no wrap.
TEST_P(LinearOracle, LookupsReadEachWindowOnce) {
  LinearConfig c = config(256, 1);
  c.tail_slots = 64;
  LocalTable t(c);
  constexpr uint32_t R = 4;
  Client client(*t.fabric, t.cfg, test::probe(8, 128, R));
  const uint32_t vb = t.cfg.format == SlotFormat::kSet ? 0 : t.cfg.value_bytes;
  std::vector<uint64_t> slots(c.total_slots(), 0);  // key + 1 in each occupied slot
  std::unordered_map<uint64_t, uint64_t> where;
  std::mt19937_64 rng(11);
  while (where.size() < 230) {  // load 0.9: long clusters, many lookups past the first window
    const uint64_t k = rng() & key_mask();
    if (where.count(k)) continue;
    uint64_t s = linear_place(c, k).home;
    while (slots[s]) ++s;
    slots[s] = k + 1;
    where[k] = s;
    ASSERT_EQ(client.find_or_put(k, value_for(k, 0, vb)).status, Status::kInserted);
  }
  auto expect_windows = [&](uint64_t k, uint64_t end, Status want) {
    const uint64_t home = linear_place(c, k).home;
    const uint64_t windows = (end - home) / R + 1;
    std::vector<std::byte> out(vb);
    const OpResult r = client.get(k, out);
    ASSERT_EQ(r.status, want) << k;
    EXPECT_EQ(r.chunks, windows) << k;
    EXPECT_EQ(client.last_stats().reads, windows) << k;
    EXPECT_EQ(client.last_stats().round_trips, windows) << k;
    uint64_t bytes = 0;
    for (uint64_t w = 0; w < windows; ++w) bytes += std::min<uint64_t>(R, c.total_slots() - (home + w * R)) * c.slot_bytes();
    EXPECT_EQ(client.last_stats().bytes, bytes) << k;
    if (want == Status::kFound) {
      EXPECT_EQ(out, value_for(k, 0, vb)) << k;
    }
    // get_visit (the benchmark's get): the same answer, handed over once, with the same requests.
    struct Seen final : GetVisitor {
      int calls = 0;
      uint64_t key = 0;
      OpResult r;
      std::vector<std::byte> value;
      void on_get(uint64_t k2, const OpResult& r2, std::span<const std::byte> v) override {
        ++calls;
        key = k2;
        r = r2;
        value.assign(v.begin(), v.end());
      }
    } seen;
    OpStats st;
    client.engine().run(client.table().get_visit(k, vb, seen), &st);
    ASSERT_EQ(seen.calls, 1) << k;
    EXPECT_EQ(seen.key, k);
    EXPECT_EQ(seen.r.status, want) << k;
    EXPECT_EQ(seen.r.chunks, windows) << k;
    EXPECT_EQ(seen.r.matches, want == Status::kFound ? 1u : 0u) << k;
    EXPECT_EQ(st.reads, windows) << k;
    EXPECT_EQ(st.round_trips, windows) << k;
    EXPECT_EQ(st.bytes, bytes) << k;
    EXPECT_EQ(st.reads + st.writes + st.cas + st.faa + st.rpcs, windows) << k;
    if (want == Status::kFound) {
      EXPECT_EQ(seen.value, value_for(k, 0, vb)) << k;
    } else {
      EXPECT_TRUE(seen.value.empty()) << k;
    }
  };
  uint64_t multi = 0;
  for (const auto& [k, s] : where) {
    expect_windows(k, s, Status::kFound);
    multi += s - linear_place(c, k).home >= R;
  }
  EXPECT_GT(multi, 20u);  // the scan past the first window is exercised
  for (int i = 0; i < 200; ++i) {
    const uint64_t k = rng() & key_mask();
    if (where.count(k)) continue;
    uint64_t e = linear_place(c, k).home;
    while (slots[e]) ++e;
    expect_windows(k, e, Status::kNotFound);
  }
  // get_visit hands the value over where it lies, so it takes only the table's value size: any
  // other fails with a clear error, before any request and without calling the visitor.
  struct Never final : GetVisitor {
    int calls = 0;
    void on_get(uint64_t, const OpResult&, std::span<const std::byte>) override { ++calls; }
  } never;
  const uint64_t some = where.begin()->first;
  const uint64_t reads = client.engine().transport().counters().batches;
  EXPECT_THROW(client.engine().run(client.table().get_visit(some, t.cfg.value_bytes + 1, never)), InvalidArgument);
  EXPECT_EQ(never.calls, 0);
  EXPECT_EQ(client.engine().transport().counters().batches, reads);
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearOracle,
                         testing::Values(Format{SlotFormat::kSet, 8, 0}, Format{SlotFormat::kInline, 4, 0},
                                         Format{SlotFormat::kInline, 4, 4}, Format{SlotFormat::kInline, 8, 32},
                                         Format{SlotFormat::kInline, 8, 120}),
                         name_of);

TEST(Linear, FullWhenTheProbeBoundIsExhausted) {
  LinearConfig c;
  c.home_slots = 64;
  c.tail_slots = 16;
  LocalTable t(c);
  Client client(*t.fabric, c, test::probe(4, 2, 8));  // at most 2 chunks of 4 slots
  std::unordered_set<uint64_t> inserted;
  uint64_t full = 0;
  for (uint64_t k = 1; k <= 400; ++k) {
    auto r = client.find_or_put(k);
    if (r.status == Status::kInserted) inserted.insert(k);
    else if (r.status == Status::kFull) ++full;
    else FAIL() << "unexpected status " << to_string(r.status);
    if (r.status == Status::kInserted) {
      EXPECT_LE(r.chunks, 2u);
    }  // kFull also looks past M (below)
  }
  EXPECT_GT(full, 0u);
  EXPECT_LE(inserted.size(), 80u);
  for (uint64_t k : inserted) EXPECT_EQ(client.get(k).status, Status::kFound);
  // Nothing inserted was lost, and a full key is really absent.
  auto keys = t.all_keys();
  EXPECT_EQ(keys.size(), inserted.size());
}

// Issue 10 (review): insert gave up after M chunks while lookups scan to the first empty slot, so a
// client with a smaller M than the inserter's answered kFull for a key that is present.
TEST(Linear, FindOrPutWithASmallerBoundFindsKeysPastIt) {
  for (SlotFormat f : {SlotFormat::kSet, SlotFormat::kInline, SlotFormat::kHeap}) {
    SCOPED_TRACE(to_string(f));
    LinearConfig c;
    c.format = f;
    c.value_bytes = f == SlotFormat::kSet ? 0 : 16;
    c.home_slots = 1;  // every key probes from slot 0: one cluster
    c.tail_slots = 64;
    LocalTable t(c);
    Client wide(*t.fabric, c, test::probe(4, 100, 8));
    Client narrow(*t.fabric, c, test::probe(4, 1, 8));  // M = 1: its inserts see 4 slots
    for (uint64_t k = 1; k <= 20; ++k) ASSERT_EQ(wide.find_or_put(k, value_for(k, 0, c.value_bytes)).status, Status::kInserted);
    for (uint64_t k = 1; k <= 20; ++k) {
      EXPECT_EQ(narrow.get(k).status, Status::kFound) << k;
      EXPECT_EQ(narrow.find_or_put(k, value_for(k, 1, c.value_bytes)).status, Status::kFound) << k;
    }
    EXPECT_EQ(narrow.find_or_put(21, value_for(21, 1, c.value_bytes)).status, Status::kFull);  // absent, past M
    EXPECT_EQ(t.all_keys().size(), 20u);
  }
}

TEST(Linear, NoWrapAroundAtTheEndOfTheTail) {
  LinearConfig c;
  c.home_slots = 8;
  c.tail_slots = 4;
  LocalTable t(c);
  Client client(*t.fabric, c, test::probe(8, 100, 3));
  // Oracle: sequential linear probing without wrap-around over the 12 slots.
  std::vector<uint64_t> slots(c.total_slots(), 0);
  std::unordered_set<uint64_t> want;
  for (uint64_t k = 1; k <= 50; ++k) {
    uint64_t s = linear_place(c, k).home;
    while (s < slots.size() && slots[s]) ++s;
    if (s < slots.size()) slots[s] = k, want.insert(k);
    EXPECT_EQ(client.find_or_put(k).status, want.count(k) ? Status::kInserted : Status::kFull) << k;
  }
  EXPECT_GE(want.size(), 4u);  // keys homed near the end fill the tail, then report full
  auto keys = t.all_keys();
  EXPECT_EQ(std::unordered_set<uint64_t>(keys.begin(), keys.end()), want);
  EXPECT_EQ(keys.size(), want.size());
  for (uint64_t k = 1; k <= 50; ++k)  // never reads outside the region
    EXPECT_EQ(client.get(k).status, want.count(k) ? Status::kFound : Status::kNotFound) << k;
}

// Boundaries: every shard filled to exactly full, with keys homed in the last home slots so that
// probes, chunks (C = 3 does not divide the tail) and lookup READs (R = 8) reach the last slot of
// each shard. Every acknowledged insert is found with its value, the next insert reports full, and
// a scan of every shard holds exactly the inserted keys.
class LinearBoundary : public testing::TestWithParam<Format> {};

TEST_P(LinearBoundary, ShardsFilledToExactlyFullLoseNothingAndReportFull) {
  LinearConfig c = test::config_of(GetParam());
  c.memory_nodes = 2;
  c.home_slots = 16;
  c.tail_slots = 4;  // 20 slots per shard
  const uint64_t mask = c.format == SlotFormat::kSet ? (1ULL << 63) - 1 : c.key_bytes == 4 ? 0xffffffffULL : ~0ULL;
  // For each shard: one key homed at every home slot, and `tail` more homed at the last one. Then
  // for every a, the keys homed at or after slot a number exactly total - a: the shard is exactly
  // full whatever the insertion order (probes never wrap).
  std::vector<uint64_t> keys;
  std::vector<std::vector<uint64_t>> wanted(c.memory_nodes, std::vector<uint64_t>(c.home_slots, 1));
  for (auto& w : wanted) w.back() += c.tail();
  std::unordered_set<uint64_t> used;
  std::vector<uint64_t> extra;  // keys homed at the last home slot, for the "next insert is full" check
  std::mt19937_64 rng(99);
  while (extra.size() < 2 * c.memory_nodes || keys.size() < c.memory_nodes * c.total_slots()) {
    const uint64_t k = rng() & mask;
    if (!used.insert(k).second) continue;
    const LinearPlacement pl = linear_place(c, k);
    if (wanted[pl.node][pl.home] > 0) {
      --wanted[pl.node][pl.home];
      keys.push_back(k);
    } else if (pl.home == c.home_slots - 1 && extra.size() < 2 * c.memory_nodes) {
      extra.push_back(k);
    }
  }
  std::shuffle(keys.begin(), keys.end(), rng);
  LocalTable t(c);
  Client client(*t.fabric, c, test::probe(3, 64, 8));
  const uint32_t vb = c.format == SlotFormat::kSet ? 0 : c.value_bytes;
  for (uint64_t k : keys) ASSERT_EQ(client.find_or_put(k, value_for(k, 0, vb)).status, Status::kInserted) << k;
  for (uint64_t k : extra) EXPECT_EQ(client.find_or_put(k, value_for(k, 0, vb)).status, Status::kFull) << k;
  std::vector<std::byte> out(vb);
  for (uint64_t k : keys) {
    ASSERT_EQ(client.get(k, out).status, Status::kFound) << k;
    EXPECT_EQ(out, value_for(k, 0, vb)) << k;
  }
  for (uint64_t k : extra) EXPECT_EQ(client.get(k, out).status, Status::kNotFound) << k;
  auto stored = t.all_keys();
  std::sort(stored.begin(), stored.end());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(stored, keys);
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearBoundary,
                         testing::Values(Format{SlotFormat::kSet, 8, 0}, Format{SlotFormat::kInline, 8, 24},
                                         Format{SlotFormat::kInline, 4, 8}, Format{SlotFormat::kInline, 4, 0},
                                         Format{SlotFormat::kHeap, 8, 24}),
                         name_of);

// find_or_put's round trips and requests by the distance d of the key's first free slot from its
// home, with the speculative claim on and off (linear.h, "Speculative claim"), and a second
// find_or_put of the key (present). The counts are the protocol's, exactly.
class LinearClaim : public testing::TestWithParam<Format> {};

TEST_P(LinearClaim, RoundTripsAndRequestsByFirstFreeSlot) {
  LinearConfig c = test::config_of(GetParam());
  c.home_slots = 256;
  c.tail_slots = 64;
  constexpr uint32_t C = 8;
  const bool heap = c.format == SlotFormat::kHeap;
  const bool one_word = c.slot_bytes() == 8 && !heap;  // published by its claim CAS
  const uint32_t pub = one_word ? 0 : 1, writes = one_word ? 0 : 2;
  const uint32_t vb = c.format == SlotFormat::kSet ? 0 : c.value_bytes;
  struct Cost { uint32_t rt, reads, cas, writes, faa = 0; };
  auto expect_cost = [](const OpStats& s, Cost want, const std::string& what) {
    EXPECT_EQ(s.round_trips, want.rt) << what;
    EXPECT_EQ(s.reads, want.reads) << what;
    EXPECT_EQ(s.cas, want.cas) << what;
    EXPECT_EQ(s.writes, want.writes) << what;
    EXPECT_EQ(s.faa, want.faa) << what;
  };
  for (SpeculativeClaim mode : {SpeculativeClaim::kOn, SpeculativeClaim::kOff}) {
    for (uint64_t d : {uint64_t{0}, uint64_t{3}, uint64_t{C + 2}}) {
      const std::string what = std::string("claim ") + to_string(mode) + ", d = " + std::to_string(d);
      const bool on = mode == SpeculativeClaim::kOn;
      LocalTable t(c);
      const uint64_t home = 40;
      const auto keys = test::keys_homed_at(c, home, d + 1, 3);
      ProbeConfig p = test::probe(C, 64, 8);
      p.speculative_claim = SpeculativeClaim::kOff;
      Client loader(*t.fabric, c, p);
      for (uint64_t i = 1; i <= d; ++i) ASSERT_EQ(loader.find_or_put(keys[i], value_for(keys[i], 0, vb)).status, Status::kInserted);
      p.speculative_claim = mode;
      Client client(*t.fabric, c, p);
      const uint64_t k = keys[0];
      if (heap) {
        for (uint64_t i = 1; i <= d; ++i) ASSERT_NE(linear_place(c, keys[i]).fp16, linear_place(c, k).fp16);
      }
      ASSERT_EQ(client.find_or_put(k, value_for(k, 1, vb)).status, Status::kInserted) << what;
      if (heap) {
        // The client's first record costs an FAA (a heap block): up front when speculating (the
        // claim CAS publishes it), else at the first free slot, where its WRITE shares the
        // publishing CAS's batch (fenced). The WRITE is the only one; the CAS publishes. k's
        // neighbours' fingerprints differ from k's (checked below), so no record is READ.
        if (on) {
          expect_cost(client.last_stats(), d == 0 ? Cost{2, 1, 1, 1, 1}
                                           : d < C ? Cost{3, 1, 2, 1, 1}
                                                   : Cost{4, 3, 2, 1, 1}, what + ": insert");
        } else {
          expect_cost(client.last_stats(), d < C ? Cost{3, 2, 1, 1, 1} : Cost{3, 3, 1, 1, 1}, what + ": insert");
        }
      } else if (on) {
        expect_cost(client.last_stats(), d == 0 ? Cost{1 + pub, 1, 1, writes}
                                         : d < C ? Cost{2 + pub, 1, 2, writes}
                                                 : Cost{3 + pub, 3, 2, writes}, what + ": insert");
      } else {
        expect_cost(client.last_stats(), d < C ? Cost{2 + pub, 2, 1, writes} : Cost{2 + pub, 3, 1, writes},
                    what + ": insert");
      }
      // Present: found, never inserted twice (a lost speculative claim still scans the home slot).
      ASSERT_EQ(client.find_or_put(k, value_for(k, 2, vb)).status, Status::kFound) << what;
      if (heap) {
        // A spare record is written speculatively in the first batch (and stays private); k's slot
        // matches its fingerprint, so its record is READ to compare keys.
        if (on) {
          expect_cost(client.last_stats(), d < C ? Cost{2, 2, 1, 1} : Cost{3, 4, 1, 1}, what + ": find");
        } else {
          expect_cost(client.last_stats(), d < C ? Cost{2, 3, 0, 1} : Cost{2, 4, 0, 1}, what + ": find");
        }
      } else if (on) {
        expect_cost(client.last_stats(), d < C ? Cost{1, 1, 1, 0} : Cost{2, 3, 1, 0}, what + ": find");
      } else {
        expect_cost(client.last_stats(), Cost{1, 2, 0, 0}, what + ": find");
      }
      std::vector<std::byte> out(vb);
      ASSERT_EQ(client.get(k, out).status, Status::kFound) << what;
      EXPECT_EQ(out, value_for(k, 1, vb)) << what;
      const auto stored = t.all_keys();
      EXPECT_EQ(std::count(stored.begin(), stored.end(), k), 1) << what;
      EXPECT_EQ(stored.size(), d + 1) << what;
    }
  }
}

// kAuto speculates while this client's inserts found their home free at least as often as chunk 0
// full, and follows the evidence both ways (a speculating insert with d = 3 costs 2 CAS, else 1).
TEST_P(LinearClaim, AutoFollowsWhereInsertsFoundTheirFirstFreeSlot) {
  LinearConfig c = test::config_of(GetParam());
  c.home_slots = 1024;
  c.tail_slots = 64;
  constexpr uint32_t C = 8;
  const uint32_t vb = c.format == SlotFormat::kSet ? 0 : c.value_bytes;
  LocalTable t(c);
  ProbeConfig p = test::probe(C, 64, 8);
  p.speculative_claim = SpeculativeClaim::kOff;
  Client loader(*t.fabric, c, p);
  p.speculative_claim = SpeculativeClaim::kAuto;
  Client client(*t.fabric, c, p);
  auto& lc = dynamic_cast<LinearClient&>(client.table());
  uint64_t home = 16;
  // Inserts a new key whose first free slot is d slots from its home (a fresh neighbourhood each).
  auto insert_at = [&](uint64_t d) {
    const auto keys = test::keys_homed_at(c, home, d + 1, 100 + home);
    home += 32;
    for (uint64_t i = 1; i <= d; ++i) ASSERT_EQ(loader.find_or_put(keys[i], value_for(keys[i], 0, vb)).status, Status::kInserted);
    ASSERT_EQ(client.find_or_put(keys[0], value_for(keys[0], 0, vb)).status, Status::kInserted);
  };
  EXPECT_TRUE(lc.speculating()) << "no evidence yet: speculate";
  insert_at(C + 2);
  EXPECT_EQ(client.last_stats().cas, 2u);
  EXPECT_FALSE(lc.speculating()) << "chunk 0 full 1, home free 0";
  insert_at(3);
  EXPECT_EQ(client.last_stats().cas, 1u) << "not speculating";
  EXPECT_FALSE(lc.speculating());
  insert_at(0);
  EXPECT_EQ(client.last_stats().cas, 1u);
  EXPECT_TRUE(lc.speculating()) << "home free 1, chunk 0 full 1";
  insert_at(3);
  EXPECT_EQ(client.last_stats().cas, 2u) << "speculated and lost";
  insert_at(C);
  insert_at(2 * C);
  EXPECT_FALSE(lc.speculating()) << "home free 1, chunk 0 full 3";
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearClaim,
                         testing::Values(Format{SlotFormat::kSet, 8, 0}, Format{SlotFormat::kInline, 8, 8},
                                         Format{SlotFormat::kInline, 4, 0}, Format{SlotFormat::kInline, 4, 8},
                                         Format{SlotFormat::kHeap, 8, 24}, Format{SlotFormat::kHeap, 4, 8}),
                         name_of);

TEST(Linear, TombstonesAreSkippedAndNeverReused) {
  LinearConfig c;
  c.home_slots = 1;  // every key probes from slot 0: one cluster
  c.tail_slots = 64;
  LocalTable t(c);
  Client client(*t.fabric, c);
  for (uint64_t k = 1; k <= 10; ++k) ASSERT_EQ(client.find_or_put(k).status, Status::kInserted);
  ASSERT_EQ(client.erase(3).status, Status::kErased);
  EXPECT_EQ(client.get(3).status, Status::kNotFound);
  EXPECT_EQ(client.get(10).status, Status::kFound);  // lookups continue past the tombstone
  EXPECT_EQ(client.erase(3).status, Status::kNotFound);
  ASSERT_EQ(client.find_or_put(3).status, Status::kInserted);
  // Slot 2 still holds the tombstone; key 3 now sits after key 10.
  const std::byte* slots = t.fabric->local_region(0).data() + sizeof(ShardHeader);
  uint64_t w2, w10;
  std::memcpy(&w2, slots + 2 * 8, 8);
  std::memcpy(&w10, slots + 10 * 8, 8);
  EXPECT_EQ(w2, 1u);
  EXPECT_EQ(w10, (1ULL << 63) | 3);
}

TEST(Linear, BadKeysValuesAndConfigsAreRejected) {
  LinearConfig set;
  LocalTable t(set);
  Client client(*t.fabric, set);
  EXPECT_THROW(client.find_or_put(1ULL << 63), InvalidArgument);
  std::vector<std::byte> v(4);
  EXPECT_THROW(client.find_or_put(1, v), InvalidArgument);  // sets hold no values

  LinearConfig rec;
  rec.format = SlotFormat::kInline;
  rec.key_bytes = 4;
  rec.value_bytes = 8;
  LocalTable t2(rec);
  Client c2(*t2.fabric, rec);
  EXPECT_THROW(c2.find_or_put(1ULL << 32), InvalidArgument);
  std::vector<std::byte> big(9);
  EXPECT_THROW(c2.put(1, big), InvalidArgument);
  std::vector<std::byte> small(3);
  EXPECT_THROW(c2.update(1, small), InvalidArgument);
  std::vector<uint64_t> keys{1, 2, 1ULL << 40};
  EXPECT_THROW(c2.find_or_put_many(keys), InvalidArgument);
  EXPECT_EQ(c2.get(1).status, Status::kNotFound);  // nothing of the bad batch was inserted

  LinearConfig bad = rec;
  bad.value_bytes = 121;
  EXPECT_THROW(bad.validate(), InvalidArgument);
  bad.format = SlotFormat::kHeap;  // heap records take up to 4096 value bytes
  EXPECT_NO_THROW(bad.validate());
  bad.value_bytes = 4096;
  EXPECT_NO_THROW(bad.validate());
  bad.value_bytes = 4097;
  EXPECT_THROW(bad.validate(), InvalidArgument);
  bad = rec;
  bad.key_bytes = 5;
  EXPECT_THROW(bad.validate(), InvalidArgument);
  EXPECT_THROW(LinearConfig::for_records(100, 1.0, 1), InvalidArgument);
  EXPECT_THROW(LinearConfig::for_records(0, 0.5, 1), InvalidArgument);
  EXPECT_THROW((test::probe(0, 1, 1).validate()), InvalidArgument);
}

// Issue 26 item 4: a tail of 2^61 slots wrapped region_bytes() (2^61 · 8 = 2^64), the fabric gave a
// small region and the loader wrote past it. Sizes are checked: validate() refuses a tail or a
// region beyond its bound, and region_bytes() throws rather than return a wrapped size.
TEST(Linear, TailAndRegionBeyondTheirBoundsAreRefused) {
  for (SlotFormat f : {SlotFormat::kSet, SlotFormat::kInline, SlotFormat::kHeap}) {
    LinearConfig c = LinearConfig::for_records(1000000, 0.9999, 1);
    c.format = f;
    c.value_bytes = f == SlotFormat::kSet ? 0 : 8;
    for (uint64_t tail : {uint64_t{1} << 61, uint64_t{1} << 62, uint64_t{1} << 63, ~uint64_t{0}, kMaxTailSlots + 1}) {
      c.tail_slots = tail;
      EXPECT_THROW(c.validate(), InvalidArgument) << to_string(f) << " tail " << tail;
      EXPECT_FALSE(linear_config_error(c).empty());
      // Beyond 2^61 the size wraps: region_bytes() throws instead of returning a small number.
      if (tail >= uint64_t{1} << 61) {
        EXPECT_THROW((void)c.region_bytes(), InvalidArgument) << to_string(f) << " tail " << tail;
      }
    }
    c.tail_slots = 1 << 20;
    EXPECT_NO_THROW(c.validate());
    EXPECT_GT(c.region_bytes(), (uint64_t{1} << 20) * c.slot_bytes());
  }
  // The largest tail whose region still fits: 2^36 8-byte slots (2^39 bytes), accepted.
  LinearConfig c;
  c.tail_slots = kMaxTailSlots;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.region_bytes() % 8, 0u);
  // A heap whose records overflow the region bound (2^36 slots of 4 KiB records).
  c.format = SlotFormat::kHeap;
  c.value_bytes = 4096;
  EXPECT_THROW(c.validate(), InvalidArgument);
  // A load factor so small the slot count exceeds every bound: refused before a double is cast.
  EXPECT_THROW(LinearConfig::for_records(100000, 1e-15, 1), InvalidArgument);
  EXPECT_THROW(LinearConfig::for_records(1ULL << 34, 1e-300, 1), InvalidArgument);
  EXPECT_THROW(CuckooConfig::for_records(100000, 1e-15, 1, 4), InvalidArgument);
  EXPECT_THROW(ContinuityConfig::for_records(100000, 1e-15, 1, 3), InvalidArgument);
  EXPECT_THROW(LevelConfig::for_records(100000, 1e-15, 1, 0), InvalidArgument);
}

TEST(Linear, BulkLoadedRecordsAreFoundWithTheirValues) {
  LinearConfig c = LinearConfig::for_records(20000, 0.8, 2);
  c.format = SlotFormat::kInline;
  c.key_bytes = 8;
  c.value_bytes = 24;
  auto fabric = make_local_fabric({c.region_bytes(), c.region_bytes()});
  LinearShardLoader l0(c, 0, fabric->local_region(0)), l1(c, 1, fabric->local_region(1));
  std::mt19937_64 rng(3);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 20000; ++i) {
    keys.push_back(rng());
    auto v = value_for(keys.back(), 1, 24);
    EXPECT_TRUE(l0.insert(keys.back(), v) || l1.insert(keys.back(), v));
  }
  EXPECT_EQ(l0.records() + l1.records(), 20000u);
  Client client(*fabric, c);
  std::vector<std::byte> out(keys.size() * 24);
  auto res = client.get_many(keys, out, 64);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(res[i].status, Status::kFound);
    auto want = value_for(keys[i], 1, 24);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + static_cast<std::ptrdiff_t>(i * 24)));
  }
  EXPECT_EQ(client.get(rng()).status, Status::kNotFound);
  // The header records what was loaded; a client checks it before use.
  auto h = client.engine().run(static_cast<LinearClient&>(client.table()).read_header(1));
  EXPECT_EQ(h.records, l1.records());
  EXPECT_EQ(h.home_slots, c.home_slots);
}

}  // namespace
}  // namespace rdmahash
