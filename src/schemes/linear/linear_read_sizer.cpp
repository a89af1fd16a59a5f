// ClusterReadSizer: sizes a lookup's READ from the clusters earlier scans reported (cluster
// hints). The design note is in include/rdmahash/linear.h (ClusterReadSizer).
#include "schemes/linear/linear_internal.h"

namespace rdmahash {

// --- cluster hints ----------------------------------------------------------------------------

ClusterReadSizer::ClusterReadSizer(uint32_t default_size, size_t capacity,
                                   std::function<uint32_t(uint64_t, uint64_t)> size_with_cluster, uint32_t max_size)
    : default_size_(std::max<uint32_t>(1, default_size)),
      capacity_(capacity),
      size_with_cluster_(std::move(size_with_cluster)),
      max_size_(max_size) {}

void ClusterReadSizer::observe(uint32_t node, uint64_t start, uint64_t length) {
  // A run shorter than the default read cannot save a round trip (a read of R* slots covers it),
  // so it is not worth the bookkeeping on every lookup of a lightly skewed table.
  if (capacity_ == 0 || length < default_size_) return;
  // Not among the largest: nothing to do (the common case once the tracker is full).
  if (clusters_.size() >= capacity_ && length <= by_length_.begin()->first) return;
  auto containing = clusters_.upper_bound({node, start});
  if (containing != clusters_.begin()) {
    auto prev = std::prev(containing);
    if (prev->first.first == node && prev->first.second <= start &&
        prev->first.second + prev->second >= start + length)
      return;  // a part of a cluster already known (a lookup that started inside it)
  }
  // Drop what this observation supersedes: tracked clusters overlapping it (the table only grows,
  // so an overlapping older cluster is a stale piece of this one).
  auto it = clusters_.lower_bound({node, start});
  if (it != clusters_.begin()) {
    auto prev = std::prev(it);
    if (prev->first.first == node && prev->first.second + prev->second > start) it = prev;
  }
  while (it != clusters_.end() && it->first.first == node && it->first.second < start + length) {
    if (it->first.second == start && it->second == length) return;  // already known
    auto range = by_length_.equal_range(it->second);
    for (auto b = range.first; b != range.second; ++b)
      if (b->second == it->first) { by_length_.erase(b); break; }
    it = clusters_.erase(it);
  }
  if (clusters_.size() >= capacity_) {
    auto smallest = by_length_.begin();
    if (smallest->first >= length) return;  // not among the largest
    clusters_.erase(smallest->second);
    by_length_.erase(smallest);
  }
  clusters_.emplace(Key{node, start}, length);
  by_length_.emplace(length, Key{node, start});
}

uint32_t ClusterReadSizer::size_at(uint32_t node, uint64_t slot) {
  auto it = clusters_.upper_bound({node, slot});
  if (it != clusters_.begin()) {
    auto prev = std::prev(it);
    if (prev->first.first == node && slot < prev->first.second + prev->second)  // inside: read to its end
      return static_cast<uint32_t>(std::min<uint64_t>(max_size_, prev->first.second + prev->second - slot + 1));
  }
  if (it == clusters_.end() || it->first.first != node) return default_size_;
  const uint64_t offset = it->first.second - slot;
  if (offset > 2ULL * default_size_) return default_size_;  // too far ahead to change the choice
  const uint64_t length = it->second;
  const uint64_t key = (offset << 32) | std::min<uint64_t>(length, 0xffffffffULL);
  if (auto c = cache_.find(key); c != cache_.end()) return c->second;
  if (cache_.size() > (1u << 16)) cache_.clear();
  const uint32_t r = std::clamp<uint32_t>(size_with_cluster_(offset, length), 1, max_size_);
  cache_.emplace(key, r);
  return r;
}

}  // namespace rdmahash
