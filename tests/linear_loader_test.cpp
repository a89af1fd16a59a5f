// The memory node's bulk loader (LinearShardLoader) against an oracle: the naive rule "each record
// goes to the first free slot at or after its home, in insertion order" simulated here slot by
// slot. The loader's union-find over full slots (built on the first long walk) must give exactly
// that layout, for hot keys (multimaps: seed 000 Fig. 12's zipfian θ = 0.99) and mixed keys, in
// every contiguous format; and its work (slot_checks(): slots looked at plus union-find steps) must
// be the naive walk's exactly while no walk is long, and about linear in n for n copies of one key,
// where the naive walk is O(n²).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "test_util.h"

namespace rdmahash {
namespace {

std::vector<std::byte> value_of(uint64_t key, uint32_t bytes) {
  std::vector<std::byte> v(bytes);
  for (uint32_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>(key * 131 + i);
  return v;
}

// Loads `keys` in order and checks the shard's keys, slot by slot, against the naive rule.
// Returns the naive walk's slot checks (per insert: every slot from home to the one taken).
uint64_t check_layout(const LinearConfig& c, const std::vector<uint64_t>& keys, uint64_t* loader_checks) {
  auto fabric = make_local_fabric({c.region_bytes()});
  LinearShardLoader loader(c, 0, fabric->local_region(0));
  const uint64_t total = c.total_slots();
  const uint32_t per_slot = c.format == SlotFormat::kHeap4 ? 4 : 1;
  std::vector<uint32_t> used(total, 0);
  std::map<uint64_t, std::vector<uint64_t>> expected;  // slot -> keys in way order
  uint64_t naive = 0;
  for (uint64_t k : keys) {
    EXPECT_TRUE(loader.insert(k, value_of(k, c.value_bytes)));
    const uint64_t home = linear_place(c, k).home;
    uint64_t s = home;
    while (s < total && used[s] == per_slot) ++s;
    EXPECT_LT(s, total);
    if (s >= total) return naive;
    naive += s - home + 1;
    ++used[s];
    expected[s].push_back(k);
  }
  std::vector<uint64_t> want;
  for (const auto& [slot, ks] : expected) want.insert(want.end(), ks.begin(), ks.end());
  EXPECT_EQ(linear_scan_keys(c, fabric->local_region(0)), want);
  EXPECT_EQ(loader.records(), keys.size());
  *loader_checks = loader.slot_checks();
  return naive;
}

LinearConfig config(SlotFormat f) {
  LinearConfig c;
  c.format = f;
  c.key_bytes = 8;
  c.value_bytes = f == SlotFormat::kSet ? 0 : 8;
  c.home_slots = 4096;
  c.tail_slots = 8192;
  return c;
}

// Hot keys interleaved with distinct ones, some of which land inside the hot clusters: the
// union-find is built mid-load (the first walk past 256 slots) and then must agree with the
// slots filled before it existed and after.
std::vector<uint64_t> mixed_keys() {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 6000; ++i) {
    const uint64_t r = rng() % 10;
    if (r < 4) keys.push_back(11);                  // hottest
    else if (r < 6) keys.push_back(12);             // second hot key
    else keys.push_back((rng() >> 2) | 1ULL << 40); // distinct (8-byte keys, below 2^63)
  }
  return keys;
}

TEST(LinearLoader, LayoutMatchesNaiveRule) {
  for (SlotFormat f : {SlotFormat::kSet, SlotFormat::kInline, SlotFormat::kHeap, SlotFormat::kHeap4}) {
    SCOPED_TRACE(to_string(f));
    const LinearConfig c = config(f);
    uint64_t checks = 0;
    const uint64_t naive = check_layout(c, mixed_keys(), &checks);
    // Walks up to 256 slots before the index is built, one pass over the shard to build it, then
    // path halving's amortised few steps per insert; the naive loader's hot walks cost far more.
    const uint64_t bound = 256 * 256 + c.total_slots() + 40 * mixed_keys().size();
    EXPECT_LT(checks, bound) << "naive " << naive;
    EXPECT_GT(naive, 3 * bound);
  }
}

TEST(LinearLoader, ShortClustersOnly) {  // the union-find is never built: the plain walk alone
  LinearConfig c = config(SlotFormat::kInline);
  std::mt19937_64 rng(3);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 2000; ++i) keys.push_back(rng() >> 1);
  uint64_t checks = 0;
  EXPECT_EQ(check_layout(c, keys, &checks), checks);  // the plain walk, slot for slot
}

TEST(LinearLoader, TailOverflowIsAnError) {
  LinearConfig c = config(SlotFormat::kInline);
  c.tail_slots = 300;
  auto fabric = make_local_fabric({c.region_bytes()});
  LinearShardLoader loader(c, 0, fabric->local_region(0));
  const uint64_t home = linear_place(c, 5).home;
  const uint64_t room = c.total_slots() - home;
  for (uint64_t i = 0; i < room; ++i) ASSERT_TRUE(loader.insert(5, value_of(5, 8)));
  EXPECT_THROW(loader.insert(5, value_of(5, 8)), InvalidArgument);
  EXPECT_EQ(loader.records(), room);
}

TEST(LinearLoader, HotKeyLoadsInLinearTime) {
  LinearConfig c = config(SlotFormat::kSet);
  c.home_slots = 1 << 20;
  c.tail_slots = 1 << 18;
  auto fabric = make_local_fabric({c.region_bytes()});
  LinearShardLoader loader(c, 0, fabric->local_region(0));
  constexpr uint64_t kCopies = 200000;
  for (uint64_t i = 0; i < kCopies; ++i) ASSERT_TRUE(loader.insert(42, {}));
  // The naive walk: kCopies²/2 = 2·10^10 checks. One pass to build the index, then a few per insert.
  EXPECT_LT(loader.slot_checks(), c.total_slots() + 10 * kCopies);
  const auto keys = linear_scan_keys(c, fabric->local_region(0));
  ASSERT_EQ(keys.size(), kCopies);
  EXPECT_TRUE(std::all_of(keys.begin(), keys.end(), [](uint64_t k) { return k == 42; }));
}

}  // namespace
}  // namespace rdmahash
