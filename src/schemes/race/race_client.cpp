// RACE hashing's client: RaceClient and the read/write path of RaceClient::Impl (directory cache,
// reading and classifying a key's buckets, block allocation, get/write/erase). Splits are in
// race_split.cpp, the memory-node side in race.cpp; declarations shared by them in race_internal.h.
// Layout, protocol and the safety argument: include/rdmahash/race.h.
// RaceClient::Impl's members below keep the indentation they had in the class body (now in
// race_internal.h), so the mutation harness's `find` strings (tests/mutants/race.json) still match.
#include <bit>

#include "schemes/race/race_internal.h"

namespace rdmahash {

// --- client -------------------------------------------------------------------------------------

  // Other operations of this client keep using the cache while this one reads: it is replaced
  // in one step, never left half-filled.
  Task<void> RaceClient::Impl::refresh() {
    ++st.dir_refreshes;
    uint32_t want = dir.empty() ? cfg.initial_depth : gd;
    for (;;) {
      std::vector<std::byte> buf(64 + (size_t{8} << want));
      co_await engine.read(RemoteAddr{0, 0}, buf.data(), static_cast<uint32_t>(buf.size()));
      const uint64_t depth = load64(buf.data() + 8);
      if (load64(buf.data()) != kRaceMagic) throw FabricError("race: node 0 holds no RACE table (bad magic)");
      if (load64(buf.data() + offsetof(RaceNodeHeader, config_tag)) != race_config_tag(cfg))
        throw InvalidArgument("race: the table on node 0 was built with another configuration (memory nodes, groups per "
                              "subtable, max depth, key bytes or hash seed differ from this client's)");
      if (depth > cfg.max_depth) throw FabricError("race: directory depth " + std::to_string(depth) + " exceeds the config");
      if (depth > want) {  // grew since: read the larger directory
        want = static_cast<uint32_t>(depth);
        continue;
      }
      std::vector<uint64_t> d(size_t{1} << depth);
      bool complete = true;
      for (size_t i = 0; i < d.size(); ++i) {
        d[i] = load64(buf.data() + 64 + 8 * i);
        if (d[i] == 0) complete = false;  // a doubling's copy not yet visible: read again
      }
      if (!complete) continue;
      if (!dir.empty() && depth < gd) co_return;  // a newer refresh of this client finished first
      gd = static_cast<uint32_t>(depth);
      dir = std::move(d);
      co_return;
    }
  }

  // read_view's parse of the two combined buckets in v.buf (a plain function: a coroutine would keep
  // its loop variables in its frame, in memory).
  void RaceClient::Impl::parse_view(const Ctx& c, View& v, const std::array<RemoteAddr, 2>& cb) {
    v.slots.clear();
    static_assert(4 * kRaceSlots <= 32, "View::match holds a bit per slot of the four buckets");
    v.slots.reserve(4 * kRaceSlots);
    v.load = {0, 0};
    v.headers_ok = true;
    v.frozen = false;
    // The two combined buckets share their overflow bucket when the key's main buckets are
    // neighbours, and are one when they coincide. v.slots lists each slot once (a copy listed
    // twice would be its own rival: RaceFault.OverlappingCombinedBucketsListEachSlotOnce), in
    // ascending address (the order placement scans for an empty slot; the lowest copy is chosen by
    // address wherever it matters): so whole buckets are deduplicated, the first read kept, and
    // ordered, each bucket's slots already ascending — not a search per slot and a sort of 28.
    // Loads and the frozen flag count every bucket read.
    struct Bucket {
      uint64_t offset;
      const std::byte* at;
      int i;
    };
    std::array<Bucket, 4> buckets;
    size_t nb = 0;
    for (int i = 0; i < 2; ++i)
      for (int b = 0; b < 2; ++b) {
        const std::byte* bucket = v.buf.data() + 128 * i + 64 * b;
        const uint64_t hdr = load64(bucket);
        const uint32_t depth = static_cast<uint32_t>(hdr & 0xff);
        if (depth == kRetiredDepth || (c.p.h & mask(depth)) != (hdr >> 8)) v.headers_ok = false;
        for (uint32_t s = 0; s < kRaceSlots; ++s) {
          const uint64_t w = load64(bucket + 8 + 8 * s);
          if (w != 0) ++v.load[i];
          if (w & kFrozen) v.frozen = true;
        }
        const uint64_t offset = cb[i].offset + 64 * b;
        if (std::none_of(buckets.begin(), buckets.begin() + nb, [&](const Bucket& x) { return x.offset == offset; }))
          buckets[nb++] = Bucket{offset, bucket, i};
      }
    for (size_t k = 1; k < nb; ++k)  // insertion sort of at most 4
      for (size_t j = k; j > 0 && buckets[j].offset < buckets[j - 1].offset; --j) std::swap(buckets[j], buckets[j - 1]);
    // v.match: the slots a copy of the key may be in (its fingerprint, neither empty nor a kill
    // marker), computed without a branch per slot: most slots are not, unpredictably.
    v.match = 0;
    for (size_t k = 0; k < nb; ++k)
      for (uint32_t s = 0; s < kRaceSlots; ++s) {
        const uint64_t w = load64(buckets[k].at + 8 + 8 * s);
        const uint32_t candidate = ((w & ~kFrozen) != 0) & ((w & kKilled) == 0) & (slot_fp(w) == c.p.fp);
        v.match |= candidate << v.slots.size();
        v.slots.push_back(SlotRef{RemoteAddr{v.sub.node, buckets[k].offset + 8 + 8 * s}, w, buckets[k].i});
      }
  }

  // RT: read both combined buckets of the key in the subtable the cache names (cache off: READ
  // the directory entry first). A stale header (RETIRED, or a suffix the key does not have)
  // refreshes the directory and retries with it.
  // With `place`: the same READ of the subtable already read (v.sub), in one batch behind the
  // placement CAS `place`, fenced after it (performed after the CAS at that node, fabric.h):
  // the view a placement needs, read after it, in the placement's own round trip. `*won`: the
  // CAS swapped.
  // With place->classify_into: classify (blocks + dir check) the view v held before, in the same
  // batch; it reads only v.slots and v.sub, which stay the old view's until the parse below.
  Task<Verdict> RaceClient::Impl::read_view(Ctx& c, View& v, SlotCas* place, bool* won) {
    if (dir.empty()) co_await refresh();
    if (place) {
      // (nothing to read first: the subtable is the one the placement's slot belongs to)
    } else if (!cfg.dir_cache) {
      uint64_t e = 0, depth = 0;
      auto a = engine.read(RemoteAddr{0, 8}, &depth, 8);
      auto b = engine.read(RemoteAddr{0, cfg.directory_offset() + 8 * (c.p.h & mask(gd))}, &e, 8);
      co_await a;
      co_await b;
      if (depth != gd) co_await refresh();
      else dir[c.p.h & mask(gd)] = e;
    }
    if (!place) v.sub = entry_addr(entry_for(c.p.h));
    std::array<RemoteAddr, 2> cb;
    for (int i = 0; i < 2; ++i) cb[i] = RemoteAddr{v.sub.node, v.sub.offset + combined_offset(c.p.main[i])};
    if (place) {
      auto k = engine.cas(place->at, place->expect, place->desired);
      auto r0 = engine.read_fenced(cb[0], v.buf.data(), 128);
      auto r1 = engine.read_fenced(cb[1], v.buf.data() + 128, 128);
      if (place->classify_into)
        place->classified = co_await classify(c, v, true, true, *place->classify_into, nullptr, nullptr);
      *won = (co_await k) == place->expect;
      co_await r0;
      co_await r1;
    } else {
      auto r0 = engine.read(cb[0], v.buf.data(), 128);
      auto r1 = engine.read(cb[1], v.buf.data() + 128, 128);
      co_await r0;
      co_await r1;
    }
    c.chunks += 2;
    parse_view(c, v, cb);
    if (v.headers_ok) co_return Verdict::kOk;
    ++st.stale_detected;
    ++st.stale_headers;
    co_await refresh();
    // The fresh directory cannot still name the subtable read. Its headers are written once, in
    // its image before any entry names it, and then only RETIRED, after its split's publication
    // has CASed every entry naming it (copy-on-split order, race.h); the refresh READ follows
    // ours, so it sees that publication. A subtable named at index i has a suffix ≡ i, which is
    // the key's. So this is corrupted memory or a broken protocol: an error, not a view to use
    // (before copy-on-split it meant "headers rewritten, not published yet": contents current).
    if (same_addr(entry_addr(entry_for(c.p.h)), v.sub))
      throw FabricError("race: a bucket header of a subtable the directory names is RETIRED or has another suffix "
                        "(memory corrupted or the split protocol broken)");
    co_return Verdict::kRetry;
  }

  // RT: READ the blocks of fingerprint-matching slots this op has not classified yet (committed
  // only, unless `all`), plus the key's directory entry when `check_dir`: the check that no split
  // published since the view was read moved the key elsewhere. Fills `copies` with the slots
  // holding the key. `value_out` receives the value of the committed copy.
  Task<Verdict> RaceClient::Impl::classify(Ctx& c, const View& v, bool all, bool check_dir, std::vector<SlotRef>& copies,
                                           std::vector<std::byte>* value_out, uint32_t* value_len) {
    std::vector<Fetch> fetch;
    std::vector<std::byte> blocks(select_fetches(c, v, all, value_out != nullptr, fetch));  // every block READ, one buffer
    uint64_t e = 0, depth = gd;
    const uint32_t cached_gd = gd;
    if (!fetch.empty() || check_dir) {
      std::vector<Pending> pend;
      pend.reserve(fetch.size());
      for (const Fetch& f : fetch) pend.push_back(engine.read(f.at, blocks.data() + f.offset, f.len));
      // The global depth too: a split that doubled the directory leaves the entry at the old
      // index naming S even when it moved the key (the key's entry is in the new upper half).
      std::optional<Pending> d, g;
      if (check_dir) {
        d.emplace(engine.read(RemoteAddr{0, cfg.directory_offset() + 8 * (c.p.h & mask(cached_gd))}, &e, 8));
        g.emplace(engine.read(RemoteAddr{0, offsetof(RaceNodeHeader, global_depth)}, &depth, 8));
      }
      for (auto& p : pend) co_await p;
      if (d) {
        Pending& dp = *d;
        co_await dp;
        Pending& gp = *g;
        co_await gp;
      }
    }
    if (check_dir && (depth != cached_gd || !same_addr(entry_addr(e), v.sub))) {
      ++st.stale_detected;
      co_await refresh();
      co_return Verdict::kRetry;
    }
    for (const Fetch& f : fetch) {
      auto b = parse_block(blocks.data() + f.offset, f.len);
      if (!b) throw FabricError("race: a KV block failed its checksum (memory corrupted or a pointer is wrong)");
      const bool mine = b->key.size() == c.key.size() && std::equal(b->key.begin(), b->key.end(), c.key.begin());
      if (std::none_of(c.known.begin(), c.known.end(), [&](auto& k) { return k.first == f.id; })) {
        c.known.emplace_back(f.id, mine);
      }
      if (mine && value_out) {
        value_out->assign(b->value.begin(), b->value.end());
        if (value_len) *value_len = static_cast<uint32_t>(b->value.size());
      }
    }
    collect_copies(c, v, copies);
    co_return Verdict::kOk;
  }

  // classify's choice of blocks (plain functions, as parse_view): the fingerprint matches not
  // classified yet (committed only, unless `all`; a committed one again when its value is
  // wanted), each block once, laid out one after another from offset 0. Returns their bytes.
  size_t RaceClient::Impl::select_fetches(const Ctx& c, const View& v, bool all, bool want_value, std::vector<Fetch>& fetch) const {
    size_t bytes = 0;
    for (uint32_t m = v.match; m != 0; m &= m - 1) {  // the fingerprint matches, in v.slots order
      const SlotRef& s = v.slots[static_cast<size_t>(std::countr_zero(m))];
      if (!all && !(s.v & kCommitted)) continue;
      const uint64_t id = s.v & kPtrMask;
      const bool wanted_value = want_value && (s.v & kCommitted);
      if (!wanted_value && std::any_of(c.known.begin(), c.known.end(), [&](auto& k) { return k.first == id; })) continue;
      if (std::any_of(fetch.begin(), fetch.end(), [&](const Fetch& f) { return f.id == id; })) continue;
      const uint32_t len = slot_units(s.v) * 64;
      fetch.push_back(Fetch{id, slot_block(s.v), len, bytes});
      bytes += len;
    }
    return bytes;
  }

  // The slots of the view holding the key, by what classify learned of their blocks.
  void RaceClient::Impl::collect_copies(const Ctx& c, const View& v, std::vector<SlotRef>& copies) const {
    copies.clear();
    for (uint32_t m = v.match; m != 0; m &= m - 1) {
      const SlotRef& s = v.slots[static_cast<size_t>(std::countr_zero(m))];
      const uint64_t id = s.v & kPtrMask;
      auto it = std::find_if(c.known.begin(), c.known.end(), [&](auto& k) { return k.first == id; });
      if (it != c.known.end() && it->second) copies.push_back(s);
    }
  }

  // Space for one block, carved from this client's chunks; a new chunk by RPC when none has room,
  // trying every node. Several operations of this client may refill at once: every chunk they
  // get is kept, none is dropped. False: the pool is exhausted.
  Task<bool> RaceClient::Impl::alloc_block(uint32_t bytes, RemoteAddr& out) {
    bytes = (bytes + 63) / 64 * 64;
    for (;;) {
      for (size_t i = 0; i < chunks.size(); ++i)
        if (chunks[i].second - chunks[i].first.offset >= bytes) {
          out = chunks[i].first;
          chunks[i].first.offset += bytes;
          if (chunks[i].second - chunks[i].first.offset < 64 * kMaxUnits) chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(i));
          co_return true;
        }
      if (refilling) {
        // Another operation's RPC is in flight: ride along in its batch (one 8-byte READ), then
        // look again, instead of fetching a chunk of our own that would go mostly unused.
        uint64_t scratch = 0;
        co_await engine.read(RemoteAddr{0, 0}, &scratch, 8);
        continue;
      }
      refilling = true;
      // Cleared on every way out, a failing RPC's exception included: left set, every later
      // allocation of this client would ride along forever on an RPC no longer in flight.
      struct Unset {
        bool& flag;
        ~Unset() { flag = false; }
      } unset{refilling};
      bool ok = false;
      for (uint32_t tries = 0; tries < cfg.memory_nodes && !ok; ++tries) {
        const uint32_t node = alloc_node;
        alloc_node = (alloc_node + 1) % cfg.memory_nodes;  // spread chunks over the nodes
        if (const uint64_t got = co_await rpc_alloc(node, cfg.chunk_bytes)) {
          chunks.emplace_back(RemoteAddr{node, got}, got + cfg.chunk_bytes);
          ok = true;
        }
      }
      if (!ok) co_return false;
    }
  }

  Task<uint64_t> RaceClient::Impl::rpc_alloc(uint32_t node, uint64_t bytes) {
    std::array<uint64_t, 2> req{bytes, node};
    std::vector<std::byte> reply;
    co_await engine.rpc(node, kRaceRpcAlloc, req.data(), 16, &reply);
    ++st.chunk_rpcs;
    if (reply.size() != 8) throw FabricError("race: malformed allocation reply");
    co_return load64(reply.data());
  }

  // --- operations ---------------------------------------------------------------------------

  void RaceClient::Impl::check_key(std::span<const std::byte> key) const {
    if (key.empty() || key.size() > kMaxKeyBytes)
      throw InvalidArgument("race: keys must be 1 to " + std::to_string(kMaxKeyBytes) + " bytes, got " +
                            std::to_string(key.size()));
  }

  void RaceClient::Impl::check_value(std::span<const std::byte> value) const {
    if (value.size() > kMaxValueBytes)
      throw InvalidArgument("race: values must be at most " + std::to_string(kMaxValueBytes) + " bytes, got " +
                            std::to_string(value.size()));
  }

  Task<OpResult> RaceClient::Impl::get(std::span<const std::byte> key, std::vector<std::byte>* out) {
    check_key(key);
    Ctx c{key, place(cfg, key), {}, 0};
    View v;
    std::vector<SlotRef> copies;
    std::vector<std::byte> value;
    OpResult r;
    for (;;) {
      if (co_await read_view(c, v) == Verdict::kRetry) continue;
      if (co_await classify(c, v, false, true, copies, &value, &r.value_bytes) == Verdict::kRetry) continue;
      break;
    }
    r.chunks = c.chunks;
    const bool hit = std::any_of(copies.begin(), copies.end(), [](const SlotRef& s) { return s.v & kCommitted; });
    if (!hit) {
      r.status = Status::kNotFound;
      r.value_bytes = 0;
      co_return r;
    }
    r.status = Status::kFound;
    r.matches = 1;
    if (out) *out = std::move(value);
    co_return r;
  }

  // find_or_put / put / update: see race.h for the insert protocol and duplicate resolution.
  Task<OpResult> RaceClient::Impl::write(std::span<const std::byte> key, std::span<const std::byte> value, Mode mode) {
    check_key(key);
    check_value(value);
    Ctx c{key, place(cfg, key), {}, 0};
    std::vector<std::byte> block;
    build_block(key, value, id, block);
    const uint32_t units = static_cast<uint32_t>(block.size() / 64);
    RemoteAddr at;
    if (!co_await alloc_block(static_cast<uint32_t>(block.size()), at)) co_return OpResult{Status::kFull, 0, 0, 0};
    uint64_t mine_tent = make_slot(c.p.fp, units, at);
    uint64_t mine_id = mine_tent & kPtrMask;
    c.known.emplace_back(mine_id, true);
    bool have_mine = false;
    bool placed = false;  // mine_tent was placed: never again (race.h, Protocol: no slot value is placed twice)
    RemoteAddr mine_at{};
    bool written = false;
    View v;
    std::vector<SlotRef> copies;
    std::optional<Verdict> placed_view;  // v was read behind our placement CAS, in its batch
    auto done = [&](Status s) { return OpResult{s, c.chunks, s == Status::kFound ? 1u : 0u, 0}; };
    for (;;) {
      Verdict rv;
      if (placed_view) {
        rv = *placed_view;
        placed_view.reset();
      } else if (!written) {
        auto w = engine.write(at, block.data(), static_cast<uint32_t>(block.size()));  // same round trip
        rv = co_await read_view(c, v);
        co_await w;
        written = true;
      } else {
        rv = co_await read_view(c, v);
      }
      if (rv == Verdict::kRetry) continue;
      if (v.frozen) {  // a split of this subtable is running: help it finish, then read again
        co_await help_frozen(c, v.sub);
        continue;
      }
      // Committed copies need a validated view (dir check); tentative ones do not. A block
      // already read and found to hold another key holds it for good (blocks are never written
      // again nor reused): its slot is no copy and needs no check.
      const bool any_match = std::any_of(v.slots.begin(), v.slots.end(), [&](const SlotRef& s) {
        if ((s.v & ~kFrozen) == 0 || slot_fp(s.v) != c.p.fp || (s.v & kPtrMask) == mine_id) return false;
        return std::none_of(c.known.begin(), c.known.end(), [&](auto& k) { return k.first == (s.v & kPtrMask) && !k.second; });
      });
      // An empty slot of the less loaded combined bucket (main bucket first).
      auto pick_empty = [&]() -> const SlotRef* {
        const int first = v.load[0] <= v.load[1] ? 0 : 1;
        for (const SlotRef& s : v.slots)  // the less loaded combined bucket's own slots first
          if (s.v == 0 && s.cb == first) return &s;
        for (const SlotRef& s : v.slots)
          if (s.v == 0) return &s;
        return nullptr;
      };
      // A first view whose fingerprint matches need their blocks READ: a round trip, which an
      // insert of a new key (the matches hold other keys) would pay on top of its 3. Unless this
      // client's recent such views mostly held the key (then placing first costs a withdrawal),
      // place our copy in that round trip: CAS + fenced re-READ + the blocks and dir check of this
      // view, one batch (race.h, Costs). A copy placed beside a committed one is withdrawn as
      // after any placement (duplicate resolution): only the round trips differ.
      // Only beside COMMITTED matches: a tentative one is likely a copy of the key (contention,
      // or a dead inserter's), which the resolution should commit, not race with ours.
      const bool all_committed = std::all_of(v.slots.begin(), v.slots.end(), [&](const SlotRef& s) {
        if ((s.v & ~kFrozen) == 0 || slot_fp(s.v) != c.p.fp || (s.v & kPtrMask) == mine_id) return true;
        return (s.v & kCommitted) && !(s.v & kKilled);
      });
      const bool first_match = any_match && mode != Mode::kUpdate && !placed && !have_mine;
      auto note_match = [&] {
        const bool hit = std::any_of(copies.begin(), copies.end(), [&](const SlotRef& s) { return (s.v & kPtrMask) != mine_id; });
        ++spec_seen;
        if (hit) ++spec_hits;
        if (spec_seen >= 64) {
          spec_seen /= 2;
          spec_hits /= 2;
        }
      };
      if (first_match && all_committed && 3 * spec_hits <= spec_seen) {
        if (const SlotRef* e = pick_empty()) {
          SlotCas put_v{e->addr, 0, mine_tent, &copies};
          bool won = false;
          placed_view = co_await read_view(c, v, &put_v, &won);
          if (won) {
            have_mine = true;
            mine_at = put_v.at;
            placed = true;
          }
          if (put_v.classified == Verdict::kRetry) {  // a split moved the key: read again
            placed_view.reset();
            continue;
          }
          note_match();
          continue;
        }
      }
      if (co_await classify(c, v, true, any_match || mode == Mode::kUpdate, copies, nullptr, nullptr) == Verdict::kRetry)
        continue;
      if (first_match) note_match();
      // Our copy killed by another inserter (race.h, "Helping"): clear the marker and start over.
      // Only a kill leaves it, so a copy of ours that is gone without one was committed.
      const SlotRef* marker = nullptr;
      for (const SlotRef& s : v.slots)
        if ((s.v & kKilled) && (s.v & kPtrMask) == mine_id) marker = &s;
      if (marker) {
        if (!co_await cas(marker->addr, marker->v, 0)) continue;
        have_mine = false;
        continue;
      }
      const SlotRef* mine = nullptr;
      const SlotRef* committed = nullptr;
      const SlotRef* lowest = nullptr;  // the lowest tentative copy: the one that may commit
      // Our block referenced twice would be a bug; the committed reference, else the lowest, is
      // ours, the others are withdrawn like other tentative copies.
      for (const SlotRef& s : copies)
        if ((s.v & kPtrMask) == mine_id && (!mine || (s.v & kCommitted))) mine = &s;
      for (const SlotRef& s : copies) {
        if (s.v & kCommitted) {
          if (&s == mine || (s.v & kPtrMask) != mine_id) committed = &s;
        } else if (!lowest || s.addr.offset < lowest->addr.offset) {
          lowest = &s;
        }
      }
      if (mine && (mine->v & kCommitted)) {  // a helper committed it (our own CAS answers at once)
        ++st.commits_by_helper;
        for (const SlotRef& h : copies)
          if (&h != mine && (h.v & kPtrMask) == mine_id) (void)co_await cas(h.addr, h.v, 0);
        co_return done(Status::kInserted);
      }
      if (have_mine && !mine) {
        // Our copy is gone and left no kill marker: a helper committed it and a later update or
        // erase replaced it (it never left a split behind: a retired subtable is all frozen) (validate the view first: a stale one may just not show it).
        if (co_await classify(c, v, true, true, copies, nullptr, nullptr) == Verdict::kRetry) continue;
        ++st.commits_by_helper;
        co_return done(Status::kInserted);
      }
      if (committed) {
        if (mine) {  // withdraw our tentative copy before answering (fails if it was committed)
          if (!co_await cas(mine->addr, mine->v, 0)) continue;
          have_mine = false;
        }
        if (mode == Mode::kFindOrPut) co_return done(Status::kFound);
        const uint64_t next = make_slot(c.p.fp, units, at) | kCommitted;
        if (co_await cas(committed->addr, committed->v, next)) co_return done(Status::kUpdated);
        continue;  // lost to a concurrent write: fresh read
      }
      if (mode == Mode::kUpdate) co_return done(Status::kNotFound);
      if (lowest) {
        // Kill every other tentative copy (withdraw ours), then, once a re-read shows the lowest
        // as the only copy, commit it, whoever owns it: nobody waits for its owner.
        bool changed = false;
        for (const SlotRef& s : copies) {
          if (&s == lowest) continue;
          const bool own = (s.v & kPtrMask) == mine_id;
          if (!co_await cas(s.addr, s.v, own ? 0 : (s.v | kKilled))) {
            changed = true;
            continue;
          }
          changed = true;
          if (own) have_mine = false;
          else ++st.kills;
        }
        if (changed) continue;  // re-read and decide again
        const SlotRef t = *lowest;
        const uint64_t commit_v = t.v | kCommitted;
        if (co_await cas(t.addr, t.v, commit_v)) {
          if ((t.v & kPtrMask) == mine_id) co_return done(Status::kInserted);
          ++st.commits_helped;  // its owner's insert took effect here; ours finds (or updates) it
          if (mode == Mode::kFindOrPut) co_return done(Status::kFound);
        }
        continue;
      }
      // Absent: CAS an empty slot of the less loaded combined bucket (main bucket first).
      const SlotRef* empty = pick_empty();
      if (!empty) {
        if (!cfg.resize) co_return done(Status::kFull);
        const Status s = co_await split(c, v.sub);
        if (s == Status::kFull) co_return done(Status::kFull);
        continue;
      }
      if (placed) {
        // Our copy was killed or withdrawn and we place the key again: with a fresh block, i.e. a
        // new slot value. The same value placed again (maybe in the same slot) would let a stalled
        // helper's commit or kill CAS, issued from a view of the first placement, land on this
        // one. The old block is leaked; the WRITE goes with the next READ, before our CAS.
        if (!co_await alloc_block(static_cast<uint32_t>(block.size()), at)) co_return done(Status::kFull);
        mine_tent = make_slot(c.p.fp, units, at);
        mine_id = mine_tent & kPtrMask;
        c.known.emplace_back(mine_id, true);
        placed = false;
        written = false;
        continue;
      }
      // The placement CAS and the re-READ of both combined buckets, fenced behind it, in one
      // round trip: the next decision's view shows the key as it was after our copy landed.
      bool won = false;
      SlotCas put_v{empty->addr, 0, mine_tent};
      placed_view = co_await read_view(c, v, &put_v, &won);
      if (won) {
        have_mine = true;
        mine_at = put_v.at;
        placed = true;
      }
    }
  }

  Task<OpResult> RaceClient::Impl::erase(std::span<const std::byte> key) {
    check_key(key);
    Ctx c{key, place(cfg, key), {}, 0};
    View v;
    std::vector<SlotRef> copies;
    for (;;) {
      if (co_await read_view(c, v) == Verdict::kRetry) continue;
      if (co_await classify(c, v, false, true, copies, nullptr, nullptr) == Verdict::kRetry) continue;
      const SlotRef* committed = nullptr;
      for (const SlotRef& s : copies)
        if (s.v & kCommitted) committed = &s;
      if (!committed) co_return OpResult{Status::kNotFound, c.chunks, 0, 0};
      if (committed->v & kFrozen) {  // a split of this subtable is running: help it finish
        co_await help_frozen(c, v.sub);
        continue;
      }
      if (co_await cas(committed->addr, committed->v, 0)) co_return OpResult{Status::kErased, c.chunks, 1, 0};
    }
  }

RaceClient::RaceClient(const RaceConfig& cfg, Engine& engine, uint32_t client_id) : cfg_(cfg) {
  cfg_.validate();
  if (client_id > kRaceMaxClientId)
    throw InvalidArgument("race: client id " + std::to_string(client_id) + " does not fit the " +
                          std::to_string(kRaceMaxClientId + 1) + " owner ids of locks and blocks");
  impl_ = std::make_unique<Impl>(cfg_, engine, client_id, stats_);
}
RaceClient::~RaceClient() = default;

namespace {
// uint64 keys as bytes: the 8 little-endian bytes, then a fixed pattern up to key_bytes.
std::vector<std::byte> int_key(const RaceConfig& c, uint64_t key) {
  std::vector<std::byte> k(c.key_bytes);
  std::memcpy(k.data(), &key, 8);
  for (uint32_t i = 8; i < c.key_bytes; ++i) k[i] = static_cast<std::byte>(0xA5 ^ i);
  return k;
}
}  // namespace

Task<OpResult> RaceClient::find_or_put(KeyView key, std::span<const std::byte> value) {
  return impl_->write(key.bytes, value, Impl::Mode::kFindOrPut);
}
Task<OpResult> RaceClient::put(KeyView key, std::span<const std::byte> value) {
  return impl_->write(key.bytes, value, Impl::Mode::kPut);
}
Task<OpResult> RaceClient::update(KeyView key, std::span<const std::byte> value) {
  return impl_->write(key.bytes, value, Impl::Mode::kUpdate);
}
Task<OpResult> RaceClient::get(KeyView key, std::vector<std::byte>* value_out) { return impl_->get(key.bytes, value_out); }
Task<OpResult> RaceClient::erase(KeyView key) { return impl_->erase(key.bytes); }

Task<OpResult> RaceClient::find_or_put(uint64_t key, std::span<const std::byte> value) {
  const auto k = int_key(cfg_, key);
  co_return co_await impl_->write(k, value, Impl::Mode::kFindOrPut);
}
Task<OpResult> RaceClient::put(uint64_t key, std::span<const std::byte> value) {
  const auto k = int_key(cfg_, key);
  co_return co_await impl_->write(k, value, Impl::Mode::kPut);
}
Task<OpResult> RaceClient::update(uint64_t key, std::span<const std::byte> value) {
  const auto k = int_key(cfg_, key);
  co_return co_await impl_->write(k, value, Impl::Mode::kUpdate);
}
Task<OpResult> RaceClient::erase(uint64_t key) {
  const auto k = int_key(cfg_, key);
  co_return co_await impl_->erase(k);
}
Task<OpResult> RaceClient::get(uint64_t key, std::span<std::byte> value_out) {
  const auto k = int_key(cfg_, key);
  std::vector<std::byte> v;
  OpResult r = co_await impl_->get(k, &v);
  // (A miss leaves v empty: memcpy's pointers must not be null even for 0 bytes.)
  if (const size_t n = std::min(v.size(), value_out.size())) std::memcpy(value_out.data(), v.data(), n);
  co_return r;
}
Task<OpResult> RaceClient::get_all(uint64_t key, std::vector<std::byte>* values_out) {
  const auto k = int_key(cfg_, key);
  std::vector<std::byte> v;
  OpResult r = co_await impl_->get(k, &v);
  if (values_out && r.status == Status::kFound) values_out->insert(values_out->end(), v.begin(), v.end());
  co_return r;
}
Task<void> RaceClient::refresh_directory() { return impl_->refresh(); }
uint32_t RaceClient::cached_depth() const { return impl_->gd; }

}  // namespace rdmahash
