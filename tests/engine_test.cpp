#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/sim_fabric.h"

namespace rdmahash {
namespace {

Task<uint64_t> read_word(Engine& e, RemoteAddr a) {
  uint64_t v = 0;
  co_await e.read(a, &v, 8);
  co_return v;
}

Task<uint64_t> overlapped(Engine& e) {
  uint64_t a = 0, b = 0;
  Pending pa = e.read({0, 0}, &a, 8);
  Pending pb = e.read({0, 8}, &b, 8);
  co_await std::move(pa);
  co_await std::move(pb);  // already complete: no second round trip
  co_return a + b;
}

Task<uint64_t> post_and_drop(Engine& e, bool drop) {
  uint64_t a = 0, b = 0;
  co_await e.read({0, 0}, &a, 8);
  {
    Pending p = e.read({0, 8}, &b, 8);  // withdrawn unposted when dropped
    if (!drop) co_await std::move(p);
  }
  co_return a + b;
}

// lines_read: the lines every READ spans, by the closed form, against the oracle of the distinct
// lines its bytes fall in; atomics and WRITEs are not counted.
TEST(FabricCounters, LinesReadAreTheLinesEachReadSpans) {
  auto brute = [](uint64_t off, uint64_t len) {
    std::set<uint64_t> lines;
    for (uint64_t i = 0; i < len; ++i) lines.insert((off + i) / 64);
    return static_cast<uint64_t>(lines.size());
  };
  for (uint64_t off = 0; off < 200; ++off)
    for (uint64_t len = 0; len < 300; ++len) ASSERT_EQ(lines_spanned(off, len), brute(off, len)) << off << " " << len;
  auto f = make_local_fabric({4096});
  auto t = f->connect();
  std::mt19937_64 rng(5);
  std::vector<std::byte> buf(512);
  uint64_t expected = 0;
  for (int i = 0; i < 200; ++i) {
    Request r;
    r.kind = ReqKind::kRead;
    r.len = static_cast<uint32_t>(rng() % 257);
    r.addr = {0, rng() % (4096 - r.len + 1)};
    r.buf = buf.data();
    expected += brute(r.addr.offset, r.len);
    t->execute(std::span<Request>(&r, 1));
  }
  uint64_t old = 0;
  Request cas;
  cas.kind = ReqKind::kCas;
  cas.addr = {0, 64};
  cas.result = &old;
  Request w;
  w.kind = ReqKind::kWrite;
  w.addr = {0, 100};
  w.len = 200;
  w.buf = buf.data();
  std::array<Request, 2> more{cas, w};
  t->execute(more);
  EXPECT_EQ(t->counters().lines_read, expected);
  EXPECT_EQ(t->counters().reads, 200u);
}

TEST(Engine, ReadWriteCasFaa) {
  auto f = make_local_fabric({4096});
  auto t = f->connect();
  Engine e(*t);
  uint64_t v = 0x1122334455667788ULL;
  e.run([&]() -> Task<void> { co_await e.write({0, 16}, &v, 8); }());
  EXPECT_EQ(e.run(read_word(e, {0, 16})), v);
  EXPECT_EQ(e.run([&]() -> Task<uint64_t> { co_return co_await e.cas({0, 16}, 1, 2); }()), v);  // fails
  EXPECT_EQ(e.run(read_word(e, {0, 16})), v);
  EXPECT_EQ(e.run([&]() -> Task<uint64_t> { co_return co_await e.cas({0, 16}, v, 7); }()), v);  // succeeds
  EXPECT_EQ(e.run(read_word(e, {0, 16})), 7u);
  EXPECT_EQ(e.run([&]() -> Task<uint64_t> { co_return co_await e.faa({0, 16}, 5); }()), 7u);
  EXPECT_EQ(e.run(read_word(e, {0, 16})), 12u);
}

TEST(Engine, OverlappedRequestsShareOneRoundTrip) {
  auto f = make_local_fabric({4096});
  std::memset(f->local_region(0).data(), 1, 16);
  auto t = f->connect();
  Engine e(*t);
  OpStats s;
  EXPECT_EQ(e.run(overlapped(e), &s), 2 * 0x0101010101010101ULL);
  EXPECT_EQ(s.round_trips, 1u);
  EXPECT_EQ(s.reads, 2u);
  EXPECT_EQ(s.bytes, 16u);
  EXPECT_EQ(t->counters().batches, 1u);
}

TEST(Engine, DroppedPendingIsWithdrawnBeforePosting) {
  auto f = make_local_fabric({4096});
  auto t = f->connect();
  Engine e(*t);
  OpStats s;
  e.run(post_and_drop(e, true), &s);
  EXPECT_EQ(s.reads, 1u);
  EXPECT_EQ(t->counters().reads, 1u);
  OpStats s2;
  e.run(post_and_drop(e, false), &s2);
  EXPECT_EQ(s2.reads, 2u);
  EXPECT_EQ(s2.round_trips, 2u);
}

TEST(Engine, RunManyBatchesUpToDepthOperations) {
  auto f = make_local_fabric({1 << 16});
  auto t = f->connect();
  Engine e(*t);
  std::vector<uint64_t> out(100);
  uint64_t total_rt = 0, completed = 0;
  e.run_many(
      100, 16, [&](uint64_t i) -> Task<void> { return [](Engine& e, uint64_t* dst, uint64_t i) -> Task<void> {
        co_await e.read({0, i * 8}, dst, 8);
      }(e, &out[i], i); },
      [&](const Engine::Completion& c) {
        EXPECT_FALSE(c.error);
        total_rt += c.stats.round_trips;
        ++completed;
      });
  EXPECT_EQ(completed, 100u);
  EXPECT_EQ(total_rt, 100u);              // one round trip each
  EXPECT_EQ(t->counters().batches, 7u);  // ceil(100 / 16)
  EXPECT_EQ(t->counters().reads, 100u);
}

// An operation that holds a lock between its requests: CAS word i 0 -> 1, `extra` READs, then
// WRITE 0 (the unlock). Abandoned midway, it leaves its word locked.
Task<void> locked_op(Engine& e, uint64_t i, uint32_t extra) {
  const RemoteAddr w{0, i * 8};
  if (co_await e.cas(w, 0, 1) != 0) throw std::runtime_error("word already locked");
  uint64_t scratch = 0;
  for (uint32_t k = 0; k < extra; ++k) co_await e.read({0, 4096}, &scratch, 8);
  const uint64_t zero = 0;
  co_await e.write(w, &zero, 8);
}

// run_many with a `done` or a `make` that throws: nothing starts after the exception, every
// operation in flight runs to its end (no lock left held) and is reported once, and then the
// exception leaves run_many. (`done` runs inside the engine's root coroutine: an exception escaping
// there would terminate the process.)
TEST(Engine, RunManyCallbackExceptionsFinishTheOperationsInFlight) {
  struct Thrown : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  for (const bool from_done : {true, false}) {
    SCOPED_TRACE(from_done ? "done throws" : "make throws");
    auto f = make_local_fabric({8192});
    auto t = f->connect();
    Engine e(*t);
    const uint64_t n = 64;
    std::vector<int> made(n, 0), reported(n, 0);
    EXPECT_THROW(e.run_many(
                     n, 8,
                     [&](uint64_t i) -> Task<void> {
                       if (!from_done && i == 11) throw Thrown("make threw");
                       ++made[i];
                       return locked_op(e, i, static_cast<uint32_t>(i % 4));
                     },
                     [&](const Engine::Completion& c) {
                       EXPECT_FALSE(c.error);
                       ++reported[c.index];
                       if (from_done && c.index == 2) throw Thrown("done threw");
                     }),
                 Thrown);
    uint64_t started = 0;
    for (uint64_t i = 0; i < n; ++i) {
      EXPECT_EQ(reported[i], made[i]) << "operation " << i;
      started += made[i];
      uint64_t w;
      std::memcpy(&w, f->local_region(0).data() + i * 8, 8);
      EXPECT_EQ(w, 0u) << "operation " << i << " left its word locked";
    }
    EXPECT_GE(started, 8u);
    EXPECT_LT(started, n) << "nothing starts after the exception";
    if (!from_done) {
      EXPECT_EQ(started, 11u);
    }
    // The engine stays usable.
    EXPECT_EQ(e.run(read_word(e, {0, 0})), 0u);
  }
}

TEST(Engine, TransportErrorFailsTheOperationNotTheEngine) {
  auto f = make_local_fabric({4096});
  auto t = f->connect();
  Engine e(*t);
  EXPECT_THROW(e.run(read_word(e, {0, 4096})), FabricError);
  EXPECT_THROW(e.run(read_word(e, {3, 0})), FabricError);
  EXPECT_THROW(e.run([&]() -> Task<uint64_t> { co_return co_await e.cas({0, 4}, 0, 1); }()), FabricError);
  EXPECT_EQ(e.run(read_word(e, {0, 0})), 0u);  // still usable
}

TEST(Engine, RpcReachesTheRegisteredHandler) {
  auto f = make_local_fabric({4096});
  f->register_rpc(7, [](uint32_t, std::span<const std::byte> req, std::vector<std::byte>& reply) {
    reply.assign(req.rbegin(), req.rend());
  });
  auto t = f->connect();
  Engine e(*t);
  const char msg[] = "abc";
  std::vector<std::byte> reply;
  OpStats s;
  e.run([&]() -> Task<void> { co_await e.rpc(0, 7, msg, 3, &reply); }(), &s);
  ASSERT_EQ(reply.size(), 3u);
  EXPECT_EQ(static_cast<char>(reply[0]), 'c');
  EXPECT_EQ(s.rpcs, 1u);
  EXPECT_THROW(e.run([&]() -> Task<void> { co_await e.rpc(0, 8, msg, 3, &reply); }()), FabricError);
}

// fabric.h: a node refuses an RPC payload over kMaxRpcBytes before its handler runs, on the local
// and the simulated fabric (the UCX fabric's case is in ucx_fabric_test).
TEST(Engine, RpcOverThePayloadLimitIsRefused) {
  for (const bool sim : {false, true}) {
    SCOPED_TRACE(sim ? "sim fabric" : "local fabric");
    std::unique_ptr<Fabric> f;
    if (sim) f = make_sim_fabric({4096}, load_sim_profile("edr"));
    else f = make_local_fabric({4096});
    uint64_t calls = 0;
    f->register_rpc(7, [&](uint32_t, std::span<const std::byte> req, std::vector<std::byte>& reply) {
      ++calls;
      reply.assign(req.begin(), req.begin() + std::min<size_t>(req.size(), 8));
    });
    auto t = f->connect();
    Engine e(*t);
    std::vector<std::byte> big(size_t{kMaxRpcBytes} + 1), reply;
    e.run([&]() -> Task<void> { co_await e.rpc(0, 7, big.data(), kMaxRpcBytes, &reply); }());
    EXPECT_EQ(calls, 1u);
    try {
      e.run([&]() -> Task<void> { co_await e.rpc(0, 7, big.data(), kMaxRpcBytes + 1, &reply); }());
      ADD_FAILURE() << "an RPC over kMaxRpcBytes was accepted";
    } catch (const FabricError& ex) {
      EXPECT_NE(std::string(ex.what()).find("kMaxRpcBytes"), std::string::npos) << ex.what();
    }
    EXPECT_EQ(calls, 1u) << "the handler ran for the refused payload";
  }
}

}  // namespace
}  // namespace rdmahash
