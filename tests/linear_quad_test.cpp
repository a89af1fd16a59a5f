// Quadratic chunks (linear.h, ChunkOrder): an exact probing oracle (every acknowledged insert
// found, the shards' scan equals the oracle's slots, filled to full then kFull, keys homed at the
// end of the shard so chunks wrap), the bulk loader walking the same sequence, several clients on
// overlapping keys, and the configurations a quadratic table refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "test_util.h"

namespace rdmahash {
namespace {

using test::Format;
using test::LocalTable;
using test::value_for;

constexpr uint64_t kTomb = ~0ULL;  // the oracle's tombstone

uint64_t mask_of(const LinearConfig& c) {
  return c.format == SlotFormat::kSet ? (1ULL << 63) - 1 : c.key_bytes == 4 ? 0xffffffffULL : ~0ULL;
}

// Sequential quadratic probing, written from the definition (chunk i of home h starts at
// h + C·i(i+1)/2 mod N, at most min(M, ⌈N/C⌉) chunks): the slot an insert of `key` claims, or N.
uint64_t oracle_slot(const LinearConfig& c, uint32_t max_chunks, const std::vector<uint64_t>& slots, uint64_t home) {
  const uint64_t n = c.total_slots(), C = c.chunk;
  const uint64_t chunks = std::min<uint64_t>(max_chunks, (n + C - 1) / C);
  for (uint64_t i = 0; i < chunks; ++i) {
    const uint64_t start = (home + C * (i * (i + 1) / 2)) % n;
    for (uint64_t j = 0; j < C; ++j)
      if (slots[(start + j) % n] == 0) return (start + j) % n;
  }
  return n;
}

class LinearQuad : public testing::TestWithParam<Format> {};

std::string name_of(const testing::TestParamInfo<Format>& i) {
  return std::string(to_string(i.param.format)) + "_k" + std::to_string(i.param.key_bytes) + "_v" +
         std::to_string(i.param.value_bytes);
}

// Two shards of 20 slots (16 home + 4 tail), C = 3 (does not divide 20: chunks straddle the end of
// the shard and go on at slot 0), keys offered until every shard reports kFull, a third of them
// homed in the last two home slots. The table must hold exactly the oracle's slots, in its order.
TEST_P(LinearQuad, ExactOracleFillToFullThenFull) {
  LinearConfig c = test::config_of(GetParam());
  c.memory_nodes = 2;
  c.home_slots = 16;
  c.tail_slots = 4;
  c.chunk_order = ChunkOrder::kQuadratic;
  c.chunk = 3;
  LocalTable t(c);
  const uint32_t M = 64;  // more than ⌈20/3⌉ = 7: the sequence's bound applies
  Client client(*t.fabric, c, test::probe(3, M, 8));
  const uint32_t vb = c.format == SlotFormat::kSet ? 0 : c.value_bytes;
  std::vector<std::vector<uint64_t>> slots(c.memory_nodes, std::vector<uint64_t>(c.total_slots(), 0));
  std::unordered_set<uint64_t> acked, refused, offered;
  std::mt19937_64 rng(5);
  const uint64_t mask = mask_of(c);
  uint32_t full_in_a_row = 0, end_homed = 0;
  while (full_in_a_row < 400) {
    uint64_t k = rng() & mask;
    if (k < 2 || !offered.insert(k).second) continue;
    const LinearPlacement p = linear_place(c, k);
    if (p.home < c.home_slots - 2 && rng() % 3 == 0) continue;  // favour keys homed at the end
    end_homed += p.home >= c.home_slots - 2;
    const uint64_t s = oracle_slot(c, M, slots[p.node], p.home);
    const OpResult r = client.find_or_put(k, value_for(k, 0, vb));
    if (s < c.total_slots()) {
      ASSERT_EQ(r.status, Status::kInserted) << k;
      EXPECT_LE(r.chunks, 7u + 7u);  // its chunks (+ none: an insert needs no lookup)
      slots[p.node][s] = k;
      acked.insert(k);
      full_in_a_row = 0;
    } else {
      ASSERT_EQ(r.status, Status::kFull) << k;
      refused.insert(k);
      ++full_in_a_row;
    }
  }
  EXPECT_GT(end_homed, 20u);
  EXPECT_GE(acked.size(), 2 * 14u);  // most of the 40 slots (triangular offsets may skip some)
  // Every acknowledged key found with its value, and found again by find_or_put; refused keys absent.
  std::vector<std::byte> out(vb);
  for (uint64_t k : acked) {
    ASSERT_EQ(client.get(k, out).status, Status::kFound) << k;
    EXPECT_EQ(out, value_for(k, 0, vb)) << k;
    EXPECT_EQ(client.find_or_put(k, value_for(k, 1, vb)).status, Status::kFound) << k;
    const OpResult all = client.engine().run(client.table().get_all(k, nullptr));
    EXPECT_EQ(all.matches, 1u) << k;
  }
  for (uint64_t k : refused) EXPECT_EQ(client.get(k, out).status, Status::kNotFound) << k;
  // The shards hold exactly the oracle's slots (linear_scan_keys lists keys in slot order).
  for (uint32_t n = 0; n < c.memory_nodes; ++n) {
    std::vector<uint64_t> want;
    for (uint64_t k : slots[n])
      if (k != 0) want.push_back(k);
    EXPECT_EQ(linear_scan_keys(c, t.fabric->local_region(n)), want) << "node " << n;
  }
  // A client with M = 1 finds keys past its first chunk (find_or_put looks the key up, as get).
  Client narrow(*t.fabric, c, test::probe(3, 1, 8));
  for (uint64_t k : acked) ASSERT_EQ(narrow.find_or_put(k, value_for(k, 1, vb)).status, Status::kFound) << k;
  // Erase leaves tombstones that lookups walk through: the other keys stay found, the erased ones
  // are gone, and no insert reuses a tombstone (the oracle's next free slot is still the answer).
  std::vector<uint64_t> erased(acked.begin(), acked.end());
  std::sort(erased.begin(), erased.end());
  erased.resize(erased.size() / 3);
  for (uint64_t k : erased) {
    ASSERT_EQ(client.erase(k).status, Status::kErased) << k;
    const LinearPlacement p = linear_place(c, k);
    *std::find(slots[p.node].begin(), slots[p.node].end(), k) = kTomb;
    acked.erase(k);
  }
  for (uint64_t k : erased) EXPECT_EQ(client.get(k, out).status, Status::kNotFound) << k;
  for (uint64_t k : acked) EXPECT_EQ(client.get(k, out).status, Status::kFound) << k;
  for (uint64_t k : erased) {
    const LinearPlacement p = linear_place(c, k);
    const uint64_t s = oracle_slot(c, M, slots[p.node], p.home);
    EXPECT_EQ(client.find_or_put(k, value_for(k, 2, vb)).status, s < c.total_slots() ? Status::kInserted : Status::kFull) << k;
    if (s < c.total_slots()) slots[p.node][s] = k;
  }
  if (c.format == SlotFormat::kInline && vb > 0)  // updates find the key along the same sequence
    for (uint64_t k : acked) {
      ASSERT_EQ(client.update(k, value_for(k, 3, vb)).status, Status::kUpdated) << k;
      ASSERT_EQ(client.get(k, out).status, Status::kFound);
      EXPECT_EQ(out, value_for(k, 3, vb));
    }
}

// The bulk loader and the clients walk the same sequence: loaded keys are found, and a client's
// insert of a new key lands where the oracle says after the load.
TEST_P(LinearQuad, BulkLoadedRecordsAreFoundAlongTheSequence) {
  LinearConfig c = test::config_of(GetParam());
  c.home_slots = 64;
  c.tail_slots = 8;
  c.chunk_order = ChunkOrder::kQuadratic;
  c.chunk = 4;
  LocalTable t(c);
  const uint32_t vb = c.format == SlotFormat::kSet ? 0 : c.value_bytes;
  LinearShardLoader loader(c, 0, t.fabric->local_region(0));
  std::vector<uint64_t> slots(c.total_slots(), 0);
  std::vector<uint64_t> keys = test::keys_homed_at(c, 62, 12, 1);  // crowded at the end: chunks wrap
  for (uint64_t k = 1000; keys.size() < 50; ++k) keys.push_back(k);
  for (uint64_t k : keys) {
    const uint64_t s = oracle_slot(c, 1u << 30, slots, linear_place(c, k).home);
    ASSERT_LT(s, c.total_slots());
    slots[s] = k;
    ASSERT_TRUE(loader.insert(k, value_for(k, 0, vb)));
  }
  std::vector<uint64_t> want;
  for (uint64_t k : slots)
    if (k) want.push_back(k);
  EXPECT_EQ(linear_scan_keys(c, t.fabric->local_region(0)), want);
  Client client(*t.fabric, c, test::probe(4, 128, 8));
  std::vector<std::byte> out(vb);
  for (uint64_t k : keys) {
    ASSERT_EQ(client.get(k, out).status, Status::kFound) << k;
    EXPECT_EQ(out, value_for(k, 0, vb));
    EXPECT_EQ(client.find_or_put(k, value_for(k, 1, vb)).status, Status::kFound) << k;
  }
}

// Several clients (threads) insert overlapping keys into a crowded quadratic table: every key once,
// every client's answer kInserted or kFound, and all found afterwards.
TEST_P(LinearQuad, ConcurrentFindOrPutInsertsEveryKeyOnce) {
  LinearConfig c = test::config_of(GetParam());
  c.home_slots = 512;
  c.tail_slots = 64;
  c.memory_nodes = 2;
  c.chunk_order = ChunkOrder::kQuadratic;
  c.chunk = 4;
  LocalTable t(c);
  std::mt19937_64 rng(23);
  std::vector<uint64_t> pool;
  std::unordered_set<uint64_t> seen;
  while (pool.size() < 820) {  // load factor 0.8 of the home slots
    const uint64_t k = rng() & mask_of(c);
    if (k > 1 && seen.insert(k).second) pool.push_back(k);
  }
  const uint32_t vb = c.format == SlotFormat::kSet ? 0 : c.value_bytes;
  constexpr int kThreads = 4;
  std::vector<uint64_t> inserted(kThreads), found(kThreads), other(kThreads);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th)
    threads.emplace_back([&, th] {
      ProbeConfig p = test::probe(4, 1024, 8);
      p.speculative_claim = th % 2 ? SpeculativeClaim::kOn : SpeculativeClaim::kOff;
      Client client(*t.fabric, c, p);
      std::vector<uint64_t> keys = pool;
      if (th > 0) std::shuffle(keys.begin(), keys.end(), std::mt19937_64(200 + th));
      std::vector<std::byte> values;
      for (uint64_t k : keys) {
        auto v = value_for(k, 0, vb);
        values.insert(values.end(), v.begin(), v.end());
      }
      for (const auto& r : client.find_or_put_many(keys, values, 1 + th * 8)) {
        if (r.status == Status::kInserted) ++inserted[th];
        else if (r.status == Status::kFound) ++found[th];
        else ++other[th];
      }
    });
  for (auto& th : threads) th.join();
  uint64_t ins = 0, fnd = 0;
  for (int th = 0; th < kThreads; ++th) {
    ins += inserted[th];
    fnd += found[th];
    EXPECT_EQ(other[th], 0u);
  }
  EXPECT_EQ(ins, pool.size());
  EXPECT_EQ(ins + fnd, kThreads * pool.size());
  auto keys = t.all_keys();
  std::unordered_set<uint64_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size()) << "a key was inserted twice";
  EXPECT_EQ(distinct, seen);
  Client reader(*t.fabric, c, test::probe(4, 1, 8));
  std::vector<std::byte> out(vb);
  for (uint64_t k : pool) {
    ASSERT_EQ(reader.get(k, out).status, Status::kFound) << k;
    EXPECT_EQ(out, value_for(k, 0, vb));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearQuad,
                         testing::Values(Format{SlotFormat::kSet, 8, 0}, Format{SlotFormat::kInline, 8, 24},
                                         Format{SlotFormat::kInline, 4, 8}, Format{SlotFormat::kInline, 4, 0}),
                         name_of);

// One READ per chunk, at the triangular offsets: a key whose chunks 0..2 are full claims in chunk 3.
TEST(LinearQuadOrder, ChunksAreReadAtTriangularOffsets) {
  LinearConfig c;
  c.home_slots = 256;
  c.tail_slots = 16;
  c.chunk_order = ChunkOrder::kQuadratic;
  c.chunk = 4;
  LocalTable t(c);
  const uint64_t home = 10;
  // Fill chunks 0, 1, 2 of home 10 (slots 10..13, 14..17, 22..25) with keys homed there.
  std::vector<uint64_t> keys = test::keys_homed_at(c, home, 13, 3);
  ProbeConfig p = test::probe(4, 16, 8);
  p.speculative_claim = SpeculativeClaim::kOff;
  Client client(*t.fabric, c, p);
  for (size_t i = 0; i < 12; ++i) ASSERT_EQ(client.find_or_put(keys[i]).status, Status::kInserted);
  std::vector<uint64_t> want_slots = {10, 11, 12, 13, 14, 15, 16, 17, 22, 23, 24, 25};
  const std::byte* region = t.fabric->local_region(0).data() + sizeof(ShardHeader);
  for (size_t i = 0; i < 12; ++i) {
    uint64_t w;
    std::memcpy(&w, region + want_slots[i] * 8, 8);
    EXPECT_EQ(w, (1ULL << 63) | keys[i]) << "slot " << want_slots[i];
  }
  const OpResult r = client.find_or_put(keys[12]);  // chunk 3 starts at 10 + 4·6 = 34
  EXPECT_EQ(r.status, Status::kInserted);
  EXPECT_EQ(r.chunks, 4u);
  uint64_t w;
  std::memcpy(&w, region + 34 * 8, 8);
  EXPECT_EQ(w, (1ULL << 63) | keys[12]);
  EXPECT_EQ(client.get(keys[12]).chunks, 4u);  // the lookup reads the same four chunks
  // A linear table's lookup would have stopped at slot 18 (empty): the quadratic one walks past it.
  EXPECT_EQ(client.get(keys[12]).status, Status::kFound);
}

TEST(LinearQuadOrder, RefusedCombinations) {
  LinearConfig c;
  c.chunk_order = ChunkOrder::kQuadratic;
  c.chunk = 8;
  LocalTable t(c);
  EXPECT_THROW({ Client x(*t.fabric, c, test::probe(16, 8, 8)); }, InvalidArgument);  // not the table's chunk
  ProbeConfig p = test::probe(8, 8, 8);
  p.read_sizer = std::make_shared<ClusterReadSizer>(8, 10, [](uint64_t, uint64_t) { return 8u; });
  EXPECT_THROW({ Client x(*t.fabric, c, p); }, InvalidArgument);  // read sizers assume contiguous probing
  LinearConfig h = c;
  h.format = SlotFormat::kHeap;
  h.value_bytes = 8;
  EXPECT_NE(linear_config_error(h).find("quadratic"), std::string::npos);
  LinearConfig z = c;
  z.chunk = 0;
  EXPECT_FALSE(linear_config_error(z).empty());
  EXPECT_EQ(parse_chunk_order("quadratic"), ChunkOrder::kQuadratic);
  EXPECT_EQ(parse_chunk_order("linear"), ChunkOrder::kLinear);
  EXPECT_FALSE(parse_chunk_order("cubic").has_value());
}

}  // namespace
}  // namespace rdmahash
