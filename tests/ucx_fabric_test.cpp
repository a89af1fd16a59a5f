// Multi-process test of UcxFabric, run under mpirun by CTest:
//   mpirun -n 3 ucx_fabric_test --memory-nodes 1     (1 memory node, 2 clients)
//   mpirun -n 2 ucx_fabric_test --symmetric          (every rank hosts a region and is a client)
// Each check is verified at the memory node or by all-gathered results; any mismatch fails.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "rdmahash/ucx_fabric.h"

using namespace rdmahash;

namespace {

int failures = 0, checks = 0;

void expect(bool ok, const std::string& what, int rank) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  }
}

uint64_t pattern(int rank, uint64_t i) { return (static_cast<uint64_t>(rank) << 48) ^ (i * 0x9E3779B97F4A7C15ULL); }

constexpr uint64_t kRegion = 1 << 20;
constexpr uint64_t kCounterOff = 0;       // FAA target
constexpr uint64_t kClaimOff = 64;        // 256 CAS words
constexpr uint64_t kClaimWords = 256;
constexpr uint64_t kPrivateOff = 8192;    // per-client 64 KiB areas
constexpr uint64_t kPrivateBytes = 64 * 1024;
constexpr int kFaaPerClient = 500;

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  UcxFabricConfig cfg;
  cfg.region_bytes = kRegion;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--symmetric") == 0) cfg.symmetric = true;
    else if (std::strcmp(argv[i], "--memory-nodes") == 0 && i + 1 < argc) cfg.memory_nodes = std::stoul(argv[++i]);
  }
  int rc = 0;
  {
    auto f = UcxFabric::create(cfg);
    const int rank = f->rank();
    const uint32_t nodes = f->memory_nodes();
    const uint32_t clients = f->client_count();
    const uint32_t me = cfg.symmetric ? rank : rank - nodes;
    f->register_rpc(9, [&](uint32_t src, std::span<const std::byte> req, std::vector<std::byte>& reply) {
      // Echo the request reversed, then the sender's rank and the serving rank.
      reply.assign(req.rbegin(), req.rend());
      const uint32_t extra[2] = {src, static_cast<uint32_t>(rank)};
      const auto* b = reinterpret_cast<const std::byte*>(extra);
      reply.insert(reply.end(), b, b + sizeof extra);
    });
    f->barrier();
    std::vector<uint64_t> my_claims;
    if (f->is_client()) {
      auto t = f->connect();
      for (uint32_t node = 0; node < nodes; ++node) {
        // 1. Writes of several sizes to this client's private area, read back in one batch.
        const uint64_t base = kPrivateOff + me * kPrivateBytes;
        const uint32_t sizes[] = {8, 24, 256, 4096, 16384};
        std::vector<std::vector<uint64_t>> out, in;
        std::vector<Request> batch;
        uint64_t off = base;
        for (uint32_t s : sizes) {
          out.emplace_back(s / 8);
          for (uint64_t i = 0; i < s / 8; ++i) out.back()[i] = pattern(rank, off + i);
          Request r;
          r.kind = ReqKind::kWrite; r.addr = {node, off}; r.buf = out.back().data(); r.len = s;
          batch.push_back(r);
          off += s;
        }
        t->execute(batch);
        batch.clear();
        off = base;
        for (uint32_t s : sizes) {
          in.emplace_back(s / 8, 0);
          Request r;
          r.kind = ReqKind::kRead; r.addr = {node, off}; r.buf = in.back().data(); r.len = s;
          batch.push_back(r);
          off += s;
        }
        t->execute(batch);
        expect(in == out, "read back what was written (node " + std::to_string(node) + ")", rank);

        // 2. Many small reads in one batch (the engine's common case).
        std::vector<uint64_t> words(512);
        batch.clear();
        for (uint64_t i = 0; i < words.size(); ++i) {
          Request r;
          r.kind = ReqKind::kRead; r.addr = {node, base + (i % 4) * 8}; r.buf = &words[i]; r.len = 8;
          batch.push_back(r);
        }
        t->execute(batch);
        bool ok = true;
        std::vector<uint64_t> flat;
        for (const auto& v : out) flat.insert(flat.end(), v.begin(), v.end());
        for (uint64_t i = 0; i < words.size(); ++i) ok &= words[i] == flat[i % 4];
        expect(ok, "512 reads in one batch", rank);

        // 3. Fetch-add on one shared counter by every client.
        uint64_t old = 0;
        for (int i = 0; i < kFaaPerClient; ++i) {
          Request r;
          r.kind = ReqKind::kFaa; r.addr = {node, kCounterOff}; r.compare = 1; r.result = &old;
          std::vector<Request> one{r};
          t->execute(one);
        }
        // 4. Racing CAS claims: each word 0 → my id; count the ones I won.
        std::vector<uint64_t> results(kClaimWords);
        batch.clear();
        for (uint64_t w = 0; w < kClaimWords; ++w) {
          Request r;
          r.kind = ReqKind::kCas; r.addr = {node, kClaimOff + w * 8}; r.compare = 0; r.swap = 1000 + rank;
          r.result = &results[w];
          batch.push_back(r);
        }
        t->execute(batch);
        for (uint64_t w = 0; w < kClaimWords; ++w)
          if (results[w] == 0) my_claims.push_back(node * kClaimWords + w);
        // A failed CAS returns the winner's value and changes nothing.
        for (uint64_t w = 0; w < kClaimWords; ++w)
          expect(results[w] == 0 || (results[w] >= 1000 && results[w] < 1000 + static_cast<uint64_t>(f->size())),
                 "CAS returns the old value", rank);

        // 5. RPC echo.
        const char msg[] = "hello, memory node";
        std::vector<std::byte> reply;
        Request r;
        r.kind = ReqKind::kRpc; r.addr = {node, 0}; r.buf = const_cast<char*>(msg); r.len = sizeof msg;
        r.rpc_id = 9; r.reply = &reply;
        std::vector<Request> one{r};
        t->execute(one);
        bool rpc_ok = reply.size() == sizeof msg + 8;
        for (size_t i = 0; rpc_ok && i < sizeof msg; ++i) rpc_ok = static_cast<char>(reply[i]) == msg[sizeof msg - 1 - i];
        uint32_t extra[2] = {0, 0};
        if (rpc_ok) std::memcpy(extra, reply.data() + sizeof msg, 8);
        expect(rpc_ok && extra[0] == static_cast<uint32_t>(rank) && extra[1] == node, "rpc echo", rank);

        // 6. A bad address throws, an unknown handler throws; the transport stays usable.
        Request bad;
        bad.kind = ReqKind::kRead; bad.addr = {node, kRegion - 4}; bad.buf = words.data(); bad.len = 8;
        std::vector<Request> badb{bad};
        bool threw = false;
        try { t->execute(badb); } catch (const FabricError&) { threw = true; }
        expect(threw, "out-of-range read throws FabricError", rank);
        r.rpc_id = 77;
        std::vector<Request> badrpc{r};
        threw = false;
        try { t->execute(badrpc); } catch (const FabricError&) { threw = true; }
        expect(threw, "rpc to an unknown handler throws FabricError", rank);
      }
      const auto& c = t->counters();
      // Per node: 5 writes, 5 + 512 reads (+1 rejected before posting: not counted), 500 FAA,
      // 256 CAS, 2 RPCs (the unknown-handler one was posted).
      expect(c.writes == 5u * nodes && c.reads == 517u * nodes && c.faa == 500u * nodes && c.cas == 256u * nodes &&
                 c.rpcs == 2u * nodes,
             "counters match the requests issued", rank);
      f->client_done();
    }
    f->serve();
    // Every CAS word was claimed exactly once across all clients.
    std::vector<std::byte> mine(my_claims.size() * 8);
    if (!my_claims.empty()) std::memcpy(mine.data(), my_claims.data(), mine.size());
    auto all = f->gather(mine);
    if (rank == 0) {
      std::vector<int> claimed(nodes * kClaimWords, 0);
      for (auto& b : all)
        for (size_t i = 0; i + 8 <= b.size(); i += 8) {
          uint64_t w;
          std::memcpy(&w, b.data() + i, 8);
          if (w < claimed.size()) ++claimed[w];
        }
      bool once = true;
      for (int c : claimed) once &= c == 1;
      expect(once, "each CAS word claimed exactly once", rank);
    }
    f->barrier();
    if (f->is_memory_node()) {
      auto region = f->local_region(rank);
      uint64_t counter;
      std::memcpy(&counter, region.data() + kCounterOff, 8);
      expect(counter == static_cast<uint64_t>(clients) * kFaaPerClient, "FAA total = clients x increments", rank);
      bool writes_landed = true;
      for (uint32_t c = 0; c < clients; ++c) {
        const int writer = cfg.symmetric ? c : c + nodes;
        uint64_t w;
        std::memcpy(&w, region.data() + kPrivateOff + c * kPrivateBytes, 8);
        writes_landed &= w == pattern(writer, kPrivateOff + c * kPrivateBytes);
      }
      expect(writes_landed, "writes visible in the memory node's region", rank);
    }
    int local_fail = failures, total_fail = 0, local_checks = checks, total_checks = 0;
    MPI_Reduce(&local_fail, &total_fail, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&local_checks, &total_checks, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) std::printf("%d passed, %d failed\n", total_checks - total_fail, total_fail);
    MPI_Allreduce(&local_fail, &total_fail, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    rc = total_fail ? 1 : 0;
    f->barrier();
  }
  MPI_Finalize();
  return rc;
}
