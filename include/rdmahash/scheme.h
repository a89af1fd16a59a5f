// rdmahash/scheme.h — the scheme registry: every table scheme of the library as one descriptor.
//
// The seam between "a scheme" and everything around it (the benchmark, `rdmahash serve`,
// `--connect` clients, the conformance tests). Each scheme is one `SchemeDescriptor`:
//   * its name as `--scheme` spells it and a one-line summary;
//   * its capabilities (`SchemeCaps`): what it stores, which options apply to it;
//   * `check`: every limit of its options, in one place, in terms of `TableOptions` field names;
//   * `make`: a `SchemeTable` for typed options — the memory-node side (region size, format and
//     bulk load, RPC handlers and host duties, a persistent image) and the client factory.
// Callers reach schemes only through `find_scheme` / `schemes()` / `make_table`: adding a scheme is
// a folder under src/schemes/ plus one entry in src/schemes/registry.cpp.
//
// Options are typed once, at the boundary (the CLI parses strings into `TableOptions`); nothing
// below it compares strings. Errors from `check_table_options` name fields in braces
// ("{key_bytes} must be in [8, 256] with {scheme} race"); `format_option_error` turns the marks into
// the caller's own names (the CLI: flag names, "--key-bytes"), or the bare field names.
//
// Life of a table: `make_table(opts)` (validates; throws InvalidArgument) → on each memory node
// `persistent_region()` (pmem schemes: the file mapping the fabric exposes) → `load(fabric,
// records)` formats the hosted shards and loads the records → clients anywhere call
// `make_client(engine, client_options)`; `rdmahash serve` asks `loss_handler` what to repair when a
// client dies.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/model.h"
#include "rdmahash/table.h"

namespace rdmahash {

class ClientLossHandler;  // rdmahash/ucx_service.h
enum class SpeculativeClaim : uint8_t;  // rdmahash/linear.h: kOff, kOn, kAuto
enum class ChunkOrder : uint8_t;        // rdmahash/linear.h: kLinear, kQuadratic

enum class SchemeId : uint8_t { kLinear, kCuckoo, kRace, kContinuity, kLevel, kHopscotch, kCluster };

// Where records live: in the table's slots, or out of band in a heap (linear, cuckoo; seed 000
// §4.1). kHeap4: linear only, four fingerprints per 8-byte slot (bulk-loaded, read-only).
enum class Storage : uint8_t { kInline, kHeap, kHeap4 };
const char* to_string(Storage s);
std::optional<Storage> parse_storage(std::string_view name);  // "inline", "heap", "heap4"

// Linear's slot format: kAuto is kSet (keys only, 63-bit) unless values or 4-byte keys need records.
enum class SlotFormatChoice : uint8_t { kAuto, kSet, kInline };
const char* to_string(SlotFormatChoice s);
std::optional<SlotFormatChoice> parse_slot_format(std::string_view name);  // "auto", "set", "inline"

// Cuckoo lookups: all candidate buckets in one round (parallel) or one after another (sequential).
enum class CuckooLookup : uint8_t { kParallel, kSequential };
const char* to_string(CuckooLookup s);
std::optional<CuckooLookup> parse_cuckoo_lookup(std::string_view name);

// On/off/auto switches (linear's speculative claim keeps its own enum: SpeculativeClaim, linear.h).
enum class Switch : uint8_t { kOff, kOn };
const char* to_string(Switch s);
std::optional<Switch> parse_switch(std::string_view name);  // "on", "off"

// How lookups size their READs (seed 000): a fixed number of slots, the model's R* for the table's
// load factor (with or without the bandwidth constraint of Eq. 2), or R* with cluster hints.
struct ReadSizeSpec {
  // kModelThroughput: R* of the same model with the calibrated throughput fit in place of c and α
  // (model/calibrate.h): the time a READ occupies a pipelined client, for lookups at depth.
  enum class Kind { kFixed, kModel, kModelUnconstrained, kCluster, kModelThroughput };
  Kind kind = Kind::kFixed;
  uint32_t slots = 8;  // kFixed
  std::string text() const;  // "fixed:8", "model", "model-unconstrained", "cluster", "model-throughput"
};

// Everything that shapes a table: one typed value. Fields a scheme does not read keep their
// defaults (check_table_options refuses a non-default one the scheme cannot honour).
struct TableOptions {
  SchemeId scheme = SchemeId::kLinear;
  uint32_t memory_nodes = 1;
  uint64_t records = 100000;   // loaded records (the data set)
  double load_factor = 0.5;    // records / home slots of the fixed-size schemes
  uint32_t key_bytes = 8;
  uint32_t value_bytes = 0;
  uint64_t seed = 1;           // hash seeds derive from it
  double zipf_theta = 0;       // > 0: the loaded records repeat keys (a multimap: caps.multimap)
  // Records the table may come to hold beyond `records`:
  uint64_t capacity = 0;       // records it may hold in all ((`serve --capacity`); 0: records + writes
  uint64_t writes = 0;         // records the run's points may write (heaps, level's room to grow)
  uint64_t inserts = 0;        // keys the run's clients may insert (race sizes its pool for them)
  uint32_t clients = 0;        // clients the run has, when known (race: each may hold a split's subtables)
  // linear
  Storage storage = Storage::kInline;
  SlotFormatChoice slot_format = SlotFormatChoice::kAuto;
  uint64_t tail_slots = 0;     // 0: max(4096, S/32)
  uint32_t chunk = 8;
  uint32_t max_chunks = 128;
  SpeculativeClaim speculative_claim = static_cast<SpeculativeClaim>(2);  // linear.h; 2: kAuto
  ChunkOrder chunk_order = static_cast<ChunkOrder>(0);  // linear.h; 0: kLinear (kQuadratic: `chunk` is the table's)
  std::optional<model::CostParams> cost_params;  // read-size model (rdmahash calibrate); empty: seed 000's
  std::optional<model::CostParams> throughput_cost_params;  // --read-size model-throughput (a calibrated profile's)
  // cuckoo
  uint32_t slots_per_bucket = 4;
  CuckooLookup cuckoo_lookup = CuckooLookup::kParallel;
  // race
  uint32_t race_groups = 64;
  uint32_t initial_depth = 0;
  Switch race_dir_cache = Switch::kOn;
  // continuity
  uint32_t sbuckets = 3;
  uint32_t max_resizes = 0;
  uint32_t added_sbucket_pairs = 0;  // D of --added-sbuckets 1/D (0: none)
  uint32_t resize_pace = 2;
  // hopscotch
  uint32_t neighborhood = 8;   // H: slots of a key's neighbourhood, in [2, 64]
  // persistent schemes (continuity, level, hopscotch): the memory node's table lives in this file
  std::string pm_path;
  bool keep_table = false;     // reloads keep the table as it is (no image copy)
  std::string command = "rdmahash";  // for messages ("rdmahash bench", "rdmahash serve")
  // tests only
  uint64_t die_holding_lock = 0;  // linear inline: die holding the Nth slot lock; race: at the Nth split step
  uint64_t die_loading = 0;       // continuity/level: die after the Nth bulk-loaded record
};

struct SchemeCaps {
  uint32_t max_value_bytes_inline = 0;  // value bytes an inline record holds (0: no values)
  uint32_t max_value_bytes_heap = 0;    // with Storage::kHeap (0: no heap)
  bool byte_keys = false;        // KeyView overloads (variable-length keys and values)
  bool four_byte_keys = false;   // key_bytes 4
  bool heap4 = false;            // Storage::kHeap4
  bool multimap = false;         // duplicate keys, get_all
  bool read_size_model = false;  // ReadSizeSpec other than kFixed
  bool chunked_inserts = false;  // find_or_put probes chunks of TableOptions::chunk slots (ClientOptions::chunk)
  bool persistent = false;       // pm_path
  bool online_resize = false;    // the table grows while serving (report: resizes, resizing)
  bool splits = false;           // grows by splitting subtables (report: splits, directory depth)
  bool client_ids = false;       // clients are named by id for good (make_client's client_id)
  bool bulk_load_needs_all_nodes = false;  // load() needs every memory node in one process
};

// What a client needs besides the table: its read-size policy and its identity.
struct ClientOptions {
  ReadSizeSpec read_size;
  double assumed_load_factor = 0;  // model R from this load factor instead of the table's (0: table's)
  // Model read sizes (not cluster): the share of lookups whose key is present and which stop at it
  // (model::LookupDistribution). 0: seed 000's model, every lookup reads to the first empty slot
  // (misses, multimap scans); 1: gets of present keys.
  double present_fraction = 0;
  uint32_t clusters = 1000;        // clusters tracked per client (kCluster)
  uint32_t client_id = 0;          // unique among the table's clients, live and dead (caps.client_ids)
  uint32_t chunk = 0;              // linear find-or-put: slots per chunk READ (0: the table's TableOptions::chunk)
  uint32_t location_cache = 0;     // cluster: header buckets each client caches (0: off)
};

// The records a memory node loads: `count` keys, each with the value `fill` writes for it.
class RecordSource {
 public:
  virtual uint64_t count() const = 0;
  virtual uint64_t next() = 0;  // the next record's key
  virtual void fill(uint64_t key, std::span<std::byte> value) const = 0;
  std::function<void(uint64_t done)> progress;  // called every 64 Ki records (may be empty)

 protected:
  ~RecordSource() = default;
};

// A report value: the scheme's own statistics and options for a benchmark row.
using ReportValue = std::variant<std::string, uint64_t, double, bool>;
using ReportFields = std::vector<std::pair<std::string, ReportValue>>;

// One table of a scheme, as one process sees it (memory node, client, or both).
class SchemeTable {
 public:
  virtual ~SchemeTable() = default;
  virtual uint64_t region_bytes() const = 0;  // per memory node
  virtual uint64_t slots() const = 0;  // home slots over all memory nodes (0: the table grows)
  // The table's slots now, read from the memory this process hosts; 0 where it cannot tell.
  virtual uint64_t slots_in(Fabric&) const { return slots(); }
  virtual unsigned key_bits() const = 0;  // keys are in [0, 2^key_bits)
  virtual uint32_t value_bytes() const = 0;
  // Memory-node side: formats every shard this process hosts (`fabric.local_region(n)` non-empty)
  // and loads the records that belong to them; registers the RPC handlers clients need. Called
  // again on the same fabric to reload between points: the table as the first call left it (a
  // persistent image: restored as it was after the first call).
  virtual void load(Fabric& fabric, RecordSource& records) = 0;
  struct Client {
    std::unique_ptr<KvClient> client;
    uint32_t read_size = 0;  // the lookup read size in slots (model/cluster: the model's R*)
  };
  // Throws InvalidArgument for a read-size policy the scheme has not. Model sizes read the
  // table's metadata (one READ) to learn the load factor.
  virtual Client make_client(Engine& engine, const ClientOptions& c) const = 0;
  virtual std::string describe() const = 0;
  // After a client's run: its scheme statistics (caps.splits: splits, split loads, depth).
  struct ClientStats {
    uint64_t splits = 0;
    std::vector<double> split_loads;
    uint32_t directory_depth = 0;
  };
  virtual ClientStats client_stats(KvClient&) const { return {}; }
  // The scheme's own options for a report row (e.g. race: race_dir_cache, initial_depth).
  virtual ReportFields report_options() const { return {}; }
  // Persistent schemes: the memory node's table memory, a file mapping the fabric must expose as
  // its region (opened on first call, on the memory node only); empty otherwise.
  virtual std::span<std::byte> persistent_region() { return {}; }
  virtual std::string persistence() const { return {}; }  // "volatile", "pmem", "msync"; empty: n/a
  // After load: the records of an existing persistent image recovered instead of bulk-loaded.
  virtual std::optional<uint64_t> recovered_records() const { return std::nullopt; }
  // Online resizes so far (over every shard) and whether one is in progress, where this process
  // can tell (hosts every shard); nothing otherwise.
  virtual std::optional<uint64_t> table_resizes() const { return std::nullopt; }
  virtual std::optional<bool> table_resizing() const { return std::nullopt; }
  // `rdmahash serve`: what to repair after a client died (null: nothing). Memory-node side.
  // (Include rdmahash/ucx_service.h to hold the handler.)
  virtual std::unique_ptr<ClientLossHandler> loss_handler(Fabric&) const;
};

struct SchemeDescriptor {
  SchemeId id;
  const char* name;     // as --scheme spells it
  const char* summary;  // one line for --help
  SchemeCaps caps;
  // The scheme's own limits ("" when fine), fields named in braces; check_table_options runs the
  // common ones first.
  std::string (*check)(const TableOptions&);
  std::unique_ptr<SchemeTable> (*make)(const TableOptions&);
};

std::span<const SchemeDescriptor> schemes();
const SchemeDescriptor& scheme(SchemeId id);
const SchemeDescriptor* find_scheme(std::string_view name);  // null if none
std::string scheme_names();  // "linear, cuckoo, race, continuity, level, hopscotch, cluster"
inline const SchemeCaps& caps(SchemeId id) { return scheme(id).caps; }
uint32_t max_value_bytes(const TableOptions& o);  // by scheme and storage

// Every limit of `o` for its scheme: "" when valid, else one message with {field} marks.
std::string check_table_options(const TableOptions& o);
// Replaces each "{field}" of `message` by name(field) (default: the bare field name).
std::string format_option_error(std::string_view message,
                                const std::function<std::string(std::string_view field)>& name = {});
// Validates (InvalidArgument, fields named bare) and builds the scheme's table.
std::unique_ptr<SchemeTable> make_table(const TableOptions& o);

}  // namespace rdmahash
