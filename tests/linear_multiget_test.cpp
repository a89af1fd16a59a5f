// Linear probing's multi-get (LinearClient::get_batch, Client::get_many): every key's answer and its
// requests, round trips and bytes are get_visit's (the oracle: std::unordered_map for the answers,
// a get_visit of the same key for the costs), on tables crowded enough that clusters run past the
// first window; a locked slot and a failing memory node fail only their own keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <unordered_map>

#include "rdmahash/client.h"
#include "schemes/linear/linear_internal.h"  // the slot layout: the test locks a slot in place
#include "schemes/record.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::LocalTable;
using test::value_for;

using Answer = test::GetAnswer;
using Recorder = test::GetRecorder;

Task<void> visit(LinearClient& c, uint64_t key, uint32_t vb, GetVisitor& v) { co_await c.get_visit(key, vb, v); }

struct MultiGetCase {
  SlotFormat format;
  uint32_t key_bytes, value_bytes, read_size, nodes;
};

class MultiGet : public testing::TestWithParam<MultiGetCase> {};

TEST_P(MultiGet, AnswersAndCostsAreGetVisits) {
  const MultiGetCase& p = GetParam();
  LinearConfig c;
  c.format = p.format;
  c.key_bytes = p.key_bytes;
  c.value_bytes = p.value_bytes;
  c.home_slots = 2048;
  c.memory_nodes = p.nodes;
  LocalTable t(c);
  ProbeConfig probe;
  probe.read_size = p.read_size;
  Client loader(*t.fabric, c, probe);
  const uint64_t mask = p.format == SlotFormat::kSet ? (1ULL << 63) - 1 : p.key_bytes == 4 ? 0xffffffffULL : ~0ULL;
  std::mt19937_64 rng(11);
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  // Load 0.9: clusters far longer than a window of 2 or 4 slots.
  while (oracle.size() < c.home_slots * p.nodes * 9 / 10) {
    const uint64_t k = rng() & mask;
    if (k < 2 || oracle.count(k)) continue;
    auto v = value_for(k, 3, c.value_bytes);
    ASSERT_EQ(loader.find_or_put(k, v).status, Status::kInserted);
    oracle.emplace(k, std::move(v));
  }
  std::vector<uint64_t> present;
  for (auto& [k, v] : oracle) present.push_back(k);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, probe, e);
  Recorder rec;
  uint64_t resumed = 0, keys_checked = 0;
  for (const size_t batch : {1u, 7u, 16u, 64u}) {
    for (int round = 0; round < 8; ++round) {
      std::vector<uint64_t> keys;
      for (size_t i = 0; i < batch; ++i) {
        if (rng() % 4 == 0) {
          uint64_t k;
          do k = rng() & mask; while (k < 2 || oracle.count(k));
          keys.push_back(k);  // absent: a miss, after the whole cluster
        } else {
          keys.push_back(present[rng() % present.size()]);
        }
      }
      std::vector<std::optional<Answer>> got(keys.size());
      std::vector<OpStats> cost(keys.size());
      std::vector<int> calls(keys.size(), 0);
      const uint64_t batches0 = tr->counters().batches;
      auto done = [&](const Engine::Completion& comp) {
        ASSERT_LT(comp.index, keys.size());
        ASSERT_FALSE(comp.error);
        ++calls[comp.index];
        got[comp.index] = std::move(rec.last);
        rec.last.reset();
        cost[comp.index] = comp.stats;
      };
      // Odd rounds: at most 5 keys in flight, new ones joining as others are answered.
      const bool streamed = round % 2 == 1;
      if (streamed) {
        ASSERT_TRUE(client.get_batch(keys.size(), 5, [&](uint64_t i) { return keys[i]; }, c.value_bytes, rec, done));
      } else {
        ASSERT_TRUE(client.get_batch(keys, c.value_bytes, rec, done));
      }
      const uint64_t batches = tr->counters().batches - batches0;
      uint32_t max_rt = 0;
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(calls[i], 1) << "key index " << i;
        ASSERT_TRUE(got[i].has_value()) << "on_get must come before done";
        const auto it = oracle.find(keys[i]);
        if (it == oracle.end()) {
          EXPECT_EQ(got[i]->r.status, Status::kNotFound) << keys[i];
        } else {
          ASSERT_EQ(got[i]->r.status, Status::kFound) << keys[i];
          if (p.format != SlotFormat::kSet) {
            EXPECT_EQ(got[i]->value, it->second) << keys[i];
          }
        }
        // The same key alone through get_visit: the same answer, chunks, requests, round trips, bytes.
        OpStats alone;
        e.run(visit(client, keys[i], c.value_bytes, rec), &alone);
        ASSERT_TRUE(rec.last.has_value());
        EXPECT_EQ(rec.last->r.status, got[i]->r.status);
        EXPECT_EQ(rec.last->r.chunks, got[i]->r.chunks) << keys[i];
        EXPECT_EQ(rec.last->value, got[i]->value);
        rec.last.reset();
        EXPECT_EQ(cost[i].round_trips, alone.round_trips) << keys[i];
        EXPECT_EQ(cost[i].reads, alone.reads) << keys[i];
        EXPECT_EQ(cost[i].bytes, alone.bytes) << keys[i];
        EXPECT_EQ(cost[i].writes + cost[i].cas + cost[i].faa + cost[i].rpcs, 0u);
        resumed += cost[i].round_trips > 1;
        max_rt = std::max(max_rt, cost[i].round_trips);
        ++keys_checked;
      }
      // All keys in flight: one batch per round, as many rounds as the longest lookup has windows.
      if (!streamed) {
        EXPECT_EQ(batches, max_rt) << "batch of " << keys.size();
      } else {
        EXPECT_GE(batches, (keys.size() + 4) / 5);
        EXPECT_LE(batches, keys.size() * max_rt);
      }
    }
  }
  EXPECT_GT(resumed, keys_checked / 10) << "the table must make lookups run past their first window";
}

INSTANTIATE_TEST_SUITE_P(Formats, MultiGet,
                         testing::Values(MultiGetCase{SlotFormat::kInline, 8, 16, 2, 1},
                                         MultiGetCase{SlotFormat::kInline, 8, 8, 4, 2},
                                         MultiGetCase{SlotFormat::kInline, 4, 8, 2, 1},
                                         MultiGetCase{SlotFormat::kSet, 8, 0, 2, 2}),
                         [](const testing::TestParamInfo<MultiGetCase>& i) {
                           return std::string(to_string(i.param.format)) + "_k" + std::to_string(i.param.key_bytes) +
                                  "_v" + std::to_string(i.param.value_bytes) + "_R" + std::to_string(i.param.read_size) +
                                  "_n" + std::to_string(i.param.nodes);
                         });

// A read sizer whose R varies with the slot (1 + slot mod 3) and that logs every cluster it is
// shown: a multi-get with a sizer must size each window by it (window(), not a fixed R) and show it
// the clusters its scans saw, as get_visit does.
struct LoggingSizer final : ReadSizer {
  std::vector<std::array<uint64_t, 3>> seen;  // (node, start, length) per observe
  uint32_t size_at(uint32_t, uint64_t slot) override { return static_cast<uint32_t>(1 + slot % 3); }
  bool wants_clusters() const override { return true; }
  void observe(uint32_t node, uint64_t start, uint64_t length) override { seen.push_back({node, start, length}); }
};

// With a read sizer, one key at a time: the multi-get sizes each window as a get_visit of the key
// does, so each key costs what its get_visit costs, and it shows the sizer the same clusters in the
// same order. Several keys at a time: the same answers (the oracle).
TEST(MultiGetReadSizer, SizesEachWindowAndReportsClusters) {
  LinearConfig c;
  c.format = SlotFormat::kInline;
  c.key_bytes = 8;
  c.value_bytes = 8;
  c.home_slots = 1024;
  LocalTable t(c);
  Client loader(*t.fabric, c);
  std::mt19937_64 rng(5);
  std::unordered_map<uint64_t, std::vector<std::byte>> oracle;
  while (oracle.size() < c.home_slots * 8 / 10) {  // load 0.8: clusters past a window of 1-3 slots
    const uint64_t k = rng() | 2;
    if (oracle.count(k)) continue;
    auto v = value_for(k, 4, c.value_bytes);
    ASSERT_EQ(loader.find_or_put(k, v).status, Status::kInserted);
    oracle.emplace(k, std::move(v));
  }
  std::vector<uint64_t> keys;
  for (auto& [k, v] : oracle)
    if (keys.size() < 150) keys.push_back(k);
  for (int i = 0; i < 50; ++i) {  // absent: a miss after the whole cluster
    uint64_t k;
    do k = rng() | 2; while (oracle.count(k));
    keys.push_back(k);
  }
  auto tr = t.fabric->connect();
  Engine e(*tr);
  auto many_sizer = std::make_shared<LoggingSizer>();
  auto alone_sizer = std::make_shared<LoggingSizer>();
  ProbeConfig pm, pa;
  pm.read_sizer = many_sizer;
  pa.read_sizer = alone_sizer;
  LinearClient many(c, pm, e), alone(c, pa, e);
  Recorder rec;
  std::vector<std::optional<Answer>> got(keys.size());
  std::vector<OpStats> cost(keys.size());
  auto done = [&](const Engine::Completion& comp) {
    ASSERT_FALSE(comp.error);
    got[comp.index] = std::move(rec.last);
    rec.last.reset();
    cost[comp.index] = comp.stats;
  };
  ASSERT_TRUE(many.get_batch(keys.size(), 1, [&](uint64_t i) { return keys[i]; }, c.value_bytes, rec, done));
  uint64_t past_first = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got[i].has_value()) << keys[i];
    const auto it = oracle.find(keys[i]);
    EXPECT_EQ(got[i]->r.status, it == oracle.end() ? Status::kNotFound : Status::kFound) << keys[i];
    if (it != oracle.end()) {
      EXPECT_EQ(got[i]->value, it->second) << keys[i];
    }
    OpStats a;
    e.run(visit(alone, keys[i], c.value_bytes, rec), &a);
    rec.last.reset();
    EXPECT_EQ(cost[i].reads, a.reads) << keys[i];
    EXPECT_EQ(cost[i].bytes, a.bytes) << keys[i];
    past_first += a.reads > 1;
  }
  EXPECT_GT(past_first, keys.size() / 10) << "lookups must run past their first window";
  EXPECT_FALSE(alone_sizer->seen.empty());
  EXPECT_EQ(many_sizer->seen, alone_sizer->seen) << "the multi-get must show the sizer the clusters get_visit does";
  // 16 keys in flight: the windows interleave, the answers do not change.
  std::fill(got.begin(), got.end(), std::nullopt);
  ASSERT_TRUE(many.get_batch(keys.size(), 16, [&](uint64_t i) { return keys[i]; }, c.value_bytes, rec, done));
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got[i].has_value()) << keys[i];
    EXPECT_EQ(got[i]->r.status, oracle.count(keys[i]) ? Status::kFound : Status::kNotFound) << keys[i];
  }
}

// probe() is the client's own to change between calls: a read size of 0 makes every lookup a miss
// with no READ (lookup's loop ends at once); the multi-get answers the same and posts nothing.
TEST(MultiGetReadSizer, ReadSizeZeroIsAMissWithoutARead) {
  LinearConfig c;
  c.home_slots = 64;
  LocalTable t(c);
  Client loader(*t.fabric, c);
  for (uint64_t k = 2; k < 10; ++k) ASSERT_EQ(loader.find_or_put(k, value_for(k, 1, c.value_bytes)).status, Status::kInserted);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, ProbeConfig{}, e);
  client.probe().read_size = 0;
  Recorder rec;
  std::vector<uint64_t> keys{2, 3, 4, 100};
  std::vector<int> calls(keys.size(), 0);
  const uint64_t batches0 = tr->counters().batches, reads0 = tr->counters().reads;
  ASSERT_TRUE(client.get_batch(keys.size(), 4, [&](uint64_t i) { return keys[i]; }, c.value_bytes, rec,
                               [&](const Engine::Completion& comp) {
                                 ASSERT_FALSE(comp.error);
                                 ++calls[comp.index];
                                 ASSERT_TRUE(rec.last.has_value());
                                 EXPECT_EQ(rec.last->r.status, Status::kNotFound);
                                 rec.last.reset();
                                 EXPECT_EQ(comp.stats.reads, 0u);
                               }));
  EXPECT_EQ(calls, std::vector<int>(keys.size(), 1));
  EXPECT_EQ(tr->counters().batches, batches0);
  EXPECT_EQ(tr->counters().reads, reads0);
  OpStats alone;
  e.run(visit(client, 2, c.value_bytes, rec), &alone);
  ASSERT_TRUE(rec.last.has_value());
  EXPECT_EQ(rec.last->r.status, Status::kNotFound);
  EXPECT_EQ(alone.reads, 0u);
}

LinearConfig small_inline(uint32_t nodes) {
  LinearConfig c;
  c.format = SlotFormat::kInline;
  c.key_bytes = 8;
  c.value_bytes = 16;
  c.home_slots = 512;
  c.memory_nodes = nodes;
  return c;
}

// `n` keys (key k is i · step for i = 2, 3, ...), each inserted with value_for(key, 1).
std::vector<uint64_t> insert_keys(const LocalTable& t, size_t n, uint64_t step) {
  Client loader(*t.fabric, t.cfg);
  std::vector<uint64_t> keys;
  for (uint64_t k = 2; keys.size() < n; ++k) keys.push_back(k * step);
  for (uint64_t k : keys) EXPECT_EQ(loader.find_or_put(k, value_for(k, 1, t.cfg.value_bytes)).status, Status::kInserted);
  return keys;
}

// The ctrl word of `key`'s slot in node 0's region, found by its key word (a test locks it in
// place), or null.
uint64_t* ctrl_word_of(const LocalTable& t, uint64_t key) {
  const linear_internal::InlineLayout l(t.cfg);
  std::span<std::byte> region = t.fabric->local_region(0);
  for (uint64_t s = 0; s < t.cfg.total_slots(); ++s) {
    std::byte* sl = region.data() + linear_internal::kHeaderBytes + s * t.cfg.slot_bytes();
    if ((record::load64(sl) & record::kOcc) && l.key(sl) == key) return reinterpret_cast<uint64_t*>(sl);
  }
  return nullptr;
}

// A key whose slot is locked (a writer mid-update) is re-read until the retry budget ends, then
// fails alone; the other keys of the batch are answered. Unlocked, the same batch answers them all.
TEST(MultiGetFaults, LockedSlotFailsOnlyItsKey) {
  const LinearConfig c = small_inline(1);
  LocalTable t(c);
  const std::vector<uint64_t> keys = insert_keys(t, 40, 0x9E3779B97F4A7C15ULL);
  uint64_t* ctrl = ctrl_word_of(t, keys[5]);  // the slot this test locks
  ASSERT_NE(ctrl, nullptr);
  ProbeConfig probe;
  probe.retry_budget = std::chrono::milliseconds(2);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, probe, e);
  for (const bool locked : {true, false}) {
    if (locked) *ctrl |= record::kLock;
    else *ctrl &= ~record::kLock;
    Recorder rec;
    std::vector<bool> failed(keys.size(), false), found(keys.size(), false);
    ASSERT_TRUE(client.get_batch(keys, c.value_bytes, rec, [&](const Engine::Completion& comp) {
      failed[comp.index] = static_cast<bool>(comp.error);
      if (comp.error) {
        EXPECT_GE(comp.stats.round_trips, 2u) << "a locked slot is read again until the budget ends";
      } else {
        ASSERT_TRUE(rec.last.has_value());
        found[comp.index] = rec.last->r.status == Status::kFound && rec.last->value == value_for(keys[comp.index], 1, c.value_bytes);
      }
      rec.last.reset();
    }));
    for (size_t i = 0; i < keys.size(); ++i) {
      if (locked && i == 5) {
        EXPECT_TRUE(failed[i]) << "a slot that stays locked fails its lookup (RetryBudgetExceeded)";
        continue;
      }
      EXPECT_FALSE(failed[i]) << i;
      EXPECT_TRUE(found[i]) << i;
    }
  }
}

// A slot locked in the first round and unlocked before the second: its key leaves the rounds for
// the lookup, which reads the window again and answers it. Answer and chunks are get_visit's, with
// one READ and one round trip more; every latency lies within the call, the resumed key's last.
TEST(MultiGetFaults, SlotUnlockedAfterTheFirstRoundIsAnswered) {
  const LinearConfig c = small_inline(1);
  LocalTable t(c);
  const std::vector<uint64_t> keys = insert_keys(t, 40, 0x9E3779B97F4A7C15ULL);
  uint64_t* ctrl = ctrl_word_of(t, keys[7]);
  ASSERT_NE(ctrl, nullptr);
  *ctrl |= record::kLock;
  // The first batch holds one READ per key; the first request after it unlocks the slot.
  test::FaultTransport ft(t.fabric->connect(), {}, [&](const Request&, uint64_t ordinal) {
    if (ordinal == keys.size()) *ctrl &= ~record::kLock;
  });
  Engine e(ft);
  LinearClient client(c, ProbeConfig{}, e);
  Recorder rec;
  std::vector<std::optional<Answer>> got(keys.size());
  std::vector<OpStats> cost(keys.size());
  std::vector<std::chrono::nanoseconds> latency(keys.size());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(client.get_batch(keys, c.value_bytes, rec, [&](const Engine::Completion& comp) {
    ASSERT_FALSE(comp.error) << comp.index;
    got[comp.index] = std::move(rec.last);
    rec.last.reset();
    cost[comp.index] = comp.stats;
    latency[comp.index] = comp.latency;
  }));
  const auto wall = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ((*ctrl & record::kLock), 0u) << "the hook ran: a second batch was posted";
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got[i].has_value());
    EXPECT_EQ(got[i]->r.status, Status::kFound) << i;
    EXPECT_EQ(got[i]->value, value_for(keys[i], 1, c.value_bytes)) << i;
    OpStats alone;
    e.run(visit(client, keys[i], c.value_bytes, rec), &alone);
    ASSERT_TRUE(rec.last.has_value());
    EXPECT_EQ(got[i]->r.chunks, rec.last->r.chunks) << i;
    rec.last.reset();
    const uint32_t extra = i == 7 ? 1 : 0;
    EXPECT_EQ(cost[i].reads, alone.reads + extra) << i;
    EXPECT_EQ(cost[i].round_trips, alone.round_trips + extra) << i;
    EXPECT_GE(latency[i].count(), 0) << i;
    EXPECT_LE(latency[i], wall) << i;
    if (i != 7) {
      EXPECT_LE(latency[i], latency[7]) << "the resumed key finished last";
    }
  }
}

// A key whose window holds a locked slot leaves the rounds for its own lookup, which reads that
// window again. A read sizer that tracks clusters is shown that window's runs once, by the lookup,
// so the multi-get shows it the runs the keys' get_visits show (as multisets: the order differs).
TEST(MultiGetReadSizer, ResumedKeyShowsItsWindowsRunsOnce) {
  struct FourSlots final : ReadSizer {
    std::vector<std::array<uint64_t, 3>> seen;  // (node, start, length) per observe
    uint32_t size_at(uint32_t, uint64_t) override { return 4; }
    bool wants_clusters() const override { return true; }
    void observe(uint32_t node, uint64_t start, uint64_t length) override { seen.push_back({node, start, length}); }
  };
  const LinearConfig c = small_inline(1);
  LocalTable t(c);
  const std::vector<uint64_t> keys = insert_keys(t, 40, 0x9E3779B97F4A7C15ULL);
  // The locked key: one whose 4-slot window from its home shows a run that ends at an empty slot
  // after the key's own slot (the scan meets the lock before it; the window's observation shows
  // that run).
  const std::byte* slots = t.fabric->local_region(0).data() + linear_internal::kHeaderBytes;
  auto empty = [&](uint64_t s) { return s < c.total_slots() && record::load64(slots + s * c.slot_bytes()) == 0; };
  size_t locked = keys.size();
  for (size_t i = 0; i < keys.size() && locked == keys.size(); ++i) {
    const uint64_t home = linear_place(c, keys[i]).home;
    const auto* ctrl = reinterpret_cast<const std::byte*>(ctrl_word_of(t, keys[i]));
    const uint64_t s = static_cast<uint64_t>(ctrl - slots) / c.slot_bytes();
    for (uint64_t e = s + 1; e < home + 4 && s < home + 4; ++e)
      if (empty(e)) {
        locked = i;
        break;
      }
  }
  ASSERT_LT(locked, keys.size());
  uint64_t* ctrl = ctrl_word_of(t, keys[locked]);
  *ctrl |= record::kLock;
  // Every key's first READ is in the first batch; the first request after it unlocks the slot.
  test::FaultTransport ft(t.fabric->connect(), {}, [&](const Request&, uint64_t ordinal) {
    if (ordinal == keys.size()) *ctrl &= ~record::kLock;
  });
  Engine e(ft);
  auto many_sizer = std::make_shared<FourSlots>();
  ProbeConfig pm;
  pm.read_sizer = many_sizer;
  LinearClient many(c, pm, e);
  Recorder rec;
  std::vector<std::optional<Answer>> got(keys.size());
  ASSERT_TRUE(many.get_batch(keys, c.value_bytes, rec, [&](const Engine::Completion& comp) {
    ASSERT_FALSE(comp.error) << comp.index;
    got[comp.index] = std::move(rec.last);
    rec.last.reset();
  }));
  EXPECT_EQ((*ctrl & record::kLock), 0u) << "the hook ran: a second batch was posted";
  auto alone_sizer = std::make_shared<FourSlots>();
  ProbeConfig pa;
  pa.read_sizer = alone_sizer;
  auto tr = t.fabric->connect();
  Engine e2(*tr);
  LinearClient alone(c, pa, e2);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got[i].has_value()) << i;
    EXPECT_EQ(got[i]->r.status, Status::kFound) << i;
    e2.run(visit(alone, keys[i], c.value_bytes, rec));
    rec.last.reset();
  }
  auto a = alone_sizer->seen, m = many_sizer->seen;
  std::sort(a.begin(), a.end());
  std::sort(m.begin(), m.end());
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(m, a) << "each run the keys' windows show, shown once";
}

// done must not start another multi-get on the same client: refused, and the outer call finishes.
TEST(MultiGetFaults, ReentryFromDoneIsRefused) {
  const LinearConfig c = small_inline(1);
  LocalTable t(c);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, ProbeConfig{}, e);
  Recorder rec;
  const std::vector<uint64_t> keys{11, 12, 13};
  int calls = 0, refused = 0;
  ASSERT_TRUE(client.get_batch(keys, c.value_bytes, rec, [&](const Engine::Completion&) {
    ++calls;
    try {
      client.get_batch(keys, c.value_bytes, rec, [](const Engine::Completion&) {});
    } catch (const std::logic_error&) {
      ++refused;
    }
  }));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(refused, 3);
  int again = 0;
  EXPECT_TRUE(client.get_batch(keys, c.value_bytes, rec, [&](const Engine::Completion&) { ++again; }));
  EXPECT_EQ(again, 3) << "usable after a refused reentry";
}

// Requests to a failing memory node fail their keys; the keys on the other node are answered.
TEST(MultiGetFaults, FailedReadsFailOnlyTheirKeys) {
  const LinearConfig c = small_inline(2);
  LocalTable t(c);
  const std::vector<uint64_t> keys = insert_keys(t, 64, 7919);
  test::FaultTransport ft(t.fabric->connect(), [](const Request& r, uint64_t) { return r.addr.node == 1; });
  Engine e(ft);
  LinearClient client(c, ProbeConfig{}, e);
  Recorder rec;
  std::vector<int> outcome(keys.size(), -1);  // 0 failed, 1 found with its value, 2 another answer
  ASSERT_TRUE(client.get_batch(keys, c.value_bytes, rec, [&](const Engine::Completion& comp) {
    if (comp.error) {
      outcome[comp.index] = 0;
    } else {
      ASSERT_TRUE(rec.last.has_value());
      const bool right = rec.last->r.status == Status::kFound && rec.last->value == value_for(keys[comp.index], 1, c.value_bytes);
      outcome[comp.index] = right ? 1 : 2;  // 2: an answer, but not the key's (e.g. a failed READ's buffer scanned)
    }
    rec.last.reset();
  }));
  size_t on1 = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool fails = linear_place(c, keys[i]).node == 1;
    on1 += fails;
    EXPECT_EQ(outcome[i], fails ? 0 : 1) << "key " << keys[i];
  }
  EXPECT_GT(on1, 0u);
  EXPECT_LT(on1, keys.size());
}

// What a multi-get refuses: a value size other than the table's (before any request), a bad key
// (that key alone), heap tables (false: no multi-get, nothing done).
TEST(MultiGetFaults, RefusesWhatGetVisitRefuses) {
  const LinearConfig c = small_inline(1);
  LocalTable t(c);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, ProbeConfig{}, e);
  Recorder rec;
  int calls = 0;
  auto done = [&](const Engine::Completion&) { ++calls; };
  const std::vector<uint64_t> keys{5, 6, 7};
  EXPECT_THROW(client.get_batch(keys, c.value_bytes + 1, rec, done), InvalidArgument);
  LinearConfig c4 = c;
  c4.key_bytes = 4;
  LocalTable t4(c4);
  auto tr4 = t4.fabric->connect();
  Engine e4(*tr4);
  LinearClient client4(c4, ProbeConfig{}, e4);
  EXPECT_EQ(tr->counters().batches, 0u);
  EXPECT_EQ(calls, 0);
  // A key that does not fit the table fails alone (InvalidArgument), as get_visit's task would.
  const std::vector<uint64_t> wide{5, 1ULL << 40, 6};
  std::vector<int> outcome(wide.size(), -1);
  ASSERT_TRUE(client4.get_batch(wide, c4.value_bytes, rec, [&](const Engine::Completion& comp) {
    if (!comp.error) {
      outcome[comp.index] = rec.last.has_value() && rec.last->r.status == Status::kNotFound ? 1 : 2;
      return;
    }
    try {
      std::rethrow_exception(comp.error);
    } catch (const InvalidArgument&) {
      outcome[comp.index] = 0;
    } catch (...) {
      outcome[comp.index] = 3;
    }
  }));
  EXPECT_EQ(outcome, (std::vector<int>{1, 0, 1}));
  calls = 0;

  LinearConfig heap = c;
  heap.format = SlotFormat::kHeap;
  heap.key_bytes = 4;
  heap.value_bytes = 8;
  heap.heap_records = 1024;
  ASSERT_EQ(linear_config_error(heap), "");
  LocalTable th(heap);
  auto trh = th.fabric->connect();
  Engine eh(*trh);
  LinearClient ch(heap, ProbeConfig{}, eh);
  EXPECT_FALSE(ch.get_batch(keys, heap.value_bytes, rec, done));
  EXPECT_EQ(trh->counters().batches, 0u);
  EXPECT_EQ(calls, 0);
}

// Client::get_many is the multi-get, `depth` keys a batch: the same answers as get, fewer batches.
TEST(MultiGetClient, GetManyAnswersAsGetsDo) {
  const LinearConfig c = small_inline(2);
  LocalTable t(c);
  Client client(*t.fabric, c);
  std::vector<uint64_t> keys;
  for (uint64_t k = 2; keys.size() < 600; ++k) keys.push_back(k * 0x2545F4914F6CDD1DULL);
  std::vector<std::byte> values;
  for (size_t i = 0; i < keys.size(); i += 2) {  // every other key present
    ASSERT_EQ(client.find_or_put(keys[i], value_for(keys[i], 2, c.value_bytes)).status, Status::kInserted);
  }
  std::vector<std::byte> out(keys.size() * c.value_bytes, std::byte{0x77});
  const uint64_t b0 = client.engine().transport().counters().batches;
  const auto got = client.get_many(keys, out, 32);
  const uint64_t batches = client.engine().transport().counters().batches - b0;
  EXPECT_LE(batches, keys.size() / 32 * 3 + 3);
  uint64_t rts = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<std::byte> one(c.value_bytes);
    const OpResult alone = client.get(keys[i], one);
    rts += client.last_stats().round_trips;
    ASSERT_EQ(got[i].status, alone.status) << i;
    ASSERT_EQ(got[i].status, i % 2 == 0 ? Status::kFound : Status::kNotFound) << i;
    if (i % 2 == 0) {
      EXPECT_TRUE(std::equal(one.begin(), one.end(), out.begin() + static_cast<std::ptrdiff_t>(i * c.value_bytes)));
      EXPECT_EQ(one, value_for(keys[i], 2, c.value_bytes));
    }
  }
  EXPECT_EQ(client.get_many(keys, out, 32).size(), keys.size());
  EXPECT_EQ(client.last_stats().round_trips, rts) << "a multi-get costs each key what its get costs";
}

// At the end of the tail: a full 12-slot table (no wrap-around), windows of 3 slots clipped at the
// last slot, and keys whose probe runs off the end (a miss with no READ past it), as get does.
TEST(MultiGetClient, EndOfTheTail) {
  LinearConfig c;
  c.home_slots = 8;
  c.tail_slots = 4;
  LocalTable t(c);
  Client client(*t.fabric, c, test::probe(8, 100, 3));
  for (uint64_t k = 1; k <= 50; ++k) (void)client.find_or_put(k);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 60; ++k) keys.push_back(k);
  const auto got = client.get_many(keys, {}, 16);
  const OpStats many = client.last_stats();
  OpStats alone;
  uint32_t found = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(got[i].status, client.get(keys[i]).status) << keys[i];
    EXPECT_EQ(got[i].chunks, client.get(keys[i]).chunks) << keys[i];
    alone.add(client.last_stats());
    found += got[i].status == Status::kFound;
  }
  EXPECT_EQ(found, c.total_slots());
  EXPECT_EQ(many.round_trips, alone.round_trips);
  EXPECT_EQ(many.reads, alone.reads);
  EXPECT_EQ(many.bytes, alone.bytes);
}

// Direct reads (Transport::direct_region): on a transport that maps the regions (LocalFabric, UCX
// over shared memory) a multi-get copies its windows from the mapped slots instead of posting
// READs. Against the same multi-get through requests (a FaultTransport that fails nothing: no
// direct region), on a crowded two-node table: the same answers, the same per-key requests, round
// trips and bytes, and the same fabric counts (batches, READs, bytes, lines), every batch of the
// first a round of direct reads and none of the second; latencies run to the end of a key's round
// (the round moves the batch clock).
TEST(MultiGetPaths, DirectReadsCountAsTheRequestsTheyReplace) {
  LinearConfig c = small_inline(2);
  c.home_slots = 1024;
  LocalTable t(c);
  std::mt19937_64 rng(5);
  std::vector<uint64_t> present;
  {
    Client loader(*t.fabric, c);
    while (present.size() < c.home_slots * 2 * 9 / 10) {
      const uint64_t k = rng() | 2;
      ASSERT_EQ(loader.find_or_put(k, value_for(k, 1, c.value_bytes)).status, Status::kInserted);
      present.push_back(k);
    }
  }
  std::vector<uint64_t> keys;
  for (int i = 0; i < 300; ++i) keys.push_back(i % 4 == 0 ? (rng() | 2) : present[rng() % present.size()]);
  struct Run {
    std::vector<std::optional<Answer>> got;
    std::vector<OpStats> cost;
    FabricCounters counters;
    std::chrono::nanoseconds max_latency{0};
  };
  auto run = [&](Transport& tr) {
    Engine e(tr);
    ProbeConfig probe;
    probe.read_size = 2;
    LinearClient client(c, probe, e);
    Recorder rec;
    Run r;
    r.got.resize(keys.size());
    r.cost.resize(keys.size());
    const FabricCounters before = tr.counters();
    EXPECT_TRUE(client.get_batch(keys.size(), 16, [&](uint64_t i) { return keys[i]; }, c.value_bytes, rec,
                                 [&](const Engine::Completion& comp) {
                                   EXPECT_FALSE(comp.error);
                                   r.got[comp.index] = std::move(rec.last);
                                   rec.last.reset();
                                   r.cost[comp.index] = comp.stats;
                                   r.max_latency = std::max(r.max_latency, comp.latency);
                                 }));
    r.counters = tr.counters();
    r.counters.batches -= before.batches;
    r.counters.reads -= before.reads;
    r.counters.bytes_read -= before.bytes_read;
    r.counters.lines_read -= before.lines_read;
    r.counters.direct_rounds -= before.direct_rounds;
    return r;
  };
  auto direct_tr = t.fabric->connect();
  ASSERT_EQ(direct_tr->direct_region(1).size(), c.region_bytes()) << "the local fabric maps every region";
  test::FaultTransport requests_tr(t.fabric->connect(), {});
  ASSERT_TRUE(requests_tr.direct_region(0).empty());
  const Run direct = run(*direct_tr), posted = run(requests_tr);
  uint64_t second_windows = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(direct.got[i].has_value() && posted.got[i].has_value()) << i;
    EXPECT_EQ(direct.got[i]->r.status, posted.got[i]->r.status) << keys[i];
    EXPECT_EQ(direct.got[i]->value, posted.got[i]->value) << keys[i];
    if (direct.got[i]->r.status == Status::kFound) {
      EXPECT_EQ(direct.got[i]->value, value_for(keys[i], 1, c.value_bytes));
    }
    EXPECT_EQ(direct.cost[i].round_trips, posted.cost[i].round_trips) << keys[i];
    EXPECT_EQ(direct.cost[i].reads, posted.cost[i].reads) << keys[i];
    EXPECT_EQ(direct.cost[i].bytes, posted.cost[i].bytes) << keys[i];
    second_windows += direct.cost[i].reads > 1;
  }
  EXPECT_GT(second_windows, keys.size() / 10) << "lookups must run past their first window";
  EXPECT_EQ(direct.counters.batches, posted.counters.batches);
  EXPECT_EQ(direct.counters.reads, posted.counters.reads);
  EXPECT_EQ(direct.counters.bytes_read, posted.counters.bytes_read);
  EXPECT_EQ(direct.counters.lines_read, posted.counters.lines_read);
  EXPECT_GT(direct.counters.lines_read, direct.counters.reads) << "windows that span two lines count both";
  EXPECT_EQ(direct.counters.direct_rounds, direct.counters.batches) << "every round reads in place";
  EXPECT_GT(direct.counters.direct_rounds, 0u);
  EXPECT_EQ(posted.counters.direct_rounds, 0u);
  // 300 keys, 16 at a time: a key's latency spans its rounds, not 0 (a clock that stood still).
  EXPECT_GT(direct.max_latency.count(), 0) << "a key answered in a round finishes at the round's end";
}

// A client whose table is larger than the memory node's region (another table's config) must not
// read past the mapped region: a multi-get reads directly only when every shard's slots lie
// inside their region, else it posts READs, and a window past the region fails its key alone.
TEST(MultiGetPaths, ATableLargerThanItsRegionFailsOnlyTheKeysPastIt) {
  LinearConfig small = small_inline(1);
  small.home_slots = 256;
  small.tail_slots = 64;
  LinearConfig big = small;
  big.home_slots = 4096;
  auto fabric = make_local_fabric({small.region_bytes()});
  LinearShardLoader(small, 0, fabric->local_region(0));
  auto tr = fabric->connect();
  Engine e(*tr);
  LinearClient client(big, ProbeConfig{}, e);
  std::vector<uint64_t> keys;
  for (uint64_t k = 2; keys.size() < 400; ++k) keys.push_back(k * 0x9E3779B97F4A7C15ULL);
  Recorder rec;
  uint64_t failed = 0, missed = 0;
  ASSERT_TRUE(client.get_batch(keys, big.value_bytes, rec, [&](const Engine::Completion& comp) {
    const uint64_t home = linear_place(big, keys[comp.index]).home;
    const bool inside = linear_internal::kHeaderBytes + (home + 8) * big.slot_bytes() <= small.region_bytes();
    EXPECT_EQ(static_cast<bool>(comp.error), !inside) << "key " << keys[comp.index] << " at slot " << home;
    if (comp.error) {
      ++failed;
    } else {
      ++missed;
      ASSERT_TRUE(rec.last.has_value());
      EXPECT_EQ(rec.last->r.status, Status::kNotFound);  // the region is empty
    }
    rec.last.reset();
  }));
  EXPECT_GT(failed, keys.size() / 2);
  EXPECT_GT(missed, 0u);
}

}  // namespace
}  // namespace rdmahash
