// The simulated fabric's measured client CPU (client_cpu = measured, src/fabric/sim_fabric.cpp):
// what is charged is the client's own code between two execute() calls, and nothing the
// simulation itself does inside execute() (its event loop, the copies, RPC handlers). Each side
// burns a known amount of thread CPU time, so the bounds hold on a loaded machine too: a thread's
// CPU clock does not advance while it is descheduled.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <ctime>
#include <vector>

#include "rdmahash/fabric.h"
#include "rdmahash/sim_fabric.h"
#include "common/cpu_clock.h"

namespace {

double thread_cpu_ns() { return static_cast<double>(rdmahash::common::thread_cpu_ns()); }

// Spins until this thread has used `ns` more CPU time; returns what it used.
double burn(double ns) {
  const double t0 = thread_cpu_ns();
  double t = t0;
  while (t - t0 < ns) t = thread_cpu_ns();
  return t - t0;
}

// An 8-byte READ or WRITE of `buf` at (node, offset).
rdmahash::Request word_req(rdmahash::ReqKind kind, uint32_t node, uint64_t offset, uint64_t* buf) {
  rdmahash::Request r;
  r.kind = kind;
  r.addr = rdmahash::RemoteAddr{node, offset};
  r.buf = buf;
  r.len = 8;
  return r;
}

rdmahash::SimProfile measured_profile() {
  rdmahash::SimProfile p;
  p.name = "test";
  p.latency_ns = 1000;
  p.nic_ops_per_s = 1e8;
  p.link_bytes_per_s = 1e10;
  p.header_bytes = 0;
  p.qp_depth = 16;
  p.rpc_ns = 500;
  p.client_batch_ns = 0;
  p.client_request_ns = 0;
  p.client_cpu = rdmahash::SimProfile::ClientCpu::kMeasured;
  return p;
}

}  // namespace

TEST(SimFabricMeasured, ChargesTheClientsCodeNotTheSimulationsWork) {
  constexpr double kClient = 200e3;   // ns of client code between two batches
  constexpr double kHandler = 2e6;    // ns an RPC handler burns inside execute()
  constexpr int kBatches = 20;
  auto fabric = rdmahash::make_sim_fabric({4096}, measured_profile());
  double handler_cpu = 0;
  fabric->register_rpc(7, [&](uint32_t, std::span<const std::byte>, std::vector<std::byte>& reply) {
    handler_cpu += burn(kHandler);
    reply.assign(8, std::byte{1});
  });
  double client_cpu = 0;
  fabric->run(1, [&](uint32_t, rdmahash::Transport& t) {
    std::byte payload[8]{};
    std::vector<std::byte> reply;
    for (int i = 0; i < kBatches; ++i) {
      client_cpu += burn(kClient);
      rdmahash::Request r;
      r.kind = rdmahash::ReqKind::kRpc;
      r.addr = rdmahash::RemoteAddr{0, 0};
      r.buf = payload;
      r.len = sizeof payload;
      r.rpc_id = 7;
      r.reply = &reply;
      rdmahash::Request batch[1] = {r};
      t.execute(batch);
    }
  });
  const double charged = fabric->last_run().client_cpu_ns;
  ASSERT_GE(handler_cpu, kBatches * kHandler);
  // At least the client's burns (less a clock read per interval, which is subtracted: < 50 µs),
  // and far less than the handlers' CPU, which runs inside execute() on the same thread.
  EXPECT_GE(charged, client_cpu - kBatches * 50e3) << "client burned " << client_cpu;
  EXPECT_LE(charged, client_cpu + 0.25 * handler_cpu) << "client burned " << client_cpu << ", handlers " << handler_cpu;
  // The virtual time holds the charge: at least every batch's client CPU plus its round trip.
  EXPECT_GE(fabric->last_run().virtual_ns, charged + kBatches * (2 * 1000.0 + 500.0));
}

TEST(SimFabricMeasured, AnEmptyIntervalIsChargedAlmostNothing) {
  // Back-to-back batches with no client code between them: the charge per interval is the loop's
  // own few instructions, not the clock reads (their median cost is subtracted) nor the
  // simulation's work. Bounded by a fraction of the thread's whole CPU time for the loop, which
  // holds every clock read and the whole simulation.
  constexpr int kBatches = 20000;
  auto fabric = rdmahash::make_sim_fabric({4096}, measured_profile());
  double loop_cpu = 0;
  fabric->run(1, [&](uint32_t, rdmahash::Transport& t) {
    uint64_t word = 0;
    rdmahash::Request batch[1] = {word_req(rdmahash::ReqKind::kRead, 0, 64, &word)};
    const double t0 = thread_cpu_ns();
    for (int i = 0; i < kBatches; ++i) t.execute(batch);
    loop_cpu = thread_cpu_ns() - t0;
  });
  const double charged = fabric->last_run().client_cpu_ns;
  EXPECT_LE(charged, 0.2 * loop_cpu) << "charged " << charged / kBatches << " ns per empty interval, loop "
                                     << loop_cpu / kBatches << " ns per batch";
}

namespace {

rdmahash::SimProfile fixed_profile() {
  rdmahash::SimProfile p = measured_profile();
  p.client_cpu = rdmahash::SimProfile::ClientCpu::kFixed;
  p.client_batch_ns = 50;
  p.client_request_ns = 10;
  return p;
}

// `clients` clients each add 1 to a shared counter `per_client` times with CAS retry loops (a
// READ, then a CAS per attempt: contended, so the order of their batches decides who retries).
// Returns {final counter, CAS attempts, virtual ns}.
struct CasRun {
  uint64_t counter = 0, attempts = 0;
  double virtual_ns = 0;
};
CasRun cas_counter(uint32_t clients, uint32_t per_client) {
  auto fabric = rdmahash::make_sim_fabric({4096, 4096}, fixed_profile());
  std::vector<uint64_t> attempts(clients, 0);
  fabric->run(clients, [&](uint32_t c, rdmahash::Transport& t) {
    for (uint32_t i = 0; i < per_client; ++i) {
      uint64_t seen = 0;
      rdmahash::Request b1[1] = {word_req(rdmahash::ReqKind::kRead, 1, 8, &seen)};
      t.execute(b1);
      for (;;) {
        uint64_t old = 0;
        rdmahash::Request cas;
        cas.kind = rdmahash::ReqKind::kCas;
        cas.addr = rdmahash::RemoteAddr{1, 8};
        cas.compare = seen;
        cas.swap = seen + 1;
        cas.result = &old;
        rdmahash::Request b2[1] = {cas};
        t.execute(b2);
        ++attempts[c];
        if (old == seen) break;
        seen = old;
      }
    }
  });
  CasRun r;
  std::memcpy(&r.counter, fabric->local_region(1).data() + 8, 8);
  for (uint64_t a : attempts) r.attempts += a;
  r.virtual_ns = fabric->last_run().virtual_ns;
  return r;
}

}  // namespace

TEST(SimFabricClients, ManyContendingClientsLoseNoIncrementAndRepeatExactly) {
  // 100 coroutine clients, contended CASes on one word:
  // the counter is exact (the oracle: clients x increments), there were retries (the clients
  // really interleaved), and a second run is identical to the last CAS and the last nanosecond.
  const CasRun a = cas_counter(100, 10), b = cas_counter(100, 10);
  EXPECT_EQ(a.counter, 100u * 10u);
  EXPECT_GT(a.attempts, 100u * 10u);
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.virtual_ns, b.virtual_ns);
  EXPECT_EQ(a.counter, b.counter);
}

TEST(SimFabricClients, AClientsExceptionIsRethrownAfterEveryClientFinished) {
  auto fabric = rdmahash::make_sim_fabric({4096}, fixed_profile());
  std::vector<int> done(8, 0);
  EXPECT_THROW(fabric->run(8,
                           [&](uint32_t c, rdmahash::Transport& t) {
                             uint64_t w = 0;
                             for (int i = 0; i < 5; ++i) {
                               rdmahash::Request b[1] = {word_req(rdmahash::ReqKind::kRead, 0, 0, &w)};
                               if (c == 3 && i == 2) throw std::runtime_error("client 3 fails");
                               t.execute(b);
                             }
                             done[c] = 1;
                           }),
               std::runtime_error);
  for (uint32_t c = 0; c < 8; ++c) EXPECT_EQ(done[c], c == 3 ? 0 : 1) << c;
  // A failed request (outside the region) throws FabricError inside its client, which may catch it.
  int caught = 0;
  fabric->run(4, [&](uint32_t, rdmahash::Transport& t) {
    uint64_t w = 0;
    rdmahash::Request b[1] = {word_req(rdmahash::ReqKind::kRead, 0, 8192, &w)};
    try {
      t.execute(b);
    } catch (const rdmahash::FabricError&) {
      ++caught;
    }
  });
  EXPECT_EQ(caught, 4);
}

TEST(SimFabricClients, AConnectedTransportWorksOutsideRunAndIsRefusedInside) {
  auto fabric = rdmahash::make_sim_fabric({4096}, fixed_profile());
  auto owned = fabric->connect();
  uint64_t w = 7;
  auto batch_of = [](uint64_t* buf, rdmahash::ReqKind kind) { return word_req(kind, 0, 16, buf); };
  rdmahash::Request put[1] = {batch_of(&w, rdmahash::ReqKind::kWrite)};
  owned->execute(put);  // outside run(): its own client, performed at once
  int refused = 0;
  uint64_t seen[2] = {};
  fabric->run(2, [&](uint32_t c, rdmahash::Transport& t) {
    rdmahash::Request mine[1] = {batch_of(&seen[c], rdmahash::ReqKind::kRead)};
    t.execute(mine);
    uint64_t x = 0;
    rdmahash::Request theirs[1] = {batch_of(&x, rdmahash::ReqKind::kRead)};
    try {
      owned->execute(theirs);
    } catch (const std::logic_error&) {
      ++refused;
    }
    t.execute(mine);  // the run goes on
  });
  EXPECT_EQ(refused, 2);
  EXPECT_EQ(seen[0], 7u);
  EXPECT_EQ(seen[1], 7u);
  uint64_t back = 0;
  rdmahash::Request get[1] = {batch_of(&back, rdmahash::ReqKind::kRead)};
  owned->execute(get);  // and outside run() again
  EXPECT_EQ(back, 7u);
}
