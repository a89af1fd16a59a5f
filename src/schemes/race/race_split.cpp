// RACE hashing's splits (resizing), run by any client: freezing a subtable, copying it into two
// children, doubling the directory, publishing and retiring. The client's read/write path is in
// race_client.cpp; declarations shared by them in race_internal.h. The split protocol and its
// safety argument: include/rdmahash/race.h ("Split").
// RaceClient::Impl's members below keep the indentation they had in the class body (now in
// race_internal.h), so the mutation harness's `find` strings (tests/mutants/race.json) still match.
#include <csignal>
#include "schemes/race/race_internal.h"

namespace rdmahash {

  // --- splits, run by anyone (race.h, "Split") -------------------------------------------------

  // A writer met frozen slots in `sub`: S is being split (or was: retired). Help the split of
  // `sub` if it is the one installed (splits run one at a time; run_split first polls the split
  // word up to help_patience times), then re-read the directory: either the split was finished
  // here, or it was released (finished) while we polled, or it had been finished already.
  Task<void> RaceClient::Impl::help_frozen(const Ctx& c, RemoteAddr sub) {
    uint64_t w = 0;
    co_await engine.read(split_at(), &w, 8);
    if (w != 0) co_await run_split(w, &sub, false);
    co_await refresh();
    // S's split is finished now (we ran it, or it had been released, which follows publication),
    // so the fresh directory no longer names S. If it does, S was frozen with no split installed
    // for it: a broken invariant (race.h), not something to wait for.
    if (same_addr(entry_addr(entry_for(c.p.h)), sub))
      throw FabricError("race: a subtable the directory names holds frozen slots, but no installed split is of it");
  }

  // Runs the split described by split word `w` to its end (race.h, "Split", steps 4-9). Any
  // number of clients may run it at once, and any may stop at any request: every change is a CAS
  // from a value that never comes back, or a WRITE of a constant into a retired subtable.
  // `only`: do nothing unless the split is of that subtable. Returns how it ended, as far as this
  // runner can tell: kPublished (dir[s] named S or A: the split is real), kVoid (the descriptor
  // is void — its subtable had been split before it was installed — and our CAS released the
  // word, so the test ran while it was installed; nobody touched A or B), or kUnknown (another
  // operation of ours ran it; the split is not of `only`; or the word was released before our
  // test: dir[s] naming neither S nor A then also fits a finished split whose child A was split
  // since; or another client's split was released while we polled it, help_patience). Only the installer
  // needs to know (its statistics and its spare children): see split_published.
  enum class End { kPublished, kVoid, kUnknown };
  Task<RaceClient::Impl::End> RaceClient::Impl::run_split(uint64_t w, const RemoteAddr* only, bool mine, bool* load_recorded) {
    // Another operation of this client already runs this split: ride along (one 8-byte READ per
    // batch) until the word changes, instead of repeating its work. Waiting for our own operation
    // is not waiting for another client: it progresses at every batch we post.
    // (If that operation ends without finishing it, e.g. a failed request, we run it ourselves.)
    while (std::find(running.begin(), running.end(), w) != running.end()) {
      uint64_t cur = 0;
      co_await engine.read(split_at(), &cur, 8);
      if (cur != w) co_return End::kUnknown;
    }
    struct Running {  // removes w from `running` however this coroutine ends
      std::vector<uint64_t>& v;
      uint64_t w;
      ~Running() { v.erase(std::find(v.begin(), v.end(), w)); }
    };
    running.push_back(w);
    Running guard{running, w};
    std::array<uint64_t, 8> d{};
    co_await engine.read(entry_addr(w), d.data(), 64);
    if (d[0] != kDescMagic || d[7] != block_check(reinterpret_cast<const std::byte*>(d.data()), 7))
      throw FabricError("race: the split word names a block that is not a valid split descriptor");
    Desc x{d[1], static_cast<uint32_t>(d[2]), entry_addr(d[3]), entry_addr(d[4]), entry_addr(d[5])};
    if (only && !same_addr(*only, x.sub)) co_return End::kUnknown;
    // Another client's split: give its runners cfg.help_patience round trips to release it before
    // repeating their work (RaceConfig::help_patience). Our own installed split (mine, or
    // installed by this client and met again) is run at once.
    if (!mine && (w >> 48) != uint64_t{id} + 1) {
      for (uint32_t i = 0; i < cfg.help_patience; ++i) {
        uint64_t cur = 0;
        co_await engine.read(split_at(), &cur, 8);
        if (cur != w) {
          ++st.waited;
          co_return End::kUnknown;
        }
      }
    }
    const uint64_t eS = make_entry(x.sub, x.L), eA = make_entry(x.a, x.L + 1);
    uint64_t ds = 0;
    co_await engine.read(dir_at(x.s), &ds, 8);
    die_point();
    // While w is installed dir[s] changes only by this split's publication (S@L → A@L+1), so
    // this test gives the same answer to every helper that reads dir[s] while w is installed.
    // After the release it does not: a finished split's child A may have been split since.
    if (ds != eS && ds != eA) co_return co_await cas(split_at(), w, 0) ? End::kVoid : End::kUnknown;
    if (!mine && (w >> 48) != uint64_t{id} + 1) ++st.helped;
    if (ds == eS) {  // not published at s yet: freeze and copy (a publisher has finished both)
      std::vector<uint64_t> val;
      co_await freeze(x.sub, val);
      if (mine) {
        record_split_load(val);
        if (load_recorded) *load_recorded = true;
      }
      co_await copy(x, val);
    }
    const uint64_t depth = co_await double_dir(x.L);
    co_await publish(x, depth);
    die_point();
    // Retire S: its headers now match no key (stale caches re-read the directory at once).
    {
      std::vector<Pending> p;
      for (uint64_t b = 0; b < 3ULL * cfg.groups_per_subtable; ++b) {
        p.push_back(engine.write(RemoteAddr{x.sub.node, x.sub.offset + b * 64}, &kRetiredHeader, 8));
        if (p.size() == kBatch) co_await post_all(p);
      }
      co_await post_all(p);
    }
    die_point();
    if (co_await cas(split_at(), w, 0)) {
      uint64_t ignored = co_await engine.faa(RemoteAddr{0, offsetof(RaceNodeHeader, subtables)}, 2);
      (void)ignored;
    }
    die_point();
    co_return End::kPublished;
  }

  // The installer's verdict on its split w once run_split returned (w is no longer installed then,
  // and never again: descriptor blocks are not reused). kUnknown is settled by one 8-byte READ of
  // slot 0 of A: a void split's A is never written (no runner passes the VOID test, nobody else
  // knows A), while a published one was copied in full — every slot CASed away from RESERVED —
  // before its publication, and no later write produces RESERVED again. So RESERVED there ⟺ void.
  // How full the subtable a split of this client divided was (bench: split_load_factor).
  void RaceClient::Impl::record_split_load(const std::vector<uint64_t>& val) {
    const auto used = std::count_if(val.begin(), val.end(), [](uint64_t v) { return v != 0; });
    st.split_load.push_back(static_cast<double>(used) / static_cast<double>(val.size()));
  }

  Task<bool> RaceClient::Impl::split_published(End end, RemoteAddr a) {
    if (end != End::kUnknown) co_return end == End::kPublished;
    uint64_t v = 0;
    co_await engine.read(RemoteAddr{a.node, a.offset + slot_at(0)}, &v, 8);
    co_return v != kReserved;
  }

  // Step 4: CAS every slot of S v → v|FROZEN until all are frozen. S is retired after the split
  // and never unfrozen, so a frozen slot holds its value for good: `val` (FROZEN cleared) is the
  // same for every helper.
  Task<void> RaceClient::Impl::freeze(RemoteAddr sub, std::vector<uint64_t>& val) {
    std::vector<std::byte> img(cfg.subtable_bytes());
    co_await engine.read(sub, img.data(), static_cast<uint32_t>(img.size()));
    die_point();
    const uint64_t slots = 3ULL * cfg.groups_per_subtable * kRaceSlots;
    val.assign(slots, 0);
    std::vector<uint64_t> todo;
    for (uint64_t i = 0; i < slots; ++i) {
      const uint64_t v = load64(img.data() + slot_at(i));
      val[i] = v & ~kFrozen;
      if (!(v & kFrozen)) todo.push_back(i);
    }
    while (!todo.empty()) {
      std::vector<uint64_t> again;
      for (size_t from = 0; from < todo.size(); from += kBatch) {
        const size_t to = std::min(todo.size(), from + kBatch);
        std::vector<Pending> p;
        for (size_t j = from; j < to; ++j)
          p.push_back(engine.cas(RemoteAddr{sub.node, sub.offset + slot_at(todo[j])}, val[todo[j]], val[todo[j]] | kFrozen));
        for (size_t j = from; j < to; ++j) {
          Pending& pj = p[j - from];
          const uint64_t old = co_await pj;
          if (old == val[todo[j]]) continue;
          val[todo[j]] = old & ~kFrozen;
          if (!(old & kFrozen)) again.push_back(todo[j]);  // a writer got there first: freeze what it wrote
        }
      }
      todo.swap(again);
      die_point();
    }
  }

  // Step 5: slot i of S goes to slot i of A or B by bit L of its key's hash; the other child's
  // slot i becomes empty. Each is a CAS from RESERVED: done once, by whichever helper is first.
  Task<void> RaceClient::Impl::copy(const Desc& x, const std::vector<uint64_t>& val) {
    std::vector<std::byte> ia(cfg.subtable_bytes()), ib(cfg.subtable_bytes());
    {
      auto ra = engine.read(x.a, ia.data(), static_cast<uint32_t>(ia.size()));
      auto rb = engine.read(x.b, ib.data(), static_cast<uint32_t>(ib.size()));
      co_await ra;
      co_await rb;
    }
    const uint64_t slots = val.size();
    for (uint64_t from = 0; from < slots; from += kBatch) {
      const uint64_t to = std::min(slots, from + kBatch);
      std::vector<std::vector<std::byte>> bufs(to - from);
      std::vector<Pending> p;
      auto open = [&](uint64_t i) { return load64(ia.data() + slot_at(i)) == kReserved || load64(ib.data() + slot_at(i)) == kReserved; };
      for (uint64_t i = from; i < to; ++i) {
        if (val[i] == 0 || !open(i)) continue;
        bufs[i - from].resize(slot_units(val[i]) * 64);
        p.push_back(engine.read(slot_block(val[i]), bufs[i - from].data(), slot_units(val[i]) * 64));
      }
      co_await post_all(p);
      die_point();
      for (uint64_t i = from; i < to; ++i) {
        if (!open(i)) continue;
        bool to_b = false;
        if (val[i] != 0) {
          auto blk = parse_block(bufs[i - from].data(), static_cast<uint32_t>(bufs[i - from].size()));
          if (!blk) throw FabricError("race: split found a KV block that fails its checksum");
          to_b = (hash_bytes(blk->key, cfg.hash_seed) >> x.L) & 1;
        }
        if (load64(ia.data() + slot_at(i)) == kReserved)
          p.push_back(engine.cas(RemoteAddr{x.a.node, x.a.offset + slot_at(i)}, kReserved, to_b ? 0 : val[i]));
        if (load64(ib.data() + slot_at(i)) == kReserved)
          p.push_back(engine.cas(RemoteAddr{x.b.node, x.b.offset + slot_at(i)}, kReserved, to_b ? val[i] : 0));
      }
      co_await post_all(p);
      die_point();
    }
  }

  // Step 6: if L == GD, double: upper half entries CAS 0 → their lower twin, then GD CAS L → L+1
  // (only after every upper entry is set, so no reader sees a zero entry below 2^GD). Returns GD.
  Task<uint64_t> RaceClient::Impl::double_dir(uint32_t L) {
    uint64_t depth = 0;
    co_await engine.read(RemoteAddr{0, offsetof(RaceNodeHeader, global_depth)}, &depth, 8);
    if (depth != L) co_return depth;
    std::vector<uint64_t> d(size_t{1} << L);
    co_await engine.read(dir_at(0), d.data(), static_cast<uint32_t>(8 * d.size()));
    std::vector<Pending> p;
    for (size_t j = 0; j < d.size(); ++j) {
      p.push_back(engine.cas(dir_at(d.size() + j), 0, d[j]));
      if (p.size() == kBatch) co_await post_all(p);
    }
    co_await post_all(p);
    die_point();
    const uint64_t old = co_await engine.cas(RemoteAddr{0, offsetof(RaceNodeHeader, global_depth)}, L, L + 1);
    die_point();
    co_return old == L ? L + 1 : old;
  }

  // Step 7: every entry ≡ s (mod 2^L) below 2^depth: CAS S@L → A or B (by bit L) at L+1. S is
  // never named again once retired, so a late helper's CAS fails.
  Task<void> RaceClient::Impl::publish(const Desc& x, uint64_t depth) {
    const uint64_t eS = make_entry(x.sub, x.L), eA = make_entry(x.a, x.L + 1), eB = make_entry(x.b, x.L + 1);
    std::vector<Pending> p;
    for (uint64_t i = x.s; i < (uint64_t{1} << depth); i += uint64_t{1} << x.L) {
      p.push_back(engine.cas(dir_at(i), eS, ((i >> x.L) & 1) ? eB : eA));
      if (p.size() == kBatch) co_await post_all(p);
    }
    co_await post_all(p);
  }

  // --- split (race.h, "Split", steps 1-3; then run_split) ----------------------------------------

  // kInserted: the subtable was split (by us or someone else); retry the insert. kFull: no room.
  Task<Status> RaceClient::Impl::split(Ctx& c, RemoteAddr sub) {
    if (preparing_split) {
      // Another operation of this client is preparing a split (likely of this very subtable):
      // ride along in its batch, then retry the insert (it re-reads its buckets).
      uint64_t scratch = 0;
      co_await engine.read(split_at(), &scratch, 8);
      co_return Status::kInserted;
    }
    co_await refresh();
    const uint64_t e = entry_for(c.p.h);
    if (!same_addr(entry_addr(e), sub)) co_return Status::kInserted;  // already split by someone
    const uint32_t L = entry_depth(e);
    if (L >= cfg.max_depth) co_return Status::kFull;
    const uint64_t s = c.p.h & mask(L), s2 = s | (uint64_t{1} << L);
    // 1. One split runs at a time: if one is installed, help it to its end (after run_split's
    //    patience) or see it released, then retry.
    uint64_t cur = 0;
    co_await engine.read(split_at(), &cur, 8);
    if (cur != 0) {
      co_await run_split(cur, nullptr, false);
      co_await refresh();
      co_return Status::kInserted;
    }
    // 2. The children: A (suffix s) and B (s2), every slot RESERVED, and the descriptor block.
    // One operation of this client at a time from here to the install (preparing_split; cleared
    // on every way out, exceptions included).
    if (preparing_split) co_return Status::kInserted;  // another one got here during our READs: retry
    preparing_split = true;
    struct Unset {
      bool& flag;
      bool armed = true;
      ~Unset() {
        if (armed) flag = false;
      }
    } unset{preparing_split};
    // Taken out of `spare` before any co_await: this client's other operations may split too.
    std::array<std::optional<RemoteAddr>, 2> kids{std::exchange(spare[0], std::nullopt), std::exchange(spare[1], std::nullopt)};
    auto keep = [&] {  // unused (nothing published them): for this client's next split
      for (int k = 0; k < 2; ++k)
        if (kids[k] && !spare[k]) spare[k] = kids[k];
    };
    for (int k = 0; k < 2; ++k)
      for (uint32_t t = 0; t < cfg.memory_nodes && !kids[k]; ++t) {
        const uint32_t node = static_cast<uint32_t>(((k ? s2 : s) + t) % cfg.memory_nodes);
        if (const uint64_t got = co_await rpc_alloc(node, cfg.subtable_bytes())) kids[k] = RemoteAddr{node, got};
      }
    RemoteAddr blk{};
    bool have_blk = false;  // (no co_await inside && : GCC 12 miscompiles it)
    if (kids[0] && kids[1]) have_blk = co_await alloc_block(64, blk);
    if (!have_blk) {
      keep();
      co_return Status::kFull;
    }
    die_point();
    const RemoteAddr a = *kids[0], b = *kids[1];
    std::vector<std::byte> ia(cfg.subtable_bytes()), ib(cfg.subtable_bytes());
    for (uint64_t i = 0; i < 3ULL * cfg.groups_per_subtable; ++i) {
      store64(ia.data() + 64 * i, make_header(L + 1, s));
      store64(ib.data() + 64 * i, make_header(L + 1, s2));
      for (uint32_t j = 0; j < kRaceSlots; ++j) {
        store64(ia.data() + 64 * i + 8 + 8 * j, kReserved);
        store64(ib.data() + 64 * i + 8 + 8 * j, kReserved);
      }
    }
    std::array<uint64_t, 8> d{kDescMagic, s, L, make_entry(sub, L), make_entry(a, L + 1), make_entry(b, L + 1), id, 0};
    d[7] = block_check(reinterpret_cast<const std::byte*>(d.data()), 7);
    {
      auto wa = engine.write(a, ia.data(), static_cast<uint32_t>(ia.size()));
      auto wb = engine.write(b, ib.data(), static_cast<uint32_t>(ib.size()));
      auto wd = engine.write(blk, d.data(), 64);
      co_await wa;
      co_await wb;
      co_await wd;
    }
    die_point();
    // 3. Install the descriptor: from here on anyone can finish the split. Lost: help the winner.
    const uint64_t w = split_word(id, blk);
    const uint64_t old = co_await engine.cas(split_at(), 0, w);
    preparing_split = false;  // installed (anyone may help it now) or lost: nothing allocated is in flight
    unset.armed = false;      // (another operation may set the flag again before this one returns)
    if (old != 0) {
      keep();  // never published
      co_await run_split(old, nullptr, false);
      co_await refresh();
      co_return Status::kInserted;
    }
    die_point();
    // Counted once, by its installer, iff published; a void split's A and B (never written by
    // anyone) stay this client's spares. Taking a published split for void would hand out live
    // subtables for overwriting (test RaceFault.InstallerStalledPastItsPublishedSplit...).
    bool load_recorded = false;
    const End end = co_await run_split(w, nullptr, true, &load_recorded);
    if (co_await split_published(end, a)) {
      ++st.splits;
      if (!load_recorded) {
        // A helper froze S before this client's run got there. S stays frozen for good (only its
        // headers are retired), so freeze() is one READ of the values the split divided.
        std::vector<uint64_t> val;
        co_await freeze(sub, val);
        record_split_load(val);
      }
    } else {
      keep();
    }
    co_await refresh();
    co_return Status::kInserted;
  }

}  // namespace rdmahash
