// YCSB core-workload property files and YCSB-style operation generation.
//
// What is read
//   A YCSB workload file (what `ycsb run -P FILE` takes) plus `-p name=value` overrides, which win
//   over the file whatever their order, as in YCSB. The file syntax accepted is the subset of Java
//   properties that YCSB's workload files use:
//     - one `name=value` per line; whitespace (space, tab, form feed) around the name and the value
//       is trimmed; the value is everything after the first `=` (it may itself contain `=`);
//     - lines whose first non-blank character is `#` or `!` are comments; blank lines are skipped;
//       a `#` later in a line is NOT a comment (Java keeps it in the value, and so do we);
//     - LF or CRLF line ends; a UTF-8 byte-order mark is skipped; a name set twice keeps its last value.
//   Rejected, with the file and line in the message: a line without `=` (Java's `name:value` and
//   `name value` forms are not accepted), an empty name or one containing blanks or `:`, and a
//   line ending in `\` (Java's line continuation). Backslash escapes are not interpreted.
//
// Properties interpreted (names and defaults are CoreWorkload's, site.ycsb.workloads.CoreWorkload)
//   workload                   site.ycsb.workloads.CoreWorkload or com.yahoo.ycsb.workloads.CoreWorkload;
//                              any other class is an error; absent = CoreWorkload (YCSB requires it).
//   recordcount                records loaded before the run. YCSB's default is 0 (which YCSB reads
//                              as "unbounded"); here 0, set or defaulted, is an error: give a count.
//   operationcount             run-phase operations over ALL clients (split with ops_for_client());
//                              default 0 = YCSB's "no count limit" (the bench decides what that means).
//   readproportion 0.95, updateproportion 0.05, insertproportion 0, scanproportion 0,
//   readmodifywriteproportion 0
//                              each >= 0, and (unlike YCSB, which normalises the weights) they must
//                              add up to 1 within 1e-6.
//   requestdistribution        uniform (default) | zipfian | latest | hotspot. YCSB's sequential and
//                              exponential are not supported.
//   hotspotdatafraction 0.2, hotspotopnfraction 0.8    each in [0, 1].
//   zipfianconstant 0.99       > 0 and != 1. Not an upstream CoreWorkload property (upstream always
//                              uses 0.99); an extension found in several YCSB ports. It applies to the
//                              zipfian and latest request distributions, not to zipfian scan lengths.
//   fieldcount 10, fieldlength 100   value size = fieldcount * fieldlength bytes (must fit 32 bits).
//                              0 only without updates (update, read-modify-write proportions 0).
//   insertorder                hashed (default) | ordered: only reported (Workload::hashed_keys());
//                              the bench maps record numbers to keys with its own bijection.
//   minscanlength 1, maxscanlength 1000, scanlengthdistribution uniform (default) | zipfian.
//   Every other property is accepted and ignored, as YCSB ignores what its workload does not read;
//   it is kept in Workload::unknown_properties. A few of them change YCSB's workload in ways this
//   tool does not follow (fieldlengthdistribution other than constant, insertstart, insertcount);
//   those add a line to Workload::warnings for the bench to print.
//
// How operations are generated (Generator; as CoreWorkload.doTransaction)
//   The op type is drawn from the proportions in YCSB's order (read, update, insert, scan,
//   read-modify-write). Record numbers ("key_index"), as CoreWorkload.nextKeynum():
//     uniform   uniform over the loaded records 0..recordcount-1 (never the inserted ones, as YCSB)
//     hotspot   hotspotopnfraction of the requests go uniformly to the first
//               floor(recordcount * hotspotdatafraction) records, the rest to the others
//               (HotspotIntegerGenerator over the loaded records)
//     zipfian   ScrambledZipfianGenerator: a Gray et al. zipfian over 10^10+1 items (zeta given for
//               0.99 as YCSB hard-codes it, else computed), FNV-1a-64 scrambled and taken modulo
//               recordcount + 2*operationcount*insertproportion + 1 (YCSB's room for the inserts
//               it expects); a record not inserted yet is redrawn
//     latest    SkewedLatestGenerator: the most recently inserted record is the most popular, then
//               the one before, ... (a zipfian over the records inserted so far, grown as inserts
//               happen, with zeta extended incrementally)
//   Inserts take new record numbers: client c of n takes recordcount + c + k*n for its k-th insert,
//   so clients never collide. A client only requests records it knows exist: the loaded ones and
//   its OWN inserts (per-client view; with one client this is exactly YCSB's). By default an insert
//   counts from the next op on; a client with several ops in flight should construct its Generator
//   with InsertVisibility::kOnAcknowledge and call acknowledge_insert() when an insert completes
//   (YCSB's AcknowledgedCounterGenerator: records become visible as a gap-free prefix).
//   Scan lengths: uniform over [minscanlength, maxscanlength] or zipfian (theta 0.99) with
//   minscanlength the most common.
//
// Small deliberate differences from YCSB (all affect at most single items or edge cases):
//   latest can return record 0 (YCSB's off-by-one never does); when a zipfian grows, eta is
//   recomputed for the new item count (YCSB keeps the initial count in it); FNV hash values equal
//   to 2^63 are not turned negative by Math.abs; zeta of large item counts uses an Euler-Maclaurin
//   tail (relative error < 1e-12) instead of summing every term.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rdmahash::bench::ycsb {

// Every error about a workload file or a -p override. The message starts with where the problem
// is: "FILE:LINE: ...", "-p name=value: ..." or "FILE: ..." for what is missing from the file.
class YcsbError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class OpType : uint8_t { kRead, kUpdate, kInsert, kReadModifyWrite, kScan };
enum class Distribution : uint8_t { kUniform, kZipfian, kLatest, kHotspot };
enum class ScanLengthDistribution : uint8_t { kUniform, kZipfian };
enum class InsertOrder : uint8_t { kHashed, kOrdered };

// "read", "update", "insert", "read-modify-write", "scan".
std::string_view to_string(OpType t);
// The property values: "uniform", "zipfian", "latest", "hotspot".
std::string_view to_string(Distribution d);
std::string_view to_string(ScanLengthDistribution d);
std::string_view to_string(InsertOrder o);

struct Workload {
  std::string source;  // the file name given to parse()/load_file(), for messages
  std::string workload_class = "site.ycsb.workloads.CoreWorkload";

  uint64_t record_count = 0;     // recordcount (always >= 1 after parsing)
  uint64_t operation_count = 0;  // operationcount, all clients together; 0 = no count limit

  double read_proportion = 0.95;             // readproportion
  double update_proportion = 0.05;           // updateproportion
  double insert_proportion = 0.0;            // insertproportion
  double read_modify_write_proportion = 0.0; // readmodifywriteproportion
  double scan_proportion = 0.0;              // scanproportion

  Distribution request_distribution = Distribution::kUniform;  // requestdistribution
  double hotspot_data_fraction = 0.2;  // hotspotdatafraction
  double hotspot_opn_fraction = 0.8;   // hotspotopnfraction
  double zipfian_constant = 0.99;      // zipfianconstant

  uint64_t field_count = 10;    // fieldcount
  uint64_t field_length = 100;  // fieldlength
  InsertOrder insert_order = InsertOrder::kHashed;  // insertorder

  uint32_t min_scan_length = 1;     // minscanlength
  uint32_t max_scan_length = 1000;  // maxscanlength
  ScanLengthDistribution scan_length_distribution = ScanLengthDistribution::kUniform;

  std::map<std::string, std::string> properties;          // every property as finally set
  std::map<std::string, std::string> unknown_properties;  // those not interpreted here
  std::vector<std::string> warnings;  // properties that YCSB honours but this tool ignores

  uint32_t value_bytes() const { return static_cast<uint32_t>(field_count * field_length); }
  bool hashed_keys() const { return insert_order == InsertOrder::kHashed; }
  double proportion(OpType t) const;
  // Load phase: records 0..load_records()-1.
  uint64_t load_records() const { return record_count; }
  // Run phase: client `client`'s share of operation_count, split as YCSB splits it over threads
  // (the first operation_count % clients clients do one more). 0 if operation_count is 0.
  uint64_t ops_for_client(uint32_t client, uint32_t clients) const;
};

// Parses `file_text` (named `source_name` in messages), then applies `overrides` in order.
// Throws YcsbError.
Workload parse(std::string_view file_text, std::string_view source_name,
               const std::vector<std::pair<std::string, std::string>>& overrides = {});
// Reads and parses a file; an unreadable file is a YcsbError too.
Workload load_file(const std::filesystem::path& path,
                   const std::vector<std::pair<std::string, std::string>>& overrides = {});
// "name=value" (the argument of -p) -> {name, value}, both trimmed. Throws YcsbError.
std::pair<std::string, std::string> parse_override(std::string_view name_equals_value);

// The op types with a non-zero proportion, in OpType order.
std::vector<OpType> used_op_types(const Workload& w);

// One line for reports, e.g. "read 0.5 update 0.5, zipfian(0.99), 1000 records x 1000 B, 1000 ops".
std::string summary(const Workload& w);

// --- generators -------------------------------------------------------------------------------

// Deterministic pseudo-random numbers (splitmix64).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double next_double();          // uniform in [0, 1)
  uint64_t below(uint64_t n);    // uniform in [0, n), n >= 1
 private:
  uint64_t state_;
};

// YCSB's Utils.fnvhash64 (FNV-1a over the 8 bytes, low byte first, then |h|).
uint64_t fnvhash64(uint64_t value);

// YCSB's ZipfianGenerator: Gray et al., "Quickly generating billion-record synthetic databases"
// (SIGMOD 1994). Items min..max; min is the most popular, then min+1, ...
class ZipfianGenerator {
 public:
  ZipfianGenerator(uint64_t min, uint64_t max, double theta);
  ZipfianGenerator(uint64_t min, uint64_t max, double theta, double zetan);  // zetan precomputed

  uint64_t next(Rng& rng) { return next(rng, items_); }
  // Draws from the first `item_count` items (min .. min+item_count-1). The item count may grow
  // between calls (zeta is then extended incrementally), as YCSB's nextLong(itemcount).
  uint64_t next(Rng& rng, uint64_t item_count);

  uint64_t items() const { return items_; }
  double theta() const { return theta_; }
  double zetan() const { return zetan_; }

  // zeta(n, theta) = sum_{i=1..n} i^-theta.
  static double zeta(uint64_t n, double theta) { return zeta(0, n, theta, 0.0); }
  // Given initial = zeta(from, theta), returns zeta(n, theta) for n >= from.
  static double zeta(uint64_t from, uint64_t n, double theta, double initial);

 private:
  void set_count(uint64_t n);
  uint64_t items_;
  uint64_t base_;
  double theta_;
  double alpha_;
  double zeta2_;
  double half_pow_theta_;  // 0.5^theta
  double zetan_;
  double eta_;
  uint64_t count_for_zeta_;
};

// YCSB's ScrambledZipfianGenerator: zipfian over kItemCount+1 items, FNV-scrambled onto min..max.
class ScrambledZipfianGenerator {
 public:
  static constexpr uint64_t kItemCount = 10'000'000'000ULL;
  static constexpr double kZetan = 26.46902820178302;  // YCSB's zeta(kItemCount, 0.99)
  ScrambledZipfianGenerator(uint64_t min, uint64_t max, double theta);
  uint64_t next(Rng& rng);

 private:
  ZipfianGenerator gen_;
  uint64_t min_;
  uint64_t item_count_;
};

struct Op {
  OpType type;
  uint64_t key_index;    // record number; inserts: a new one (see Generator::insert_key)
  uint32_t scan_length;  // kScan only, else 0
};

enum class InsertVisibility : uint8_t {
  kOnIssue,        // an insert's record may be requested from the next op on
  kOnAcknowledge,  // ... only once acknowledge_insert() was called for it (and all before it)
};

// The run-phase operation sequence of one client. Deterministic in (workload, client, clients,
// seed). Not thread-safe: one per client.
class Generator {
 public:
  Generator(const Workload& w, uint32_t client, uint32_t clients, uint64_t seed,
            InsertVisibility visibility = InsertVisibility::kOnIssue);

  Op next();
  // kOnAcknowledge: the insert of `key_index` (returned by next()) has completed.
  void acknowledge_insert(uint64_t key_index);

  bool hashed_keys() const { return hashed_; }
  uint64_t inserts_issued() const { return issued_; }
  uint64_t inserts_visible() const { return visible_; }
  // Record number of this client's k-th insert (k from 0).
  uint64_t insert_key(uint64_t k) const { return record_count_ + client_ + k * clients_; }

 private:
  OpType choose_op();
  uint64_t choose_key();
  bool visible(uint64_t key_index) const;
  uint32_t choose_scan_length();

  Rng rng_;
  uint64_t record_count_;
  uint32_t client_;
  uint32_t clients_;
  bool hashed_;
  InsertVisibility visibility_;
  std::vector<std::pair<double, OpType>> op_weights_;  // normalised, YCSB order
  Distribution dist_;
  uint64_t hot_items_ = 0;
  double hot_opn_fraction_ = 0;
  std::optional<ScrambledZipfianGenerator> scrambled_;
  std::optional<ZipfianGenerator> latest_;
  uint32_t min_scan_ = 1;
  uint32_t max_scan_ = 1;
  std::optional<ZipfianGenerator> scan_zipf_;
  uint64_t issued_ = 0;   // inserts handed out
  uint64_t visible_ = 0;  // inserts that may be requested: k < visible_
  std::deque<bool> acked_;  // kOnAcknowledge: inserts visible_.. issued_-1, done or not
};

}  // namespace rdmahash::bench::ycsb
