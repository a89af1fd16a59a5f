// Linear probing's client data path for set and inline slots: placement checks, publication, the
// lookup windows and their sinks, insert/update/put/erase. Out-of-band records (kHeap, kHeap4) are
// in linear_heap.cpp, the memory-node side in linear_shard.cpp, cluster hints in
// linear_read_sizer.cpp. The layout, publication protocol and invariants are documented in
// include/rdmahash/linear.h; this file follows them line by line.
#include <csignal>
#include <cstddef>
#include <cstring>
#include "fabric/direct_access.h"
#include "schemes/batch_guard.h"
#include "schemes/linear/linear_internal.h"

namespace rdmahash {

// --- client -----------------------------------------------------------------------------------

LinearClient::LinearClient(const LinearConfig& cfg, const ProbeConfig& probe, Engine& engine)
    : cfg_(cfg), probe_(probe), engine_(engine), slot_bytes_(cfg.slot_bytes()), record_bytes_(cfg.record_bytes()) {
  cfg_.validate();
  probe_.validate();
  if (cfg_.heap()) spare_.resize(cfg_.memory_nodes);
  if (cfg_.quadratic() && probe_.chunk != cfg_.chunk)
    throw InvalidArgument("the table probes quadratic chunks of " + std::to_string(cfg_.chunk) +
                          " slots: a client's chunk size must be the table's, got " + std::to_string(probe_.chunk));
  if (cfg_.quadratic() && probe_.read_sizer)
    throw InvalidArgument("quadratic chunks: lookups read whole chunks, a read sizer (the read-size model, cluster "
                          "hints) assumes a contiguous probe");
}

struct LinearClient::BatchState {
  // A key in flight: 64 bytes, one cache line, copied only when it stays for another round while
  // keys before it left. Its OpStats are derived when it is answered: one READ a round, so
  // round_trips = reads = chunks; bytes summed.
  struct Key {
    uint64_t index, key;
    uint64_t slot;       // its next window's first slot (linear order)
    uint64_t run_start;  // the cluster run so far (read sizers that track clusters)
    uint32_t node, kbits;
    uint32_t chunks;     // windows read, = its rounds
    uint32_t bytes;      // bytes those READs fetched
    uint32_t n;          // this round: the slots of its window
    std::chrono::steady_clock::time_point start;  // the batch boundary it joined at
  };
  static_assert(sizeof(Key) == 64);
  std::vector<Key> active;     // not answered yet
  std::vector<Key> resume;     // met a locked or torn slot: the lookup goes on
  std::vector<Request> reqs;
  std::vector<std::byte> windows;  // this round's windows, back to back
  std::vector<const std::byte*> direct;  // per node: its slots, mapped (direct reads), or none
  bool running = false;            // get_batch is not reentrant (done must not call it)
};

LinearClient::~LinearClient() = default;

void LinearClient::validate_key(uint64_t key) const {
  if (cfg_.format == SlotFormat::kSet && key >= kOcc)
    throw InvalidArgument("key " + std::to_string(key) + " does not fit a set slot (keys must be below 2^63)");
  if (cfg_.format != SlotFormat::kSet && cfg_.key_bytes == 4 && key > 0xffffffffULL)
    throw InvalidArgument("key " + std::to_string(key) + " does not fit 4 key bytes");
}

void LinearClient::check_value(std::span<const std::byte> value, bool required) const {
  if (cfg_.format == SlotFormat::kSet) {
    if (!value.empty()) throw InvalidArgument("set tables hold keys only: values are not accepted");
    if (required) throw InvalidArgument("set tables hold keys only: update is not supported");
    return;
  }
  if (value.size() > cfg_.value_bytes)
    throw InvalidArgument("value of " + std::to_string(value.size()) + " bytes is larger than the slot's " +
                          std::to_string(cfg_.value_bytes) + " value bytes");
  if (required && value.size() != cfg_.value_bytes)
    throw InvalidArgument("value must be exactly " + std::to_string(cfg_.value_bytes) + " bytes, got " +
                          std::to_string(value.size()));
}

// `lock`: the ordinal of a lock this client holds (lock_taken()); called before and after its
// payload WRITE. Other operations of the engine may take locks in between, hence the ordinal.
uint64_t LinearClient::lock_taken() { return probe_.die_holding_lock ? ++locks_taken_ : 0; }
void LinearClient::maybe_die_holding_lock(uint64_t lock, bool payload_written) {
  if (lock != 0 && lock == probe_.die_holding_lock && payload_written == (lock % 2 == 1)) ::raise(SIGKILL);
}

// Publishes the record `rec` (slot_bytes_ bytes: the unlocked ctrl word, then the payload) into
// the slot at `a`, which this client holds locked: the payload WRITE and the WRITE of the ctrl
// word fenced after it, one round trip (the fenced order is argued in linear.h). Fault injection
// (die_holding_lock, odd lock): the payload alone first, then die before the unlock.
Task<void> LinearClient::publish(RemoteAddr a, const std::byte* rec, uint64_t lock) {
  const RemoteAddr payload{a.node, a.offset + 8};
  if (lock != 0 && lock == probe_.die_holding_lock && lock % 2 == 1) {
    co_await engine_.write(payload, rec + 8, slot_bytes_ - 8);
    maybe_die_holding_lock(lock, true);
  }
  Pending body = engine_.write(payload, rec + 8, slot_bytes_ - 8);
  Pending unlock = engine_.write_fenced(a, rec, 8);
  co_await std::move(body);
  co_await std::move(unlock);
}

RemoteAddr LinearClient::slot_addr(uint32_t node, uint64_t slot) const {
  return RemoteAddr{node, kHeaderBytes + slot * slot_bytes_};
}

Task<ShardHeader> LinearClient::read_header(uint32_t node) {
  ShardHeader h{};
  co_await engine_.read(RemoteAddr{node, 0}, &h, sizeof h);
  if (h.magic != kLinearMagic) throw FabricError("node " + std::to_string(node) + " holds no linear table shard");
  if (h.slot_bytes != slot_bytes_ || h.home_slots != cfg_.home_slots || h.key_bytes != cfg_.key_bytes ||
      h.value_bytes != cfg_.value_bytes || h.format != static_cast<uint32_t>(cfg_.format))
    throw InvalidArgument("shard " + std::to_string(node) + " was built with a different configuration");
  co_return h;
}

Task<bool> LinearClient::read_stable(uint32_t node, uint64_t slot, std::byte* dst) {
  const InlineLayout l(cfg_);
  RetryDeadline deadline(probe_.retry_budget);
  do {
    co_await engine_.read(slot_addr(node, slot), dst, slot_bytes_);
    const uint64_t ctrl = load64(dst);
    if (ctrl & kDel) co_return false;
    if (!(ctrl & kLock) && inline_consistent(cfg_, l, dst)) co_return true;
  } while (!deadline.expired());
  throw RetryBudgetExceeded("slot " + std::to_string(slot) + " on node " + std::to_string(node) + " stayed locked or inconsistent for " +
                            std::to_string(deadline.attempts()) + " reads, longer than the retry budget (a writer died mid-update?)");
}

// Scans slots [j, n) of a lookup window `data` for `key` and stops at the first answer: kHit at
// slot j (the set word, or an unlocked inline record of the key whose check word matches), kUnstable
// at slot j (its ctrl names the key's bits but it is locked or fails its check: re-read it),
// kMiss (an empty slot ends the probe, seed 000 §4.3) or kMore (no answer: read the next window).
enum class LinearClient::Probe : uint8_t { kHit, kUnstable, kMiss, kMore };
// Inlined into its two callers (both below): the multi-get calls it once per key and round.
[[gnu::always_inline]] inline LinearClient::Probe LinearClient::scan(uint64_t key, uint32_t kbits,
                                                                     const std::byte* data, uint64_t n, uint64_t& j) const {
  const bool set = cfg_.format == SlotFormat::kSet;
  const InlineLayout l(cfg_);
  for (; j < n; ++j) {
    const std::byte* sl = data + j * slot_bytes_;
    const uint64_t w = load64(sl);
    if (w == 0) return Probe::kMiss;
    if (set) {
      if (w == (kOcc | key)) return Probe::kHit;
      continue;
    }
    if ((w & kDel) || static_cast<uint32_t>(w) != kbits) continue;
    if ((w & kLock) || !inline_consistent(cfg_, l, sl)) return Probe::kUnstable;
    if (cfg_.key_bytes == 8 && load64(sl + l.key_off) != key) continue;
    return Probe::kHit;
  }
  return Probe::kMore;
}

// Slots a lookup READ at `slot` fetches: the read size, never past the last tail slot.
uint64_t LinearClient::window(uint32_t node, uint64_t slot) const {
  return std::min<uint64_t>(read_slots(node, slot), cfg_.total_slots() - slot);
}

// Posts the READ of the window [start, start + n) mod N into `dst`. A linear window never runs past
// the last slot (window(), chunk clipping): one READ. A quadratic chunk may: its rest is at slot 0,
// a second READ in the same batch (same round trip).
std::pair<Pending, std::optional<Pending>> LinearClient::read_window(uint32_t node, uint64_t start, uint64_t n,
                                                                     std::byte* dst) {
  const uint64_t first = std::min<uint64_t>(n, cfg_.total_slots() - start);
  Pending a = engine_.read(slot_addr(node, start), dst, static_cast<uint32_t>(first * slot_bytes_));
  if (first == n) return {std::move(a), std::nullopt};
  return {std::move(a), std::optional<Pending>(engine_.read(slot_addr(node, 0), dst + first * slot_bytes_,
                                                            static_cast<uint32_t>((n - first) * slot_bytes_)))};
}

uint32_t LinearClient::read_slots(uint32_t node, uint64_t slot) const {
  // A sizer's R is bounded as ProbeConfig::read_size is (65536 slots): a window's bytes must fit
  // a READ's 32-bit length.
  return probe_.read_sizer ? std::clamp<uint32_t>(probe_.read_sizer->size_at(node, slot), 1, kMaxReadSlots) : probe_.read_size;
}

// Reports the clusters a scan has seen to a read sizer that tracks them. A scan knows the slots
// from `run_start` (its home slot, or the slot after the last empty one it saw) are occupied up
// to the next empty slot, across reads; each such run is reported when its empty slot is seen.
// The run that starts at the home slot may begin earlier than the scan can see: it is reported
// from the home slot, which is all a later read starting inside it needs. Tombstones count as
// occupied: probes run through them.
void LinearClient::observe_clusters(uint32_t node, uint64_t start, const std::byte* slots, uint64_t n,
                                    uint64_t& run_start) const {
  if (!probe_.read_sizer || !probe_.read_sizer->wants_clusters()) return;
  for (uint64_t j = 0; j < n; ++j) {
    if (load64(slots + j * slot_bytes_) != 0) continue;
    const uint64_t empty = start + j;
    if (empty > run_start) probe_.read_sizer->observe(node, run_start, empty - run_start);
    run_start = empty + 1;
  }
}

// Multimap lookup: every record of the key from its home slot to the first empty slot, along the
// table's chunk order (the windows of lookup() below).
Task<OpResult> LinearClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  validate_key(key);
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  if (cfg_.heap()) {
    co_await heap_scan(key, p, true, {}, values_out, r);
    r.status = r.matches ? Status::kFound : Status::kNotFound;
    co_return r;
  }
  const uint64_t total = cfg_.total_slots();
  const bool quad_all = cfg_.quadratic();  // get_all walks the table's chunk order (linear.h, ChunkOrder)
  const uint64_t windows = quad_all ? cfg_.quad_chunks() : total;
  const InlineLayout l(cfg_);
  const bool set = cfg_.format == SlotFormat::kSet;
  std::vector<std::byte> buf;
  std::vector<std::byte> one(slot_bytes_);
  // Quadratic chunks wrapped modulo N may overlap an earlier chunk of the sequence: a slot is
  // counted once. Linear windows never overlap.
  std::vector<uint64_t> counted;
  auto first_time = [&](uint64_t slot) {
    if (!quad_all) return true;
    if (std::find(counted.begin(), counted.end(), slot) != counted.end()) return false;
    counted.push_back(slot);
    return true;
  };
  uint64_t run_start = p.home;
  uint64_t s = p.home;
  for (uint64_t i = 0; i < windows; ++i) {
    const uint64_t n = quad_all ? cfg_.chunk : window(p.node, s);
    if (n == 0) break;  // linear: past the last tail slot
    buf.resize(n * slot_bytes_);
    {
      auto rd = read_window(p.node, s, n, buf.data());
      co_await std::move(rd.first);
      if (rd.second) co_await std::move(*rd.second);
    }
    ++r.chunks;
    if (!quad_all) observe_clusters(p.node, s, buf.data(), n, run_start);
    for (uint64_t j = 0; j < n; ++j) {
      const std::byte* sl = buf.data() + j * slot_bytes_;
      uint64_t w = load64(sl);
      if (w == 0) {  // the first empty slot (in chunk order) ends the scan (seed 000 §4.3)
        r.status = r.matches ? Status::kFound : Status::kNotFound;
        co_return r;
      }
      const uint64_t slot = (s + j) % total;
      if (set) {
        r.matches += w == (kOcc | key) && first_time(slot);
        continue;
      }
      if ((w & kDel) || static_cast<uint32_t>(w) != p.kbits) continue;
      if ((w & kLock) || !inline_consistent(cfg_, l, sl)) {
        if (!co_await read_stable(p.node, slot, one.data())) continue;
        sl = one.data();
      }
      if (cfg_.key_bytes == 8 && load64(sl + l.key_off) != key) continue;
      if (!first_time(slot)) continue;
      ++r.matches;
      if (values_out) values_out->insert(values_out->end(), sl + l.val_off, sl + l.val_off + cfg_.value_bytes);
    }
    s = quad_all ? cfg_.quad_next(s, i) : s + n;
  }
  r.status = r.matches ? Status::kFound : Status::kNotFound;
  co_return r;
}

// Where a lookup's answer goes. `check` vets the sink against the table's value size; `buffer` is
// where a value is copied when it does not come from a window in the frame (a heap record); `hit`
// hands over an inline hit in place (its value, and `at`: its slot and the ctrl word read), `copied`
// a value already in `buffer` (or none: not found).
struct LinearClient::CopySink {  // get(): the value copied to value_out, the OpResult returned
  using Ret = OpResult;
  std::span<std::byte> out;
  void check(uint32_t) const {}  // any value_out: the value is copied, cut or zero-padded by the caller
  std::span<std::byte> buffer(Scratch&, std::vector<std::byte>&, uint32_t) const { return out; }
  OpResult hit(uint64_t, const OpResult& r, std::span<const std::byte> value, const Located&) const {
    if (!out.empty() && !value.empty()) std::memcpy(out.data(), value.data(), std::min(out.size(), value.size()));
    return r;
  }
  OpResult copied(uint64_t, const OpResult& r, std::span<std::byte>) const { return r; }
};
struct LinearClient::VisitSink {  // get_visit(): the visitor sees the value where it lies
  using Ret = void;
  GetVisitor* v;
  uint32_t value_bytes;  // the caller's: must be the table's (the value is handed over where it lies)
  void check(uint32_t table_value_bytes) const {
    if (value_bytes != table_value_bytes)
      throw InvalidArgument("linear get_visit: value_bytes " + std::to_string(value_bytes) +
                            " is not the table's value size " + std::to_string(table_value_bytes));
  }
  std::span<std::byte> buffer(Scratch& frame, std::vector<std::byte>& big, uint32_t value_bytes) const {
    if (value_bytes > frame.size()) {
      big.assign(value_bytes, std::byte{0});
      return big;
    }
    std::fill_n(frame.data(), value_bytes, std::byte{0});
    return {frame.data(), value_bytes};
  }
  void hit(uint64_t key, const OpResult& r, std::span<const std::byte> value, const Located&) const {
    v->on_get(key, r, value);
  }
  void copied(uint64_t key, const OpResult& r, std::span<std::byte> buf) const {
    v->on_get(key, r, r.status == Status::kFound ? std::span<const std::byte>(buf) : std::span<const std::byte>());
  }
};

struct LinearClient::LocateSink {  // locate(): the key's slot and ctrl word; the READs added to `reads`
  using Ret = Located;
  uint32_t* reads;
  void check(uint32_t) const {}
  std::span<std::byte> buffer(Scratch&, std::vector<std::byte>&, uint32_t) const {  // heap tables: heap_scan
    throw std::logic_error("linear: locate on a heap table");
  }
  Located hit(uint64_t, const OpResult& r, std::span<const std::byte>, const Located& at) const {
    *reads += r.chunks;
    return at;
  }
  Located copied(uint64_t, const OpResult& r, std::span<std::byte>) const {  // inline: a miss
    *reads += r.chunks;
    return Located{};
  }
};

Task<LinearClient::Located> LinearClient::locate(uint64_t key, uint32_t& reads) {
  return lookup(key, LocateSink{&reads});  // not a coroutine itself: the lookup's frame is the only one
}

Task<OpResult> LinearClient::get(uint64_t key, std::span<std::byte> value_out) {
  return lookup(key, CopySink{value_out});  // not a coroutine itself: get's frame is lookup's
}

Task<void> LinearClient::get_visit(uint64_t key, uint32_t value_bytes, GetVisitor& v) {
  return lookup(key, VisitSink{&v, value_bytes});
}

bool LinearClient::get_batch(uint64_t count, uint32_t depth, const std::function<uint64_t(uint64_t)>& key_of,
                             uint32_t value_bytes, GetVisitor& v,
                             const std::function<void(const Engine::Completion&)>& done) {
  if (cfg_.heap() || cfg_.quadratic()) return false;
  const VisitSink sink{&v, value_bytes};
  sink.check(cfg_.value_bytes);
  if (count == 0) return true;
  if (depth == 0) depth = 1;
  if (!batch_) batch_ = std::make_unique<BatchState>();
  BatchState& b = *batch_;
  const BatchReentryGuard running(b.running, "LinearClient::get_batch");
  b.active.clear();
  b.resume.clear();
  engine_.restart_clock();  // the first keys start now, not at the engine's last batch
  const InlineLayout l(cfg_);
  const uint64_t total = cfg_.total_slots();
  const bool has_value = cfg_.value_bytes != 0;
  // Direct reads (fabric.h) when the transport performs every node's READs with this CPU anyway:
  // the windows are copied from the mapped slots as execute() would copy them, with no Request.
  // Only when every shard's slots lie inside its mapped region (else requests, which fail alone).
  bool direct = true;
  b.direct.assign(cfg_.memory_nodes, nullptr);
  for (uint32_t node = 0; node < cfg_.memory_nodes && direct; ++node) {
    const std::span<const std::byte> region = engine_.direct_region(node);
    direct = region.size() >= kHeaderBytes && (region.size() - kHeaderBytes) / slot_bytes_ >= total;
    if (direct) b.direct[node] = region.data() + kHeaderBytes;
  }
  auto stats_of = [](const BatchState::Key& k) {
    // round_trips, reads, writes and cas as ONE 16-byte store: `done` reads them at once (a
    // vectorized sum, as ClientResult::add_op's), and a wide load of bytes just written by
    // narrower stores is not forwarded from the store buffer (a ~20-cycle stall per key).
    using V4 = uint32_t __attribute__((vector_size(16)));
    static_assert(offsetof(OpStats, round_trips) == 0 && offsetof(OpStats, reads) == 4 && offsetof(OpStats, writes) == 8 &&
                  offsetof(OpStats, cas) == 12);
    OpStats st;
    const V4 v = {k.chunks, k.chunks, 0, 0};
    std::memcpy(static_cast<void*>(&st), &v, sizeof v);  // OpStats is trivially copyable
    st.bytes = k.bytes;
    return st;
  };
  auto finish = [&](const BatchState::Key& k, std::exception_ptr error) {
    done(Engine::Completion{k.index, stats_of(k),
                            std::chrono::duration_cast<std::chrono::nanoseconds>(engine_.batch_clock() - k.start),
                            std::move(error)});
  };
  auto miss = [&](const BatchState::Key& k) {
    OpResult r;
    r.chunks = k.chunks;
    sink.copied(k.key, r, {});
    finish(k, nullptr);
  };
  // Rounds: up to `depth` keys in flight; each round's batch carries the next window of every key
  // not yet answered (the READ its lookup would post next: window(), the read sizer's R, never past
  // the last tail slot), new keys joining as others are answered, as run_many keeps `depth`
  // operations in flight. Windows are scanned by the lookup's rules in a plain loop. A key whose
  // next window would start past the last tail slot is a miss at once; a locked or torn slot leaves
  // the rounds for the lookup itself (below).
  uint64_t issued = 0;
  while (issued < count || !b.active.empty()) {
    const auto now = engine_.batch_clock();
    while (b.active.size() < depth && issued < count) {
      const uint64_t index = issued++;
      const uint64_t key = key_of(index);
      try {
        validate_key(key);
      } catch (const InvalidArgument&) {  // fails its own key, as get_visit's task would
        done(Engine::Completion{index, OpStats{}, std::chrono::nanoseconds(0), std::current_exception()});
        continue;
      }
      const LinearPlacement p = place_key(cfg_, key);
      BatchState::Key& k = b.active.emplace_back();  // fields stored in place, not copied from the stack
      k.index = index;
      k.key = key;
      k.slot = k.run_start = p.home;
      k.node = p.node;
      k.kbits = p.kbits;
      k.start = now;
    }
    if (b.active.empty()) break;
    // Read once a round (probe() may be changed between calls to done): a fixed R, or 0 for window().
    const uint64_t fixed_r = probe_.read_sizer ? 0 : probe_.read_size;
    const bool clusters = probe_.read_sizer && probe_.read_sizer->wants_clusters();
    // Each key's window and READ, in one pass. A window of 0 slots (a read size of 0: probe()
    // changed) is a miss with no READ, as lookup's loop ends. Each Request field is written in
    // place: a Request built on the stack and copied in costs a store-forwarding stall per key.
    size_t live = 0, bytes = 0;
    if (!direct) b.reqs.resize(b.active.size());
    for (size_t a = 0; a < b.active.size(); ++a) {
      const BatchState::Key& k = b.active[a];
      // kept: a read sizer may change R while scanning. A fixed R: window() without its calls.
      const uint64_t n = fixed_r ? std::min<uint64_t>(fixed_r, total - k.slot) : window(k.node, k.slot);
      if (n == 0) {
        miss(k);
        continue;
      }
      if (live != a) b.active[live] = k;
      b.active[live].n = static_cast<uint32_t>(n);
      const uint32_t len = static_cast<uint32_t>(n * slot_bytes_);
      bytes += len;
      if (direct) {  // start every miss of the round before the first copy waits on one
        detail::prefetch(b.direct[k.node] + k.slot * slot_bytes_, len);
        ++live;
        continue;
      }
      Request& r = b.reqs[live++];
      r.kind = ReqKind::kRead;
      r.addr = slot_addr(k.node, k.slot);
      r.len = len;
      r.fence = false;
    }
    b.active.resize(live);
    if (live == 0) continue;
    if (b.windows.size() < bytes) b.windows.resize(bytes);
    std::string error;
    if (direct) {
      // The round's READs, as execute()'s same-host path performs a batch of them.
      engine_.begin_direct_reads();
      uint64_t off = 0, lines = 0;
      for (const BatchState::Key& k : b.active) {
        const uint64_t len = k.n * slot_bytes_;
        detail::read_in(b.windows.data() + off, b.direct[k.node] + k.slot * slot_bytes_, len);
        lines += lines_spanned(slot_addr(k.node, k.slot).offset, len);
        off += len;
      }
      engine_.end_direct_reads(live, bytes, lines);
    } else {
      b.reqs.resize(live);
      bytes = 0;
      for (Request& r : b.reqs) {  // the windows back to back, now that `windows` is sized
        r.buf = b.windows.data() + bytes;
        bytes += r.len;
      }
      error = engine_.execute_batch(b.reqs);
    }
    size_t kept = 0;
    const std::byte* data = b.windows.data();  // key a's window; the next key's follows it
    for (size_t a = 0; a < b.active.size(); ++a) {
      BatchState::Key& k = b.active[a];
      const uint64_t n = k.n;
      const uint32_t len = static_cast<uint32_t>(n * slot_bytes_);
      const std::byte* window = data;
      data += len;
      ++k.chunks;
      k.bytes += len;
      if (!direct && b.reqs[a].status != ReqStatus::kOk) {  // as an awaited failed READ: FabricError in that key's op
        finish(k, std::make_exception_ptr(FabricError(error)));
        continue;
      }
      uint64_t j = 0;
      const Probe found = scan(k.key, k.kbits, window, n, j);
      // The runs this window shows, to a read sizer that tracks them; not for a key that met a
      // locked or torn slot: its lookup reads the window again and shows them (each run once).
      if (clusters && found != Probe::kUnstable) observe_clusters(k.node, k.slot, window, n, k.run_start);
      if (found == Probe::kHit) {
        OpResult r;
        r.chunks = k.chunks;
        r.status = Status::kFound;
        r.matches = 1;
        const std::byte* sl = window + j * slot_bytes_;
        sink.hit(k.key, r, has_value ? std::span<const std::byte>(sl + l.val_off, cfg_.value_bytes) : std::span<const std::byte>(),
                 Located{true, k.slot + j, load64(sl)});
        finish(k, nullptr);
      } else if (found == Probe::kMiss) {
        miss(k);
      } else if (found == Probe::kMore) {
        k.slot += n;  // the next window, as lookup's loop goes on
        if (k.slot >= total) {  // none: past the last tail slot, a miss now
          miss(k);
        } else {
          if (kept != a) b.active[kept] = k;  // a key that stays where it is is not copied
          ++kept;
        }
      } else {
        // kUnstable: the lookup itself, from this window's start as it stood before this round
        // (one READ more than the lookup's read_stable of the one slot; the same answer). Its
        // stats keep this round's READ; the lookup counts its chunks from before it.
        b.resume.push_back(k);
      }
    }
    b.active.resize(kept);
    // The keys that met a locked or torn slot, each as its own lookup, before the next round.
    if (!b.resume.empty()) {
      const auto resumed = engine_.batch_clock();
      engine_.run_many(
          b.resume.size(), static_cast<uint32_t>(b.resume.size()),
          [&](uint64_t i) {
            const BatchState::Key& k = b.resume[i];
            return lookup(k.key, sink, LookupFrom{true, k.slot, k.run_start, k.chunks - 1});
          },
          [&](const Engine::Completion& c) {
            const BatchState::Key& k = b.resume[c.index];
            OpStats st = stats_of(k);
            st.add(c.stats);
            done(Engine::Completion{k.index, st,
                                    std::chrono::duration_cast<std::chrono::nanoseconds>(resumed - k.start) + c.latency, c.error});
          });
      b.resume.clear();
    }
  }
  return true;
}

// The lookup (seed 000 §4.3) of get, get_visit and locate: READ a window of R slots from the home
// slot, scan it, read the next window while no slot answers (one READ per window, a re-read of a
// locked or torn slot of the key), all in this one frame; a hit is handed to the sink from the
// window. The windows follow the table's chunk order (linear.h, ChunkOrder): linear, consecutive
// windows of R slots (the read sizer's) up to the last tail slot, no wrap; quadratic, the chunks an
// insert may claim in (all quad_chunks() of them), C slots each at quad_next, wrapping modulo N.
template <class Sink>
Task<typename Sink::Ret> LinearClient::lookup(uint64_t key, Sink sink, LookupFrom from) {
  validate_key(key);
  sink.check(cfg_.value_bytes);
  OpResult r;
  r.chunks = from.chunks;
  const LinearPlacement p = linear_place(cfg_, key);
  // The window buffer (inline), or get_visit's value buffer when a heap record is copied out: in
  // the frame unless larger than its inline bytes (no malloc per get).
  Scratch buf(0);
  std::vector<std::byte> big, one;
  if (cfg_.heap()) {
    const std::span<std::byte> out = sink.buffer(buf, big, cfg_.value_bytes);
    const Located loc = co_await heap_scan(key, p, false, out, nullptr, r);
    r.status = loc.found ? Status::kFound : Status::kNotFound;
    r.matches = loc.found ? 1 : 0;
    co_return sink.copied(key, r, out);
  }
  const InlineLayout l(cfg_);
  const uint64_t total = cfg_.total_slots();
  const bool quad = cfg_.quadratic();  // the lookup walks the table's chunk order
  const uint64_t windows = quad ? cfg_.quad_chunks() : total;
  uint64_t run_start = from.set ? from.run_start : p.home;
  uint64_t s = from.set ? from.slot : p.home;  // from: linear order only (get_batch)
  for (uint64_t i = 0; i < windows; ++i) {
    const uint64_t n = quad ? cfg_.chunk : window(p.node, s);
    if (n == 0) break;  // linear: past the last tail slot
    std::byte* data = buf.data();
    if (n * slot_bytes_ > buf.size()) {
      big.resize(n * slot_bytes_);
      data = big.data();
    }
    {
      auto rd = read_window(p.node, s, n, data);
      co_await std::move(rd.first);
      if (rd.second) co_await std::move(*rd.second);
    }
    ++r.chunks;
    if (!quad) observe_clusters(p.node, s, data, n, run_start);  // read sizers: linear order only
    for (uint64_t j = 0;; ++j) {
      const Probe found = scan(key, p.kbits, data, n, j);
      if (found == Probe::kMore) break;
      if (found == Probe::kMiss) co_return sink.copied(key, r, {});
      const std::byte* sl = data + j * slot_bytes_;
      if (found == Probe::kUnstable) {  // locked or torn: re-read it until stable (or erased)
        one.resize(slot_bytes_);
        if (!co_await read_stable(p.node, (s + j) % total, one.data())) continue;
        sl = one.data();
        if (cfg_.key_bytes == 8 && load64(sl + l.key_off) != key) continue;
      }
      r.status = Status::kFound;
      r.matches = 1;
      co_return sink.hit(key, r,
                         cfg_.value_bytes ? std::span<const std::byte>(sl + l.val_off, cfg_.value_bytes)
                                          : std::span<const std::byte>(),
                         Located{true, (s + j) % total, load64(sl)});
    }
    s = quad ? cfg_.quad_next(s, i) : s + n;
  }
  co_return sink.copied(key, r, {});
}

bool LinearClient::speculating() const {
  switch (probe_.speculative_claim) {
    case SpeculativeClaim::kOff: return false;
    case SpeculativeClaim::kOn: return true;
    case SpeculativeClaim::kAuto: break;
  }
  // A won speculation saves a round trip; an insert whose chunk 0 is full pays one more with it
  // (chunk 1 is no longer overlapped). Ties, and a client with no evidence yet, speculate.
  return claims_home_ >= claims_past_chunk0_;
}

void LinearClient::note_claim(uint64_t distance) {
  constexpr uint32_t kClaimWindow = 256;  // recent inserts weigh most: the load factor moves
  if (++claims_ > kClaimWindow) {
    claims_ /= 2;
    claims_home_ /= 2;
    claims_past_chunk0_ /= 2;
  }
  claims_home_ += distance == 0;
  claims_past_chunk0_ += distance >= probe_.chunk;
}

Task<OpResult> LinearClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, false);
  check_writable();
  if (cfg_.format == SlotFormat::kHeap) co_return co_await heap_insert(key, value);
  co_return co_await insert(key, value);
}

// Seed 001 find-or-put: chunks of C slots, at most M chunks; chunk i+1 is posted before chunk i is
// scanned, so its round trip overlaps the scan (and usually shares a batch with chunk i). The chunks
// follow the table's chunk order (linear.h, ChunkOrder): linear, consecutive from the home slot and
// clipped at the last tail slot; quadratic, C slots at quad_next wrapping modulo N, at most
// min(M, ⌈N/C⌉) of them.
Task<OpResult> LinearClient::insert(uint64_t key, std::span<const std::byte> value) {
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  const uint64_t total = cfg_.total_slots();
  const uint32_t C = probe_.chunk;  // a quadratic table's chunk (checked by the constructor)
  const bool quad_claims = cfg_.quadratic();  // insert claims along the table's chunk order
  const uint64_t M = quad_claims ? std::min<uint64_t>(probe_.max_chunks, cfg_.quad_chunks()) : probe_.max_chunks;
  const bool set = cfg_.format == SlotFormat::kSet;
  const InlineLayout l(cfg_);
  const size_t chunk_bytes = static_cast<size_t>(C) * slot_bytes_;
  Scratch bufs(2 * chunk_bytes);
  Scratch one(slot_bytes_);

  // The slots of the chunk at `start`: a linear chunk ends at the last tail slot (0: past it).
  auto chunk_len = [&](uint64_t start) -> uint64_t {
    if (quad_claims) return C;
    return start >= total ? 0 : std::min<uint64_t>(C, total - start);
  };
  // The start of chunk i+1, chunk i starting at `start`.
  auto next_chunk = [&](uint64_t start, uint64_t i) -> uint64_t {
    return quad_claims ? cfg_.quad_next(start, i) : start + C;
  };
  using Read = std::pair<Pending, std::optional<Pending>>;
  auto post = [&](uint64_t i, uint64_t start) {
    return read_window(p.node, start, chunk_len(start), bufs.data() + (i % 2) * chunk_bytes);
  };
  // Key-match check for an occupied slot word/ctrl `w` at `slot`; may re-read the slot.
  // Returns 1 = my key (found), 0 = another key or a tombstone.
  auto is_mine = [&](uint64_t w, uint64_t slot, const std::byte* bytes) -> Task<bool> {
    if (set) co_return w == (kOcc | key);
    if ((w & kDel) || static_cast<uint32_t>(w) != p.kbits) co_return false;
    if (cfg_.key_bytes == 4) {
      // The ctrl word holds the whole key. But a locked version-0 ctrl is a claim whose insert is
      // not published yet, and a sweeper rolls it back if its holder died: wait for it.
      if (!(w & kLock) || version_of(w) != 0) co_return true;
      co_return co_await read_stable(p.node, slot, one.data());
    }
    if (!bytes || (w & kLock) || !inline_consistent(cfg_, l, bytes)) {
      if (!co_await read_stable(p.node, slot, one.data())) co_return false;
      bytes = one.data();
    }
    co_return load64(bytes + l.key_off) == key;
  };

  if (chunk_len(p.home) == 0) { r.status = Status::kFull; co_return r; }
  // A slot that is one word (sets; 4-byte keys without a value) is published by the CAS itself; a
  // larger record is claimed locked and published after its payload.
  const bool one_word = slot_bytes_ == 8;
  const uint64_t claim = set ? (kOcc | key) : one_word ? make_ctrl(1, p.kbits) : (kOcc | kLock | p.kbits);
  // `slot` is claimed: publish the payload, then the unlocking ctrl fenced after it, in one round
  // trip (see the protocol in linear.h).
  auto publish_claim = [&](uint64_t slot) -> Task<void> {
    if (one_word) co_return;
    const uint64_t lock = lock_taken();
    maybe_die_holding_lock(lock, false);
    std::memset(one.data(), 0, one.size());
    build_payload(cfg_, l, key, 1, value, one.data());
    store64(one.data(), make_ctrl(1, p.kbits));
    co_await publish(slot_addr(p.node, slot), one.data(), lock);
  };

  std::optional<Read> cur(post(0, p.home));
  // Speculative claim (linear.h): the home slot's claim CAS goes in chunk 0's batch. Won, the key
  // is absent and the READ is not needed; lost, chunk 0 is scanned as usual, home included.
  const bool speculate = speculating();
  if (speculate && co_await engine_.cas(slot_addr(p.node, p.home), 0, claim) == 0) {
    ++r.chunks;
    note_claim(0);
    co_await publish_claim(p.home);
    r.status = Status::kInserted;
    co_return r;
  }
  uint64_t start = p.home;
  for (uint64_t i = 0; i < M; ++i) {
    const uint64_t n = chunk_len(start);
    const uint64_t next_start = next_chunk(start, i);
    const bool more = i + 1 < M && chunk_len(next_start) > 0;
    // Seed 001 posts chunk i+1 before it scans chunk i; after a lost speculative claim chunk 1 is
    // posted only if chunk 0 turns out full (the READ it saves pays for the failed CAS).
    const bool overlap = !(speculate && i == 0);
    std::optional<Read> next;
    if (overlap && more) next.emplace(post(i + 1, next_start));
    co_await std::move(cur->first);
    if (cur->second) co_await std::move(*cur->second);
    cur.reset();
    ++r.chunks;
    const std::byte* chunk = bufs.data() + (i % 2) * chunk_bytes;
    for (uint64_t j = 0; j < n; ++j) {
      const std::byte* sl = chunk + j * slot_bytes_;
      const uint64_t slot = (start + j) % total;  // linear chunks never pass the last slot
      uint64_t w = load64(sl);
      if (w == 0) {
        const uint64_t old = co_await engine_.cas(slot_addr(p.node, slot), 0, claim);
        if (old == 0) {
          note_claim(i * C + j);  // linear: slot - home
          co_await publish_claim(slot);
          r.status = Status::kInserted;
          co_return r;
        }
        w = old;  // someone else claimed it first: re-check the winner (seed 001, line 15)
        if (co_await is_mine(w, slot, nullptr)) { r.status = Status::kFound; r.matches = 1; co_return r; }
        continue;
      }
      // Only a slot whose word names the key (set word, or ctrl's key bits) costs the is_mine
      // coroutine; is_mine itself repeats these tests.
      const bool may_be_mine = set ? w == (kOcc | key) : !(w & kDel) && static_cast<uint32_t>(w) == p.kbits;
      if (may_be_mine && co_await is_mine(w, slot, sl)) { r.status = Status::kFound; r.matches = 1; co_return r; }
    }
    if (!overlap && more) next.emplace(post(i + 1, next_start));
    if (!next) break;
    cur.emplace(std::move(*next));
    start = next_start;
  }
  // M chunks held neither the key nor an empty slot. Lookups scan on to the first empty slot (a
  // quadratic table: along every chunk of the sequence), so a key past M chunks (inserted by a
  // client with a larger M) is present: answer as get would, never kFull for a present key.
  if ((co_await locate(key, r.chunks)).found) {
    r.status = Status::kFound;
    r.matches = 1;
    co_return r;
  }
  r.status = Status::kFull;
  co_return r;
}

Task<OpResult> LinearClient::update(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, true);
  check_writable();
  if (cfg_.format == SlotFormat::kHeap) co_return co_await heap_update(key, value);
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  const InlineLayout l(cfg_);
  std::vector<std::byte> payload(slot_bytes_);
  for (;;) {
    const Located loc = co_await locate(key, r.chunks);
    if (!loc.found) { r.status = Status::kNotFound; co_return r; }
    const RemoteAddr a = slot_addr(p.node, loc.slot);
    const uint64_t locked = loc.ctrl | kLock;
    if (co_await engine_.cas(a, loc.ctrl, locked) != loc.ctrl) continue;  // raced: look again
    uint64_t unlocked = 0;
    const uint64_t v = (version_of(loc.ctrl) + 1) & kVersionMask;
    const uint64_t lock = lock_taken();
    maybe_die_holding_lock(lock, false);
    if (slot_bytes_ > 8) {
      build_payload(cfg_, l, key, v, value, payload.data());
      store64(payload.data(), make_ctrl(v, p.kbits));
      co_await publish(a, payload.data(), lock);
    } else {
      maybe_die_holding_lock(lock, true);
      co_await engine_.write(a, &(unlocked = make_ctrl(v, p.kbits)), 8);
    }
    r.status = Status::kUpdated;
    r.matches = 1;
    co_return r;
  }
}

Task<OpResult> LinearClient::put(uint64_t key, std::span<const std::byte> value) {
  validate_key(key);
  check_value(value, cfg_.format != SlotFormat::kSet);
  check_writable();
  if (cfg_.format == SlotFormat::kSet) {
    OpResult r = co_await insert(key, value);
    if (r.status == Status::kFound) r.status = Status::kUpdated;  // nothing to replace in a set
    co_return r;
  }
  uint32_t chunks = 0;
  for (;;) {
    OpResult r = co_await update(key, value);
    chunks += r.chunks;
    if (r.status == Status::kUpdated || r.status == Status::kFull) { r.chunks = chunks; co_return r; }
    // (if/else, not ?: — GCC mishandles co_await inside a conditional expression)
    if (cfg_.format == SlotFormat::kHeap) {
      r = co_await heap_insert(key, value);
    } else {
      r = co_await insert(key, value);
    }
    chunks += r.chunks;
    if (r.status != Status::kFound) { r.chunks = chunks; co_return r; }
    // Inserted concurrently by someone else after our update missed: update it now.
  }
}

Task<OpResult> LinearClient::erase(uint64_t key) {
  validate_key(key);
  check_writable();
  if (cfg_.format == SlotFormat::kHeap) co_return co_await heap_erase(key);
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  for (;;) {
    const Located loc = co_await locate(key, r.chunks);
    if (!loc.found) { r.status = Status::kNotFound; co_return r; }
    const uint64_t dead = cfg_.format == SlotFormat::kSet
                              ? kSetTombstone
                              : (kOcc | kDel | (((version_of(loc.ctrl) + 1) & kVersionMask) << 32) | p.kbits);
    if (co_await engine_.cas(slot_addr(p.node, loc.slot), loc.ctrl, dead) == loc.ctrl) {
      r.status = Status::kErased;
      r.matches = 1;
      co_return r;
    }
  }
}

}  // namespace rdmahash
