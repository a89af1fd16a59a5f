// Linear probing's multi-find-or-put (LinearClient::find_or_put_batch, Client::find_or_put_many):
// every key's outcome against an oracle (std::unordered_map of what is stored), keys repeated inside
// one batch and raced by several clients inserted exactly once, chunks clipped at the last tail
// slot, kFull only for an absent key, and no slot left locked. The forced interleavings are in
// linear_interleaving_test.cpp (LinearInterleaving.BatchedInsertStoppedAtEveryStep...).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>

#include "rdmahash/client.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::LocalTable;
using test::value_for;

// Does any inline slot hold a LOCKed ctrl word?
bool any_locked(const LocalTable& t) {
  for (uint32_t n = 0; n < t.cfg.memory_nodes; ++n) {
    const std::span<std::byte> region = t.fabric->local_region(n);
    for (uint64_t s = 0; s < t.cfg.total_slots(); ++s) {
      uint64_t ctrl;
      std::memcpy(&ctrl, region.data() + 64 + s * t.cfg.slot_bytes(), 8);
      if ((ctrl >> 63) && (ctrl & (1ULL << 62))) return true;
    }
  }
  return false;
}

// An inline table of `key_bytes`-byte keys and 8-byte values, `home_slots` home slots per shard.
LinearConfig inline_table(uint64_t home_slots, uint32_t key_bytes = 8, uint32_t nodes = 1) {
  LinearConfig c;
  c.format = SlotFormat::kInline;
  c.key_bytes = key_bytes;
  c.value_bytes = 8;
  c.home_slots = home_slots;
  c.memory_nodes = nodes;
  return c;
}

struct Outcome {
  OpResult r;
  OpStats st;
  bool error = false;
};

// find_or_put_batch of `keys` (value_for(key, salt)), `depth` in flight: each key's outcome by index.
std::vector<Outcome> put_batch(LinearClient& c, const std::vector<uint64_t>& keys, uint32_t depth, uint32_t salt) {
  std::vector<Outcome> out(keys.size());
  std::vector<int> seen(keys.size(), 0);
  const uint32_t vb = c.config().value_bytes;
  const bool ran = c.find_or_put_batch(
      keys.size(), depth, [&](uint64_t i) { return keys[i]; },
      [&](uint64_t i, uint64_t key, std::span<std::byte> v) {
        EXPECT_EQ(key, keys[i]);
        EXPECT_EQ(v.size(), vb);
        const auto want = value_for(key, salt, vb);
        std::copy(want.begin(), want.end(), v.begin());
      },
      [&](const Engine::Completion& cm, const OpResult& r) {
        ++seen[cm.index];
        out[cm.index] = Outcome{r, cm.stats, cm.error != nullptr};
      });
  EXPECT_TRUE(ran);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(seen[i], 1) << "key " << i << " completed " << seen[i] << " times";
  return out;
}

struct PutBatchCase {
  uint32_t key_bytes, value_bytes, nodes;
  SpeculativeClaim claim;
};

class PutBatch : public testing::TestWithParam<PutBatchCase> {};

// One client, batches of new, present and repeated keys up to load 0.95 (clusters run through
// several chunks and into the tail): each key inserted exactly once, by its first find-or-put;
// the others kFound; every stored value the inserter's; nothing left locked.
TEST_P(PutBatch, OutcomesMatchTheOracle) {
  const PutBatchCase& p = GetParam();
  LinearConfig c;
  c.format = SlotFormat::kInline;
  c.key_bytes = p.key_bytes;
  c.value_bytes = p.value_bytes;
  c.home_slots = 1024;
  c.tail_slots = 16;
  c.memory_nodes = p.nodes;
  LocalTable t(c);
  ProbeConfig probe = test::probe(8, 1024, 8);
  probe.speculative_claim = p.claim;
  probe.retry_budget = std::chrono::seconds(5);  // one client: a wait on a lock would be on its own
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, probe, e);
  const uint64_t mask = p.key_bytes == 4 ? 0xffffffffULL : ~0ULL;
  std::mt19937_64 rng(5);
  std::unordered_map<uint64_t, uint32_t> oracle;  // key -> salt of its stored value
  std::vector<uint64_t> present;
  const size_t target = c.home_slots * p.nodes * 95 / 100;
  uint32_t salt = 1;
  uint64_t inserted = 0, found = 0, full = 0;
  for (const uint32_t batch : {1u, 7u, 16u, 64u, 200u}) {
    for (int round = 0; (round < 6 || batch == 200u) && oracle.size() < target; ++round, ++salt) {
      std::vector<uint64_t> keys;
      for (uint32_t i = 0; i < batch; ++i) {
        const uint32_t pick = rng() % 8;
        if (pick == 0 && !present.empty()) {
          keys.push_back(present[rng() % present.size()]);  // present before the batch
        } else if (pick == 1 && !keys.empty()) {
          keys.push_back(keys[rng() % keys.size()]);  // repeated inside the batch
        } else {
          uint64_t k;
          do k = rng() & mask; while (k < 2 || oracle.count(k));
          keys.push_back(k);
        }
      }
      const auto out = put_batch(client, keys, std::min<uint32_t>(batch, 16), salt);
      std::map<uint64_t, int> inserts, fulls;
      for (size_t i = 0; i < keys.size(); ++i) {
        const Outcome& o = out[i];
        ASSERT_FALSE(o.error) << "key " << keys[i];
        if (o.r.status == Status::kInserted) {
          ++inserts[keys[i]];
          ++inserted;
          EXPECT_EQ(o.r.matches, 0u);
        } else if (o.r.status == Status::kFull) {
          ++fulls[keys[i]];  // no slot left in its probe sequence: it must be absent (below)
        } else {
          ASSERT_EQ(o.r.status, Status::kFound) << to_string(o.r.status);
          EXPECT_EQ(o.r.matches, 1u);
          ++found;
        }
        EXPECT_GE(o.r.chunks, 1u);
        EXPECT_GE(o.st.round_trips, 1u);
      }
      std::vector<uint64_t> distinct = keys;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      for (uint64_t k : distinct) {
        const bool was = oracle.count(k) != 0;  // before this batch
        if (fulls[k]) {  // kFull: never for a present key, and then every copy full and none stored
          EXPECT_FALSE(was) << "kFull for a present key " << k;
          EXPECT_EQ(inserts[k], 0) << k;
          EXPECT_EQ(fulls[k], std::count(keys.begin(), keys.end(), k)) << k;
          std::vector<std::byte> v(c.value_bytes);
          EXPECT_EQ(e.run(client.get(k, v)).status, Status::kNotFound) << k;
          ++full;
          continue;
        }
        EXPECT_EQ(inserts[k], was ? 0 : 1) << "key " << k << (was ? " was present" : " was new");
        if (!was) {
          oracle.emplace(k, salt);
          present.push_back(k);
        }
      }
      ASSERT_FALSE(any_locked(t)) << "a slot stayed locked after the batch";
    }
  }
  EXPECT_GE(oracle.size(), target) << "the table must get crowded";
  EXPECT_LT(full, oracle.size() / 20) << "kFull is for the few keys homed near the tail's end";
  EXPECT_GT(found, 0u);
  // Everything stored once, with its inserter's value.
  auto keys = t.all_keys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "a key is stored twice";
  EXPECT_EQ(keys.size(), oracle.size());
  EXPECT_EQ(inserted, oracle.size());
  for (const auto& [k, s] : oracle) {
    std::vector<std::byte> v(c.value_bytes);
    ASSERT_EQ(e.run(client.get(k, v)).status, Status::kFound) << k;
    EXPECT_EQ(v, value_for(k, s, c.value_bytes)) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, PutBatch,
                         testing::Values(PutBatchCase{8, 8, 1, SpeculativeClaim::kAuto},
                                         PutBatchCase{8, 8, 2, SpeculativeClaim::kOn},
                                         PutBatchCase{8, 8, 1, SpeculativeClaim::kOff},
                                         PutBatchCase{8, 0, 1, SpeculativeClaim::kOn},
                                         PutBatchCase{8, 40, 2, SpeculativeClaim::kAuto},
                                         PutBatchCase{4, 8, 1, SpeculativeClaim::kOn},
                                         PutBatchCase{4, 8, 1, SpeculativeClaim::kOff}),
                         [](const testing::TestParamInfo<PutBatchCase>& i) {
                           return "k" + std::to_string(i.param.key_bytes) + "_v" + std::to_string(i.param.value_bytes) +
                                  "_n" + std::to_string(i.param.nodes) + "_" + to_string(i.param.claim);
                         });

// The same key many times in one round: every copy claims the home slot in one batch, one wins, the
// others meet its locked claim (the ones whose READ ran after it) and leave the rounds for insert,
// which must not wait on that lock before this client has published it.
TEST(PutBatchRepeats, OneKeyManyTimesInOneRoundIsInsertedOnce) {
  for (SpeculativeClaim claim : {SpeculativeClaim::kOn, SpeculativeClaim::kOff}) {
    for (uint32_t kb : {8u, 4u}) {
      SCOPED_TRACE(std::string(to_string(claim)) + ", key bytes " + std::to_string(kb));
      const LinearConfig c = inline_table(256, kb);
      LocalTable t(c);
      ProbeConfig probe = test::probe(8, 16, 8);
      probe.speculative_claim = claim;
      probe.retry_budget = std::chrono::seconds(2);  // a wait on its own lock fails the key
      auto tr = t.fabric->connect();
      Engine e(*tr);
      LinearClient client(c, probe, e);
      const auto homed = test::keys_homed_at(c, 40, 3, 9);
      // homed[0] sixteen times, interleaved with two other keys of its home.
      std::vector<uint64_t> keys;
      for (int i = 0; i < 16; ++i) keys.push_back(homed[i % 5 == 4 ? 1 + i % 2 : 0]);
      const auto out = put_batch(client, keys, 16, 1);
      std::map<uint64_t, int> inserts;
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_FALSE(out[i].error) << "copy " << i << " of key " << keys[i];
        if (out[i].r.status == Status::kInserted) ++inserts[keys[i]];
        else EXPECT_EQ(out[i].r.status, Status::kFound);
      }
      for (uint64_t k : {homed[0], homed[1], homed[2]}) EXPECT_EQ(inserts[k], 1) << k;
      auto all = t.all_keys();
      EXPECT_EQ(all.size(), 3u);
      EXPECT_FALSE(any_locked(t));
    }
  }
}

// Keys homed at the last home slots: their chunks run into the tail and end at its last slot. A
// chunk past the table would fail its READ; once the slots run out, kFull — for absent keys only.
TEST(PutBatchBounds, ChunksStopAtTheLastTailSlotAndFullMeansAbsent) {
  LinearConfig c = inline_table(64);
  c.tail_slots = 2;
  LocalTable t(c);
  const ProbeConfig probe = test::probe(8, 16, 8);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, probe, e);
  // 12 keys homed at slot 60: slots 60..65 hold six of them, the other six find no slot.
  const auto keys = test::keys_homed_at(c, 60, 12, 3);
  const auto out = put_batch(client, keys, 4, 1);
  uint64_t inserted = 0, full = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_FALSE(out[i].error) << "a READ ran past the table";
    if (out[i].r.status == Status::kInserted) ++inserted;
    else if (out[i].r.status == Status::kFull) ++full;
    else ADD_FAILURE() << to_string(out[i].r.status);
  }
  EXPECT_EQ(inserted, 6u);
  EXPECT_EQ(full, 6u);
  // Again: the stored ones are found, the others still full.
  const auto again = put_batch(client, keys, 4, 2);
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(again[i].r.status, out[i].r.status == Status::kInserted ? Status::kFound : Status::kFull) << i;
  EXPECT_EQ(t.all_keys().size(), 6u);
  EXPECT_FALSE(any_locked(t));

  // The probe bound M: with one chunk, a key whose chunk 0 (slots 10..17) is full is kFull although
  // slot 18 is free; a client with M = 2 inserts it there, and then the M = 1 client finds it (the
  // lookup past M).
  const auto crowd = test::keys_homed_at(c, 10, 9, 5);
  ProbeConfig one = probe;
  one.max_chunks = 1;
  auto tr1 = t.fabric->connect();
  Engine e1(*tr1);
  LinearClient narrow(c, one, e1);
  const std::vector<uint64_t> first(crowd.begin(), crowd.begin() + 8);
  for (const Outcome& o : put_batch(narrow, first, 8, 1)) EXPECT_EQ(o.r.status, Status::kInserted);
  const std::vector<uint64_t> last{crowd[8]};
  EXPECT_EQ(put_batch(narrow, last, 1, 1)[0].r.status, Status::kFull);
  EXPECT_EQ(put_batch(client, last, 1, 1)[0].r.status, Status::kInserted);
  EXPECT_EQ(put_batch(narrow, last, 1, 1)[0].r.status, Status::kFound);
}

// Several clients, each a thread with its own engine, batch-insert the same keys in different
// orders (some with the coroutine find_or_put): every key inserted by exactly one of them, stored
// once, with that client's value.
TEST(PutBatchRace, ClientsRacingOnTheSameKeysInsertEachOnce) {
  const LinearConfig c = inline_table(1 << 15);
  LocalTable t(c);
  std::mt19937_64 rng(17);
  std::vector<uint64_t> keys;
  while (keys.size() < 20000) keys.push_back(rng() | 2);
  constexpr int kClients = 4;
  std::vector<std::vector<uint64_t>> order(kClients, keys);
  for (int i = 0; i < kClients; ++i) std::shuffle(order[i].begin(), order[i].end(), std::mt19937_64(i));
  std::vector<std::vector<Outcome>> out(kClients);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      ProbeConfig probe = test::probe(8, 64, 8);
      probe.speculative_claim = i % 2 ? SpeculativeClaim::kOn : SpeculativeClaim::kAuto;
      auto tr = t.fabric->connect();
      Engine e(*tr);
      LinearClient client(c, probe, e);
      ready.fetch_add(1);
      while (ready.load() < kClients) std::this_thread::yield();  // all start together
      if (i == kClients - 1) {  // the coroutine path beside the batches
        out[i].resize(keys.size());
        for (size_t j = 0; j < keys.size(); ++j) {
          try {
            out[i][j].r = e.run(client.find_or_put(order[i][j], value_for(order[i][j], 100 + i, 8)));
          } catch (const std::exception&) {
            out[i][j].error = true;  // fails the test below, not the test binary
          }
        }
      } else {
        out[i] = put_batch(client, order[i], 16, 100 + i);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::unordered_map<uint64_t, int> inserter;
  std::unordered_map<uint64_t, int> inserts;
  for (int i = 0; i < kClients; ++i)
    for (size_t j = 0; j < keys.size(); ++j) {
      ASSERT_FALSE(out[i][j].error);
      if (out[i][j].r.status == Status::kInserted) {
        ++inserts[order[i][j]];
        inserter[order[i][j]] = i;
      } else {
        ASSERT_EQ(out[i][j].r.status, Status::kFound) << to_string(out[i][j].r.status);
      }
    }
  for (uint64_t k : keys) EXPECT_EQ(inserts[k], 1) << "key " << k;
  auto all = t.all_keys();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a key is stored twice";
  EXPECT_EQ(all.size(), keys.size());
  EXPECT_FALSE(any_locked(t));
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient reader(c, test::probe(8, 64, 8), e);
  for (uint64_t k : keys) {
    std::vector<std::byte> v(8);
    ASSERT_EQ(e.run(reader.get(k, v)).status, Status::kFound);
    EXPECT_EQ(v, value_for(k, 100 + inserter[k], 8)) << k;
  }
}

// A memory node whose requests fail fails only the keys that live there (FabricError, as their
// tasks would), and a key the table cannot hold fails alone (InvalidArgument); the other keys are
// inserted, and nothing is left locked.
TEST(PutBatchFaults, FailedRequestsAndBadKeysFailOnlyTheirKeys) {
  const LinearConfig c = inline_table(512, 4, 2);
  LocalTable t(c);
  test::FaultTransport ft(t.fabric->connect(), [](const Request& r, uint64_t) { return r.addr.node == 1; });
  Engine e(ft);
  LinearClient client(c, ProbeConfig{}, e);
  std::vector<uint64_t> keys;
  for (uint64_t k = 100; keys.size() < 64; k += 7919) keys.push_back(k);
  keys[10] = 1ULL << 40;  // does not fit a 4-byte key
  std::vector<int> outcome(keys.size(), -1);  // 0 FabricError, 1 InvalidArgument, 2 inserted, 3 other
  ASSERT_TRUE(client.find_or_put_batch(
      keys.size(), 16, [&](uint64_t i) { return keys[i]; },
      [&](uint64_t, uint64_t key, std::span<std::byte> v) {
        const auto want = value_for(key, 1, 8);
        std::copy(want.begin(), want.end(), v.begin());
      },
      [&](const Engine::Completion& comp, const OpResult& r) {
        if (!comp.error) {
          outcome[comp.index] = r.status == Status::kInserted ? 2 : 3;
          return;
        }
        try {
          std::rethrow_exception(comp.error);
        } catch (const InvalidArgument&) {
          outcome[comp.index] = 1;
        } catch (const FabricError&) {
          outcome[comp.index] = 0;
        }
      }));
  size_t on1 = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i == 10) {
      EXPECT_EQ(outcome[i], 1);
      continue;
    }
    const bool fails = linear_place(c, keys[i]).node == 1;
    on1 += fails;
    EXPECT_EQ(outcome[i], fails ? 0 : 2) << "key " << keys[i];
  }
  EXPECT_GT(on1, 0u);
  EXPECT_EQ(t.all_keys().size(), keys.size() - 1 - on1);
  EXPECT_FALSE(any_locked(t));
}

// Transient failures anywhere in a batch (every 5th request, whatever its kind: a chunk READ, a
// claim or speculative CAS, a payload or unlocking WRITE): a key whose request failed may fail, but
// no key answered kInserted is unreadable or holds another value, no key already stored is
// overwritten, and no key is stored twice.
TEST(PutBatchFaults, TransientFailuresNeverCorruptAnswers) {
  for (SpeculativeClaim claim : {SpeculativeClaim::kOn, SpeculativeClaim::kOff}) {
    SCOPED_TRACE(to_string(claim));
    const LinearConfig c = inline_table(512);
    LocalTable t(c);
    ProbeConfig probe = test::probe(8, 64, 8);
    probe.speculative_claim = claim;
    probe.retry_budget = std::chrono::milliseconds(200);
    Client loader(*t.fabric, c, probe);
    std::mt19937_64 rng(29);
    std::vector<uint64_t> old_keys, new_keys;
    while (old_keys.size() < 200) {
      const uint64_t k = rng() | 2;
      ASSERT_EQ(loader.find_or_put(k, value_for(k, 1, 8)).status, Status::kInserted);
      old_keys.push_back(k);
    }
    while (new_keys.size() < 150) new_keys.push_back(rng() | 2);
    test::FaultTransport ft(t.fabric->connect(), [](const Request&, uint64_t ordinal) { return ordinal % 5 == 3; });
    Engine e(ft);
    LinearClient client(c, probe, e);
    std::vector<int> outcome(new_keys.size(), -1);  // 0 failed, 1 inserted, 2 other
    ASSERT_TRUE(client.find_or_put_batch(
        new_keys.size(), 16, [&](uint64_t i) { return new_keys[i]; },
        [&](uint64_t, uint64_t key, std::span<std::byte> v) {
          const auto want = value_for(key, 2, 8);
          std::copy(want.begin(), want.end(), v.begin());
        },
        [&](const Engine::Completion& comp, const OpResult& r) {
          outcome[comp.index] = comp.error ? 0 : r.status == Status::kInserted ? 1 : 2;
        }));
    size_t inserted = 0, failed = 0;
    auto tr = t.fabric->connect();
    Engine re(*tr);
    LinearClient reader(c, probe, re);
    for (size_t i = 0; i < new_keys.size(); ++i) {
      ASSERT_NE(outcome[i], -1);
      EXPECT_NE(outcome[i], 2) << "a new key answered neither inserted nor failed";
      failed += outcome[i] == 0;
      if (outcome[i] != 1) continue;
      ++inserted;
      std::vector<std::byte> v(8);
      OpResult r;
      try {
        r = re.run(reader.get(new_keys[i], v));
      } catch (const std::exception& ex) {
        ADD_FAILURE() << "kInserted key " << new_keys[i] << " unreadable: " << ex.what();
        continue;
      }
      EXPECT_EQ(r.status, Status::kFound) << new_keys[i];
      EXPECT_EQ(v, value_for(new_keys[i], 2, 8)) << new_keys[i];
    }
    EXPECT_GT(inserted, 0u);
    EXPECT_GT(failed, 0u);
    for (uint64_t k : old_keys) {
      std::vector<std::byte> v(8);
      ASSERT_EQ(re.run(reader.get(k, v)).status, Status::kFound) << k;
      EXPECT_EQ(v, value_for(k, 1, 8)) << "a stored key was overwritten: " << k;
    }
    // Published (unlocked) keys: a failed unlock leaves its slot locked, as insert's does
    // (PerRequestFailure.LinearInlineFailedUnlockReportsFailureAndLeavesTheKeyLocked).
    std::vector<uint64_t> published;
    const std::span<std::byte> region = t.fabric->local_region(0);
    for (uint64_t s = 0; s < c.total_slots(); ++s) {
      uint64_t ctrl, key;
      std::memcpy(&ctrl, region.data() + 64 + s * c.slot_bytes(), 8);
      std::memcpy(&key, region.data() + 64 + s * c.slot_bytes() + 8, 8);
      if ((ctrl >> 63) && !(ctrl & (3ULL << 61))) published.push_back(key);
    }
    std::sort(published.begin(), published.end());
    EXPECT_EQ(std::adjacent_find(published.begin(), published.end()), published.end()) << "a key is stored twice";
    EXPECT_GE(published.size(), old_keys.size() + inserted);
  }
}

// A done callback that throws while other keys of the batch hold claims: those keys still run to
// their outcome (no slot stays LOCKed, each reported once), no key starts after the exception, and
// the exception comes out of the call. The next call runs normally.
TEST(PutBatchCallbacks, AThrowingDoneStrandsNoClaim) {
  const LinearConfig c = inline_table(4096);
  LocalTable t(c);
  ProbeConfig probe = test::probe(8, 16, 8);
  probe.speculative_claim = SpeculativeClaim::kOn;  // round 1 claims the new keys' home slots
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, probe, e);
  const uint64_t present = 77;
  put_batch(client, {present}, 1, 1);
  // `present` first: its answer (kFound, round 1) comes while the new keys' CASes have claimed.
  std::vector<uint64_t> keys{present};
  for (uint64_t k = 1000; keys.size() < 64; ++k) keys.push_back(k);
  std::map<uint64_t, int> reported;
  struct Thrown : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  EXPECT_THROW(client.find_or_put_batch(
                   keys.size(), 16, [&](uint64_t i) { return keys[i]; },
                   [&](uint64_t, uint64_t key, std::span<std::byte> v) {
                     const auto want = value_for(key, 1, 8);
                     std::copy(want.begin(), want.end(), v.begin());
                   },
                   [&](const Engine::Completion& cm, const OpResult& r) {
                     EXPECT_EQ(cm.error, nullptr);
                     ++reported[keys[cm.index]];
                     if (r.status == Status::kFound) throw Thrown("a user's done threw");
                     EXPECT_EQ(r.status, Status::kInserted);
                   }),
               Thrown);
  EXPECT_FALSE(any_locked(t));
  EXPECT_EQ(reported.size(), 16u) << "the 16 keys in flight, and none started after the exception";
  for (const auto& [k, n] : reported) EXPECT_EQ(n, 1) << "key " << k;
  // What was reported inserted is stored; what never started is not.
  auto all = t.all_keys();
  std::sort(all.begin(), all.end());
  std::vector<uint64_t> want;
  for (const auto& [k, n] : reported) want.push_back(k);
  EXPECT_EQ(all, want);
  // The next call runs normally and inserts the rest.
  const auto out = put_batch(client, keys, 16, 1);
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(out[i].r.status, reported.count(keys[i]) ? Status::kFound : Status::kInserted) << keys[i];
  EXPECT_FALSE(any_locked(t));
}

// A done callback calling find_or_put_batch again would clear the outer call's keys in flight: the
// nested call is refused with std::logic_error before it does anything, the outer call finishes
// its keys and then rethrows it.
TEST(PutBatchCallbacks, ACallFromItsOwnDoneIsRefused) {
  const LinearConfig c = inline_table(1024);
  LocalTable t(c);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, test::probe(8, 16, 8), e);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 40; ++k) keys.push_back(k * 7919);
  std::vector<int> seen(keys.size(), 0);
  bool nested_ran = false;
  auto fill = [](uint64_t, uint64_t key, std::span<std::byte> v) {
    const auto want = value_for(key, 1, 8);
    std::copy(want.begin(), want.end(), v.begin());
  };
  std::vector<int> started(keys.size(), 0);
  EXPECT_THROW(client.find_or_put_batch(keys.size(), 8, [&](uint64_t i) { ++started[i]; return keys[i]; }, fill,
                                        [&](const Engine::Completion& cm, const OpResult& r) {
                                          ++seen[cm.index];
                                          EXPECT_EQ(r.status, Status::kInserted);
                                          if (cm.index != 0) return;
                                          (void)client.find_or_put_batch(
                                              1, 1, [](uint64_t) { return uint64_t{5}; }, fill,
                                              [&](const Engine::Completion&, const OpResult&) { nested_ran = true; });
                                        }),
               std::logic_error);
  EXPECT_FALSE(nested_ran);
  // Every key started before the exception ran to its outcome, reported once; none started after it.
  size_t done_keys = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(seen[i], started[i]) << "key index " << i;
    done_keys += seen[i];
  }
  EXPECT_GE(done_keys, 8u);
  EXPECT_LT(done_keys, keys.size());
  EXPECT_EQ(t.all_keys().size(), done_keys);
  EXPECT_FALSE(any_locked(t));
  // The guard is released: the next call runs.
  const auto out = put_batch(client, {5}, 1, 1);
  EXPECT_EQ(out[0].r.status, Status::kInserted);
}

// Schemes and formats without a multi-find-or-put say so and do nothing.
TEST(PutBatchScope, OtherFormatsReturnFalse) {
  for (SlotFormat f : {SlotFormat::kSet, SlotFormat::kHeap}) {
    LinearConfig c;
    c.format = f;
    c.key_bytes = 8;
    c.value_bytes = f == SlotFormat::kSet ? 0 : 8;
    c.home_slots = 64;
    LocalTable t(c);
    auto tr = t.fabric->connect();
    Engine e(*tr);
    LinearClient client(c, ProbeConfig{}, e);
    bool called = false;
    EXPECT_FALSE(client.find_or_put_batch(
        1, 1, [&](uint64_t) { called = true; return uint64_t{5}; }, [&](uint64_t, uint64_t, std::span<std::byte>) { called = true; },
        [&](const Engine::Completion&, const OpResult&) { called = true; }));
    EXPECT_FALSE(called);
  }
}

// The batch's buffers (two chunks a key) are sized for the keys in flight: a depth far above the
// count, with chunks of 65536 slots, used to ask for depth × 4 MiB up front (4 TiB here, a
// bad_alloc) to insert 3 keys.
TEST(PutBatchCallbacks, ADepthAboveTheCountSizesBuffersByTheCount) {
  const LinearConfig c = inline_table(1024);
  LocalTable t(c);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  LinearClient client(c, test::probe(65536, 1, 8), e);
  const std::vector<uint64_t> keys{11, 22, 33};
  const auto out = put_batch(client, keys, 1u << 20, 1);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_FALSE(out[i].error) << keys[i];
    EXPECT_EQ(out[i].r.status, Status::kInserted) << keys[i];
  }
  EXPECT_EQ(t.all_keys().size(), keys.size());
}

}  // namespace
}  // namespace rdmahash
