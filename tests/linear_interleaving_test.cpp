// Deterministic interleavings for linear probing (inline records, heap records, sets), in the
// style of CuckooInterleaving: instead of hoping the scheduler interleaves threads badly, the test
// stops a writer at every point where a NIC could let another client in — before each request and
// between the 8-byte words of each WRITE — and runs a reader and a second writer there; and it
// splits a reader's multi-word READs into pieces with a writer step between them (a READ of several
// words is not atomic). Only one side runs at a time, so every run is the same run.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "rdmahash/engine.h"
#include "test_util.h"

namespace rdmahash {
namespace {

using test::LocalTable;
using test::value_for;

// Runs one writer operation on its own thread, stopping before every request and between the
// words of every WRITE until the test calls step(). A batch's requests run in reverse order: a
// batch is unordered, and reversing puts a CAS posted with a WRITE before that WRITE. A fenced
// request (fabric.h) is the one order a batch has: the requests before it all run (reversed)
// before it and those after it.
class SteppedWriter {
 public:
  SteppedWriter(Fabric& fabric, const LinearConfig& c, const ProbeConfig& p)
      : transport_(this, fabric.connect()), engine_(transport_), client_(c, p, engine_) {}
  ~SteppedWriter() {
    while (step()) {
    }
    if (thread_.joinable()) thread_.join();
  }
  using Op = std::function<Task<OpResult>(LinearClient&)>;
  // Starts `op` and runs it to its first stop (or to its end).
  void start(const Op& op) {
    start_sync([op](Engine& e, LinearClient& c) { return e.run(op(c)); });
  }
  // The same for an operation that runs its own batches (find_or_put_batch).
  using SyncOp = std::function<OpResult(Engine&, LinearClient&)>;
  void start_sync(const SyncOp& op) {
    if (thread_.joinable()) thread_.join();
    std::unique_lock lk(m_);
    done_ = false;
    paused_ = false;
    thread_ = std::thread([this, op] {
      OpResult r{};
      std::exception_ptr e;
      try {
        r = op(engine_, client_);
      } catch (...) {
        e = std::current_exception();
      }
      std::lock_guard g(m_);
      result_ = r;
      error_ = e;
      done_ = true;
      cv_.notify_all();
    });
    cv_.wait(lk, [&] { return paused_ || done_; });
  }
  // Lets the writer run to its next stop. Returns false once the operation has finished.
  bool step() {
    std::unique_lock lk(m_);
    if (done_) return false;
    paused_ = false;
    go_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return paused_ || done_; });
    return !done_;
  }
  bool done() {
    std::lock_guard g(m_);
    return done_;
  }
  OpResult result() {
    if (error_) std::rethrow_exception(error_);
    return result_;
  }

 private:
  class Transport final : public rdmahash::Transport {
   public:
    Transport(SteppedWriter* w, std::unique_ptr<rdmahash::Transport> inner) : w_(w), inner_(std::move(inner)) {}
    void execute(std::span<Request> batch) override {
      ++counters_.batches;
      // Segments [begin, end) start at a fenced request; each runs reversed, in segment order.
      for (size_t begin = 0, end = 0; begin < batch.size(); begin = end) {
        end = begin + 1;
        while (end < batch.size() && !batch[end].fence) ++end;
        for (size_t i = end; i-- > begin;) run(batch[i]);
      }
    }

   private:
    void run(Request& r) {
      if (r.kind == ReqKind::kWrite) {
        for (uint32_t off = 0; off < r.len; off += 8) {  // a WRITE lands one word at a time
          w_->pause();
          Request piece = r;
          piece.addr.offset += off;
          piece.buf = static_cast<std::byte*>(r.buf) + off;
          piece.len = std::min<uint32_t>(8, r.len - off);
          piece.fence = false;
          inner_->execute(std::span<Request>(&piece, 1));
        }
      } else {
        w_->pause();
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }

    SteppedWriter* w_;
    std::unique_ptr<rdmahash::Transport> inner_;
  };
  void pause() {
    std::unique_lock lk(m_);
    paused_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return go_; });
    go_ = false;
  }

  Transport transport_;
  Engine engine_;
  LinearClient client_;
  std::thread thread_;
  std::mutex m_;
  std::condition_variable cv_;
  bool paused_ = false, go_ = false, done_ = true;
  OpResult result_{};
  std::exception_ptr error_;
};

// The other clients' transport. A client that finds the key locked by the stopped writer would
// re-read it forever: after `budget` READs in one operation it gives up ("retry"), which only
// ever happens before a READ, never between a lock and its unlock. With `tear` set, every READ
// is split at random word boundaries and `tear` runs between the pieces.
// (The engine reports a transport's error as a FabricError with the same message.)
struct Retry : FabricError {
  Retry() : FabricError("retry") {}
};
bool is_retry(const FabricError& e) { return std::string_view(e.what()) == "retry"; }
class OtherTransport final : public Transport {
 public:
  OtherTransport(std::unique_ptr<Transport> inner, uint32_t budget) : inner_(std::move(inner)), budget_(budget) {}
  std::function<void()> tear;
  void new_op() { reads_ = 0; }
  void execute(std::span<Request> batch) override {
    ++counters_.batches;
    for (Request& r : batch) {
      if (r.kind == ReqKind::kRead && ++reads_ > budget_) throw Retry();
      if (r.kind == ReqKind::kRead && tear) {
        const uint32_t words = (r.len + 7) / 8;
        uint32_t done = 0;
        for (uint32_t w = 1; w <= words; ++w) {
          const bool cut = w < words && rng_() % 3 == 0;
          if (!cut && w < words) continue;
          Request piece = r;
          piece.addr.offset += done * 8;
          piece.buf = static_cast<std::byte*>(r.buf) + done * 8;
          piece.len = std::min(r.len, w * 8) - done * 8;
          inner_->execute(std::span<Request>(&piece, 1));
          done = w;
          if (cut) tear();
        }
      } else {
        inner_->execute(std::span<Request>(&r, 1));
      }
      counters_.add(r);
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  uint32_t budget_, reads_ = 0;
  std::mt19937_64 rng_{23};
};

using test::Format;
std::string format_name(const Format& f) {
  return std::string(to_string(f.format)) + "_k" + std::to_string(f.key_bytes) + "_v" + std::to_string(f.value_bytes);
}

// Inline records: does any slot of the table hold a LOCKed ctrl word (a writer between its claim
// or lock and its unlock)?
bool any_slot_locked(Fabric& fabric, const LinearConfig& c) {
  if (c.format != SlotFormat::kInline) return false;
  for (uint32_t n = 0; n < c.memory_nodes; ++n) {
    const std::span<std::byte> region = fabric.local_region(n);
    for (uint64_t s = 0; s < c.total_slots(); ++s) {
      uint64_t ctrl;
      std::memcpy(&ctrl, region.data() + 64 + s * c.slot_bytes(), 8);
      if ((ctrl >> 63) && (ctrl & (1ULL << 62))) return true;
    }
  }
  return false;
}

LinearConfig config_for(const Format& f) {
  LinearConfig c = test::config_of(f);
  c.home_slots = 64;
  c.tail_slots = 64;
  return c;
}

using test::keys_homed_at;

class LinearInterleaving : public testing::TestWithParam<Format> {};

// The writer inserts (or, when `preload`, updates) key k. At stop number `j` of its run a second
// client puts k with its own value; at every stop a third client reads k. The reader sees k
// absent (until someone's insert of it was acknowledged), or a value someone wrote — never torn or
// unpublished bytes; at the end k is stored exactly once, and at most one insert of it succeeded.
// Every client claims with `claim` (linear.h, "Speculative claim"); with `home_free` k's home slot
// is free (a speculative claim can win it), else three other keys homed there fill it and the next
// two slots.
void run_writer_stops(const Format& f, bool preload, SpeculativeClaim claim = SpeculativeClaim::kAuto,
                      bool home_free = false, bool batched = false) {
  SCOPED_TRACE(std::string("claim ") + to_string(claim) + (home_free ? ", home free" : ", home taken") +
               (batched ? ", find_or_put_batch" : ""));
  const LinearConfig c = config_for(f);
  const uint32_t vb = c.value_bytes;
  const bool set = c.format == SlotFormat::kSet;
  ProbeConfig p = test::probe(8, 16, 8);
  p.speculative_claim = claim;
  // j = -1: the writer alone, to count its stops; then the second writer at each of them.
  int solo_stops = 0;
  for (int j = -1; j <= solo_stops; ++j) {
    SCOPED_TRACE("second writer at stop " + std::to_string(j));
    LocalTable t(c);
    const auto neighbours = keys_homed_at(c, 20, 4, 1);
    const uint64_t k = neighbours[0];
    Client loader(*t.fabric, c, p);
    const size_t others = home_free ? 0 : neighbours.size() - 1;
    for (size_t i = 1; i <= others; ++i)
      ASSERT_EQ(loader.find_or_put(neighbours[i], value_for(neighbours[i], 0, vb)).status, Status::kInserted);
    std::vector<std::vector<std::byte>> written;  // every value of k anyone has started to write
    bool present = false;                         // an insert of k was acknowledged (or preloaded)
    if (preload) {
      written.push_back(value_for(k, 1, vb));
      ASSERT_EQ(loader.find_or_put(k, written.back()).status, Status::kInserted);
      present = true;
    }

    OtherTransport rt(t.fabric->connect(), 4);
    Engine re(rt);
    LinearClient reader(c, p, re);
    OtherTransport wt(t.fabric->connect(), 6);
    Engine we(wt);
    LinearClient second(c, p, we);
    uint64_t retries = 0;
    // `settled`: nobody holds a lock any more, so a reader that would retry is wrong too.
    auto check_reader = [&](const char* when, bool settled = false) {
      std::vector<std::byte> out(vb);
      rt.new_op();
      try {
        const OpResult r = re.run(reader.get(k, out));
        if (r.status == Status::kNotFound) {
          EXPECT_FALSE(present) << when << ": an acknowledged key was reported absent";
        } else {
          ASSERT_EQ(r.status, Status::kFound);
          EXPECT_TRUE(std::find(written.begin(), written.end(), out) != written.end())
              << when << ": the reader returned bytes nobody wrote (torn or unpublished)";
        }
      } catch (const FabricError& e) {
        if (!is_retry(e)) throw;
        EXPECT_FALSE(settled) << when << ": the key stayed locked or inconsistent after every writer finished";
        // Readers wait only for a lock: a slot published (unlocked) before its payload landed
        // would make them wait with nobody holding a lock (the publish fence, linear.h).
        if (c.format == SlotFormat::kInline) {
          EXPECT_TRUE(any_slot_locked(*t.fabric, c)) << when << ": k is unreadable while no slot is locked";
        }
        ++retries;
      }
    };

    SteppedWriter w(*t.fabric, c, p);
    const auto v1 = value_for(k, 2, vb);
    written.push_back(v1);
    if (batched) {
      // The writer's find-or-put of k as a multi-find-or-put of one key (its rounds, not insert).
      w.start_sync([&](Engine&, LinearClient& cl) {
        OpResult out{};
        std::exception_ptr err;
        const bool ran = cl.find_or_put_batch(
            1, 1, [&](uint64_t) { return k; },
            [&](uint64_t, uint64_t, std::span<std::byte> v) { std::copy(v1.begin(), v1.end(), v.begin()); },
            [&](const Engine::Completion& c, const OpResult& r) {
              out = r;
              err = c.error;
            });
        if (!ran) throw std::logic_error("find_or_put_batch refused the table");
        if (err) std::rethrow_exception(err);
        return out;
      });
    } else {
      w.start([&](LinearClient& cl) { return preload ? cl.update(k, v1) : cl.find_or_put(k, v1); });
    }
    int stop = 0;
    uint64_t inserts = 0;
    for (;; ++stop) {
      check_reader("before the second writer");
      if (stop == j) {
        const auto v2 = value_for(k, 3, vb);
        written.push_back(v2);
        wt.new_op();
        try {
          OpResult r = set ? we.run(second.find_or_put(k, {})) : we.run(second.put(k, v2));
          if (r.status == Status::kInserted) ++inserts, present = true;
          else EXPECT_TRUE(r.status == Status::kFound || r.status == Status::kUpdated) << to_string(r.status);
        } catch (const FabricError& e) {
          if (!is_retry(e)) throw;
          ++retries;  // k is locked by the stopped writer: the second writer would wait
        }
        check_reader("after the second writer");
      }
      if (!w.step()) break;
    }
    const OpResult r1 = w.result();
    if (preload) {
      EXPECT_EQ(r1.status, Status::kUpdated);
    } else {
      EXPECT_TRUE(r1.status == Status::kInserted || r1.status == Status::kFound) << to_string(r1.status);
      if (r1.status == Status::kInserted) ++inserts;
      EXPECT_EQ(inserts, 1u) << "k was inserted by both writers, or by neither";
      if (j < 0) {
        EXPECT_EQ(r1.status, Status::kInserted);
      }
    }
    present = true;
    check_reader("after the writer finished", true);
    const auto keys = t.all_keys();
    EXPECT_EQ(std::count(keys.begin(), keys.end(), k), 1) << "k must be stored exactly once";
    for (size_t i = 1; i <= others; ++i)
      EXPECT_EQ(std::count(keys.begin(), keys.end(), neighbours[i]), 1);
    EXPECT_EQ(keys.size(), others + 1);
    if (j < 0) solo_stops = stop;
    (void)retries;
  }
}

TEST_P(LinearInterleaving, InsertStoppedAtEveryStepKeepsTheKeyOnceAndReadersSane) {
  for (SpeculativeClaim claim : {SpeculativeClaim::kOn, SpeculativeClaim::kOff})
    for (bool home_free : {true, false}) run_writer_stops(GetParam(), false, claim, home_free);
}

// The same stops for a find-or-put of k run by find_or_put_batch (inline records of more than a
// word: the formats that have one).
TEST_P(LinearInterleaving, BatchedInsertStoppedAtEveryStepKeepsTheKeyOnceAndReadersSane) {
  const LinearConfig c = config_for(GetParam());
  if (c.format != SlotFormat::kInline || c.slot_bytes() == 8) GTEST_SKIP() << "no multi-find-or-put for this format";
  for (SpeculativeClaim claim : {SpeculativeClaim::kOn, SpeculativeClaim::kOff})
    for (bool home_free : {true, false}) run_writer_stops(GetParam(), false, claim, home_free, true);
}

TEST_P(LinearInterleaving, UpdateStoppedAtEveryStepNeverExposesTornBytes) {
  if (GetParam().format == SlotFormat::kSet) GTEST_SKIP() << "sets hold no values to update";
  run_writer_stops(GetParam(), true);
}

// A reader's multi-word READs torn by a writer updating the key between their pieces: every get
// returns a value that was written whole, never a mix of two.
TEST_P(LinearInterleaving, ReadsTornByUpdatesNeverReturnMixedValues) {
  const Format f = GetParam();
  if (f.format == SlotFormat::kSet) GTEST_SKIP() << "a set slot is one word: nothing to tear";
  LinearConfig c = config_for(f);
  if (c.heap()) c.heap_records = 1 << 15;  // room for every out-of-place update
  const uint32_t vb = c.value_bytes;
  const ProbeConfig p = test::probe(8, 16, 8);
  LocalTable t(c);
  const auto neighbours = keys_homed_at(c, 20, 4, 7);
  const uint64_t k = neighbours[0];
  Client loader(*t.fabric, c, p);
  std::vector<std::vector<std::byte>> written{value_for(k, 0, vb)};
  for (uint64_t key : neighbours) ASSERT_EQ(loader.find_or_put(key, value_for(key, 0, vb)).status, Status::kInserted);

  SteppedWriter w(*t.fabric, c, p);
  uint32_t salt = 1;
  uint64_t updates = 0;
  auto next_update = [&] {
    if (!w.done()) return;
    if (updates) {
      EXPECT_EQ(w.result().status, Status::kUpdated);
    }
    written.push_back(value_for(k, salt++, vb));
    const auto v = written.back();
    w.start([k, v](LinearClient& cl) { return cl.update(k, v); });
    ++updates;
  };
  OtherTransport rt(t.fabric->connect(), 4096);  // a get that re-reads 4096 times is stuck
  // Between two pieces of a READ the writer takes 1 to 6 steps: enough to lock, rewrite some
  // words of the payload and perhaps unlock before the reader reads the rest of the record.
  std::mt19937_64 steps(5);
  rt.tear = [&] {
    for (uint64_t n = 1 + steps() % 6; n-- > 0;)
      if (!w.step()) next_update();
  };
  Engine re(rt);
  LinearClient reader(c, p, re);
  next_update();
  std::vector<std::byte> out(vb);
  uint64_t torn = 0;
  for (int i = 0; i < 3000; ++i) {
    rt.new_op();
    const OpResult r = re.run(reader.get(k, out));
    ASSERT_EQ(r.status, Status::kFound) << "get " << i;
    if (std::find(written.begin(), written.end(), out) == written.end()) ++torn;
  }
  EXPECT_EQ(torn, 0u) << "gets returned values mixed from two writes";
  EXPECT_GT(updates, 200u) << "updates must overlap the reads";
}

// A 4-byte key's ctrl word holds the whole key, so a claim names the key before its insert is
// published. A find_or_put of that key must not answer kFound then: the claimer may die and lock
// recovery roll the claim back to a tombstone (LinearLockSweeper), which would make that kFound a
// key that never existed. It waits for the claim (here: retries); once published, kFound.
TEST(LinearInterleavingClaim, FourByteKeyUnpublishedClaimIsNotFound) {
  for (SpeculativeClaim claim : {SpeculativeClaim::kOn, SpeculativeClaim::kOff}) {
    SCOPED_TRACE(std::string("claim ") + to_string(claim));
    const LinearConfig c = config_for(Format{SlotFormat::kInline, 4, 8});
    LocalTable t(c);
    ProbeConfig p = test::probe(8, 16, 8);
    p.speculative_claim = claim;
    const uint64_t k = keys_homed_at(c, 20, 1, 5)[0];
    SteppedWriter w(*t.fabric, c, p);
    const auto v1 = value_for(k, 1, c.value_bytes);  // outlives the writer's coroutine, which holds a span of it
    w.start([&](LinearClient& cl) { return cl.find_or_put(k, v1); });
    while (!any_slot_locked(*t.fabric, c)) ASSERT_TRUE(w.step()) << "the writer never claimed a slot";
    OtherTransport ot(t.fabric->connect(), 6);
    Engine oe(ot);
    LinearClient other(c, p, oe);
    const auto v2 = value_for(k, 2, c.value_bytes);
    ot.new_op();
    try {
      const OpResult r = oe.run(other.find_or_put(k, v2));
      ADD_FAILURE() << "find_or_put answered " << to_string(r.status) << " while k's only slot is an unpublished claim";
    } catch (const FabricError& e) {
      if (!is_retry(e)) throw;
    }
    while (w.step()) {
    }
    EXPECT_EQ(w.result().status, Status::kInserted);
    ot.new_op();
    EXPECT_EQ(oe.run(other.find_or_put(k, v2)).status, Status::kFound);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, LinearInterleaving,
                         testing::Values(Format{SlotFormat::kSet, 8, 0}, Format{SlotFormat::kInline, 8, 24},
                                         Format{SlotFormat::kInline, 4, 8}, Format{SlotFormat::kHeap, 8, 24},
                                         Format{SlotFormat::kHeap, 4, 16}),
                         [](const auto& i) { return format_name(i.param); });

}  // namespace
}  // namespace rdmahash
