// Faults that must stay local (issue 10, item 6): a failed request fails only its own operation
// (fabric.h, "Per-request outcome"); retry loops are bounded by a time budget, not a count, and
// fail with RetryBudgetExceeded; a cuckoo miss that keeps overlapping relocations asks the owner.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "rdmahash/cuckoo.h"
#include "rdmahash/engine.h"
#include "rdmahash/linear.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::FaultTransport;
using test::LocalTable;
using test::value_for;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// --- per-request outcome ---------------------------------------------------------------------

// A heap-record linear table (8-byte keys) on `nodes` memory nodes of 512 home slots each.
LinearConfig heap_config(uint32_t nodes, uint32_t value_bytes) {
  LinearConfig c;
  c.format = SlotFormat::kHeap;
  c.key_bytes = 8;
  c.value_bytes = value_bytes;
  c.memory_nodes = nodes;
  c.home_slots = 512;
  return c;
}

TEST(PerRequestFailure, OneFailedRequestFailsOnlyItsOperation) {
  // Two memory nodes; every request to node 1 fails (a sick node, not a lost one). Operations on
  // node 0 share batches with them and must complete with their own results.
  auto f = make_local_fabric({4096, 4096});
  for (uint32_t n = 0; n < 2; ++n)
    for (uint64_t i = 0; i < 64; ++i) {
      const uint64_t v = n * 1000 + i;
      std::memcpy(f->local_region(n).data() + i * 8, &v, 8);
    }
  FaultTransport t(f->connect(), [](const Request& r, uint64_t) { return r.addr.node == 1; });
  Engine e(t);
  std::vector<uint64_t> got(128, ~0ULL);
  uint64_t ok0 = 0, failed1 = 0, wrong = 0;
  e.run_many(
      128, 8,
      [&](uint64_t i) -> Task<void> {
        const uint32_t node = static_cast<uint32_t>(i % 2);
        uint64_t v = 0;
        co_await e.read({node, (i / 2) * 8}, &v, 8);
        // A second, dependent round trip: an operation told its first request failed never gets here.
        co_await e.cas({node, (i / 2) * 8}, v, v + 1);
        got[i] = v;
      },
      [&](const Engine::Completion& c) {
        if (c.index % 2 == 0) {
          if (c.error) ++wrong;
          else ++ok0;
        } else {
          if (c.error) ++failed1;
          else ++wrong;
        }
      });
  EXPECT_EQ(ok0, 64u) << "an operation on the healthy node was failed by another's request";
  EXPECT_EQ(failed1, 64u);
  EXPECT_EQ(wrong, 0u);
  for (uint64_t i = 0; i < 128; i += 2) {
    EXPECT_EQ(got[i], i / 2);
    uint64_t now = 0;
    std::memcpy(&now, f->local_region(0).data() + (i / 2) * 8, 8);
    EXPECT_EQ(now, i / 2 + 1) << "the CAS of a completed operation landed once";
  }
  EXPECT_GT(t.injected(), 0u);
}

// fabric.h, "Fence": a failed request holds back the fenced requests behind it to its own node
// only (they may depend on it); a fenced request to another node is performed.
TEST(PerRequestFailure, LocalFabricFencedRequestWaitsOnlyForItsOwnNode) {
  auto f = make_local_fabric({4096, 4096});
  auto t = f->connect();
  uint64_t sink = 0, v = 5, old = ~0ULL;
  auto req = [](ReqKind k, uint32_t node, uint64_t off) {
    Request r;
    r.kind = k;
    r.addr = {node, off};
    r.len = 8;
    return r;
  };
  std::vector<Request> b{req(ReqKind::kRead, 1, 4096), req(ReqKind::kWrite, 0, 0), req(ReqKind::kCas, 0, 8)};
  b[0].buf = &sink;
  b[1].buf = &v;
  b[2].compare = 0; b[2].swap = 9; b[2].result = &old; b[2].fence = true;
  EXPECT_THROW(t->execute(b), FabricError);
  EXPECT_EQ(b[0].status, ReqStatus::kFailed);
  EXPECT_EQ(b[1].status, ReqStatus::kOk);
  EXPECT_EQ(b[2].status, ReqStatus::kOk) << "node 1's failure held back a fenced CAS to node 0";
  EXPECT_EQ(old, 0u);
  b[0].addr = {0, 4096};  // now the failure is at the fenced CAS's own node
  b[2].compare = 9; b[2].swap = 10;
  EXPECT_THROW(t->execute(b), FabricError);
  EXPECT_EQ(b[1].status, ReqStatus::kOk);
  EXPECT_EQ(b[2].status, ReqStatus::kFailed) << "a fenced CAS was performed behind a failed request to its node";
  uint64_t w = 0;
  std::memcpy(&w, f->local_region(0).data() + 8, 8);
  EXPECT_EQ(w, 9u);
}

// The same through a scheme: heap inserts on node 0 (their publishing CAS fenced after the record
// WRITE, often in one batch) share batches with operations on node 1 whose second request fails.
// Every node-0 insert succeeds and is found; no node-1 failure leaks into them.
TEST(PerRequestFailure, LinearHeapInsertsAreNotFailedByAnotherNodesFailure) {
  const LinearConfig c = heap_config(2, 16);
  LocalTable t(c);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  ProbeConfig p;
  p.speculative_claim = SpeculativeClaim::kOn;
  LinearClient client(c, p, e);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; keys.size() < 200; ++k)
    if (linear_place(c, k * 7919).node == 0) keys.push_back(k * 7919);
  std::vector<Status> st(keys.size(), Status::kFull);
  uint64_t node0_errors = 0, node1_errors = 0;
  const uint64_t bad = t.fabric->region_bytes(1);
  e.run_many(
      2 * keys.size(), 16,
      [&](uint64_t i) -> Task<void> {
        if (i % 2 == 0) {
          st[i / 2] = (co_await client.find_or_put(keys[i / 2], value_for(keys[i / 2], 1, c.value_bytes))).status;
        } else {
          uint64_t x = 0;
          co_await e.read({1, 64}, &x, 8);
          co_await e.read({1, bad}, &x, 8);  // fails validation
        }
      },
      [&](const Engine::Completion& comp) { (comp.index % 2 == 0 ? node0_errors : node1_errors) += comp.error ? 1 : 0; });
  EXPECT_EQ(node0_errors, 0u);
  EXPECT_EQ(node1_errors, keys.size());
  std::vector<std::byte> out(c.value_bytes);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(st[i], Status::kInserted) << "key " << keys[i];
    ASSERT_EQ(e.run(client.get(keys[i], out)).status, Status::kFound);
    EXPECT_EQ(out, value_for(keys[i], 1, c.value_bytes));
  }
}

TEST(PerRequestFailure, LocalFabricThrowingRpcFailsOnlyItself) {
  auto f = make_local_fabric({4096});
  f->register_rpc(7, [](uint32_t, std::span<const std::byte>, std::vector<std::byte>&) {
    throw std::runtime_error("handler refuses");
  });
  auto t = f->connect();
  uint64_t a = 11, b = 22, old = 0;
  std::vector<std::byte> reply;
  std::vector<Request> batch(4);
  batch[0].kind = ReqKind::kWrite; batch[0].addr = {0, 0}; batch[0].buf = &a; batch[0].len = 8;
  batch[1].kind = ReqKind::kRpc; batch[1].addr = {0, 0}; batch[1].rpc_id = 7; batch[1].reply = &reply;
  batch[2].kind = ReqKind::kWrite; batch[2].addr = {0, 8}; batch[2].buf = &b; batch[2].len = 8;
  batch[3].kind = ReqKind::kCas; batch[3].addr = {0, 16}; batch[3].compare = 0; batch[3].swap = 33; batch[3].result = &old;
  EXPECT_THROW(t->execute(batch), FabricError);
  EXPECT_EQ(batch[0].status, ReqStatus::kOk);
  EXPECT_EQ(batch[1].status, ReqStatus::kFailed);
  EXPECT_EQ(batch[2].status, ReqStatus::kOk) << "a request after the throwing RPC must still run";
  EXPECT_EQ(batch[3].status, ReqStatus::kOk);
  uint64_t w[3];
  std::memcpy(w, f->local_region(0).data(), 24);
  EXPECT_EQ(w[0], 11u);
  EXPECT_EQ(w[1], 22u);
  EXPECT_EQ(w[2], 33u);

  // Through the engine: a CAS sharing the batch with the failing RPC succeeds; the RPC's
  // operation alone fails.
  Engine e(*t);
  uint64_t cas_old = ~0ULL;
  bool rpc_failed = false, cas_failed = false;
  e.run_many(
      2, 2,
      [&](uint64_t i) -> Task<void> {
        if (i == 0) {
          std::vector<std::byte> r;
          co_await e.rpc(0, 7, nullptr, 0, &r);
        } else {
          cas_old = co_await e.cas({0, 16}, 33, 44);
        }
      },
      [&](const Engine::Completion& c) { (c.index == 0 ? rpc_failed : cas_failed) = static_cast<bool>(c.error); });
  EXPECT_TRUE(rpc_failed);
  EXPECT_FALSE(cas_failed);
  EXPECT_EQ(cas_old, 33u);
}

LinearConfig inline_config(uint32_t nodes) {
  LinearConfig c;
  c.format = SlotFormat::kInline;
  c.key_bytes = 8;
  c.value_bytes = 16;
  c.memory_nodes = nodes;
  c.home_slots = 512;
  return c;
}

ProbeConfig probe_with_budget(std::chrono::nanoseconds budget) {
  ProbeConfig p;
  p.retry_budget = budget;
  return p;
}

TEST(PerRequestFailure, LinearInlineInsertWhoseLockLandedUnlocks) {
  // Inserts on node 0 share batches with requests to node 1 that all fail. Every node-0 insert's
  // lock CAS, payload WRITE and unlocking CAS succeed, so it must report kInserted and leave its
  // slot unlocked (on main it was told it failed after its lock CAS and never unlocked).
  const LinearConfig c = inline_config(2);
  LocalTable t(c);
  FaultTransport ft(t.fabric->connect(), [](const Request& r, uint64_t) { return r.addr.node == 1; });
  Engine e(ft);
  LinearClient client(c, ProbeConfig{}, e);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; keys.size() < 400; ++k) keys.push_back(k * 7919);
  std::vector<Status> st(keys.size(), Status::kFull);
  std::vector<bool> err(keys.size(), false);
  std::vector<std::vector<std::byte>> vals(keys.size());
  e.run_many(
      keys.size(), 16,
      [&](uint64_t i) -> Task<void> {
        vals[i] = value_for(keys[i], 1, c.value_bytes);
        st[i] = (co_await client.find_or_put(keys[i], vals[i])).status;
      },
      [&](const Engine::Completion& comp) { err[comp.index] = static_cast<bool>(comp.error); });
  auto reader_t = t.fabric->connect();
  Engine re(*reader_t);
  // Budget zero: a slot left locked fails the read at once (RetryBudgetExceeded) instead of spinning.
  LinearClient reader(c, probe_with_budget(std::chrono::nanoseconds(0)), re);
  uint64_t on0 = 0, on1 = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (linear_place(c, keys[i]).node == 1) {
      ++on1;
      EXPECT_TRUE(err[i]) << "an operation on the failing node cannot succeed";
      continue;
    }
    ++on0;
    ASSERT_FALSE(err[i]) << "key " << keys[i] << ": a node-0 insert was failed by another operation's request";
    ASSERT_EQ(st[i], Status::kInserted);
    std::vector<std::byte> out(c.value_bytes);
    OpResult r;
    ASSERT_NO_THROW(r = re.run(reader.get(keys[i], out))) << "key " << keys[i] << " left locked";
    ASSERT_EQ(r.status, Status::kFound);
    EXPECT_EQ(out, vals[i]);
  }
  EXPECT_GT(on0, 100u);
  EXPECT_GT(on1, 100u);
}

// The documented exception: when the failing request is an insert's own unlocking write (the
// ctrl WRITE fenced behind the payload, linear.h), the
// operation reports the failure (FabricError) and its slot stays locked: nobody on LocalFabric
// releases it (a served table's LinearLockSweeper does, linear.h). A reader then fails with
// RetryBudgetExceeded once its budget is spent, rather than spinning or answering wrongly.
// Returns the failed unlock request (address, locked and unlocked words) for the budget tests.
// `payload` keeps the unlock's bytes (the request's buffer lives in the finished operation).
Request lock_a_key_forever(LocalTable& t, uint64_t key, std::vector<std::byte>& payload) {
  Request unlock{};
  FaultTransport ft(t.fabric->connect(), [&](const Request& r, uint64_t) {
    if (r.kind != ReqKind::kWrite || !r.fence) return false;
    unlock = r;
    payload.assign(static_cast<const std::byte*>(r.buf), static_cast<const std::byte*>(r.buf) + r.len);
    return true;
  });
  Engine e(ft);
  LinearClient client(t.cfg, ProbeConfig{}, e);
  const auto v = value_for(key, 1, t.cfg.value_bytes);
  EXPECT_THROW(e.run(client.find_or_put(key, v)), FabricError);
  EXPECT_EQ(ft.injected(), 1u);
  unlock.buf = payload.data();
  return unlock;
}

TEST(PerRequestFailure, LinearInlineFailedUnlockReportsFailureAndLeavesTheKeyLocked) {
  LocalTable t(inline_config(1));
  const uint64_t key = 4242;
  std::vector<std::byte> unlock_bytes;
  const Request unlock = lock_a_key_forever(t, key, unlock_bytes);
  ASSERT_EQ(unlock.kind, ReqKind::kWrite);
  ASSERT_TRUE(unlock.fence);
  auto rt = t.fabric->connect();
  Engine re(*rt);
  LinearClient reader(t.cfg, probe_with_budget(std::chrono::nanoseconds(0)), re);
  std::vector<std::byte> out(t.cfg.value_bytes);
  EXPECT_THROW(re.run(reader.get(key, out)), RetryBudgetExceeded);
}

// Heap records (linear.h, "publication order"): a record whose WRITE failed is never published.
// The record's WRITE goes in an earlier batch than the publishing CAS (a spare record, claim off:
// with chunk 0's READ), or in the CAS's own batch, fenced before it (no spare: after the FAA; or
// the speculative claim). Either way the insert (or update) reports FabricError, every live slot
// still points to a complete record, and a retry succeeds.
TEST(PerRequestFailure, LinearHeapRecordWhoseWriteFailedIsNeverPublished) {
  const LinearConfig c = heap_config(1, 24);
  struct Case {
    SpeculativeClaim claim;
    bool spare;
  };
  for (const Case cs : {Case{SpeculativeClaim::kOff, true}, Case{SpeculativeClaim::kOff, false},
                        Case{SpeculativeClaim::kOn, true}, Case{SpeculativeClaim::kOn, false}}) {
    SCOPED_TRACE(std::string("claim ") + to_string(cs.claim) + (cs.spare ? ", a spare record" : ", no spare record"));
    for (bool update : {false, true}) {
      SCOPED_TRACE(update ? "update" : "insert");
      LocalTable t(c);
      bool armed = false;
      FaultTransport ft(t.fabric->connect(), [&](const Request& r, uint64_t) {
        if (!armed || r.kind != ReqKind::kWrite) return false;
        armed = false;
        return true;
      });
      Engine e(ft);
      ProbeConfig p;
      p.speculative_claim = cs.claim;
      const uint64_t k = 4242;
      const auto v0 = value_for(k, 0, c.value_bytes), v1 = value_for(k, 1, c.value_bytes);
      std::optional<LinearClient> client;
      client.emplace(c, p, e);
      if (update) {
        ASSERT_EQ(e.run(client->find_or_put(k, v0)).status, Status::kInserted);
      }
      if (!cs.spare) client.emplace(c, p, e);  // a fresh client holds no heap block yet
      if (cs.spare && !update) {
        ASSERT_EQ(e.run(client->find_or_put(1, v0)).status, Status::kInserted);
      }
      armed = true;
      EXPECT_THROW(e.run(update ? client->update(k, v1) : client->find_or_put(k, v1)), FabricError);
      EXPECT_EQ(ft.injected(), 1u);
      const std::span<std::byte> region = t.fabric->local_region(0);
      for (uint64_t s = 0; s < c.total_slots(); ++s) {
        uint64_t w;
        std::memcpy(&w, region.data() + 64 + s * 8, 8);
        const HeapSlot hs = decode_heap_slot(w);
        if (hs.empty || hs.tombstone) continue;
        EXPECT_TRUE(linear_heap_record(c, region, hs.index).has_value())
            << "slot " << s << " points to record " << hs.index << ", whose WRITE failed";
      }
      std::vector<std::byte> out(c.value_bytes);
      ASSERT_EQ(e.run(client->get(k, out)).status, update ? Status::kFound : Status::kNotFound);
      if (update) {
        EXPECT_EQ(out, v0);
      }
      ASSERT_EQ(e.run(update ? client->update(k, v1) : client->find_or_put(k, v1)).status,
                update ? Status::kUpdated : Status::kInserted);
      ASSERT_EQ(e.run(client->get(k, out)).status, Status::kFound);
      EXPECT_EQ(out, v1);
    }
  }
}

// --- retry budget ----------------------------------------------------------------------------

TEST(RetryBudget, TinyBudgetFailsWithItsStatusEvenIfTheLockWouldBeReleasedLater) {
  // The holder is live but slow: the lock is released after 100 000 reads. A reader with a zero
  // budget must give up long before (after at most 17 reads) with RetryBudgetExceeded.
  LocalTable t(inline_config(1));
  const uint64_t key = 77;
  std::vector<std::byte> unlock_bytes;
  const Request unlock = lock_a_key_forever(t, key, unlock_bytes);
  auto release = t.fabric->connect();
  uint64_t reads = 0;
  FaultTransport ft(t.fabric->connect(), nullptr, [&](const Request& r, uint64_t) {
    if (r.kind == ReqKind::kRead && ++reads == 100000) {
      Request u = unlock;
      uint64_t old = 0;
      u.result = &old;
      release->execute(std::span<Request>(&u, 1));
    }
  });
  Engine e(ft);
  LinearClient reader(t.cfg, probe_with_budget(std::chrono::nanoseconds(0)), e);
  std::vector<std::byte> out(t.cfg.value_bytes);
  EXPECT_THROW(e.run(reader.get(key, out)), RetryBudgetExceeded);
  EXPECT_LT(reads, 100u) << "a zero budget must not spin";
}

TEST(RetryBudget, DescheduledLiveHolderDoesNotFailAReaderUnderTheDefault) {
  // The holder keeps the lock for 2^22 + 16 of the reader's reads (the old count bound was 2^22
  // re-reads), then releases it: under the default (time) budget the reader waits and finds the
  // key. Sanitizer builds hold for fewer reads (each costs ~10x more; the point is the same).
  LocalTable t(inline_config(1));
  const uint64_t key = 99;
  std::vector<std::byte> unlock_bytes;
  const Request unlock = lock_a_key_forever(t, key, unlock_bytes);
  const uint64_t hold = kSanitized ? (1u << 16) : (1u << 22) + 16;
  auto release = t.fabric->connect();
  uint64_t reads = 0;
  FaultTransport ft(t.fabric->connect(), nullptr, [&](const Request& r, uint64_t) {
    if (r.kind == ReqKind::kRead && ++reads == hold) {
      Request u = unlock;
      uint64_t old = 0;
      u.result = &old;
      release->execute(std::span<Request>(&u, 1));
    }
  });
  Engine e(ft);
  LinearClient reader(t.cfg, ProbeConfig{}, e);
  std::vector<std::byte> out(t.cfg.value_bytes);
  const OpResult r = e.run(reader.get(key, out));
  EXPECT_EQ(r.status, Status::kFound);
  EXPECT_EQ(out, value_for(key, 1, t.cfg.value_bytes));
  EXPECT_GE(reads, hold);
}

// --- cuckoo ----------------------------------------------------------------------------------

struct CuckooLocal {
  CuckooConfig cfg;
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<CuckooServer> server;
  explicit CuckooLocal(const CuckooConfig& c) : cfg(c) {
    fabric = make_local_fabric(std::vector<uint64_t>(c.memory_nodes, c.region_bytes()));
    server = std::make_unique<CuckooServer>(*fabric, c);
  }
};

TEST(CuckooMiss, EndlessRelocationsMakeAMissAskTheOwner) {
  // Every READ of the relocation counter finds it moved on (a steady stream of relocations): the
  // one-sided miss never validates. After a bounded number of attempts the lookup asks the owner,
  // which answers under the shard's lock. On main it re-read 2^20 times and then failed.
  for (CuckooStorage storage : {CuckooStorage::kInline, CuckooStorage::kHeap}) {
    CuckooConfig c;
    c.storage = storage;
    c.value_bytes = 16;
    c.buckets_per_node = 64;
    CuckooLocal t(c);
    for (uint64_t k = 1; k <= 100; ++k) ASSERT_EQ(t.server->shard(0).put(k, value_for(k, 3, c.value_bytes)).status, Status::kInserted);
    std::byte* region = t.fabric->local_region(0).data();
    uint64_t moves_reads = 0, insert_at = 0, late_key = 0;
    FaultTransport ft(t.fabric->connect(), nullptr, [&](const Request& r, uint64_t) {
      if (r.kind != ReqKind::kRead || r.addr.offset != kCuckooMovesOffset) return;
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(region + kCuckooMovesOffset)).fetch_add(2);
      if (++moves_reads == insert_at) (void)t.server->shard(0).put(late_key, value_for(late_key, 5, c.value_bytes));
    });
    Engine e(ft);
    CuckooClient client(c, CuckooProbe::kParallel, e);
    std::vector<std::byte> out(c.value_bytes);
    for (uint64_t k = 101; k <= 120; ++k) {
      OpStats s;
      const OpResult r = e.run(client.get(k, out), &s);
      EXPECT_EQ(r.status, Status::kNotFound);
      EXPECT_EQ(s.rpcs, 1u) << "the miss must fall back to the owner exactly once";
    }
    // Present keys are hits: no validation needed, no RPC.
    for (uint64_t k = 1; k <= 100; k += 9) {
      OpStats s;
      const OpResult r = e.run(client.get(k, out), &s);
      EXPECT_EQ(r.status, Status::kFound);
      EXPECT_EQ(out, value_for(k, 3, c.value_bytes));
      EXPECT_EQ(s.rpcs, 0u);
    }
    // A key inserted at the last one-sided attempt's counter READ is absent from every one-sided
    // probe and present when the owner answers: the RPC's reply carries its value.
    for (uint64_t k = 201; k <= 205; ++k) {
      moves_reads = 0;
      insert_at = 16;
      late_key = k;
      OpStats s;
      const OpResult r = e.run(client.get(k, out), &s);
      EXPECT_EQ(r.status, Status::kFound);
      EXPECT_EQ(out, value_for(k, 5, c.value_bytes));
      EXPECT_EQ(s.rpcs, 1u);
    }
  }
}

TEST(CuckooMiss, RecordThatStaysLockedFailsWithRetryBudgetExceeded) {
  CuckooConfig c;
  c.value_bytes = 16;
  c.buckets_per_node = 64;
  c.retry_budget = std::chrono::nanoseconds(0);
  CuckooLocal t(c);
  const uint64_t key = 5;
  ASSERT_EQ(t.server->shard(0).put(key, value_for(key, 1, c.value_bytes)).status, Status::kInserted);
  // Lock the record in place, as a node CPU that died mid-write would leave it.
  std::byte* region = t.fabric->local_region(0).data();
  const uint32_t rb = c.record_bytes();
  bool locked = false;
  for (uint64_t off = sizeof(CuckooShardHeader); off + rb <= c.heap_offset(); off += rb) {
    uint64_t ctrl = 0, k = 0;
    std::memcpy(&ctrl, region + off, 8);
    std::memcpy(&k, region + off + 8, 8);
    if ((ctrl >> 63) && k == key) {
      ctrl |= 1ULL << 62;  // LOCK (schemes/record.h)
      std::memcpy(region + off, &ctrl, 8);
      locked = true;
    }
  }
  ASSERT_TRUE(locked);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  CuckooClient client(c, CuckooProbe::kParallel, e);
  std::vector<std::byte> out(c.value_bytes);
  EXPECT_THROW(e.run(client.get(key, out)), RetryBudgetExceeded);
}

}  // namespace
}  // namespace rdmahash
