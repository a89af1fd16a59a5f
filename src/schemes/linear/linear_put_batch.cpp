// Linear probing's multi-find-or-put (LinearClient::find_or_put_batch): the inserts of many keys,
// round by round, each round one batch with the next request(s) of every key in flight, scanned in
// a plain loop (no coroutine per key). The protocol is insert's (linear_table.cpp, linear.h
// "Publication protocol", "Speculative claim", "Multi-find-or-put"); this file only changes who
// waits: the batch, not a coroutine.
#include <cstring>

#include "schemes/batch_guard.h"
#include "schemes/linear/linear_internal.h"

namespace rdmahash {

// A key that leaves the rounds without holding a claim: restarted as find_or_put (insert), or, past
// M chunks, the lookup that insert ends with.
Task<void> LinearClient::put_batch_resume(uint64_t key, std::span<const std::byte> value, bool past_m, OpResult* out) {
  if (!past_m) {
    *out = co_await insert(key, value);
    co_return;
  }
  OpResult r;
  if ((co_await locate(key, r.chunks)).found) {
    r.status = Status::kFound;
    r.matches = 1;
  } else {
    r.status = Status::kFull;
  }
  *out = r;
}

bool LinearClient::find_or_put_batch(uint64_t count, uint32_t depth, const std::function<uint64_t(uint64_t)>& key_of,
                                     const std::function<void(uint64_t, uint64_t, std::span<std::byte>)>& value_of,
                                     const std::function<void(const Engine::Completion&, const OpResult&)>& done) {
  if (cfg_.format != SlotFormat::kInline || cfg_.quadratic() || slot_bytes_ == 8 || probe_.die_holding_lock) return false;
  check_writable();
  if (count == 0) return true;
  // Never more keys in flight than there are keys: each holds a buffer of two chunks (up to 2 × 65536
  // slots), sized up front for `depth` keys, and a caller's depth may be far above its count.
  depth = static_cast<uint32_t>(std::clamp<uint64_t>(depth, 1, count));
  if (!put_batch_) put_batch_ = std::make_unique<PutBatchState>();
  using S = PutBatchState;
  using Stage = S::Stage;
  S& b = *put_batch_;
  const BatchReentryGuard running(b.running, "LinearClient::find_or_put_batch");
  const InlineLayout l(cfg_);
  const uint64_t total = cfg_.total_slots();
  const uint32_t C = probe_.chunk;
  const uint64_t M = probe_.max_chunks;
  const size_t chunk_bytes = size_t{C} * slot_bytes_;
  const size_t stride = 2 * chunk_bytes + 2 * size_t{slot_bytes_};  // 2 chunks, record, value (< a slot)
  engine_.restart_clock();  // the first keys start now, not at the engine's last batch
  b.active.clear();
  b.active.reserve(depth);
  b.resume.clear();
  b.free_bufs.clear();
  for (uint32_t i = depth; i-- > 0;) b.free_bufs.push_back(i);
  if (b.bufs.size() < depth * stride) b.bufs.resize(depth * stride);
  // A chunk and the one after it land in the two halves of the key's double buffer.
  auto half_of = [&](const S::Key& k, uint32_t half) { return b.bufs.data() + k.buf * stride + half * chunk_bytes; };
  auto rec_of = [&](const S::Key& k) { return b.bufs.data() + k.buf * stride + 2 * chunk_bytes; };
  auto value_span = [&](const S::Key& k) {
    return std::span<std::byte>(b.bufs.data() + k.buf * stride + 2 * chunk_bytes + slot_bytes_, cfg_.value_bytes);
  };
  auto chunk_len = [&](uint64_t start) -> uint64_t { return start >= total ? 0 : std::min<uint64_t>(C, total - start); };
  const uint64_t claim = kOcc | kLock;  // | kbits: a locked version-0 claim, insert's
  auto latency = [&](const S::Key& k, std::chrono::steady_clock::time_point at) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(at - k.t0);
  };
  // A callback that throws must not strand the keys in flight: a claimed slot stays LOCKed until
  // its publish round, and another client's insert of that key would wait on it. So the first
  // exception of key_of, value_of or done is kept, no key starts after it, every key in flight
  // runs to its outcome (and is reported), and the exception is rethrown at the end.
  std::exception_ptr callback_error;
  auto report = [&](const Engine::Completion& c, const OpResult& r) {
    try {
      done(c, r);
    } catch (...) {
      if (!callback_error) callback_error = std::current_exception();
    }
  };
  auto finish = [&](S::Key& k, const OpResult& r, std::exception_ptr error) {
    b.free_bufs.push_back(k.buf);
    report(Engine::Completion{k.index, k.st, latency(k, engine_.batch_clock()), std::move(error)}, r);
  };
  auto answer = [&](S::Key& k, Status s) {
    OpResult r;
    r.status = s;
    r.chunks = k.chunks;
    r.matches = s == Status::kFound;
    finish(k, r, nullptr);
  };
  auto leave = [&](S::Key& k, bool past_m) { b.resume.push_back(S::Resume{k, past_m, OpResult{}}); };
  // Scans the key's chunk from slot `from` as insert does. Returns true if the key stays in the
  // rounds (a claim to post or the next chunk to read), false if it was answered or left them.
  auto scan_chunk = [&](S::Key& k, uint32_t from) -> bool {
    for (;;) {
      const std::byte* chunk = half_of(k, k.half);
      for (uint32_t j = from; j < k.n; ++j) {
        const std::byte* sl = chunk + size_t{j} * slot_bytes_;
        const uint64_t w = load64(sl);
        if (w == 0) {  // the first empty slot: claim it
          k.stage = Stage::kClaim;
          k.slot = k.start + j;
          k.j = j;
          return true;
        }
        if ((w & kDel) || static_cast<uint32_t>(w) != k.kbits) continue;
        // A slot that names the key (insert's is_mine with the slot's bytes).
        if (cfg_.key_bytes == 4) {
          if (!(w & kLock) || version_of(w) != 0) {
            answer(k, Status::kFound);
            return false;
          }
          leave(k, false);  // an unpublished claim of the key: insert waits for it (read_stable)
          return false;
        }
        if ((w & kLock) || !inline_consistent(cfg_, l, sl)) {
          leave(k, false);  // locked or torn: insert re-reads the slot (read_stable)
          return false;
        }
        if (load64(sl + l.key_off) == k.key) {
          answer(k, Status::kFound);
          return false;
        }
      }
      // Neither the key nor a free slot: the next chunk, within M of them and the table; already
      // read if this round read it too (insert's overlap), else in the next round.
      const uint64_t next = k.start + C;
      if (k.chunk + 1 < M && chunk_len(next) > 0) {
        ++k.chunk;
        k.start = next;
        if (k.n_next != 0) {
          k.n = k.n_next;
          k.n_next = 0;
          k.half ^= 1;
          ++k.chunks;
          from = 0;
          continue;
        }
        k.stage = Stage::kRead;
        return true;
      }
      leave(k, true);
      return false;
    }
  };

  // insert's overlap: chunk i+1 is posted before chunk i is scanned, so it travels with chunk i's
  // READ or with a claim CAS in chunk i, except beside the speculative claim (chunk 1 only once
  // chunk 0 turns out full). Into the other half of the double buffer; once per chunk.
  auto read_ahead = [&](S::Key& k) {
    k.ahead = false;
    if (k.n_next != 0 || (k.chunk == 0 && k.speculated) || k.chunk + 1 >= M) return;
    const uint64_t n = chunk_len(k.start + C);
    if (n == 0) return;
    k.n_next = static_cast<uint32_t>(n);
    k.ahead = true;
    Request& r = b.reqs.emplace_back();
    r.kind = ReqKind::kRead;
    r.addr = slot_addr(k.node, k.start + C);
    r.buf = half_of(k, k.half ^ 1);
    r.len = k.n_next * slot_bytes_;
    ++k.st.reads;
    k.st.bytes += r.len;
  };

  // A claim CAS of `slot` (insert's: empty -> a locked version-0 claim naming the key).
  auto post_claim = [&](S::Key& k, uint64_t slot) {
    Request& c = b.reqs.emplace_back();
    c.kind = ReqKind::kCas;
    c.addr = slot_addr(k.node, slot);
    c.compare = 0;
    c.swap = claim | k.kbits;
    c.result = &k.old;
    ++k.st.cas;
    k.st.bytes += 8;
  };

  uint64_t issued = 0;
  while ((issued < count && !callback_error) || !b.active.empty() || !b.resume.empty()) {
    // Keys that left the rounds run as coroutines, but only once no key of this batch holds a claim:
    // such a coroutine may wait for a lock, and this client's own locks are released only by these
    // rounds. So while any are waiting, a round carries only the publishes of claimed keys.
    bool holding = false;
    for (const S::Key& k : b.active) holding |= k.stage == Stage::kPublish;
    if (!b.resume.empty() && !holding) {
      const auto resumed = engine_.batch_clock();
      engine_.run_many(
          b.resume.size(), static_cast<uint32_t>(b.resume.size()),
          [&](uint64_t i) {
            S::Resume& x = b.resume[i];
            return put_batch_resume(x.k.key, value_span(x.k), x.past_m, &x.r);
          },
          [&](const Engine::Completion& c) {
            S::Resume& x = b.resume[c.index];
            OpStats st = x.k.st;
            st.add(c.stats);
            OpResult r = x.r;
            r.chunks += x.k.chunks;
            b.free_bufs.push_back(x.k.buf);
            report(Engine::Completion{x.k.index, st, latency(x.k, resumed) + c.latency, c.error}, r);
          });
      b.resume.clear();
      continue;
    }
    const bool publish_only = !b.resume.empty();
    const auto now = engine_.batch_clock();
    while (!publish_only && b.active.size() < depth && issued < count && !callback_error) {
      const uint64_t index = issued++;
      uint64_t key = 0;
      try {
        key = key_of(index);
      } catch (...) {
        callback_error = std::current_exception();
        break;
      }
      try {
        validate_key(key);
      } catch (const InvalidArgument&) {  // fails its own key, as find_or_put's task would
        report(Engine::Completion{index, OpStats{}, std::chrono::nanoseconds(0), std::current_exception()}, OpResult{});
        continue;
      }
      const LinearPlacement p = place_key(cfg_, key);
      S::Key& k = b.active.emplace_back();
      k = S::Key{};
      k.index = index;
      k.key = key;
      k.home = k.start = p.home;
      k.node = p.node;
      k.kbits = p.kbits;
      k.buf = b.free_bufs.back();
      b.free_bufs.pop_back();
      k.t0 = now;
      const std::span<std::byte> value = value_span(k);
      std::memset(value.data(), 0, value.size());
      try {
        value_of(index, key, value);
      } catch (...) {  // the key never started: nothing of it to finish
        callback_error = std::current_exception();
        b.free_bufs.push_back(k.buf);
        b.active.pop_back();
        break;
      }
      k.n = static_cast<uint32_t>(chunk_len(k.home));
      if (k.n == 0) {  // no slot from its home on (insert's first test)
        answer(k, Status::kFull);
        b.active.pop_back();
        continue;
      }
      k.stage = Stage::kRead;
      k.speculated = speculating();
    }
    if (b.active.empty()) continue;
    // This round's requests, each key's in order.
    b.reqs.clear();
    for (S::Key& k : b.active) {
      k.posted = !publish_only || k.stage == Stage::kPublish;
      if (!k.posted) continue;
      k.first_req = static_cast<uint32_t>(b.reqs.size());
      ++k.st.round_trips;
      switch (k.stage) {
        case Stage::kRead: {
          k.n = static_cast<uint32_t>(chunk_len(k.start));
          k.half = 0;
          Request& r = b.reqs.emplace_back();
          r.kind = ReqKind::kRead;
          r.addr = slot_addr(k.node, k.start);
          r.buf = half_of(k, 0);
          r.len = k.n * slot_bytes_;
          ++k.st.reads;
          k.st.bytes += r.len;
          k.n_next = 0;
          read_ahead(k);
          if (k.chunk == 0 && k.speculated) post_claim(k, k.home);  // the speculative claim
          break;
        }
        case Stage::kClaim: {
          post_claim(k, k.slot);
          read_ahead(k);  // the next chunk, if not read yet, beside the CAS (as insert has it posted)
          break;
        }
        case Stage::kPublish: {
          // insert's publish_claim: the payload, then the unlocked ctrl fenced after it.
          std::byte* rec = rec_of(k);
          std::memset(rec, 0, slot_bytes_);
          build_payload(cfg_, l, k.key, 1, value_span(k), rec);
          store64(rec, make_ctrl(1, k.kbits));
          const RemoteAddr a = slot_addr(k.node, k.slot);
          Request& w = b.reqs.emplace_back();
          w.kind = ReqKind::kWrite;
          w.addr = RemoteAddr{a.node, a.offset + 8};
          w.buf = rec + 8;
          w.len = slot_bytes_ - 8;
          Request& u = b.reqs.emplace_back();
          u.kind = ReqKind::kWrite;
          u.addr = a;
          u.buf = rec;
          u.len = 8;
          u.fence = true;
          k.st.writes += 2;
          k.st.bytes += slot_bytes_;
          break;
        }
      }
    }
    const std::string error = engine_.execute_batch(b.reqs);
    auto failed = [&](S::Key& k) { finish(k, OpResult{}, std::make_exception_ptr(FabricError(error))); };
    size_t kept = 0;
    for (size_t a = 0; a < b.active.size(); ++a) {
      S::Key& k = b.active[a];
      bool stays = true;
      if (k.posted) {
        const Request* rq = b.reqs.data() + k.first_req;
        switch (k.stage) {
          case Stage::kRead: {
            if (k.chunk == 0 && k.speculated) {  // [READ chunk 0, CAS home]
              const Request& c = rq[1];
              if (c.status != ReqStatus::kOk) { failed(k); stays = false; break; }
              if (k.old == 0) {  // won: the key was absent; chunk 0's READ is not needed
                ++k.chunks;
                note_claim(0);
                k.slot = k.home;
                k.stage = Stage::kPublish;
                break;
              }
            }
            // [READ chunk i, READ chunk i+1 if n_next]: a failed READ of chunk i fails the key, as
            // insert's awaited READ would; chunk i+1's is posted again if the scan needs it.
            if (rq[0].status != ReqStatus::kOk) { failed(k); stays = false; break; }
            if (k.ahead && rq[1].status != ReqStatus::kOk) k.n_next = 0;
            ++k.chunks;
            stays = scan_chunk(k, 0);
            break;
          }
          case Stage::kClaim: {  // [CAS, READ of the next chunk if k.ahead]
            if (rq[0].status != ReqStatus::kOk) { failed(k); stays = false; break; }
            if (k.ahead && rq[1].status != ReqStatus::kOk) k.n_next = 0;  // posted again if needed
            if (k.old == 0) {
              note_claim(k.slot - k.home);
              k.stage = Stage::kPublish;
              break;
            }
            // Lost: re-check the winner (insert's is_mine without the slot's bytes).
            const uint64_t w = k.old;
            if (!(w & kDel) && static_cast<uint32_t>(w) == k.kbits) {
              if (cfg_.key_bytes == 4 && (!(w & kLock) || version_of(w) != 0)) {
                answer(k, Status::kFound);
              } else {
                leave(k, false);  // its key must be read: insert's coroutine does (read_stable)
              }
              stays = false;
              break;
            }
            stays = scan_chunk(k, k.j + 1);
            break;
          }
          case Stage::kPublish: {
            if (rq[0].status != ReqStatus::kOk || rq[1].status != ReqStatus::kOk) { failed(k); stays = false; break; }
            answer(k, Status::kInserted);
            stays = false;
            break;
          }
        }
      }
      if (!stays) continue;
      if (kept != a) b.active[kept] = k;
      ++kept;
    }
    b.active.resize(kept);
  }
  if (callback_error) std::rethrow_exception(callback_error);
  return true;
}

}  // namespace rdmahash
