// Linear probing's client path for out-of-band records (kHeap, kHeap4): the heap scan, record
// allocation and the heap insert/update/erase. The protocol is documented in
// include/rdmahash/linear.h; the inline/set data path is in linear_table.cpp.
#include "schemes/linear/linear_internal.h"

namespace rdmahash {

// --- out-of-band records (kHeap, kHeap4); the protocol is documented in linear.h ---------------

void LinearClient::check_writable() const {
  if (cfg_.format == SlotFormat::kHeap4)
    throw InvalidArgument("heap4 tables are bulk-loaded: find_or_put, put, update and erase are not supported");
}

RemoteAddr LinearClient::record_addr(uint32_t node, uint64_t index) const {
  return RemoteAddr{node, cfg_.heap_offset() + kHeapHeaderBytes + index * record_bytes_};
}

bool LinearClient::record_matches(const std::byte* rec, uint64_t key, const LinearPlacement& p) const {
  const uint64_t ctrl = load64(rec);
  if (!(ctrl & kOcc) || (ctrl & (kLock | kDel)) || static_cast<uint32_t>(ctrl) != p.kbits) return false;
  const InlineLayout l(cfg_);
  if (cfg_.key_bytes == 8 && load64(rec + l.key_off) != key) return false;
  return inline_consistent(cfg_, l, rec);
}

void LinearClient::build_record(uint64_t key, std::span<const std::byte> value, std::byte* rec) const {
  const InlineLayout l(cfg_);
  build_payload(cfg_, l, key, 1, value, rec);
  store64(rec, make_ctrl(1, linear_place(cfg_, key).kbits));
}

// Algorithm 2 (PROCESS_OUT_OF_BAND): the record READs of window i share a batch with the READ of
// window i+1; a get returns at the first verified match, otherwise the scan ends once an empty slot
// (kHeap4: a bucket with a free way) was seen AND the records it asked for have been checked.
Task<LinearClient::Located> LinearClient::heap_scan(uint64_t key, const LinearPlacement& p, bool all,
                                                    std::span<std::byte> value_out,
                                                    std::vector<std::byte>* values_out, OpResult& r) {
  const uint64_t total = cfg_.total_slots();
  const bool four = cfg_.format == SlotFormat::kHeap4;
  const InlineLayout l(cfg_);
  struct Want {
    uint64_t slot, word, index;
  };
  Scratch slot_buf(0);
  std::vector<std::byte> big, recs;
  std::vector<Want> wants;
  std::vector<Pending> rec_reads;
  std::optional<Pending> slot_read;
  uint64_t s = p.home, n = 0, run_start = p.home;
  std::byte* data = nullptr;
  auto post_window = [&]() {
    n = std::min<uint64_t>(read_slots(p.node, s), total - s);
    data = slot_buf.data();
    if (n * 8 > slot_buf.size()) {
      big.resize(n * 8);
      data = big.data();
    }
    return engine_.read(slot_addr(p.node, s), data, static_cast<uint32_t>(n * 8));
  };
  bool ended = s >= total;
  bool window_posted = !ended;  // the READ of the window at `s` is posted (and unscanned)
  if (!ended) slot_read.emplace(post_window());
  for (;;) {
    if (slot_read) {
      co_await std::move(*slot_read);
      slot_read.reset();
      ++r.chunks;
    }
    // The previous window's records (posted in the batch that just completed).
    for (size_t i = 0; i < rec_reads.size(); ++i) {
      co_await std::move(rec_reads[i]);
      const std::byte* rec = recs.data() + i * record_bytes_;
      if (!record_matches(rec, key, p)) continue;  // fingerprint collision
      ++r.matches;
      if (values_out) values_out->insert(values_out->end(), rec + l.val_off, rec + l.val_off + cfg_.value_bytes);
      if (!all) {
        if (!value_out.empty())
          std::memcpy(value_out.data(), rec + l.val_off, std::min<size_t>(value_out.size(), cfg_.value_bytes));
        co_return Located{true, wants[i].slot, wants[i].word};
      }
    }
    rec_reads.clear();
    wants.clear();
    if (ended) break;
    if (!window_posted) {  // a get's candidate records all failed verification: read on
      slot_read.emplace(post_window());
      window_posted = true;
      continue;
    }
    if (!four) observe_clusters(p.node, s, data, n, run_start);
    for (uint64_t j = 0; j < n && !ended; ++j) {
      const uint64_t w = load64(data + j * 8);
      if (w == 0) {
        ended = true;
      } else if (!four) {
        if (heap_live(w) && heap_fp(w) == p.fp16) wants.push_back(Want{s + j, w, heap_index(w)});
      } else {
        for (uint32_t way = 0; way < 4; ++way)
          if (way_fp(w, way) == p.fp8) wants.push_back(Want{s + j, w, bucket_group(w) * 4 + way});
        ended = bucket_has_free_way(w);
      }
    }
    s += n;
    if (s >= total) ended = true;  // ran off the tail: nothing further can hold the key
    recs.resize(wants.size() * record_bytes_);
    for (size_t i = 0; i < wants.size(); ++i)
      rec_reads.push_back(engine_.read(record_addr(p.node, wants[i].index), recs.data() + i * record_bytes_,
                                       record_bytes_));
    // Overlap (Algorithm 2): the next window shares the batch of these record READs — for a get
    // only if no fingerprint matched (a match almost always ends a get: prefetching would waste a
    // READ per such get, while a failed match costs one extra round trip, rarely).
    window_posted = !ended && (all || wants.empty());
    if (window_posted) slot_read.emplace(post_window());
    if (ended && rec_reads.empty()) break;
  }
  co_return Located{};
}

std::optional<uint64_t> LinearClient::pop_spare(uint32_t node) {
  auto& v = spare_[node];
  if (v.empty()) return std::nullopt;
  const uint64_t i = v.back();
  v.pop_back();
  return i;
}

Task<std::optional<uint64_t>> LinearClient::take_record(uint32_t node) {
  if (auto i = pop_spare(node)) co_return i;
  const uint64_t first =
      co_await engine_.faa(RemoteAddr{node, cfg_.heap_offset() + offsetof(HeapHeader, next)}, kHeapBlock);
  const uint64_t cap = cfg_.heap_capacity();
  if (first >= cap) co_return std::nullopt;  // exhausted (the counter may overshoot; harmless)
  const uint64_t last = std::min<uint64_t>(first + kHeapBlock, cap);
  for (uint64_t i = last; i-- > first + 1;) spare_[node].push_back(i);
  co_return first;
}

Task<bool> LinearClient::heap_is_mine(uint64_t w, uint64_t key, const LinearPlacement& p) {
  if (!heap_live(w) || heap_fp(w) != p.fp16) co_return false;
  std::vector<std::byte> rec(record_bytes_);
  co_await engine_.read(record_addr(p.node, heap_index(w)), rec.data(), record_bytes_);
  co_return record_matches(rec.data(), key, p);
}

Task<OpResult> LinearClient::heap_insert(uint64_t key, std::span<const std::byte> value) {
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  const uint64_t total = cfg_.total_slots();
  const uint32_t C = probe_.chunk;
  const uint32_t M = probe_.max_chunks;
  const size_t chunk_bytes = static_cast<size_t>(C) * 8;
  Scratch bufs(2 * chunk_bytes);
  std::vector<std::byte> rec(record_bytes_);
  build_record(key, value, rec.data());
  auto chunk_len = [&](uint32_t i) -> uint64_t {
    const uint64_t start = p.home + static_cast<uint64_t>(i) * C;
    return start >= total ? 0 : std::min<uint64_t>(C, total - start);
  };
  auto post = [&](uint32_t i) {
    return engine_.read(slot_addr(p.node, p.home + static_cast<uint64_t>(i) * C), bufs.data() + (i % 2) * chunk_bytes,
                        static_cast<uint32_t>(chunk_len(i) * 8));
  };
  // A speculative claim publishes the record with its CAS, so it needs a record now: take one up
  // front if none is spare (an FAA once per kHeapBlock inserts; none left: insert as seed 001).
  bool speculate = speculating();
  std::optional<uint64_t> index = pop_spare(p.node);
  bool exhausted = false;  // this operation's FAA found the heap full: no second one at the free slot
  if (speculate && !index && chunk_len(0) > 0) {
    index = co_await take_record(p.node);
    speculate = index.has_value();
    exhausted = !speculate;
  }
  auto finish = [&](Status st) {  // the record was not published: keep it private for later
    if (index) give_back(p.node, *index);
    r.status = st;
    r.matches = st == Status::kFound ? 1 : 0;
    return r;
  };
  // The private record, written speculatively in the first batch (harmless: no slot points to it).
  std::optional<Pending> write;
  auto post_write = [&] { write.emplace(engine_.write(record_addr(p.node, *index), rec.data(), record_bytes_)); };
  if (index) post_write();
  // The CAS that makes `slot` point to the record is fenced after the record's WRITE (linear.h,
  // "publication order"), so the two may share a batch.
  auto publish_cas = [&](uint64_t slot) { return engine_.cas_fenced(slot_addr(p.node, slot), 0, heap_word(p.fp16, *index)); };
  if (chunk_len(0) == 0) co_return finish(Status::kFull);

  std::optional<Pending> cur;
  if (speculate) {
    // Speculative claim (linear.h): WRITE, home CAS (fenced after it), chunk 0's READ, one batch.
    Pending claim = publish_cas(p.home);
    cur.emplace(post(0));
    const uint64_t old = co_await std::move(claim);
    co_await std::move(*write);
    write.reset();
    if (old == 0) {
      ++r.chunks;
      note_claim(0);
      r.status = Status::kInserted;
      co_return r;
    }
  } else {
    cur.emplace(post(0));
  }
  for (uint32_t i = 0; i < M; ++i) {
    const uint64_t n = chunk_len(i);
    const bool more = i + 1 < M && chunk_len(i + 1) > 0;
    // As in insert(): after a lost speculative claim chunk 1 is READ only if chunk 0 is full.
    const bool overlap = !(speculate && i == 0);
    std::optional<Pending> next;
    if (overlap && more) next.emplace(post(i + 1));
    co_await std::move(*cur);
    cur.reset();
    ++r.chunks;
    const std::byte* chunk = bufs.data() + (i % 2) * chunk_bytes;
    const uint64_t start = p.home + static_cast<uint64_t>(i) * C;
    for (uint64_t j = 0; j < n; ++j) {
      const uint64_t slot = start + j;
      const uint64_t w = load64(chunk + j * 8);
      if (w != 0) {
        if (co_await heap_is_mine(w, key, p)) co_return finish(Status::kFound);
        continue;
      }
      if (!index) {
        if (!exhausted) index = co_await take_record(p.node);
        if (!index) co_return finish(Status::kFull);
        post_write();  // shares the CAS's batch
      } else if (write) {
        // Posted in an earlier batch, so complete: awaiting costs no round trip, and a failed
        // WRITE stops here, before any slot can point to its record.
        co_await std::move(*write);
        write.reset();
      }
      Pending claim = publish_cas(slot);
      const uint64_t old = co_await std::move(claim);
      if (write) {
        co_await std::move(*write);
        write.reset();
      }
      if (old == 0) {
        note_claim(slot - p.home);
        r.status = Status::kInserted;  // the record is published: no longer ours to reuse
        co_return r;
      }
      // Someone else claimed the slot first: re-check the winner (seed 001, line 15).
      if (co_await heap_is_mine(old, key, p)) co_return finish(Status::kFound);
    }
    if (!overlap && more) next.emplace(post(i + 1));
    if (!next) break;
    cur.emplace(std::move(*next));
  }
  // As in insert(): a key past M chunks is present, not "full".
  OpResult scan;
  const bool present = (co_await heap_scan(key, p, false, {}, nullptr, scan)).found;
  r.chunks += scan.chunks;
  co_return finish(present ? Status::kFound : Status::kFull);
}

Task<OpResult> LinearClient::heap_update(uint64_t key, std::span<const std::byte> value) {
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  std::vector<std::byte> rec(record_bytes_);
  build_record(key, value, rec.data());
  std::optional<uint64_t> index = pop_spare(p.node);
  std::optional<Pending> write;  // shares a batch with the scan's first READ
  if (index) write.emplace(engine_.write(record_addr(p.node, *index), rec.data(), record_bytes_));
  for (;;) {
    const Located loc = co_await heap_scan(key, p, false, {}, nullptr, r);
    r.matches = 0;
    if (!loc.found) {
      if (index) give_back(p.node, *index);
      r.status = Status::kNotFound;
      co_return r;
    }
    if (!index) {
      index = co_await take_record(p.node);
      if (!index) { r.status = Status::kFull; co_return r; }
      write.emplace(engine_.write(record_addr(p.node, *index), rec.data(), record_bytes_));  // the CAS's batch
    } else if (write) {
      co_await std::move(*write);  // an earlier batch's: complete; a failed WRITE stops here
      write.reset();
    }
    Pending swap = engine_.cas_fenced(slot_addr(p.node, loc.slot), loc.ctrl, heap_word(p.fp16, *index));
    const uint64_t old = co_await std::move(swap);
    if (write) {
      co_await std::move(*write);
      write.reset();
    }
    if (old == loc.ctrl) {
      r.status = Status::kUpdated;
      r.matches = 1;
      co_return r;
    }
    // Raced with another update or an erase: the record is still private; look again.
  }
}

Task<OpResult> LinearClient::heap_erase(uint64_t key) {
  OpResult r;
  const LinearPlacement p = linear_place(cfg_, key);
  for (;;) {
    const Located loc = co_await heap_scan(key, p, false, {}, nullptr, r);
    r.matches = 0;
    if (!loc.found) { r.status = Status::kNotFound; co_return r; }
    if (co_await engine_.cas(slot_addr(p.node, loc.slot), loc.ctrl, loc.ctrl | kHDel) == loc.ctrl) {
      r.status = Status::kErased;
      r.matches = 1;
      co_return r;
    }
  }
}

}  // namespace rdmahash
