// Several clients (threads, each with its own transport and engine) on overlapping keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <unordered_set>

#include "test_util.h"

namespace rdmahash {
namespace {

using test::LocalTable;
using test::value_for;

using test::Format;

class LinearRace : public testing::TestWithParam<Format> {};

TEST_P(LinearRace, ConcurrentFindOrPutInsertsEveryKeyOnce) {
  LinearConfig c = test::config_of(GetParam());
  c.home_slots = 2048;
  c.memory_nodes = 2;  // 3000 keys in 4096 home slots: load factor 0.73, long clusters
  LocalTable t(c);
  const uint64_t mask = c.format == SlotFormat::kSet ? (1ULL << 63) - 1 : c.key_bytes == 4 ? 0xffffffffULL : ~0ULL;
  std::mt19937_64 rng(11);
  std::vector<uint64_t> pool;
  std::unordered_set<uint64_t> seen;
  while (pool.size() < 3000) {
    const uint64_t k = rng() & mask;
    if (seen.insert(k).second) pool.push_back(k);
  }
  const uint32_t vb = c.format == SlotFormat::kSet ? 0 : c.value_bytes;
  constexpr int kThreads = 4;
  std::vector<uint64_t> inserted(kThreads), found(kThreads), other(kThreads);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      Client client(*t.fabric, c, test::probe(8, 1024, 8));
      std::vector<uint64_t> keys = pool;
      std::shuffle(keys.begin(), keys.end(), std::mt19937_64(100 + th));
      if (th == 0) keys = pool;  // and one client in the same order as another's start
      std::vector<std::byte> values;
      for (uint64_t k : keys) {
        auto v = value_for(k, 0, vb);
        values.insert(values.end(), v.begin(), v.end());
      }
      auto res = client.find_or_put_many(keys, values, 1 + th * 8);
      for (auto& r : res) {
        if (r.status == Status::kInserted) ++inserted[th];
        else if (r.status == Status::kFound) ++found[th];
        else ++other[th];
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t ins = 0, fnd = 0;
  for (int th = 0; th < kThreads; ++th) {
    ins += inserted[th];
    fnd += found[th];
    EXPECT_EQ(other[th], 0u);
  }
  EXPECT_EQ(ins, pool.size());  // total inserted == distinct keys
  EXPECT_EQ(ins + fnd, kThreads * pool.size());
  auto keys = t.all_keys();
  std::unordered_set<uint64_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size()) << "a key was inserted twice";
  EXPECT_EQ(distinct, seen);
  Client reader(*t.fabric, c);
  std::vector<std::byte> out(vb);
  for (uint64_t k : pool) {
    ASSERT_EQ(reader.get(k, out).status, Status::kFound);
    EXPECT_EQ(out, value_for(k, 0, vb));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearRace,
                         testing::Values(Format{SlotFormat::kSet, 8, 0}, Format{SlotFormat::kInline, 4, 8},
                                         Format{SlotFormat::kInline, 8, 16}));

// Writers put values made of one repeated word (writer, seq); readers must never see a mix of
// two words (a torn record), and per (reader, key, writer) the seq they observe never goes back
// (a linearizable register cannot un-happen a write).
TEST(LinearRace, WritersNeverTearRecordsAndReadsAreMonotonic) {
  LinearConfig c;
  c.format = SlotFormat::kInline;
  c.key_bytes = 8;
  c.value_bytes = 64;
  c.home_slots = 64;
  LocalTable t(c);
  constexpr int kKeys = 6, kWriters = 2, kReaders = 2, kPuts = 1500;
  std::vector<uint64_t> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back(0xABCD000000000000ULL + static_cast<uint64_t>(i) * 977);
  {
    Client init(*t.fabric, c);
    std::vector<std::byte> zero(64);
    for (uint64_t k : keys) ASSERT_EQ(init.put(k, zero).status, Status::kInserted);
  }
  std::atomic<int> writers_left{kWriters}, readers_running{0};
  std::atomic<uint64_t> torn{0}, backwards{0}, reads{0}, multi_reads{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      Client client(*t.fabric, c);
      std::mt19937_64 rng(w);
      while (readers_running.load() < kReaders) std::this_thread::yield();  // the readers read while they write
      for (uint64_t seq = 1; seq <= kPuts; ++seq) {
        const uint64_t word = (static_cast<uint64_t>(w + 1) << 56) | seq;
        std::vector<std::byte> v(64);
        for (int i = 0; i < 8; ++i) std::memcpy(v.data() + i * 8, &word, 8);
        auto r = client.put(keys[rng() % kKeys], v);
        EXPECT_EQ(r.status, Status::kUpdated);
      }
      --writers_left;
    });
  }
  // Reader 0 gets one key at a time; reader 1 gets all keys at once with a multi-get, which on
  // this fabric copies its windows straight from the mapped slots (direct reads, no request).
  for (int rd = 0; rd < kReaders; ++rd) {
    threads.emplace_back([&, rd] {
      Client client(*t.fabric, c);
      std::mt19937_64 rng(100 + rd);
      std::map<std::pair<int, uint64_t>, uint64_t> last;  // (key, writer) -> seq
      std::vector<std::byte> out(64 * kKeys);
      std::vector<int> order(kKeys);
      for (int i = 0; i < kKeys; ++i) order[i] = i;
      ++readers_running;
      uint64_t mine = 0;  // values this reader checked: it reads while the writers write, and 1000 at least
      auto check = [&](int ki, const std::byte* v) {
        uint64_t w0;
        std::memcpy(&w0, v, 8);
        for (int i = 1; i < 8; ++i) {
          uint64_t wi;
          std::memcpy(&wi, v + i * 8, 8);
          if (wi != w0) ++torn;
        }
        const uint64_t writer = w0 >> 56, seq = w0 & ((1ULL << 56) - 1);
        uint64_t& prev = last[{ki, writer}];
        if (seq < prev) ++backwards;
        prev = std::max(prev, seq);
        ++reads;
        ++mine;
      };
      while (writers_left.load() > 0 || mine < 1000) {
        if (rd == 0) {
          const int ki = static_cast<int>(rng() % kKeys);
          if (client.get(keys[ki], std::span<std::byte>(out.data(), 64)).status != Status::kFound) { ++torn; continue; }
          check(ki, out.data());
        } else {
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<uint64_t> batch;
          for (int ki : order) batch.push_back(keys[ki]);
          const auto res = client.get_many(batch, out, kKeys);
          for (int i = 0; i < kKeys; ++i) {
            if (res[i].status != Status::kFound) { ++torn; continue; }
            check(order[i], out.data() + 64 * i);
          }
          ++multi_reads;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_EQ(backwards.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_GT(multi_reads.load(), 0u);
  EXPECT_EQ(t.all_keys().size(), static_cast<size_t>(kKeys));
}

// find_or_put and erase racing on a handful of keys (one probe cluster): the table never holds a
// key twice, and whatever the table holds at the end a lookup finds.
TEST(LinearRace, InsertEraseRacesKeepKeysUnique) {
  LinearConfig c;
  c.format = SlotFormat::kInline;
  c.key_bytes = 8;
  c.value_bytes = 8;
  c.home_slots = 4;
  c.tail_slots = 8192;
  LocalTable t(c);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<uint64_t> unexpected{0};
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      Client client(*t.fabric, c, test::probe(8, 4096, 8));
      std::mt19937_64 rng(th);
      std::vector<std::byte> v(8);
      for (int i = 0; i < 600; ++i) {
        const uint64_t k = 1 + rng() % 12;
        std::memcpy(v.data(), &k, 8);
        const auto s = (rng() % 3 == 0) ? client.erase(k).status : client.find_or_put(k, v).status;
        if (s == Status::kFull) ++unexpected;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(unexpected.load(), 0u);
  auto keys = t.all_keys();
  std::unordered_set<uint64_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size()) << "a key is live in two slots";
  Client client(*t.fabric, c);
  std::vector<std::byte> out(8);
  for (uint64_t k = 1; k <= 12; ++k) {
    const bool live = distinct.count(k) > 0;
    ASSERT_EQ(client.get(k, out).status, live ? Status::kFound : Status::kNotFound);
    if (live) {
      uint64_t got;
      std::memcpy(&got, out.data(), 8);
      EXPECT_EQ(got, k);
    }
  }
}

}  // namespace
}  // namespace rdmahash
