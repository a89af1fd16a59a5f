// RACE over UCX (mpirun): byte-string keys of mixed lengths (1..64 bytes) and values of mixed
// lengths against std::unordered_map, on K memory nodes, the table growing from one subtable while
// every client runs. Three phases, every client at once:
//   1. own keys: random put / find_or_put / update / erase / get on keys only this client writes,
//      each answer checked against the client's oracle;
//   2. shared keys: every client find_or_puts the same keys in the same order (overlapping inserts);
//   3. read-back: every client replays every other client's phase-1 sequence into an oracle of its
//      own and reads every key of every client back (present with the final value, or absent), and
//      reads every shared key (present, with a value some client wrote).
// Rank 0 then checks that each shared key was acknowledged "inserted" by exactly one client.
// Usage: mpirun -n N ucx_race_test [--memory-nodes K] [--ops N] [--direct-access on|off]
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/race.h"
#include "rdmahash/ucx_fabric.h"

using namespace rdmahash;

namespace {

using Bytes = std::vector<std::byte>;

constexpr uint32_t kOwnKeys = 600;
constexpr uint32_t kSharedKeys = 1500;

Bytes bytes_of(const std::string& s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

// Key i of client c (c = UINT32_MAX: shared), 1..64 bytes; distinct because the prefix names both.
std::string key_of(uint32_t c, uint32_t i) {
  std::string k = (c == UINT32_MAX ? "s" : std::to_string(c)) + "/" + std::to_string(i);
  std::mt19937_64 r(uint64_t{i} * 0x9E3779B97F4A7C15ULL + c);
  const size_t len = 1 + r() % 64;
  while (k.size() < len) k += static_cast<char>(r());
  return k;
}

// For messages: the key with its non-printable bytes as \xNN.
std::string printable(const std::string& k) {
  std::string out;
  for (const unsigned char ch : k) {
    char buf[8];
    if (ch >= 0x20 && ch < 0x7f) out += static_cast<char>(ch);
    else std::snprintf(buf, sizeof buf, "\\x%02x", ch), out += buf;
  }
  return out;
}

std::string value_of(const std::string& key, uint32_t client, uint64_t version) {
  std::string v = key + "#" + std::to_string(client) + "#" + std::to_string(version) + "#";
  std::mt19937_64 r(version * 31 + client);
  v.resize(v.size() + r() % 200, static_cast<char>('a' + version % 26));
  return v;
}

// Client c's phase 1, as a pure function of c: calls op(kind, key, value) for each operation.
enum class Op { kPut, kFindOrPut, kUpdate, kErase, kGet };
template <class F>
void own_sequence(uint32_t c, uint32_t ops, F&& op) {
  std::mt19937_64 r(1000 + c);
  for (uint32_t n = 0; n < ops; ++n) {
    const std::string k = key_of(c, static_cast<uint32_t>(r() % kOwnKeys));
    const uint64_t x = r() % 10;
    const Op kind = x < 3 ? Op::kPut : x < 5 ? Op::kFindOrPut : x < 6 ? Op::kUpdate : x < 7 ? Op::kErase : Op::kGet;
    op(kind, k, value_of(k, c, n));
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failures = 0;
  RaceConfig cfg;
  cfg.memory_nodes = 1;
  cfg.groups_per_subtable = 2;  // 42 slots per subtable: many splits while the clients run
  cfg.initial_depth = 0;
  cfg.max_depth = 14;
  cfg.chunk_bytes = 1 << 16;
  uint32_t ops = 6000;
  bool direct = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--memory-nodes") cfg.memory_nodes = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--ops") ops = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--direct-access") direct = v == "on";
  }
  {
    auto f = UcxFabric::create(UcxFabricConfig{cfg.memory_nodes, false, cfg.region_bytes(64 << 20), nullptr, {}, direct});
    RaceServer server(*f, cfg);  // formats the hosted nodes, registers the allocator
    f->barrier();
    auto fail = [&](const std::string& what) {
      if (failures < 20) std::fprintf(stderr, "rank %d: FAILED: %s\n", f->rank(), what.c_str());
      ++failures;
    };
    Bytes acks;
    MPI_Comm clients;
    MPI_Comm_split(MPI_COMM_WORLD, f->is_client() ? 1 : MPI_UNDEFINED, f->rank(), &clients);
    if (f->is_client()) {
      const uint32_t me = static_cast<uint32_t>(f->rank()) - cfg.memory_nodes;
      auto transport = f->connect();
      Engine engine(*transport);
      RaceClient table(cfg, engine, me);
      auto get = [&](const std::string& k) -> std::optional<std::string> {
        Bytes out;
        const OpResult r = engine.run(table.get(KeyView(bytes_of(k)), &out));
        if (r.status != Status::kFound) return std::nullopt;
        return std::string(reinterpret_cast<const char*>(out.data()), out.size());
      };
      // 1. own keys against the oracle
      std::unordered_map<std::string, std::string> oracle;
      own_sequence(me, ops, [&](Op kind, const std::string& k, const std::string& v) {
        const bool present = oracle.count(k) > 0;
        const Bytes kb = bytes_of(k), vb = bytes_of(v);
        Status want{}, got{};
        switch (kind) {
          case Op::kPut:
            got = engine.run(table.put(KeyView(kb), vb)).status;
            want = present ? Status::kUpdated : Status::kInserted;
            oracle[k] = v;
            break;
          case Op::kFindOrPut:
            got = engine.run(table.find_or_put(KeyView(kb), vb)).status;
            want = present ? Status::kFound : Status::kInserted;
            if (!present) oracle[k] = v;
            break;
          case Op::kUpdate:
            got = engine.run(table.update(KeyView(kb), vb)).status;
            want = present ? Status::kUpdated : Status::kNotFound;
            if (present) oracle[k] = v;
            break;
          case Op::kErase:
            got = engine.run(table.erase(KeyView(kb))).status;
            want = present ? Status::kErased : Status::kNotFound;
            oracle.erase(k);
            break;
          case Op::kGet: {
            const auto g = get(k);
            if (g != (present ? std::optional<std::string>(oracle[k]) : std::nullopt)) fail("get " + printable(k) + ": wrong answer");
            return;
          }
        }
        if (got != want) fail(printable(k) + ": " + to_string(got) + ", expected " + to_string(want));
      });
      // 2. shared keys, every client in the same order
      MPI_Barrier(clients);
      acks.assign(kSharedKeys, std::byte{0});
      for (uint32_t i = 0; i < kSharedKeys; ++i) {
        const std::string k = key_of(UINT32_MAX, i);
        const OpResult r = engine.run(table.find_or_put(KeyView(bytes_of(k)), bytes_of(value_of(k, me, 0))));
        if (r.status == Status::kInserted) acks[i] = std::byte{1};
        else if (r.status != Status::kFound) fail("find_or_put of shared " + printable(k) + ": " + to_string(r.status));
      }
      // 3. read back every client's keys and the shared ones
      MPI_Barrier(clients);
      for (uint32_t c = 0; c < f->client_count(); ++c) {
        std::unordered_map<std::string, std::string> final_state;
        own_sequence(c, ops, [&](Op kind, const std::string& k, const std::string& v) {
          const bool present = final_state.count(k) > 0;
          if (kind == Op::kPut || (kind == Op::kFindOrPut && !present) || (kind == Op::kUpdate && present)) final_state[k] = v;
          if (kind == Op::kErase) final_state.erase(k);
        });
        for (uint32_t i = 0; i < kOwnKeys; ++i) {
          const std::string k = key_of(c, i);
          const auto it = final_state.find(k);
          const auto g = get(k);
          if (g != (it == final_state.end() ? std::nullopt : std::optional<std::string>(it->second)))
            fail("client " + std::to_string(c) + "'s key " + printable(k) + " reads back wrong");
        }
      }
      for (uint32_t i = 0; i < kSharedKeys; ++i) {
        const std::string k = key_of(UINT32_MAX, i);
        const auto g = get(k);
        bool known = false;
        for (uint32_t c = 0; g && c < f->client_count() && !known; ++c) known = *g == value_of(k, c, 0);
        if (!known) fail("shared key " + printable(k) + (g ? " holds a value no client wrote" : " is missing"));
      }
      const RaceClientStats& st = table.stats();
      std::printf("client %u: %llu splits, directory depth %u\n", me, static_cast<unsigned long long>(st.splits),
                  table.cached_depth());
      f->client_done();
      MPI_Comm_free(&clients);
    }
    f->serve();
    f->barrier();
    const auto all = f->gather(acks);
    if (f->rank() == 0) {
      uint64_t splits_seen = 0;
      for (uint32_t i = 0; i < kSharedKeys; ++i) {
        int n = 0;
        for (const auto& a : all)
          if (a.size() == kSharedKeys && a[i] != std::byte{0}) ++n;
        if (n != 1) fail("shared key " + std::to_string(i) + " acknowledged as inserted " + std::to_string(n) + " times");
      }
      if (f->is_memory_node()) splits_seen = race_slot_count(*f, cfg);
      const uint64_t one_subtable = 3ULL * cfg.groups_per_subtable * kRaceSlots;
      if (splits_seen <= 8 * one_subtable) fail("the table must have grown well past one subtable: " + std::to_string(splits_seen) + " slots");
      std::printf("%s: %llu slots at the end, %d failures\n", failures ? "FAILED" : "ok",
                  static_cast<unsigned long long>(splits_seen), failures);
    }
    f->barrier();
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    failures = total;
  }
  MPI_Finalize();
  return failures ? 1 : 0;
}
