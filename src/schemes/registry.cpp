// The scheme registry (rdmahash/scheme.h): one descriptor a scheme, the options' common limits,
// and the names of the typed options' values.
#include "schemes/registry.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "rdmahash/continuity.h"
#include "rdmahash/hopscotch.h"
#include "rdmahash/linear.h"
#include "rdmahash/race.h"
#include "rdmahash/ucx_service.h"

namespace rdmahash {

void scheme_impl::require_fixed_read_size(const ClientOptions& c, const char* scheme) {
  if (c.read_size.kind != ReadSizeSpec::Kind::kFixed)
    throw InvalidArgument("--read-size " + c.read_size.text() + " applies to linear probing, not to --scheme " + scheme);
}

namespace {

// value bytes: linear inline slots and cuckoo inline buckets up to 120, heap records up to 4096
// (YCSB's default 10 x 100-byte records fit), race's out-of-place KV blocks up to kMaxValueBytes.
constexpr uint32_t kInline = 120, kHeap = 4096;

const SchemeDescriptor kSchemes[] = {
    {SchemeId::kLinear, "linear", "linear probing over one-sided READs, read size by a cost model (seeds 000, 001, 003)",
     SchemeCaps{.max_value_bytes_inline = kInline, .max_value_bytes_heap = kHeap, .four_byte_keys = true,
                .heap4 = true, .multimap = true, .read_size_model = true, .chunked_inserts = true},
     scheme_impl::check_linear, scheme_impl::make_linear},
    {SchemeId::kCuckoo, "cuckoo", "Pilaf-style cuckoo hashing, inserts on the memory node's CPU (seed 000's baseline)",
     SchemeCaps{.max_value_bytes_inline = kInline, .max_value_bytes_heap = kHeap, .four_byte_keys = true},
     scheme_impl::check_cuckoo, scheme_impl::make_cuckoo},
    {SchemeId::kRace, "race", "RACE extendible hashing, lock-free one-sided writes and resizing (seed 004)",
     SchemeCaps{.max_value_bytes_inline = static_cast<uint32_t>(kMaxValueBytes), .byte_keys = true,
                .online_resize = true, .splits = true, .client_ids = true, .bulk_load_needs_all_nodes = true},
     scheme_impl::check_race, scheme_impl::make_race},
    {SchemeId::kContinuity, "continuity", "continuity hashing on persistent memory, log-free (seed 002)",
     SchemeCaps{.max_value_bytes_inline = kInline, .persistent = true, .online_resize = true},
     scheme_impl::check_continuity, scheme_impl::make_continuity},
    {SchemeId::kLevel, "level", "level hashing (OSDI'18), seed 002's persistent-memory baseline",
     SchemeCaps{.max_value_bytes_inline = kInline, .persistent = true}, scheme_impl::check_level, scheme_impl::make_level},
    {SchemeId::kHopscotch, "hopscotch", "FaRM-KV hopscotch hashing: one READ of a key's neighbourhood (chained overflow blocks past it), writes on the memory node's CPU (NSDI'14)",
     SchemeCaps{.max_value_bytes_inline = kInline, .persistent = true}, scheme_impl::check_hopscotch,
     scheme_impl::make_hopscotch},
    {SchemeId::kCluster, "cluster", "DrTM-KV cluster hashing: READ the header bucket, then the entry; writes on the memory node's CPU (SOSP'15)",
     SchemeCaps{.max_value_bytes_inline = kInline}, scheme_impl::check_cluster, scheme_impl::make_cluster},
};

std::string short_text(double v) {  // for messages: "1e-15", not "1.0000000000000001e-15"
  char buf[40];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::span<const SchemeDescriptor> schemes() { return kSchemes; }

const SchemeDescriptor& scheme(SchemeId id) {
  for (const auto& d : kSchemes)
    if (d.id == id) return d;
  throw std::logic_error("scheme id without a registry entry");
}

const SchemeDescriptor* find_scheme(std::string_view name) {
  for (const auto& d : kSchemes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string scheme_names() {
  std::string s;
  for (const auto& d : kSchemes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

uint32_t max_value_bytes(const TableOptions& o) {
  const SchemeCaps& c = caps(o.scheme);
  return o.storage == Storage::kInline || c.max_value_bytes_heap == 0 ? c.max_value_bytes_inline : c.max_value_bytes_heap;
}

std::string check_table_options(const TableOptions& o) {
  const SchemeDescriptor& d = scheme(o.scheme);
  const SchemeCaps& c = d.caps;
  const std::string name = d.name;
  // Scheme-specific limits first (race's key and value ranges replace the common ones).
  if (std::string e = d.check(o); !e.empty()) return e;
  // Bounded whatever the scheme (an option another scheme ignores still has its range).
  if (o.initial_depth > 20) return "{initial_depth} must be at most 20";
  if (o.race_groups == 0 || o.race_groups > kMaxRaceGroups) return "{race_groups} must be in [1, 4096]";
  if (o.sbuckets < 1 || o.sbuckets > kMaxSBuckets) return "{sbuckets} must be in [1, 4] (the indicator word has 24 valid bits)";
  if (o.max_resizes > 16) return "{max_resizes} must be at most 16";
  if (o.added_sbucket_pairs > 65535) return "{added_sbucket_pairs} must be 0 or 1/D with D in [1, 65535]";
  if (o.added_sbucket_pairs != 0 && o.scheme != SchemeId::kContinuity) return "{added_sbucket_pairs} applies to {scheme} continuity";
  if (o.neighborhood != kHopscotchDefaultNeighborhood && o.scheme != SchemeId::kHopscotch)
    return "{neighborhood} applies to {scheme} hopscotch";
  if (o.resize_pace > 1000000) return "{resize_pace} must be at most 1000000";
  if (o.max_resizes > 0 && o.scheme != SchemeId::kContinuity) return "{max_resizes} applies to {scheme} continuity";
  if (!o.pm_path.empty() && !c.persistent) return "{pm_path} applies to {scheme} continuity, level or hopscotch";
  if (!o.pm_path.empty() && o.memory_nodes != 1)
    return "{pm_path} holds one memory node's table: use {memory_nodes} 1 (and no --symmetric)";
  if (o.storage == Storage::kHeap4 && !c.heap4)
    return "{storage} heap4 applies to {scheme} linear (cuckoo: {storage} heap {slots_per_bucket} 4)";
  if (o.slots_per_bucket != 1 && o.slots_per_bucket != 4) return "{slots_per_bucket} must be 1 or 4";
  if (o.zipf_theta > 0 && !c.multimap)
    return "{zipf_theta} loads duplicate keys: " + name + " tables hold each key once (use {scheme} linear)";
  if (o.memory_nodes == 0) return "{memory_nodes} must be at least 1";
  if (o.memory_nodes > 4096) return "{memory_nodes} must be at most 4096";
  if (o.records == 0) return "{records} must be at least 1";
  if (o.tail_slots > kMaxTailSlots)
    return "{tail_slots} must be at most 2^36 (overflow slots per memory node; 0 picks max(4096, S/32)), got " +
           std::to_string(o.tail_slots);
  if (o.records > (1ULL << 34)) return "{records} must be at most 2^34";
  // The table has records / load factor slots, at most 2^36 per memory node (linear's bound; the
  // other schemes' are lower and their configs say so): a tiny load factor is refused here, naming
  // the range that fits, instead of wrapping a size.
  const double f = o.load_factor;
  const double min_load_factor = static_cast<double>(o.records) / (0x1p36 * o.memory_nodes);
  if (!(f > 0.0 && f < 1.0) || std::isnan(f)) return "{load_factor} must be in (0, 1), got " + short_text(f);
  if (f < min_load_factor)
    return "{load_factor} " + short_text(f) + " is too small for {records} " + std::to_string(o.records) +
           ": the table would need more than 2^36 slots per memory node; with these records and {memory_nodes} "
           "the load factor must be in [" + short_text(min_load_factor) + ", 1)";
  if (!c.byte_keys) {
    if (o.key_bytes != 4 && o.key_bytes != 8) return "{key_bytes} must be 4 or 8";
    if (o.key_bytes == 4 && !c.four_byte_keys) return "{scheme} " + name + " stores 8-byte keys: use {key_bytes} 8";
    if (o.value_bytes > max_value_bytes(o)) {
      if (c.max_value_bytes_heap == 0)
        return "{value_bytes} must be at most " + std::to_string(c.max_value_bytes_inline) + " with {scheme} " + name;
      return o.storage == Storage::kInline
                 ? "{value_bytes} must be at most 120 (inline records hold at most 120 value bytes; "
                   "{storage} heap takes up to 4096)"
                 : "{value_bytes} must be at most 4096 for {storage} " + std::string(to_string(o.storage));
    }
  }
  if (o.slot_format == SlotFormatChoice::kSet && (o.value_bytes != 0 || o.key_bytes != 8))
    return "{slot_format} set holds 63-bit keys only: use {key_bytes} 8 and {value_bytes} 0";
  if (o.key_bytes == 4 && o.records >= (1ULL << 31)) return "{key_bytes} 4 allows fewer than 2^31 records";
  if (o.chunk == 0 || o.chunk > 65536) return "{chunk} must be in [1, 65536]";
  if (o.max_chunks == 0) return "{max_chunks} must be at least 1";
  return {};
}

std::string format_option_error(std::string_view message, const std::function<std::string(std::string_view)>& name) {
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    const size_t open = message.find('{', i);
    const size_t close = open == std::string_view::npos ? open : message.find('}', open);
    if (close == std::string_view::npos) {
      out += message.substr(i);
      break;
    }
    out += message.substr(i, open - i);
    const std::string_view field = message.substr(open + 1, close - open - 1);
    out += name ? name(field) : std::string(field);
    i = close + 1;
  }
  return out;
}

std::unique_ptr<SchemeTable> make_table(const TableOptions& o) {
  if (std::string e = check_table_options(o); !e.empty()) throw InvalidArgument(format_option_error(e));
  return scheme(o.scheme).make(o);
}

std::unique_ptr<ClientLossHandler> SchemeTable::loss_handler(Fabric&) const { return nullptr; }

// --- names of the typed options' values ---------------------------------------------------------

const char* to_string(Storage s) {
  switch (s) {
    case Storage::kInline: return "inline";
    case Storage::kHeap: return "heap";
    case Storage::kHeap4: return "heap4";
  }
  return "?";
}
std::optional<Storage> parse_storage(std::string_view n) {
  for (Storage s : {Storage::kInline, Storage::kHeap, Storage::kHeap4})
    if (n == to_string(s)) return s;
  return std::nullopt;
}
const char* to_string(SlotFormatChoice s) {
  switch (s) {
    case SlotFormatChoice::kAuto: return "auto";
    case SlotFormatChoice::kSet: return "set";
    case SlotFormatChoice::kInline: return "inline";
  }
  return "?";
}
std::optional<SlotFormatChoice> parse_slot_format(std::string_view n) {
  for (SlotFormatChoice s : {SlotFormatChoice::kAuto, SlotFormatChoice::kSet, SlotFormatChoice::kInline})
    if (n == to_string(s)) return s;
  return std::nullopt;
}
const char* to_string(CuckooLookup s) { return s == CuckooLookup::kSequential ? "sequential" : "parallel"; }
std::optional<CuckooLookup> parse_cuckoo_lookup(std::string_view n) {
  if (n == "parallel") return CuckooLookup::kParallel;
  if (n == "sequential") return CuckooLookup::kSequential;
  return std::nullopt;
}
const char* to_string(Switch s) { return s == Switch::kOn ? "on" : "off"; }
std::optional<Switch> parse_switch(std::string_view n) {
  if (n == "on") return Switch::kOn;
  if (n == "off") return Switch::kOff;
  return std::nullopt;
}

std::string ReadSizeSpec::text() const {
  switch (kind) {
    case Kind::kFixed: return "fixed:" + std::to_string(slots);
    case Kind::kModel: return "model";
    case Kind::kModelUnconstrained: return "model-unconstrained";
    case Kind::kCluster: return "cluster";
    case Kind::kModelThroughput: return "model-throughput";
  }
  return "?";
}

}  // namespace rdmahash
