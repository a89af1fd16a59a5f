// The self-validating record shared by the schemes (internal): linear probing's inline slots and
// heap records, and cuckoo's records, all use it.
//
//   [ctrl:8][key:8, only for 8-byte keys][value, zero-padded to 8][check:8, unless a 4-byte key
//   with no value (then the record is the ctrl word alone and cannot be torn)]
//   ctrl  = bit 63 OCC | bit 62 LOCK | bit 61 DEL | bits 32..60 version (29 bits, wraps) |
//           bits 0..31 the key (4-byte keys) or a 32-bit fingerprint of it (8-byte keys)
//   check = hash(salt, version, key, value words)
//
// A reader accepts a record only if ctrl is unlocked and `check` matches what it read: a READ of
// several words may be torn (RDMA and UCX give no order or atomicity beyond 8 bytes), so the
// checksum over the version, not the order of the reads, makes a torn copy detectable (Pilaf).
//
// Two check functions (CheckFn), chosen per scheme; every writer and reader of one table uses its
// scheme's (one Layout type per scheme):
//  * kChain (cuckoo, level, continuity — continuity's persistent images carry it): one splitmix64
//    finalizer (`mix64`) over version, key and salt, then one more per value word, chained.
//  * kMultiplyShift (linear probing's inline slots and heap records, since issue 12's fourth
//    pass): vector multiply-shift over the words x = (version, key, value words),
//        check = ((a_0 + salt + Σ_i a_{i+1}·x_i) mod 2^128) >> 64,
//    with fixed pseudo-random 128-bit constants a_i (kMsConstants, from splitmix64). For a_i
//    uniform in [2^128] this family is strongly universal for 64-bit words and 64-bit outputs
//    (Dietzfelbinger 1996; Thorup, "High Speed Hashing for Integers and Strings", 2015: vector
//    multiply-shift with 2w-bit arithmetic), so any two different word tuples get equal checks with
//    probability 2^-64 — whichever and however many words differ, however structured the
//    difference (unlike a plain fold of the words, where differences only in the words' high bits
//    collide far more often). A torn read is a tuple of version, key and value words that is not
//    the tuple its check word was computed from (each word comes from some write; the check word
//    from one of them), so it passes with probability 2^-64 per torn read — the same class as the
//    chain, whose 2^-64 rests on treating mix64 as a random function; here it is a theorem for
//    data chosen independently of the constants (not adversarial data: neither function is a MAC).
//    Why: the words' products are independent (no chain), so the check costs one 64x128-bit
//    multiply per word (two multiplies) with the latency of about one, instead of two dependent
//    mix64 (four multiplies in a row) for an 8-byte key and value — on every get's hit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>

#include "schemes/hash.h"

namespace rdmahash::record {

constexpr uint64_t kOcc = 1ULL << 63;
constexpr uint64_t kLock = 1ULL << 62;
constexpr uint64_t kDel = 1ULL << 61;
constexpr uint64_t kVersionMask = (1ULL << 29) - 1;

inline uint64_t load64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void store64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint64_t version_of(uint64_t ctrl) { return (ctrl >> 32) & kVersionMask; }
inline uint64_t make_ctrl(uint64_t version, uint32_t kbits) {
  return kOcc | ((version & kVersionMask) << 32) | kbits;
}

enum class CheckFn : uint8_t { kChain, kMultiplyShift };

// kMultiplyShift's constants: a_0 (the offset), a_1 (version), a_2 (key), a_3.. (value words, up
// to 4096 value bytes: linear's heap records). 128-bit, from a splitmix64 stream.
inline constexpr uint32_t kMsMaxValueWords = 512;
struct MsConstants {
  unsigned __int128 a[3 + kMsMaxValueWords];
};
constexpr MsConstants make_ms_constants() {
  MsConstants c{};
  uint64_t s = 0x6d756c7469736866ULL;  // "multishf"
  for (auto& a : c.a) {
    s += 0x9E3779B97F4A7C15ULL;
    const uint64_t hi = hash::mix64(s);
    s += 0x9E3779B97F4A7C15ULL;
    a = (static_cast<unsigned __int128>(hi) << 64) | hash::mix64(s);
  }
  return c;
}
inline constexpr MsConstants kMsConstants = make_ms_constants();

// The vector multiply-shift check (see the top of this file) of version, key and `words` value
// words at `value_padded`.
inline uint64_t check_multiply_shift(uint64_t salt, uint64_t version, uint64_t key, const std::byte* value_padded,
                                     uint32_t words) {
  using u128 = unsigned __int128;
  const auto& a = kMsConstants.a;
  u128 acc = a[0] + salt + static_cast<u128>(version) * a[1] + static_cast<u128>(key) * a[2];
  for (uint32_t i = 0; i < words; ++i) acc += static_cast<u128>(load64(value_padded + 8 * i)) * a[3 + i];
  return static_cast<uint64_t>(acc >> 64);
}

// Offsets of one record format and the operations on its bytes.
struct Layout {
  uint32_t key_bytes, value_bytes;
  uint32_t key_off, val_off, val_padded, check_off, bytes;
  bool has_check;
  CheckFn fn;
  uint64_t salt;  // keeps one scheme's checksums from validating another's bytes

  Layout(uint32_t key_bytes_, uint32_t value_bytes_, uint64_t salt_ = 0, CheckFn fn_ = CheckFn::kChain)
      : key_bytes(key_bytes_), value_bytes(value_bytes_), fn(fn_), salt(salt_) {
    key_off = 8;
    val_off = key_bytes == 8 ? 16 : 8;
    val_padded = (value_bytes + 7) / 8 * 8;
    has_check = key_bytes == 8 || value_bytes > 0;
    check_off = val_off + val_padded;
    bytes = check_off + (has_check ? 8 : 0);
    if (fn == CheckFn::kMultiplyShift && val_padded / 8 > kMsMaxValueWords)
      throw std::logic_error("record::Layout: multiply-shift check words cover at most 4096 value bytes");
  }

  uint64_t check(uint64_t version, uint64_t key, const std::byte* value_padded) const {
    if (fn == CheckFn::kMultiplyShift) return check_multiply_shift(salt, version, key, value_padded, val_padded / 8);
    uint64_t h = hash::mix64(version * 0x9E3779B97F4A7C15ULL ^ key ^ salt);
    for (uint32_t i = 0; i < val_padded; i += 8) h = hash::mix64(h ^ load64(value_padded + i));
    return h;
  }
  // The key of a published record.
  uint64_t key(const std::byte* rec) const {
    return key_bytes == 8 ? load64(rec + key_off) : (load64(rec) & 0xffffffffULL);
  }
  // The check word matches the version in ctrl and the key and value read with it.
  bool consistent(const std::byte* rec) const {
    return !has_check || load64(rec + check_off) == check(version_of(load64(rec)), key(rec), rec + val_off);
  }
  // Fills the bytes after ctrl (key word, padded value, check for `version`).
  void build(uint64_t key_, uint64_t version, std::span<const std::byte> value, std::byte* rec) const {
    if (key_bytes == 8) store64(rec + key_off, key_);
    std::memset(rec + val_off, 0, val_padded);
    if (!value.empty()) std::memcpy(rec + val_off, value.data(), value.size());
    if (has_check) store64(rec + check_off, check(version & kVersionMask, key_, rec + val_off));
  }
};

}  // namespace rdmahash::record
