// state_space — distributed breadth-first reachability over an implicit state graph, the use case of
// seeds 001 and 003: every process discovers states and asks "seen before?" of a table spread over
// all processes (find_or_put). Built against the installed rdmahash package (find_package), as a
// user's program would be.
//
// Three ways to run the same search, compared in one run (`--method all`):
//   rdmahash  PGAS: every rank hosts one shard of a linear-probing set (UcxFabric, symmetric) and
//             is a client of all of them. A rank expands the states IT inserted (its frontier),
//             find_or_put's every successor in pipelined batches; the successors it inserted
//             (kInserted) are its next frontier. No rank waits for another inside a level: the one
//             synchronisation per level is the barrier + all-reduce of the frontier sizes.
//   alltoall  The bulk-synchronous way: each state has an owner rank (a hash of it); each level,
//             every rank expands its frontier, sends each successor to its owner with
//             MPI_Alltoallv, and the owner deduplicates in a local hash set (absl::flat_hash_set).
//   local     One process, one absl::flat_hash_set, no communication (rank 0; the others wait).
// Every run checks the number of states and levels against the graph's known answer and exits 1
// if they differ.
//
// Graphs (implicit: successors computed from a state):
//   cube2-htm, cube2-qtm  the 2x2x2 Rubik's cube with one corner (DBL) fixed: 7!·3^6 = 3 674 160
//                         states; God's number 11 in the half-turn metric (moves U R F, each by
//                         90°, 180°, 270°), 14 in the quarter-turn metric (90° and 270°).
//   pancake-N             the pancake graph on permutations of N (2 ≤ N ≤ 13): N! states, edges
//                         = prefix reversals; diameter P(N) (the pancake numbers, known to N = 19).
//
// usage: mpirun -n P state_space [--graph G] [--method rdmahash|alltoall|local|all] [--load-factor F]
//                                [--depth D] [--batch B] [--json FILE]
#include <mpi.h>

#include <absl/container/flat_hash_set.h>
#include <rdmahash/client.h>
#include <rdmahash/ucx_fabric.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// --- graphs ---------------------------------------------------------------------------------------

// A state is a 64-bit word below 2^63 (the linear set's key range).
struct Graph {
  std::string name;
  uint64_t root = 0;
  uint64_t states = 0;  // the known answer
  uint32_t depth = 0;   // the known eccentricity of the root (levels = depth + 1)
  std::function<void(uint64_t, std::vector<uint64_t>&)> successors;  // appends
};

// 2x2x2 cube, Kociemba's corner numbering URF UFL ULB UBR DFR DLF DBL DRB; a state is the corner
// permutation (3 bits each) and orientation (2 bits each) of the 8 corners; DBL (6) never moves.
struct Corners {
  std::array<uint8_t, 8> cp, co;
};
constexpr Corners kMoveU{{3, 0, 1, 2, 4, 5, 6, 7}, {0, 0, 0, 0, 0, 0, 0, 0}};
constexpr Corners kMoveR{{4, 1, 2, 0, 7, 5, 6, 3}, {2, 0, 0, 1, 1, 0, 0, 2}};
constexpr Corners kMoveF{{1, 5, 2, 3, 0, 4, 6, 7}, {1, 2, 0, 0, 2, 1, 0, 0}};

uint64_t encode(const Corners& c) {
  uint64_t s = 0;
  for (int i = 0; i < 8; ++i) s |= uint64_t{c.cp[i]} << (3 * i) | uint64_t{c.co[i]} << (24 + 2 * i);
  return s;
}
Corners decode(uint64_t s) {
  Corners c{};
  for (int i = 0; i < 8; ++i) {
    c.cp[i] = static_cast<uint8_t>(s >> (3 * i) & 7);
    c.co[i] = static_cast<uint8_t>(s >> (24 + 2 * i) & 3);
  }
  return c;
}
// The state after move m: (a·m).cp[i] = a.cp[m.cp[i]], (a·m).co[i] = a.co[m.cp[i]] + m.co[i] mod 3.
Corners apply(const Corners& a, const Corners& m) {
  Corners r{};
  for (int i = 0; i < 8; ++i) {
    r.cp[i] = a.cp[m.cp[i]];
    r.co[i] = static_cast<uint8_t>((a.co[m.cp[i]] + m.co[i]) % 3);
  }
  return r;
}

Graph cube2(bool half_turns) {
  Graph g;
  g.name = half_turns ? "cube2-htm" : "cube2-qtm";
  g.root = encode(Corners{{0, 1, 2, 3, 4, 5, 6, 7}, {0, 0, 0, 0, 0, 0, 0, 0}});
  g.states = 3674160;
  g.depth = half_turns ? 11 : 14;
  g.successors = [half_turns](uint64_t s, std::vector<uint64_t>& out) {
    const Corners c = decode(s);
    for (const Corners& m : {kMoveU, kMoveR, kMoveF}) {
      const Corners once = apply(c, m), twice = apply(once, m), thrice = apply(twice, m);
      out.push_back(encode(once));
      if (half_turns) out.push_back(encode(twice));
      out.push_back(encode(thrice));
    }
  };
  return g;
}

Graph pancake(uint32_t n) {
  static constexpr uint32_t kDiameter[] = {0, 0, 1, 3, 4, 5, 7, 8, 9, 10, 11, 13, 14, 15};  // P(N)
  if (n < 2 || n > 13) throw std::invalid_argument("pancake-N needs 2 <= N <= 13");
  Graph g;
  g.name = "pancake-" + std::to_string(n);
  for (uint32_t i = 0; i < n; ++i) g.root |= uint64_t{i} << (4 * i);  // 4 bits per position
  g.states = 1;
  for (uint32_t i = 2; i <= n; ++i) g.states *= i;
  g.depth = kDiameter[n];
  g.successors = [n](uint64_t s, std::vector<uint64_t>& out) {
    for (uint32_t k = 2; k <= n; ++k) {  // reverse the top k
      uint64_t t = s;
      for (uint32_t i = 0; i < k; ++i) {
        const uint64_t v = s >> (4 * i) & 15;
        const uint32_t j = k - 1 - i;
        t = (t & ~(uint64_t{15} << (4 * j))) | v << (4 * j);
      }
      out.push_back(t);
    }
  };
  return g;
}

Graph graph_named(const std::string& name) {
  if (name == "cube2-htm") return cube2(true);
  if (name == "cube2-qtm") return cube2(false);
  if (name.rfind("pancake-", 0) == 0) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(name.c_str() + 8, &end, 10);
    if (end && *end == 0 && n >= 2 && n <= 13) return pancake(static_cast<uint32_t>(n));
  }
  throw std::invalid_argument("--graph must be cube2-htm, cube2-qtm or pancake-N (2 <= N <= 13), got '" + name + "'");
}

// --- the three searches -----------------------------------------------------------------------------

struct Result {
  std::string method;
  uint64_t states = 0;
  uint32_t levels = 0;
  double seconds = 0;
  uint64_t bytes = 0;        // moved between processes (all ranks): READ/CAS payloads, or Alltoallv data
  uint64_t round_trips = 0;  // rdmahash: round trips of all clients
  uint64_t lookups = 0;      // find_or_puts (rdmahash) or received successors (alltoall), all ranks
};

uint64_t sum_all(uint64_t v) {
  uint64_t r = 0;
  MPI_Allreduce(&v, &r, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  return r;
}

// Expands `frontier` in chunks of `chunk` states; `visit(successors)` gets each chunk's successors.
template <class Visit>
void expand(const Graph& g, const std::vector<uint64_t>& frontier, size_t chunk, std::vector<uint64_t>& buf,
            Visit&& visit) {
  for (size_t i = 0; i < frontier.size(); i += chunk) {
    buf.clear();
    for (size_t j = i; j < std::min(frontier.size(), i + chunk); ++j) g.successors(frontier[j], buf);
    visit(buf);
  }
}

Result run_rdmahash(const Graph& g, double load_factor, uint32_t depth, size_t chunk) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const auto cfg = rdmahash::LinearConfig::for_records(g.states, load_factor, static_cast<uint32_t>(ranks));
  rdmahash::UcxFabricConfig fc;
  fc.symmetric = true;
  fc.region_bytes = cfg.region_bytes();
  auto fabric = rdmahash::UcxFabric::create(fc);
  rdmahash::LinearShardLoader(cfg, static_cast<uint32_t>(rank), fabric->local_region(static_cast<uint32_t>(rank)));
  fabric->barrier();
  rdmahash::Client client(*fabric, cfg);
  Result r;
  r.method = "rdmahash";
  std::vector<uint64_t> frontier, next, buf;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t bytes = 0, round_trips = 0, lookups = 0;
  if (rank == 0 && client.find_or_put(g.root).status == rdmahash::Status::kInserted) frontier.push_back(g.root);
  uint64_t found = 1, level_size = 1;
  uint32_t levels = 1;
  while (true) {
    next.clear();
    expand(g, frontier, chunk, buf, [&](const std::vector<uint64_t>& succ) {
      const auto res = client.find_or_put_many(succ, {}, depth);
      const auto& st = client.last_stats();
      bytes += st.bytes;
      round_trips += st.round_trips;
      lookups += succ.size();
      for (size_t k = 0; k < succ.size(); ++k)
        if (res[k].status == rdmahash::Status::kInserted) next.push_back(succ[k]);
        else if (res[k].status == rdmahash::Status::kFull) throw std::runtime_error("the table is full");
    });
    fabric->barrier();  // every rank's find_or_puts are complete (the barrier progresses this rank's worker)
    level_size = sum_all(next.size());
    if (level_size == 0) break;
    found += level_size;
    ++levels;
    frontier.swap(next);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.states = found;
  r.levels = levels;
  r.bytes = sum_all(bytes);
  r.round_trips = sum_all(round_trips);
  r.lookups = sum_all(lookups);
  fabric->client_done();
  fabric->serve();
  fabric->barrier();
  return r;
}

uint32_t owner_of(uint64_t s, int ranks) {
  uint64_t h = s * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 29;
  return static_cast<uint32_t>((h * 0xBF58476D1CE4E5B9ULL >> 32) % static_cast<uint64_t>(ranks));
}

Result run_alltoall(const Graph& g, size_t chunk) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(g.states / static_cast<uint64_t>(ranks) + g.states / 8 / static_cast<uint64_t>(ranks));
  std::vector<uint64_t> frontier, next, buf, recv;
  std::vector<std::vector<uint64_t>> out(static_cast<size_t>(ranks));
  std::vector<int> scount(static_cast<size_t>(ranks)), rcount(static_cast<size_t>(ranks)), sdispl(static_cast<size_t>(ranks)),
      rdispl(static_cast<size_t>(ranks));
  std::vector<uint64_t> send;
  if (owner_of(g.root, ranks) == static_cast<uint32_t>(rank)) {
    seen.insert(g.root);
    frontier.push_back(g.root);
  }
  uint64_t found = 1, bytes = 0, received = 0;
  uint32_t levels = 1;
  while (true) {
    next.clear();
    // Every rank takes part in the same number of exchanges per level: the largest frontier's chunks.
    const uint64_t rounds = [&] {
      uint64_t mine = (frontier.size() + chunk - 1) / chunk, most = 0;
      MPI_Allreduce(&mine, &most, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
      return most;
    }();
    for (uint64_t round = 0; round < rounds; ++round) {
      for (auto& o : out) o.clear();
      buf.clear();
      const size_t lo = round * chunk, hi = std::min(frontier.size(), lo + chunk);
      for (size_t j = lo; j < hi; ++j) g.successors(frontier[j], buf);
      for (uint64_t s : buf) out[owner_of(s, ranks)].push_back(s);
      send.clear();
      for (int p = 0; p < ranks; ++p) {
        sdispl[static_cast<size_t>(p)] = static_cast<int>(send.size());
        scount[static_cast<size_t>(p)] = static_cast<int>(out[static_cast<size_t>(p)].size());
        send.insert(send.end(), out[static_cast<size_t>(p)].begin(), out[static_cast<size_t>(p)].end());
        if (p != rank) bytes += out[static_cast<size_t>(p)].size() * sizeof(uint64_t);
      }
      MPI_Alltoall(scount.data(), 1, MPI_INT, rcount.data(), 1, MPI_INT, MPI_COMM_WORLD);
      int total = 0;
      for (int p = 0; p < ranks; ++p) {
        rdispl[static_cast<size_t>(p)] = total;
        total += rcount[static_cast<size_t>(p)];
      }
      recv.resize(static_cast<size_t>(total));
      MPI_Alltoallv(send.data(), scount.data(), sdispl.data(), MPI_UINT64_T, recv.data(), rcount.data(), rdispl.data(),
                    MPI_UINT64_T, MPI_COMM_WORLD);
      received += recv.size();
      for (uint64_t s : recv)
        if (seen.insert(s).second) next.push_back(s);
    }
    const uint64_t level_size = sum_all(next.size());
    if (level_size == 0) break;
    found += level_size;
    ++levels;
    frontier.swap(next);
  }
  Result r;
  r.method = "alltoall";
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.states = found;
  r.levels = levels;
  r.bytes = sum_all(bytes);
  r.lookups = sum_all(received);
  return r;
}

Result run_local(const Graph& g) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Result r;
  r.method = "local";
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::flat_hash_set<uint64_t> seen;
    seen.reserve(g.states + g.states / 8);
    std::vector<uint64_t> frontier{g.root}, next, buf;
    seen.insert(g.root);
    uint32_t levels = 1;
    while (true) {
      next.clear();
      for (uint64_t s : frontier) {
        buf.clear();
        g.successors(s, buf);
        for (uint64_t t : buf)
          if (seen.insert(t).second) next.push_back(t);
        r.lookups += buf.size();
      }
      if (next.empty()) break;
      ++levels;
      frontier.swap(next);
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.states = seen.size();
    r.levels = levels;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return r;
}

[[noreturn]] void usage_error(const std::string& msg) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::fprintf(stderr, "state_space: error: %s\n", msg.c_str());
  MPI_Finalize();
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::string graph_name = "cube2-htm", method = "all", json;
  double load_factor = 0.5;
  uint32_t depth = 32;
  size_t chunk = 16384;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--graph") graph_name = value();
      else if (a == "--method") method = value();
      else if (a == "--load-factor") load_factor = std::stod(value());
      else if (a == "--depth") depth = static_cast<uint32_t>(std::stoul(value()));
      else if (a == "--batch") chunk = std::stoul(value());
      else if (a == "--json") json = value();
      else usage_error("unknown option '" + a + "' (options: --graph --method --load-factor --depth --batch --json)");
    } catch (const std::logic_error&) {
      usage_error("bad value for " + a);
    }
  }
  if (!(load_factor > 0 && load_factor < 1)) usage_error("--load-factor must be in (0, 1)");
  if (depth == 0 || depth > 4096) usage_error("--depth must be in [1, 4096]");
  if (chunk == 0 || chunk > (size_t{1} << 24)) usage_error("--batch must be in [1, 2^24] states");
  if (method != "all" && method != "rdmahash" && method != "alltoall" && method != "local")
    usage_error("--method must be rdmahash, alltoall, local or all, got '" + method + "'");
  Graph g;
  try {
    g = graph_named(graph_name);
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  }
  int failed = 0;
  std::vector<Result> results;
  try {
    if (method == "all" || method == "local") results.push_back(run_local(g));
    if (method == "all" || method == "alltoall") results.push_back(run_alltoall(g, chunk));
    if (method == "all" || method == "rdmahash") results.push_back(run_rdmahash(g, load_factor, depth, chunk));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "state_space: rank %d: error: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    std::printf("graph %s (known: %llu states, depth %u), %d rank%s\n", g.name.c_str(),
                static_cast<unsigned long long>(g.states), g.depth, ranks, ranks == 1 ? "" : "s");
    std::printf("%-9s %5s %10s %6s %9s %12s %12s %10s %8s\n", "method", "ranks", "states", "levels", "seconds",
                "states/s", "bytes moved", "bytes/st", "RT/succ");
    std::FILE* jf = json.empty() ? nullptr : std::fopen(json.c_str(), "a");
    if (!json.empty() && !jf) std::fprintf(stderr, "state_space: error: cannot open %s\n", json.c_str()), failed = 1;
    for (const Result& r : results) {
      const bool ok = r.states == g.states && r.levels == g.depth + 1;
      const int used = r.method == "local" ? 1 : ranks;
      std::printf("%-9s %5d %10llu %6u %9.3f %12.0f %12llu %10.1f %8.3f %s\n", r.method.c_str(), used,
                  static_cast<unsigned long long>(r.states), r.levels, r.seconds, r.states / r.seconds,
                  static_cast<unsigned long long>(r.bytes), static_cast<double>(r.bytes) / static_cast<double>(r.states),
                  r.lookups ? static_cast<double>(r.round_trips) / static_cast<double>(r.lookups) : 0.0,
                  ok ? "ok" : "WRONG");
      if (!ok) failed = 1;
      if (jf)
        std::fprintf(jf,
                     "{\"graph\":\"%s\",\"method\":\"%s\",\"ranks\":%d,\"states\":%llu,\"levels\":%u,\"known_states\":%llu,"
                     "\"known_levels\":%u,\"seconds\":%.6f,\"states_per_s\":%.1f,\"bytes_moved\":%llu,\"round_trips\":%llu,"
                     "\"successors\":%llu,\"load_factor\":%g,\"depth\":%u,\"batch\":%zu,\"correct\":%s}\n",
                     g.name.c_str(), r.method.c_str(), used, static_cast<unsigned long long>(r.states), r.levels,
                     static_cast<unsigned long long>(g.states), g.depth + 1, r.seconds, r.states / r.seconds,
                     static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.round_trips),
                     static_cast<unsigned long long>(r.lookups), load_factor, depth, chunk, ok ? "true" : "false");
    }
    if (jf) std::fclose(jf);
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
