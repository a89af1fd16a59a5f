// RACE with clients that stop at any request (issues 9/10): a splitter or a helper stops for good
// (dead or merely stalled: splits need no death board) before one of its requests and the others
// finish its split and go on, never waiting; an inserter stops holding a tentative copy, which the
// next inserter of the key commits for it (the lowest copy) or kills (a higher one). Everything matches a std::unordered_map oracle, with no
// installed split, frozen or tentative slot left. Deterministic: LocalFabric, stops at counted
// requests (the stalled-client tests pause a thread before a request and resume it later).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "rdmahash/race.h"

namespace rdmahash {
namespace {

using Bytes = std::vector<std::byte>;
Bytes bytes_of(const std::string& s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

// Executes requests one at a time; before the request for which `die` answers true (or the
// die_at-th request), the client dies: that request and every later one throw, nothing lands.
class DyingTransport final : public Transport {
 public:
  explicit DyingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  uint64_t die_at = std::numeric_limits<uint64_t>::max();
  std::function<bool(const Request&)> die;
  std::function<void(const Request&)> before;  // runs before each request (pauses, counters)
  uint64_t seen = 0;
  bool dead = false;
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (!dead && (seen == die_at || (die && die(r)))) dead = true;
      if (dead) throw FabricError("test: this client died");
      if (before) before(r);
      ++seen;
      counters_.add(r);
      inner_->execute(std::span<Request>(&r, 1));
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
};

struct Client {
  DyingTransport* tr;
  std::unique_ptr<Transport> own;
  Engine engine;
  RaceClient client;
  Client(Fabric& f, const RaceConfig& c, uint32_t id)
      : tr(nullptr), own(std::make_unique<DyingTransport>(f.connect())), engine(*own), client(c, engine, id) {
    tr = static_cast<DyingTransport*>(own.get());
  }
  OpResult run(Task<OpResult> t) { return engine.run(std::move(t)); }
  OpResult put(const std::string& k, const std::string& v) { return run(client.put(KeyView(k), bytes_of(v))); }
  OpResult find_or_put(const std::string& k, const std::string& v) { return run(client.find_or_put(KeyView(k), bytes_of(v))); }
  OpResult update(const std::string& k, const std::string& v) { return run(client.update(KeyView(k), bytes_of(v))); }
  OpResult erase(const std::string& k) { return run(client.erase(KeyView(k))); }
  std::optional<std::string> get(const std::string& k) {
    Bytes out;
    if (run(client.get(KeyView(k), &out)).status != Status::kFound) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(out.data()), out.size());
  }
  // Runs `op`; true if this client died during it (its operation stays pending forever).
  bool dies_in(const std::function<void()>& op) {
    try {
      op();
    } catch (const FabricError&) {
      if (!tr->dead) throw;
    }
    return tr->dead;
  }
};

RaceConfig fault_cfg() {
  RaceConfig c;
  c.groups_per_subtable = 1;  // 21 slots a subtable: the 20-odd keys before a split
  c.initial_depth = 0;
  c.max_depth = 10;
  c.chunk_bytes = 1 << 16;
  // Helpers run another client's split after 2 polls of the split word, not 1024: these tests
  // stop, kill and interleave the runners of a split, not the pollers (sim_fabric_race-helping
  // covers the patience).
  c.help_patience = 2;
  return c;
}

struct Table {
  RaceConfig cfg;
  std::unique_ptr<Fabric> fabric;
  explicit Table(const RaceConfig& c) : cfg(c) {
    fabric = make_local_fabric({c.region_bytes(4 << 20)});
    RaceServer server(*fabric, c);
  }
};

std::string key(int i) { return "key-" + std::to_string(i); }
std::string val(int i, int version) { return "value-" + std::to_string(i) + "." + std::to_string(version); }

// Client 1 puts key(0), key(1), ... until put number `split_target` splits; returns the index of
// the put that performed that split and the requests before it and in it (reference run).
struct SplitPoint {
  int put = -1;
  uint64_t before = 0, during = 0;
};
SplitPoint find_split(const RaceConfig& cfg, uint64_t split_target) {
  Table t(cfg);
  Client a(*t.fabric, cfg, 1);
  for (int i = 0;; ++i) {
    const uint64_t seen = a.tr->seen;
    EXPECT_EQ(a.put(key(i), val(i, 0)).status, Status::kInserted);
    if (a.client.stats().splits == split_target) return SplitPoint{i, seen, a.tr->seen - seen};
  }
}

// Client `a` puts key(0) .. key(sp.put - 1), the keys before the put that splits, into the oracle.
void put_before_split(Client& a, const SplitPoint& sp, std::unordered_map<std::string, std::string>& oracle) {
  for (int i = 0; i < sp.put; ++i) {
    ASSERT_EQ(a.put(key(i), val(i, 0)).status, Status::kInserted);
    oracle[key(i)] = val(i, 0);
  }
}

// The dead client's table, checked by a survivor: every key of `oracle` readable, then updates,
// erases and new inserts (which split again) all answer as the oracle says; finally a fresh
// client reads everything and the table has no installed split, frozen or tentative slot left.
void check_survivor(Table& t, Client& s, std::unordered_map<std::string, std::string>& oracle, int first_new, int label) {
  for (const auto& [k, v] : oracle) ASSERT_EQ(s.get(k), v) << "stop " << label << " key " << k;
  int n = 0;
  for (auto& [k, v] : oracle) {
    if (n++ % 3 == 0) {
      v += "+u";
      ASSERT_EQ(s.update(k, v).status, Status::kUpdated) << "stop " << label;
    }
  }
  std::vector<std::string> erased;
  n = 0;
  for (const auto& [k, v] : oracle)
    if (n++ % 4 == 1) erased.push_back(k);
  for (const auto& k : erased) {
    ASSERT_EQ(s.erase(k).status, Status::kErased) << "stop " << label;
    oracle.erase(k);
  }
  const uint64_t splits = s.client.stats().splits;
  for (int i = first_new; i < first_new + 60 || (s.client.stats().splits == splits && i < first_new + 400); ++i) {
    ASSERT_EQ(s.put(key(i), val(i, 2)).status, Status::kInserted) << "stop " << label << " key " << key(i);
    oracle[key(i)] = val(i, 2);
  }
  EXPECT_GT(s.client.stats().splits, splits) << "stop " << label << ": a further split must work";
  Client c(*t.fabric, t.cfg, 7);
  for (const auto& [k, v] : oracle) ASSERT_EQ(c.get(k), v) << "stop " << label << " key " << k;
  for (const auto& k : erased) ASSERT_EQ(c.get(k), std::nullopt) << "stop " << label << " key " << k;
  const RaceInspection in = race_inspect(*t.fabric, t.cfg);
  EXPECT_TRUE(in.split_word_clear) << "stop " << label;
  EXPECT_EQ(in.frozen, 0u) << "stop " << label;
  EXPECT_EQ(in.tentative, 0u) << "stop " << label;
  EXPECT_EQ(in.committed, oracle.size()) << "stop " << label;
}

// The state a splitter leaves when it dies before request `stop` of the put that splits: keys
// before it are in the oracle; the dying put's key is pending (present with its value or absent).
struct DeadSplitter {
  Table t;
  std::unordered_map<std::string, std::string> oracle;
  int pending = -1;
  DeadSplitter(const RaceConfig& cfg, const SplitPoint& sp, uint64_t stop) : t(cfg) {
    Client a(*t.fabric, cfg, 1);
    for (int i = 0; i < sp.put; ++i) {
      EXPECT_EQ(a.put(key(i), val(i, 0)).status, Status::kInserted);
      oracle[key(i)] = val(i, 0);
    }
    a.tr->die_at = a.tr->seen + stop;
    EXPECT_TRUE(a.dies_in([&] { a.put(key(sp.put), val(sp.put, 0)); }));
    pending = sp.put;
    race_mark_dead(*t.fabric, cfg, 1);
  }
  // The pending key as the survivor finds it: absent, or the dead put's value.
  void settle_pending(Client& s) {
    const auto got = s.get(key(pending));
    if (got) {
      EXPECT_EQ(*got, val(pending, 0));
      oracle[key(pending)] = *got;
    }
  }
};

// A splitter dies before each request of the put that splits (the first split, which doubles the
// directory, and the third, which does not); a survivor's writes into that subtable complete.
TEST(RaceFault, SplitterDeadBeforeEveryRequestOfASplit) {
  const RaceConfig cfg = fault_cfg();
  uint64_t helped = 0, stops = 0;
  for (uint64_t target : {1u, 3u}) {
    const SplitPoint sp = find_split(cfg, target);
    ASSERT_GT(sp.during, 40u);
    for (uint64_t stop = 0; stop < sp.during; ++stop) {
      DeadSplitter d(cfg, sp, stop);
      Client b(*d.t.fabric, cfg, 2);
      // The survivor's first write is the dead put's own key: into the frozen/locked subtable.
      ASSERT_NE(b.put(key(d.pending), val(d.pending, 1)).status, Status::kFull);
      d.oracle[key(d.pending)] = val(d.pending, 1);
      check_survivor(d.t, b, d.oracle, 1000, static_cast<int>(stop));
      if (b.client.stats().helped > 0) ++helped;
      ++stops;
      if (testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(helped, 40u) << "most stops leave an installed split that the survivor must finish";
  EXPECT_GT(stops, 80u);
}

// A helper running a dead splitter's installed split dies itself before each of its requests; a
// third client then finishes the split (it helps too: nothing is handed over, nobody waits).
// Several stops of the first splitter.
TEST(RaceFault, HelperDeadMidSplitIsFinishedByTheNextClient) {
  const RaceConfig cfg = fault_cfg();
  const SplitPoint sp = find_split(cfg, 3);
  uint64_t trials = 0, helper_died_holding = 0;
  for (uint64_t stop = 3; stop < sp.during; stop += 9) {
    // Reference: the helper's put without dying, to count its requests.
    uint64_t helper_requests = 0;
    {
      DeadSplitter d(cfg, sp, stop);
      Client b(*d.t.fabric, cfg, 2);
      b.put(key(d.pending), val(d.pending, 1));
      helper_requests = b.tr->seen;
    }
    for (uint64_t hstop = 0; hstop < helper_requests; ++hstop) {
      DeadSplitter d(cfg, sp, stop);
      Client b(*d.t.fabric, cfg, 2);
      b.tr->die_at = hstop;
      ASSERT_TRUE(b.dies_in([&] { b.put(key(d.pending), val(d.pending, 1)); }));
      race_mark_dead(*d.t.fabric, cfg, 2);
      if (!race_inspect(*d.t.fabric, cfg).split_word_clear) ++helper_died_holding;  // split still installed
      Client c(*d.t.fabric, cfg, 3);
      // The pending key: the first splitter's value, the helper's, or absent.
      const auto got = c.get(key(d.pending));
      if (got) {
        EXPECT_TRUE(*got == val(d.pending, 0) || *got == val(d.pending, 1)) << *got;
      }
      ASSERT_NE(c.put(key(d.pending), val(d.pending, 2)).status, Status::kFull);
      d.oracle[key(d.pending)] = val(d.pending, 2);
      check_survivor(d.t, c, d.oracle, 1000, static_cast<int>(stop * 1000 + hstop));
      ++trials;
      if (testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(trials, 100u);
  EXPECT_GT(helper_died_holding, 20u) << "helpers must have died inside an installed split";
}

bool is_commit(const Request& r) {
  return r.kind == ReqKind::kCas && (r.swap & (1ULL << 46)) && !(r.compare & (1ULL << 46)) && r.compare != 0;
}

bool is_tentative_cas(const RaceConfig& cfg, const Request& r) {
  return r.kind == ReqKind::kCas && r.compare == 0 && r.addr.offset >= cfg.pool_offset() && r.swap != 0 &&
         !(r.swap & ((1ULL << 46) | (1ULL << 47) | (1ULL << 63)));
}

// The table against the oracle: every key's value, nothing tentative or killed left, each key
// stored once.
void check_oracle(Table& t, Client& c, const std::unordered_map<std::string, std::string>& oracle, const std::string& absent,
                  const std::string& label) {
  for (const auto& [k, v] : oracle) EXPECT_EQ(c.get(k), std::optional<std::string>(v)) << label << " " << k;
  if (!oracle.count(absent)) {
    EXPECT_FALSE(c.get(absent).has_value()) << label;
  }
  const RaceInspection in = race_inspect(*t.fabric, t.cfg, true);
  EXPECT_EQ(in.committed, oracle.size()) << label;
  EXPECT_EQ(in.tentative, 0u) << label;
  EXPECT_EQ(in.killed, 0u) << label;
  std::set<std::vector<std::byte>> distinct(in.keys.begin(), in.keys.end());
  EXPECT_EQ(distinct.size(), in.keys.size()) << label << ": a key stored twice";
}

// An inserter dies holding a tentative copy (before its commit CAS). Another inserter of the key
// sees that copy (the only one) and commits it without waiting and without a death board: the
// dead insert took effect; the survivor answers kFound with its value.
TEST(RaceFault, DeadInserterTentativeCopyIsCommittedByTheNextInserter) {
  const RaceConfig cfg = fault_cfg();
  for (int trial = 0; trial < 40; ++trial) {
    Table t(cfg);
    Client a(*t.fabric, cfg, 1);
    Client b(*t.fabric, cfg, 2);
    std::unordered_map<std::string, std::string> oracle;
    for (int i = 0; i < 6; ++i) {
      ASSERT_EQ(b.put(key(100 + i), "x").status, Status::kInserted);
      oracle[key(100 + i)] = "x";
    }
    const std::string k = "k" + std::to_string(trial);
    a.tr->die = is_commit;
    ASSERT_TRUE(a.dies_in([&] { a.find_or_put(k, "from-a"); }));
    EXPECT_EQ(race_inspect(*t.fabric, cfg).tentative, 1u);
    const uint64_t batches = b.tr->counters().batches;
    EXPECT_EQ(b.find_or_put(k, "from-b").status, Status::kFound) << trial;
    EXPECT_EQ(b.client.stats().commits_helped, 1u) << trial;
    // WRITE block + READ buckets; READ A's block + dir entry; commit CAS (an insert is 4).
    EXPECT_EQ(b.tr->counters().batches - batches, 3u) << "round trips of the helping find_or_put";
    oracle[k] = "from-a";
    Client c(*t.fabric, cfg, 3);
    EXPECT_EQ(c.find_or_put(k, "from-c").status, Status::kFound);
    check_oracle(t, c, oracle, k, "trial " + std::to_string(trial));
  }
}

// --- live owners: helped, never waited for ---------------------------------------------------------

// Pauses its thread before one request until released.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool paused = false, open = false;
  void pause() {
    std::unique_lock l(mu);
    paused = true;
    cv.notify_all();
    cv.wait(l, [&] { return open; });
  }
  void wait_paused() {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return paused; });
  }
  void finished() {  // the paused thread's operation ended without pausing: nobody waits forever
    std::lock_guard l(mu);
    paused = true;
    cv.notify_all();
  }
  void release() {
    std::lock_guard l(mu);
    open = true;
    cv.notify_all();
  }
};

// Runs `op` on its own thread, pausing it before the first request `pause_at` accepts; returns
// once it is paused (or finished without pausing: then `paused` stays false).
struct Stalled {
  Gate gate;
  bool paused = false;
  OpResult result{};
  std::thread th;
  Stalled(Client& cl, std::function<bool(const Request&)> pause_at, std::function<OpResult()> op) {
    cl.tr->before = [this, pause_at](const Request& r) {
      if (!paused && pause_at(r)) {
        paused = true;
        gate.pause();
      }
    };
    th = std::thread([this, op] {
      result = op();
      gate.finished();
    });
    gate.wait_paused();
  }
  OpResult resume() {
    gate.release();
    th.join();
    return result;
  }
  ~Stalled() {  // a test that returns early (a failed ASSERT) still ends the thread
    if (th.joinable()) resume();
  }
};

// A pauses before request `stop` after its tentative CAS (its `stop`-th later request).
std::function<bool(const Request&)> after_tentative(const RaceConfig& cfg, uint64_t stop) {
  auto placed = std::make_shared<bool>(false);
  auto n = std::make_shared<uint64_t>(0);
  return [=, &cfg](const Request& r) {
    if (!*placed) {
      *placed = is_tentative_cas(cfg, r);
      return false;
    }
    return (*n)++ == stop;
  };
}

// A LIVE owner is stalled (forever, as far as B knows) before each of its requests after its
// tentative CAS. B inserts the same key with no wait at all: it commits A's copy (the lowest) and
// answers kFound with A's value; a reader sees it. Then C does nothing, erases the key, or
// updates it; A resumes and answers kInserted exactly once, and the key is stored once (or not at
// all after the erase: A does not insert it again).
TEST(RaceFault, LiveOwnerStalledAfterItsTentativeCasIsHelpedNotWaitedFor) {
  const RaceConfig cfg = fault_cfg();
  int trials = 0;
  for (int after = 0; after < 3; ++after)
    for (uint64_t stop = 0;; ++stop) {
      const std::string label = "after " + std::to_string(after) + " stop " + std::to_string(stop);
      Table t(cfg);
      Client a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2), c(*t.fabric, cfg, 3);
      std::unordered_map<std::string, std::string> oracle;
      for (int i = 0; i < 6; ++i) {
        ASSERT_EQ(c.put(key(100 + i), "x").status, Status::kInserted);
        oracle[key(100 + i)] = "x";
      }
      const std::string k = "k" + std::to_string(stop);
      Stalled sa(a, after_tentative(cfg, stop), [&] { return a.find_or_put(k, "from-a"); });
      if (!sa.paused) {  // A finished before its `stop`-th later request: every stop was tried
        EXPECT_EQ(sa.resume().status, Status::kInserted);
        EXPECT_GE(stop, 2u) << "A must issue a re-read and a commit after its tentative CAS";
        break;
      }
      const OpResult br = b.find_or_put(k, "from-b");
      EXPECT_EQ(br.status, Status::kFound) << label;
      EXPECT_EQ(b.client.stats().commits_helped, 1u) << label;
      oracle[k] = "from-a";  // A's insert took effect at B's commit
      EXPECT_EQ(c.get(k), std::optional<std::string>("from-a")) << label;
      if (after == 1) {
        EXPECT_EQ(c.erase(k).status, Status::kErased) << label;
        oracle.erase(k);
      } else if (after == 2) {
        EXPECT_EQ(c.put(k, "from-c").status, Status::kUpdated) << label;
        oracle[k] = "from-c";
      }
      EXPECT_EQ(sa.resume().status, Status::kInserted) << label;
      a.tr->before = nullptr;
      EXPECT_EQ(a.client.stats().commits_by_helper, 1u) << label;
      check_oracle(t, c, oracle, k, label);
      ++trials;
      if (testing::Test::HasFailure()) return;
    }
  EXPECT_GE(trials, 6);
}

// Two copies of one key, both owners live. A reads and stalls before its tentative CAS; C erases
// some of 10 other keys (freeing slots below A's); B reads and stalls before its tentative CAS;
// A places its copy and stalls after it; B goes on. B's copy lower → B kills A's (a KILLED
// marker) and commits its own (kInserted); A, resumed, clears its marker, starts over and finds
// B's (kFound). Same slot (B's CAS fails) → B commits A's copy (kFound), A answers kInserted.
// Exactly one kInserted, no marker or tentative copy left, the oracle agrees.
TEST(RaceFault, TwoLiveCopiesOneIsKilledOrHelped) {
  const RaceConfig cfg = fault_cfg();
  int helped = 0, killed = 0;
  for (int trial = 0; trial < 36; ++trial) {
    const std::string label = "trial " + std::to_string(trial);
    Table t(cfg);
    Client a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2), c(*t.fabric, cfg, 3);
    std::unordered_map<std::string, std::string> oracle;
    const std::string k = "k" + std::to_string(trial);
    for (int i = 0; i < 10; ++i) {
      ASSERT_EQ(c.put(key(i), "x").status, Status::kInserted);
      oracle[key(i)] = "x";
    }
    Gate g1, g2;
    int phase = 0;
    a.tr->before = [&](const Request& r) {
      if (phase == 0 && is_tentative_cas(cfg, r)) {
        phase = 1;
        g1.pause();
      } else if (phase == 1) {
        phase = 2;
        g2.pause();
      }
    };
    // A livelock (a kill marker taken for a copy, say) fails the trial instead of hanging the
    // suite: each of A and B dies after 1000 requests (an insert here takes ~10), and says so.
    a.tr->die_at = b.tr->die_at = 1000;
    std::string died;
    auto bounded = [&](Client& cl, const std::string& v) {
      try {
        return cl.find_or_put(k, v);
      } catch (const FabricError& e) {
        died += std::string(e.what()) + " (" + v + "); ";
        return OpResult{};
      }
    };
    OpResult ar{};
    std::thread ta([&] {
      ar = bounded(a, "from-a");
      g1.finished();
      g2.finished();
    });
    g1.wait_paused();
    std::mt19937_64 rng(trial);
    const uint64_t erase_mask = rng();
    for (int i = 0; i < 10; ++i)
      if ((erase_mask >> i) & 1) {
        ASSERT_EQ(c.erase(key(i)).status, Status::kErased);
        oracle.erase(key(i));
      }
    Stalled sb(b, [&](const Request& r) { return is_tentative_cas(cfg, r); }, [&] { return bounded(b, "from-b"); });
    ASSERT_TRUE(sb.paused);
    g1.release();
    g2.wait_paused();
    const OpResult br = sb.resume();
    b.tr->before = nullptr;
    g2.release();
    ta.join();
    a.tr->before = nullptr;
    ASSERT_EQ(died, "") << label << ": an insert ran past 1000 requests";
    EXPECT_TRUE((ar.status == Status::kInserted) != (br.status == Status::kInserted)) << label << ": inserted exactly once";
    if (b.client.stats().kills > 0) {
      ++killed;
      EXPECT_EQ(br.status, Status::kInserted) << label;
      EXPECT_EQ(ar.status, Status::kFound) << label;
    } else {
      ++helped;
      EXPECT_EQ(b.client.stats().commits_helped, 1u) << label;
      EXPECT_EQ(br.status, Status::kFound) << label;
      EXPECT_EQ(a.client.stats().commits_by_helper, 1u) << label;
    }
    oracle[k] = ar.status == Status::kInserted ? "from-a" : "from-b";
    check_oracle(t, c, oracle, k, label);
    if (testing::Test::HasFailure()) return;
  }
  EXPECT_GT(helped, 0) << "B's CAS must have met A's slot in some trials";
  EXPECT_GT(killed, 3) << "and B's copy must have been the lower one in others";
}

// Pauses a client's thread before each request its predicates accept, one pause each, in order.
struct Staged {
  std::vector<std::unique_ptr<Gate>> gates;
  size_t next = 0;
  OpResult result{};
  std::thread th;
  Staged(Client& cl, std::vector<std::function<bool(const Request&)>> at, std::function<OpResult()> op) {
    for (size_t i = 0; i < at.size(); ++i) gates.push_back(std::make_unique<Gate>());
    cl.tr->before = [this, at](const Request& r) {
      if (next < at.size() && at[next](r)) gates[next++]->pause();
    };
    th = std::thread([this, op] {
      result = op();
      for (auto& g : gates) g->finished();
    });
  }
  bool wait(size_t i) {  // true: paused at stage i (false: the operation ended first)
    gates[i]->wait_paused();
    return next > i && th.joinable();
  }
  void release(size_t i) { gates[i]->release(); }
  OpResult finish() {
    for (auto& g : gates) g->release();
    th.join();
    return result;
  }
  ~Staged() {  // a test that returns early (a failed ASSERT) still ends the thread
    if (th.joinable()) finish();
  }
};

// A third client's LOWER copy appears between a helper's read and its commit CAS, and the owner
// of the helped copy decides to withdraw it meanwhile. A reads (stalls before its tentative CAS);
// C erases keys (frees lower slots); D reads, stalls before its tentative CAS; A places its copy
// and stalls; B reads (A's copy alone), stalls before its commit CAS; D places a LOWER copy and
// stalls; A re-reads (sees D's lower copy), stalls before withdrawing its own; B commits A's copy;
// A's withdraw CAS fails (it expects the tentative value), A answers kInserted; D finds A's
// committed copy, withdraws its own: kFound. Exactly one kInserted, the oracle agrees.
TEST(RaceFault, ThirdCopyBetweenTheHelpersReadAndItsCommit) {
  const RaceConfig cfg = fault_cfg();
  int scenarios = 0;
  for (int trial = 0; trial < 36; ++trial) {
    const std::string label = "trial " + std::to_string(trial);
    Table t(cfg);
    Client a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2), c(*t.fabric, cfg, 3), d(*t.fabric, cfg, 4);
    std::unordered_map<std::string, std::string> oracle;
    const std::string k = "k" + std::to_string(trial);
    for (int i = 0; i < 10; ++i) {
      ASSERT_EQ(c.put(key(i), "x").status, Status::kInserted);
      oracle[key(i)] = "x";
    }
    auto tent = [&](const Request& r) { return is_tentative_cas(cfg, r); };
    auto any = [](const Request&) { return true; };
    auto withdraw = [](const Request& r) { return r.kind == ReqKind::kCas && r.swap == 0 && r.compare != 0; };
    uint64_t a_slot = 0, d_slot = 0;
    Staged sa(a, {[&](const Request& r) { if (tent(r)) a_slot = r.addr.offset; return tent(r); }, any, withdraw},
              [&] { return a.find_or_put(k, "from-a"); });
    ASSERT_TRUE(sa.wait(0));
    std::mt19937_64 rng(trial);
    const uint64_t erase_mask = rng();
    for (int i = 0; i < 10; ++i)
      if ((erase_mask >> i) & 1) {
        ASSERT_EQ(c.erase(key(i)).status, Status::kErased);
        oracle.erase(key(i));
      }
    Staged sd(d, {[&](const Request& r) { if (tent(r)) d_slot = r.addr.offset; return tent(r); }, any},
              [&] { return d.find_or_put(k, "from-d"); });
    ASSERT_TRUE(sd.wait(0));
    if (d_slot >= a_slot) {  // no lower slot freed: not this scenario
      sa.finish();
      sd.finish();
      a.tr->before = d.tr->before = nullptr;
      continue;
    }
    sa.release(0);
    ASSERT_TRUE(sa.wait(1)) << label;  // A's copy placed
    Staged sb(b, {is_commit}, [&] { return b.find_or_put(k, "from-b"); });
    ASSERT_TRUE(sb.wait(0)) << label;  // B read A's copy alone, about to commit it
    sd.release(0);
    ASSERT_TRUE(sd.wait(1)) << label;  // D's lower copy placed
    sa.release(1);
    ASSERT_TRUE(sa.wait(2)) << label;  // A saw D's lower copy, about to withdraw its own
    sb.release(0);
    const OpResult br = sb.finish();
    EXPECT_EQ(br.status, Status::kFound) << label;
    EXPECT_EQ(b.client.stats().commits_helped, 1u) << label << ": B's commit of A's copy lands";
    const OpResult ar = sa.finish();
    const OpResult dr = sd.finish();
    a.tr->before = b.tr->before = d.tr->before = nullptr;
    EXPECT_EQ(ar.status, Status::kInserted) << label;
    EXPECT_EQ(dr.status, Status::kFound) << label;
    oracle[k] = "from-a";
    check_oracle(t, c, oracle, k, label);
    ++scenarios;
    if (testing::Test::HasFailure()) return;
  }
  EXPECT_GT(scenarios, 3) << "D's copy must have been the lower one in some trials";
}

// A put of the key while its owner is stalled: the helper commits A's copy, then updates it
// (kUpdated, its value); A answers kInserted.
TEST(RaceFault, PutHelpsAStalledOwnerThenUpdates) {
  const RaceConfig cfg = fault_cfg();
  Table t(cfg);
  Client a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2), c(*t.fabric, cfg, 3);
  Stalled sa(a, after_tentative(cfg, 0), [&] { return a.find_or_put("k", "from-a"); });
  ASSERT_TRUE(sa.paused);
  EXPECT_EQ(b.put("k", "from-b").status, Status::kUpdated);
  EXPECT_EQ(b.client.stats().commits_helped, 1u);
  EXPECT_EQ(sa.resume().status, Status::kInserted);
  a.tr->before = nullptr;
  check_oracle(t, c, {{"k", "from-b"}}, "k", "put");
}

// A inserts "k" and stalls right after its tentative CAS; B, inserting "k" too, read A's copy
// alone and stalls before its commit CAS of it. C acts meanwhile; then B resumes (kFound, having
// committed `b_commits` copies), then A (kInserted: its copy was committed, by B or by C).
struct StalledOwnerAndHelper {
  Table t{fault_cfg()};
  Client a{*t.fabric, t.cfg, 1}, b{*t.fabric, t.cfg, 2}, c{*t.fabric, t.cfg, 3};
  Stalled sa{a, after_tentative(t.cfg, 0), [this] { return a.find_or_put("k", "from-a"); }};
  Stalled sb{b, is_commit, [this] { return b.find_or_put("k", "from-b"); }};
  bool ready() const { return sa.paused && sb.paused; }
  void resume(uint64_t b_commits, const std::string& why) {
    EXPECT_EQ(sb.resume().status, Status::kFound);
    b.tr->before = nullptr;
    EXPECT_EQ(b.client.stats().commits_helped, b_commits) << why;
    EXPECT_EQ(sa.resume().status, Status::kInserted);
    a.tr->before = nullptr;
  }
};

// Two helpers of the same stalled copy: B stalls before its commit CAS of A's copy, C commits it;
// B's CAS then fails and B finds the committed copy (kFound); A answers kInserted.
TEST(RaceFault, TwoHelpersOfOneStalledCopy) {
  StalledOwnerAndHelper x;
  ASSERT_TRUE(x.ready());
  EXPECT_EQ(x.c.find_or_put("k", "from-c").status, Status::kFound);
  EXPECT_EQ(x.c.client.stats().commits_helped, 1u);
  x.resume(0, "B's late commit CAS must fail");
  check_oracle(x.t, x.c, {{"k", "from-a"}}, "k", "two helpers");
}

// A split freezes the subtable between the helper's read and its commit CAS: B's CAS (from the
// tentative value) fails on the frozen slot; B finds A's copy in the child and commits it there.
TEST(RaceFault, SplitBetweenTheHelpersReadAndItsCommit) {
  StalledOwnerAndHelper x;
  ASSERT_TRUE(x.ready());
  std::unordered_map<std::string, std::string> oracle;
  for (int i = 0; i < 200 && x.c.client.stats().splits == 0; ++i) {
    ASSERT_EQ(x.c.put(key(i), val(i, 0)).status, Status::kInserted);
    oracle[key(i)] = val(i, 0);
  }
  ASSERT_GT(x.c.client.stats().splits, 0u);
  EXPECT_EQ(race_inspect(*x.t.fabric, x.t.cfg).tentative, 1u) << "the split carries A's tentative copy";
  x.resume(1, "B commits A's copy in the child");
  oracle["k"] = "from-a";
  check_oracle(x.t, x.c, oracle, "k", "split");
}

// The offsets of the two combined buckets a get of `k` READs (128 bytes each).
std::pair<uint64_t, uint64_t> combined_buckets(Table& t, const std::string& k) {
  Client p(*t.fabric, t.cfg, 9);  // reads only: never an owner
  std::vector<uint64_t> at;
  p.tr->before = [&](const Request& r) {
    if (r.kind == ReqKind::kRead && r.len == 128) at.push_back(r.addr.offset);
  };
  p.get(k);
  EXPECT_EQ(at.size(), 2u) << k;
  return {at.at(0), at.at(1)};
}

// A view lists each slot once (read_view): with one group a subtable, every key's two combined
// buckets overlap — they share the overflow bucket, or both hashes name one combined bucket — so a
// slot listed once per combined bucket read would show a copy twice, and an inserter would withdraw
// its own copy as a rival of itself. On a quiet table every insert, whichever way its buckets
// overlap, is insert's 2 CASes (placement, commit) and 1 WRITE, and kills and withdraws nothing.
TEST(RaceFault, OverlappingCombinedBucketsListEachSlotOnce) {
  const RaceConfig cfg = fault_cfg();
  Table t(cfg);
  Client a(*t.fabric, cfg, 1);
  ASSERT_EQ(a.find_or_put("warm", "w").status, Status::kInserted);  // the directory read and chunk RPC
  int coinciding = 0;
  for (int i = 0; i < 12; ++i) {
    const std::string k = "o" + std::to_string(i);
    const auto cb = combined_buckets(t, k);
    coinciding += cb.first == cb.second;
    EXPECT_TRUE(cb.first == cb.second || (cb.first > cb.second ? cb.first - cb.second : cb.second - cb.first) == 64)
        << k << ": one group a subtable, yet its combined buckets do not overlap";
    const FabricCounters before = a.tr->counters();
    ASSERT_EQ(a.find_or_put(k, "v" + k).status, Status::kInserted) << k;
    const FabricCounters& after = a.tr->counters();
    ASSERT_EQ(a.client.stats().splits, 0u) << k << ": the table split; pick fewer keys";
    EXPECT_EQ(after.cas - before.cas, 2u) << k << (cb.first == cb.second ? " (one combined bucket)" : " (a shared overflow)");
    EXPECT_EQ(after.writes - before.writes, 1u) << k;
    EXPECT_EQ(a.get(k), std::optional<std::string>("v" + k)) << k;
  }
  EXPECT_GT(coinciding, 0) << "no key with one combined bucket for both hashes";
  EXPECT_LT(coinciding, 12) << "no key whose combined buckets share the overflow bucket";
  EXPECT_EQ(a.client.stats().kills, 0u);
  const RaceInspection in = race_inspect(*t.fabric, cfg);
  EXPECT_EQ(in.committed, 13u);
  EXPECT_EQ(in.tentative, 0u);
  EXPECT_EQ(in.killed, 0u);
}

// No slot value is placed twice (race.h, Protocol): a helper's commit CAS issued from a view of an
// owner's copy must not land on the owner's NEXT placement of the key in the same slot. The key k
// and z have one combined bucket (both main buckets in it), so every insert takes its lowest
// empty slot. D reads the empty table, stalls before its CAS (slot 0); C puts z (slot 0); A
// places its copy T (slot 1) and stalls; B reads T alone and stalls before committing it; C
// erases z; D places its copy in slot 0, kills T (the higher), commits: kInserted. C erases k and
// puts z (slot 0); E reads (z, A's KILLED marker), stalls before its CAS (slot 2); A clears its
// marker, finds k absent, places it again in slot 1 — with a fresh block, a new value — and
// stalls; E placed and committed its copy in between (kInserted). B's commit CAS from T must fail:
// when A placed the same value again it landed, A answered kInserted too, and k had two committed
// copies (an erase left one behind). A finds E's copy and withdraws its own: kFound.
TEST(RaceFault, LateCommitCasNeverLandsOnTheOwnersNextPlacement) {
  const RaceConfig cfg = fault_cfg();
  Table t(cfg);
  std::string k, z;
  std::pair<uint64_t, uint64_t> k_buckets;
  for (int i = 0; i < 100 && z.empty(); ++i) {
    const std::string s = "k" + std::to_string(i);
    const auto cb = combined_buckets(t, s);
    if (cb.first != cb.second) continue;
    if (k.empty()) {
      k = s;
      k_buckets = cb;
    } else if (cb == k_buckets) {
      z = s;
    }
  }
  ASSERT_FALSE(z.empty()) << "no two keys with one and the same combined bucket";
  Client a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2), c(*t.fabric, cfg, 3), d(*t.fabric, cfg, 4), e(*t.fabric, cfg, 5);
  auto tent = [&](const Request& r) { return is_tentative_cas(cfg, r); };
  auto any = [](const Request&) { return true; };
  std::vector<std::pair<uint64_t, uint64_t>> a_places;  // A's placement CASes: slot offset, value
  auto a_place = [&](const Request& r) {
    if (!tent(r)) return false;
    a_places.emplace_back(r.addr.offset, r.swap);
    return true;
  };
  Staged sd(d, {tent}, [&] { return d.find_or_put(k, "from-d"); });
  ASSERT_TRUE(sd.wait(0));
  ASSERT_EQ(c.put(z, "z").status, Status::kInserted);
  Staged sa(a, {a_place, any, a_place, any}, [&] { return a.find_or_put(k, "from-a"); });
  ASSERT_TRUE(sa.wait(0));
  sa.release(0);
  ASSERT_TRUE(sa.wait(1));  // T placed
  Staged sb(b, {is_commit}, [&] { return b.find_or_put(k, "from-b"); });
  ASSERT_TRUE(sb.wait(0));  // B read T alone, about to commit it
  ASSERT_EQ(c.erase(z).status, Status::kErased);
  sd.release(0);
  EXPECT_EQ(sd.finish().status, Status::kInserted);
  EXPECT_EQ(d.client.stats().kills, 1u) << "D's lower copy kills T";
  ASSERT_EQ(c.erase(k).status, Status::kErased);
  ASSERT_EQ(c.put(z, "z").status, Status::kInserted);
  Staged se(e, {tent}, [&] { return e.find_or_put(k, "from-e"); });
  ASSERT_TRUE(se.wait(0));
  sa.release(1);
  ASSERT_TRUE(sa.wait(2));  // A cleared its marker, found k absent: about to place it again
  ASSERT_EQ(a_places.size(), 2u);
  ASSERT_EQ(a_places[1].first, a_places[0].first) << "A places its copy in T's slot again";
  EXPECT_NE(a_places[1].second, a_places[0].second) << "A placed the same slot value twice";
  se.release(0);
  EXPECT_EQ(se.finish().status, Status::kInserted);  // E's copy alone: committed
  sa.release(2);
  ASSERT_TRUE(sa.wait(3));  // A's second copy placed
  const OpResult br = sb.finish();
  EXPECT_EQ(br.status, Status::kFound);
  EXPECT_EQ(b.client.stats().commits_helped, 0u) << "B's late commit CAS landed on A's second copy";
  EXPECT_EQ(sa.finish().status, Status::kFound) << "A's insert took effect after E's";
  a.tr->before = b.tr->before = d.tr->before = e.tr->before = nullptr;
  check_oracle(t, c, {{z, "z"}, {k, "from-e"}}, k, "late commit");
  EXPECT_EQ(c.erase(k).status, Status::kErased);
  EXPECT_EQ(c.get(k), std::nullopt) << "a second committed copy survived the erase";
}

// The split statistics against the directory: every finished split adds one live subtable, and
// exactly its installer counts it, so the clients' splits sum to the live subtables less the
// initial ones (a void split, which publishes nothing, is counted by nobody).
void expect_split_count(Table& t, std::initializer_list<const Client*> clients, const std::string& label) {
  uint64_t splits = 0;
  for (const Client* c : clients) splits += c->client.stats().splits;
  const RaceInspection in = race_inspect(*t.fabric, t.cfg);
  EXPECT_EQ(splits, in.subtables - (uint64_t{1} << t.cfg.initial_depth)) << label << ": splits counted vs. published";
}

bool is_install(const Request& r) {
  return r.kind == ReqKind::kCas && r.addr.node == 0 && r.addr.offset == offsetof(RaceNodeHeader, split) && r.compare == 0;
}
bool is_subtable_alloc(const RaceConfig& cfg, const Request& r) {
  uint64_t bytes = 0;  // the allocation request is {bytes, node}
  if (r.kind != ReqKind::kRpc || r.len < 16) return false;
  std::memcpy(&bytes, r.buf, 8);
  return bytes == cfg.subtable_bytes();
}

// The end of the split-accounting tests: A puts new keys until its next split, which must
// allocate `want_allocs` subtables (counted into `allocs` by A's request hook: 2 = fresh
// children, 0 = the spares of its void split); then a third client reads every key of the
// oracle, nothing is left frozen or tentative, and the split counts agree.
void expect_next_split_then_oracle(Table& t, Client& a, const Client& b, const uint64_t& allocs, uint64_t want_allocs,
                                   std::unordered_map<std::string, std::string>& oracle, const std::string& label) {
  const uint64_t a_splits = a.client.stats().splits;
  for (int j = 5000; j < 5400 && a.client.stats().splits == a_splits; ++j) {
    ASSERT_EQ(a.put(key(j), val(j, 2)).status, Status::kInserted) << label;
    oracle[key(j)] = val(j, 2);
  }
  a.tr->before = nullptr;
  ASSERT_GT(a.client.stats().splits, a_splits) << label;
  EXPECT_EQ(allocs, want_allocs) << label << (want_allocs ? ": A's next split must allocate both children afresh"
                                                          : ": A's next split must reuse the children of its void split");
  Client c(*t.fabric, t.cfg, 3);
  for (const auto& [k, v] : oracle) ASSERT_EQ(c.get(k), v) << label << " key " << k;
  const RaceInspection in = race_inspect(*t.fabric, t.cfg);
  EXPECT_EQ(in.committed, oracle.size()) << label;
  EXPECT_EQ(in.frozen + in.tentative, 0u) << label;
  expect_split_count(t, {&a, &b}, label);
}

// A LIVE splitter is stalled before each request of the put that splits (the first split, which
// doubles the directory, and the third, which does not), not marked dead. B updates every key, erases a third, and inserts new keys — both halves of the
// splitting subtable included — and every operation completes at once, agreeing with the oracle.
// Then A resumes and finishes its put (its remaining CASes fail or are no-ops); nothing is lost,
// duplicated or resurrected.
TEST(RaceFault, LiveSplitterStalledAtEveryRequestIsHelpedNotWaitedFor) {
  const RaceConfig cfg = fault_cfg();
  uint64_t trials = 0, helped = 0;
  for (uint64_t target : {1u, 3u}) {
    const SplitPoint sp = find_split(cfg, target);
    for (uint64_t stop = 0; stop < sp.during; ++stop) {
      Table t(cfg);
      Client a(*t.fabric, cfg, 1);
      Client b(*t.fabric, cfg, 2);
      std::unordered_map<std::string, std::string> oracle;
      put_before_split(a, sp, oracle);
      Gate gate;
      const uint64_t at = a.tr->seen + stop;
      bool paused = false;
      a.tr->before = [&](const Request&) {
        if (!paused && a.tr->seen == at) {
          paused = true;
          gate.pause();
        }
      };
      OpResult ar;
      std::thread ta([&] {
        ar = a.put(key(sp.put), val(sp.put, 0));
        gate.finished();
      });
      gate.wait_paused();
      const std::string label = "split " + std::to_string(target) + " stop " + std::to_string(stop);
      {
        int n = 0;
        std::vector<std::string> erased;
        for (auto& [k, v] : oracle) {
          v = val(std::stoi(k.substr(4)), 1);
          ASSERT_EQ(b.update(k, v).status, Status::kUpdated) << label;
          if (n++ % 3 == 0) erased.push_back(k);
        }
        for (const auto& k : erased) {
          ASSERT_EQ(b.erase(k).status, Status::kErased) << label;
          oracle.erase(k);
        }
        for (int i = 2000; i < 2030; ++i) {
          ASSERT_EQ(b.put(key(i), val(i, 1)).status, Status::kInserted) << label;
          oracle[key(i)] = val(i, 1);
        }
        for (const auto& [k, v] : oracle) ASSERT_EQ(b.get(k), v) << label;
        for (const auto& k : erased) ASSERT_EQ(b.get(k), std::nullopt) << label;
      }
      gate.release();
      ta.join();
      a.tr->before = nullptr;
      ASSERT_EQ(ar.status, Status::kInserted) << label;
      oracle[key(sp.put)] = val(sp.put, 0);
      if (b.client.stats().helped > 0) ++helped;
      ++trials;
      check_survivor(t, b, oracle, 1000, static_cast<int>(target * 1000 + stop));
      expect_split_count(t, {&a, &b}, label);
      if (testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(trials, 80u);
  EXPECT_GT(helped, 40u) << "B must have met (and finished) the stalled split in most trials";
}

// The splitter A stalls just after installing its split (before reading the descriptor back).
// B finishes that split and goes on until A's child with suffix s is split again, so dir[s] names
// neither S nor A's child when A resumes: A must not take its published split for a void one
// (which would count it nowhere and, worse, keep its published children as spares and overwrite
// them with fresh images at its next split). A then splits again; nothing is lost.
TEST(RaceFault, InstallerStalledPastItsPublishedSplitCountsItAndKeepsNoChild) {
  const RaceConfig cfg = fault_cfg();
  for (uint64_t target : {1u, 3u}) {
    const std::string label = "split " + std::to_string(target);
    const SplitPoint sp = find_split(cfg, target);
    Table t(cfg);
    Client a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2);
    std::unordered_map<std::string, std::string> oracle;
    put_before_split(a, sp, oracle);
    auto installed = std::make_shared<bool>(false);
    Stalled sa(a, [installed](const Request& r) { return std::exchange(*installed, *installed || is_install(r)); },
               [&] { return a.put(key(sp.put), val(sp.put, 0)); });
    ASSERT_TRUE(sa.paused) << label;
    // dir[s] for the suffix s of A's installed split (descriptor word 1).
    auto word = [&](uint32_t node, uint64_t off) {
      uint64_t v = 0;
      std::memcpy(&v, t.fabric->local_region(node).data() + off, 8);
      return v;
    };
    const uint64_t w = word(0, offsetof(RaceNodeHeader, split));
    ASSERT_NE(w, 0u) << label;
    const uint64_t s = word(static_cast<uint32_t>((w >> 40) & 0x3f), (w & ((1ULL << 40) - 1)) * 64 + 8);
    auto dir0 = [&] { return word(0, cfg.directory_offset() + 8 * s); };
    const uint64_t before = dir0();
    ASSERT_EQ(b.put(key(sp.put), val(sp.put, 1)).status, Status::kInserted) << label;  // B helps A's split
    EXPECT_GT(b.client.stats().helped, 0u) << label;
    const uint64_t child = dir0();
    ASSERT_NE(child, before) << label;
    int i = 3000;
    for (; dir0() == child && i < 3400; ++i) {
      ASSERT_EQ(b.put(key(i), val(i, 1)).status, Status::kInserted) << label;
      oracle[key(i)] = val(i, 1);
    }
    ASSERT_NE(dir0(), child) << label << ": B must split A's child";
    EXPECT_EQ(sa.resume().status, Status::kUpdated) << label;  // B's insert of the key came first
    a.tr->before = nullptr;
    oracle[key(sp.put)] = val(sp.put, 0);
    expect_split_count(t, {&a, &b}, label);
    // A's next split allocates fresh children (it kept none of the published ones).
    uint64_t allocs = 0;
    a.tr->before = [&](const Request& r) { allocs += is_subtable_alloc(cfg, r); };
    expect_next_split_then_oracle(t, a, b, allocs, 2, oracle, label);
  }
}

// A VOID split: A stalls just before installing its split of S; B splits S meanwhile (and goes
// on). A's descriptor, installed late, names a subtable already split: nobody runs it, A does not
// count it, and A's next split reuses the two children it allocated (no new allocation).
TEST(RaceFault, VoidSplitIsNotCountedAndItsChildrenAreReused) {
  const RaceConfig cfg = fault_cfg();
  const SplitPoint sp = find_split(cfg, 3);
  Table t(cfg);
  Client a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2);
  std::unordered_map<std::string, std::string> oracle;
  put_before_split(a, sp, oracle);
  Gate gate;
  bool paused = false, counting = false;
  uint64_t allocs = 0;
  a.tr->before = [&](const Request& r) {
    if (counting) allocs += is_subtable_alloc(cfg, r);
    if (!paused && is_install(r)) {
      paused = true;
      gate.pause();
    }
  };
  OpResult ar{};
  std::thread ta([&] {
    ar = a.put(key(sp.put), val(sp.put, 0));
    gate.finished();
  });
  gate.wait_paused();
  ASSERT_TRUE(paused);
  const uint64_t b_splits = b.client.stats().splits;
  ASSERT_EQ(b.put(key(sp.put), val(sp.put, 1)).status, Status::kInserted);  // splits S itself
  ASSERT_EQ(b.client.stats().splits, b_splits + 1);
  const uint64_t a_splits = a.client.stats().splits;
  counting = true;
  gate.release();
  ta.join();
  EXPECT_EQ(ar.status, Status::kUpdated);
  oracle[key(sp.put)] = val(sp.put, 0);
  EXPECT_EQ(a.client.stats().splits, a_splits) << "a void split is nobody's";
  EXPECT_EQ(race_inspect(*t.fabric, cfg).split_word_clear, true);
  expect_split_count(t, {&a, &b}, "after the void split");
  expect_next_split_then_oracle(t, a, b, allocs, 0, oracle, "after A's next split");
}


// A void split released by ANOTHER runner before its installer's own VOID test: A stalls just
// before installing its split of S; B splits S; A installs its (now void) descriptor and stalls
// right after; B's next split meets that descriptor and releases it (B's VOID test). A resumes:
// its release CAS fails (kUnknown) and dir[s] names neither S nor A, exactly as after a published
// split whose child was split since, so only A's slot 0, still RESERVED, tells A the split was
// void: A does not count it and its next split reuses both children (no new allocation).
TEST(RaceFault, VoidSplitReleasedByAnotherRunnerIsNotCountedAndItsChildrenAreReused) {
  const RaceConfig cfg = fault_cfg();
  const SplitPoint sp = find_split(cfg, 3);
  Table t(cfg);
  Client a(*t.fabric, cfg, 1), b(*t.fabric, cfg, 2);
  std::unordered_map<std::string, std::string> oracle;
  put_before_split(a, sp, oracle);
  Gate before_install, after_install;
  int stage = 0;  // 0: before A's install, 1: installed (pause at the next request), 2: past both
  bool counting = false;
  uint64_t allocs = 0;
  a.tr->before = [&](const Request& r) {
    if (counting) allocs += is_subtable_alloc(cfg, r);
    if (stage == 1) {
      stage = 2;
      after_install.pause();
    } else if (stage == 0 && is_install(r)) {
      stage = 1;
      before_install.pause();
    }
  };
  OpResult ar{};
  std::thread ta([&] {
    ar = a.put(key(sp.put), val(sp.put, 0));
    before_install.finished();
    after_install.finished();
  });
  struct Join {  // a failed ASSERT returns early: let A run on and end its thread
    Gate &g1, &g2;
    std::thread& th;
    ~Join() {
      g1.release();
      g2.release();
      if (th.joinable()) th.join();
    }
  } join{before_install, after_install, ta};
  before_install.wait_paused();
  ASSERT_EQ(stage, 1) << "A must stall before installing its split";
  const uint64_t b_splits = b.client.stats().splits;
  ASSERT_EQ(b.put(key(sp.put), val(sp.put, 1)).status, Status::kInserted);  // splits S itself
  ASSERT_EQ(b.client.stats().splits, b_splits + 1);
  before_install.release();
  after_install.wait_paused();
  ASSERT_EQ(stage, 2) << "A must stall after installing its split";
  auto split_word = [&] {
    uint64_t v = 0;
    std::memcpy(&v, t.fabric->local_region(0).data() + offsetof(RaceNodeHeader, split), 8);
    return v;
  };
  ASSERT_NE(split_word(), 0u) << "A's void descriptor must be installed";
  ASSERT_EQ(split_word() >> 48, 1u + 1) << "the installed word must be A's";
  int i = 3000;
  for (; split_word() != 0 && i < 3400; ++i) {  // B's next split meets A's descriptor first
    ASSERT_EQ(b.put(key(i), val(i, 1)).status, Status::kInserted);
    oracle[key(i)] = val(i, 1);
  }
  ASSERT_EQ(split_word(), 0u) << "B must release A's void descriptor";
  const uint64_t a_splits = a.client.stats().splits;
  counting = true;
  after_install.release();
  ta.join();
  EXPECT_EQ(ar.status, Status::kUpdated);
  oracle[key(sp.put)] = val(sp.put, 0);
  EXPECT_EQ(a.client.stats().splits, a_splits) << "a void split is nobody's, even when another runner released it";
  expect_split_count(t, {&a, &b}, "after the void split released by B");
  expect_next_split_then_oracle(t, a, b, allocs, 0, oracle, "after A's next split");
}

// Two helpers at once: A (the splitter) is stalled mid-split, B starts helping and is stalled
// before its first request of one kind (a copy CAS, a doubling CAS, a directory CAS, the global
// depth CAS, a retiring header WRITE, the split word's release); C finishes the split, splits the
// children further, updates and erases every key. Then B resumes (its late CASes must all fail:
// no resurrected, reverted or misdirected entry), then A. Everything agrees with the oracle.
TEST(RaceFault, TwoHelpersAndALateOneAgree) {
  const RaceConfig cfg = fault_cfg();
  const uint64_t split_word_at = offsetof(RaceNodeHeader, split), depth_at = offsetof(RaceNodeHeader, global_depth);
  const uint64_t dir_end = cfg.board_offset();
  const std::vector<std::pair<const char*, std::function<bool(const Request&)>>> kinds = {
      {"copy", [](const Request& r) { return r.kind == ReqKind::kCas && (r.compare & (1ULL << 47)); }},
      {"double", [&](const Request& r) { return r.kind == ReqKind::kCas && r.addr.node == 0 && r.addr.offset >= 64 && r.addr.offset < dir_end && r.compare == 0; }},
      {"publish", [&](const Request& r) { return r.kind == ReqKind::kCas && r.addr.node == 0 && r.addr.offset >= 64 && r.addr.offset < dir_end && r.compare != 0; }},
      {"depth", [&](const Request& r) { return r.kind == ReqKind::kCas && r.addr.node == 0 && r.addr.offset == depth_at; }},
      {"retire", [](const Request& r) { uint64_t v = 0; if (r.kind == ReqKind::kWrite && r.len == 8) std::memcpy(&v, r.buf, 8); return v == ~0ULL; }},
      {"release", [&](const Request& r) { return r.kind == ReqKind::kCas && r.addr.node == 0 && r.addr.offset == split_word_at && r.swap == 0; }},
  };
  uint64_t trials = 0;
  std::map<std::string, int> paused_in;  // kind of B's stalled request → trials
  for (uint64_t target : {1u, 3u}) {
    const SplitPoint sp = find_split(cfg, target);
    for (const auto& [kind, pick] : kinds)
      for (uint64_t stop : {sp.during / 4, sp.during / 2}) {
        const std::string label = std::string(kind) + " split " + std::to_string(target) + " stop " + std::to_string(stop);
        Table t(cfg);
        Client a(*t.fabric, cfg, 1);
        std::unordered_map<std::string, std::string> oracle;
        put_before_split(a, sp, oracle);
        const uint64_t at = a.tr->seen + stop;
        Stalled sa(a, [&](const Request&) { return a.tr->seen == at; }, [&] { return a.put(key(sp.put), val(sp.put, 0)); });
        Client b(*t.fabric, cfg, 2);
        // A's key: in the subtable A splits.
        Stalled sb(b, pick, [&] { return b.put(key(sp.put), val(sp.put, 1)); });
        if (sb.paused) ++paused_in[std::string(kind) + (target == 1 ? " (doubling)" : "")];
        Client c(*t.fabric, cfg, 3);
        for (int i = 1000; i < 1040; ++i) {
          ASSERT_EQ(c.put(key(i), val(i, 1)).status, Status::kInserted) << label;
          oracle[key(i)] = val(i, 1);
        }
        int n = 0;
        std::vector<std::string> erased;
        for (auto& [k, v] : oracle) {
          v += "+c";
          ASSERT_EQ(c.update(k, v).status, Status::kUpdated) << label;
          if (n++ % 2 == 0) erased.push_back(k);
        }
        for (const auto& k : erased) {
          ASSERT_EQ(c.erase(k).status, Status::kErased) << label;
          oracle.erase(k);
        }
        const OpResult br = sb.resume();
        b.tr->before = nullptr;
        ASSERT_EQ(br.status, Status::kInserted) << label;
        const OpResult ar = sa.resume();
        a.tr->before = nullptr;
        // A's put ends last: it finds B's copy and updates it (or B's put split first: inserts).
        ASSERT_TRUE(ar.status == Status::kUpdated || ar.status == Status::kInserted) << label;
        oracle[key(sp.put)] = val(sp.put, 0);
        Client d(*t.fabric, cfg, 4);
        for (const auto& [k, v] : oracle) ASSERT_EQ(d.get(k), v) << label << " key " << k;
        for (const auto& k : erased) ASSERT_EQ(d.get(k), std::nullopt) << label << ": resurrected " << k;
        const RaceInspection in = race_inspect(*t.fabric, cfg);
        EXPECT_TRUE(in.split_word_clear) << label;
        EXPECT_EQ(in.frozen + in.tentative, 0u) << label;
        EXPECT_EQ(in.committed, oracle.size()) << label;
        expect_split_count(t, {&a, &b, &c}, label);
        ++trials;
        if (testing::Test::HasFailure()) return;
      }
  }
  EXPECT_EQ(trials, 24u);
  for (const auto& [kind, pick] : kinds) {
    EXPECT_GT(paused_in[std::string(kind) + " (doubling)"], 0) << "B never stalled before a " << kind << " request";
    if (std::string(kind) != "double" && std::string(kind) != "depth") {
      EXPECT_GT(paused_in[kind], 0) << "B never stalled before a " << kind << " request";
    }
  }
}

TEST(RaceFault, ClientIdsBeyondTheOwnerBitsAreRefused) {
  const RaceConfig cfg = fault_cfg();
  Table t(cfg);
  auto tr = t.fabric->connect();
  Engine e(*tr);
  EXPECT_THROW(RaceClient(cfg, e, kRaceMaxClientId + 1), InvalidArgument);
  RaceClient ok(cfg, e, kRaceMaxClientId);
  (void)ok;
}

// A helper of S's split, stalled just before its copy CASes (they expect RESERVED in S's
// children A and B), resumes while a child is itself being split: frozen, not yet copied. A frozen
// EMPTY slot must not equal RESERVED, or the late CASes unfreeze the child's slots and put back
// S's old items — erased meanwhile — where readers see them and the child's split copies them.
void late_copy_round(uint32_t groups, int c_base) {
  RaceConfig cfg = fault_cfg();
  cfg.groups_per_subtable = groups;  // > 1: a child splits while some of its slots are empty
  const SplitPoint sp = find_split(cfg, 1);  // the first split: S is the only subtable
  Table t(cfg);
  Client a(*t.fabric, cfg, 1);
  std::vector<std::string> erased;
  for (int i = 0; i < sp.put; ++i) {
    ASSERT_EQ(a.put(key(i), val(i, 0)).status, Status::kInserted);
    erased.push_back(key(i));
  }
  // A copy CAS is the only CAS whose expected value is frozen (RESERVED); freezes expect unfrozen words.
  auto is_copy = [](const Request& r) { return r.kind == ReqKind::kCas && (r.compare & (1ULL << 47)); };
  Client b(*t.fabric, cfg, 2);
  // B splits S and stops before its first copy CAS.
  Stalled sb(b, is_copy, [&] { return b.put(key(sp.put), val(sp.put, 0)); });
  ASSERT_TRUE(sb.paused);
  std::unordered_map<std::string, std::string> oracle;
  Client c(*t.fabric, cfg, 3);
  ASSERT_EQ(c.put(key(5000), val(5000, 1)).status, Status::kInserted);  // finishes S's split for b
  oracle[key(5000)] = val(5000, 1);
  for (const auto& k : erased) ASSERT_EQ(c.erase(k).status, Status::kErased) << k;
  std::vector<std::pair<int, Status>> c_puts;
  Stalled sc(c, is_copy, [&] {  // C fills a child until it splits; stops before its first copy CAS
    const uint64_t splits = c.client.stats().splits;
    for (int i = c_base; i < c_base + 2000 && c.client.stats().splits == splits; ++i)
      c_puts.emplace_back(i, c.put(key(i), val(i, 1)).status);
    return OpResult{};
  });
  ASSERT_TRUE(sc.paused) << "no child split started";
  const OpResult br = sb.resume();  // B's stale copy CASes land now, while the child is frozen and not yet copied
  b.tr->before = nullptr;
  ASSERT_EQ(br.status, Status::kInserted);
  oracle[key(sp.put)] = val(sp.put, 0);
  sc.resume();
  c.tr->before = nullptr;
  for (const auto& [i, st] : c_puts) {
    ASSERT_EQ(st, Status::kInserted) << key(i);
    oracle[key(i)] = val(i, 1);
  }
  Client d(*t.fabric, cfg, 4);
  for (const auto& k : erased) EXPECT_EQ(d.get(k), std::nullopt) << "resurrected " << k;
  for (const auto& [k, v] : oracle) EXPECT_EQ(d.get(k), v) << k;
  const RaceInspection in = race_inspect(*t.fabric, cfg);
  EXPECT_EQ(in.frozen + in.tentative, 0u);
  EXPECT_EQ(in.committed, oracle.size());
}

TEST(RaceFault, LateCopyOfAnOldSplitNeverLandsInAFrozenChild) {
  for (uint32_t groups : {2u, 4u, 8u})
    for (int c_base : {6000, 9000, 12000}) {
      SCOPED_TRACE("groups " + std::to_string(groups) + " keys from " + std::to_string(c_base));
      late_copy_round(groups, c_base);
      if (testing::Test::HasFailure()) return;
    }
}

}  // namespace
}  // namespace rdmahash
