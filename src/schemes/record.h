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
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "common/hash.h"

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

// Offsets of one record format and the operations on its bytes.
struct Layout {
  uint32_t key_bytes, value_bytes;
  uint32_t key_off, val_off, val_padded, check_off, bytes;
  bool has_check;
  uint64_t salt;  // keeps one scheme's checksums from validating another's bytes

  Layout(uint32_t key_bytes_, uint32_t value_bytes_, uint64_t salt_ = 0)
      : key_bytes(key_bytes_), value_bytes(value_bytes_), salt(salt_) {
    key_off = 8;
    val_off = key_bytes == 8 ? 16 : 8;
    val_padded = (value_bytes + 7) / 8 * 8;
    has_check = key_bytes == 8 || value_bytes > 0;
    check_off = val_off + val_padded;
    bytes = check_off + (has_check ? 8 : 0);
  }

  uint64_t check(uint64_t version, uint64_t key, const std::byte* value_padded) const {
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
