// YCSB workload files (parsing, overrides, errors) and the YCSB-style operation generators.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bench/ycsb.h"

#ifndef RDMAHASH_TEST_DATA_DIR
#error "RDMAHASH_TEST_DATA_DIR must name the tests/data directory"
#endif

namespace rdmahash::bench::ycsb {
namespace {

using Overrides = std::vector<std::pair<std::string, std::string>>;

std::filesystem::path data(const std::string& name) {
  return std::filesystem::path(RDMAHASH_TEST_DATA_DIR) / "ycsb" / name;
}

// The message of the YcsbError that `f` throws ("" and a failure if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const YcsbError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a YcsbError";
  return {};
}

testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

std::string parse_error(const std::string& text, const Overrides& o = {}) {
  return error_of([&] { parse(text, "test.dat", o); });
}

constexpr std::string_view kHead = "workload=site.ycsb.workloads.CoreWorkload\nrecordcount=1000\n";

// --- parsing ----------------------------------------------------------------------------------

struct Mix {
  double read, update, insert, rmw, scan;
  Distribution dist;
};

void expect_mix(const Workload& w, const Mix& m) {
  EXPECT_DOUBLE_EQ(w.read_proportion, m.read);
  EXPECT_DOUBLE_EQ(w.update_proportion, m.update);
  EXPECT_DOUBLE_EQ(w.insert_proportion, m.insert);
  EXPECT_DOUBLE_EQ(w.read_modify_write_proportion, m.rmw);
  EXPECT_DOUBLE_EQ(w.scan_proportion, m.scan);
  EXPECT_EQ(w.request_distribution, m.dist);
}

TEST(YcsbParse, CoreWorkloadsHaveTheirMixes) {
  const std::map<std::string, Mix> mixes = {
      {"workloada", {0.5, 0.5, 0, 0, 0, Distribution::kZipfian}},
      {"workloadb", {0.95, 0.05, 0, 0, 0, Distribution::kZipfian}},
      {"workloadc", {1, 0, 0, 0, 0, Distribution::kZipfian}},
      {"workloadd", {0.95, 0, 0.05, 0, 0, Distribution::kLatest}},
      {"workloade", {0, 0, 0.05, 0, 0.95, Distribution::kZipfian}},
      {"workloadf", {0.5, 0, 0, 0.5, 0, Distribution::kZipfian}},
  };
  for (const auto& [name, mix] : mixes) {
    SCOPED_TRACE(name);
    const Workload w = load_file(data(name));
    expect_mix(w, mix);
    EXPECT_EQ(w.record_count, 1000u);
    EXPECT_EQ(w.load_records(), 1000u);
    EXPECT_EQ(w.operation_count, 1000u);
    EXPECT_EQ(w.workload_class, "site.ycsb.workloads.CoreWorkload");
    EXPECT_EQ(w.value_bytes(), 1000u);  // 10 fields x 100 bytes
    EXPECT_EQ(w.insert_order, InsertOrder::kHashed);
    EXPECT_TRUE(w.hashed_keys());
    EXPECT_DOUBLE_EQ(w.zipfian_constant, 0.99);
    EXPECT_EQ(w.unknown_properties.at("readallfields"), "true");
    EXPECT_TRUE(w.warnings.empty());
    EXPECT_EQ(w.source, data(name).string());
  }
  const Workload e = load_file(data("workloade"));
  EXPECT_EQ(e.max_scan_length, 100u);
  EXPECT_EQ(e.min_scan_length, 1u);
  EXPECT_EQ(e.scan_length_distribution, ScanLengthDistribution::kUniform);
}

TEST(YcsbParse, UsedOpTypes) {
  EXPECT_EQ(used_op_types(load_file(data("workloada"))), (std::vector{OpType::kRead, OpType::kUpdate}));
  EXPECT_EQ(used_op_types(load_file(data("workloadc"))), (std::vector{OpType::kRead}));
  EXPECT_EQ(used_op_types(load_file(data("workloadd"))), (std::vector{OpType::kRead, OpType::kInsert}));
  EXPECT_EQ(used_op_types(load_file(data("workloade"))), (std::vector{OpType::kInsert, OpType::kScan}));
  EXPECT_EQ(used_op_types(load_file(data("workloadf"))), (std::vector{OpType::kRead, OpType::kReadModifyWrite}));
  EXPECT_EQ(to_string(OpType::kReadModifyWrite), "read-modify-write");
  EXPECT_EQ(to_string(OpType::kScan), "scan");
}

TEST(YcsbParse, YcsbDefaults) {
  const Workload w = parse("recordcount=5\n", "min.dat", {});
  expect_mix(w, {0.95, 0.05, 0, 0, 0, Distribution::kUniform});
  EXPECT_EQ(w.record_count, 5u);
  EXPECT_EQ(w.operation_count, 0u);  // YCSB: no count limit
  EXPECT_EQ(w.ops_for_client(0, 1), 0u);
  EXPECT_EQ(w.field_count, 10u);
  EXPECT_EQ(w.field_length, 100u);
  EXPECT_EQ(w.value_bytes(), 1000u);
  EXPECT_EQ(w.insert_order, InsertOrder::kHashed);
  EXPECT_EQ(w.min_scan_length, 1u);
  EXPECT_EQ(w.max_scan_length, 1000u);
  EXPECT_EQ(w.scan_length_distribution, ScanLengthDistribution::kUniform);
  EXPECT_DOUBLE_EQ(w.hotspot_data_fraction, 0.2);
  EXPECT_DOUBLE_EQ(w.hotspot_opn_fraction, 0.8);
  EXPECT_DOUBLE_EQ(w.zipfian_constant, 0.99);
  EXPECT_EQ(w.workload_class, "site.ycsb.workloads.CoreWorkload");
}

TEST(YcsbParse, SyntaxAsYcsbFilesUseIt) {
  const std::string text =
      "\xEF\xBB\xBF# comment\r\n"
      "! another comment\r\n"
      "\r\n"
      "   workload = com.yahoo.ycsb.workloads.CoreWorkload   \r\n"
      "recordcount\t=\t42\r\n"
      "readproportion=0.25\n"
      "updateproportion=0.75\n"
      "fieldcount=4\n"
      "fieldlength=25\n"
      "insertorder=ordered\n"
      "requestdistribution=hotspot\n"
      "hotspotdatafraction=0.1\n"
      "hotspotopnfraction=.9\n"
      "table=usertable\n"
      "exportfile=a=b.txt\n"
      "recordcount=43";  // set twice, no final newline: the last one wins
  const Workload w = parse(text, "syntax.dat", {});
  EXPECT_EQ(w.workload_class, "com.yahoo.ycsb.workloads.CoreWorkload");
  EXPECT_EQ(w.record_count, 43u);
  expect_mix(w, {0.25, 0.75, 0, 0, 0, Distribution::kHotspot});
  EXPECT_EQ(w.value_bytes(), 100u);
  EXPECT_FALSE(w.hashed_keys());
  EXPECT_DOUBLE_EQ(w.hotspot_data_fraction, 0.1);
  EXPECT_DOUBLE_EQ(w.hotspot_opn_fraction, 0.9);
  EXPECT_EQ(w.unknown_properties.size(), 2u);
  EXPECT_EQ(w.unknown_properties.at("table"), "usertable");
  EXPECT_EQ(w.unknown_properties.at("exportfile"), "a=b.txt");
  EXPECT_EQ(w.properties.at("recordcount"), "43");
  EXPECT_EQ(w.properties.at("readproportion"), "0.25");
}

TEST(YcsbParse, OverridesWinOverTheFile) {
  const Overrides o = {parse_override("recordcount=1000000"), parse_override("operationcount=5000000")};
  const Workload w = load_file(data("workloada"), o);
  EXPECT_EQ(w.record_count, 1000000u);
  EXPECT_EQ(w.operation_count, 5000000u);
  expect_mix(w, {0.5, 0.5, 0, 0, 0, Distribution::kZipfian});

  // Later overrides win; overrides may switch distributions and add unknown properties.
  const Workload u = load_file(data("workloadb"), {{"requestdistribution", "latest"},
                                                   {"requestdistribution", "uniform"},
                                                   {"readproportion", "0.9"},
                                                   {"updateproportion", "0.1"},
                                                   {"threadcount", "8"}});
  expect_mix(u, {0.9, 0.1, 0, 0, 0, Distribution::kUniform});
  EXPECT_EQ(u.unknown_properties.at("threadcount"), "8");
}

TEST(YcsbParse, ParseOverride) {
  EXPECT_EQ(parse_override("recordcount=1000000"), (std::pair<std::string, std::string>{"recordcount", "1000000"}));
  EXPECT_EQ(parse_override(" a = b=c "), (std::pair<std::string, std::string>{"a", "b=c"}));
  EXPECT_EQ(parse_override("a="), (std::pair<std::string, std::string>{"a", ""}));
  EXPECT_TRUE(has(error_of([] { parse_override("recordcount"); }), "-p recordcount: expected name=value"));
  EXPECT_TRUE(has(error_of([] { parse_override("=5"); }), "-p =5: there is no property name"));
}

TEST(YcsbParse, OpsSplitAcrossClientsAsYcsb) {
  const Workload w = load_file(data("workloada"), {{"operationcount", "10"}});
  EXPECT_EQ(w.ops_for_client(0, 3), 4u);
  EXPECT_EQ(w.ops_for_client(1, 3), 3u);
  EXPECT_EQ(w.ops_for_client(2, 3), 3u);
  EXPECT_EQ(w.ops_for_client(0, 1), 10u);
  uint64_t total = 0;
  for (uint32_t c = 0; c < 7; ++c) total += w.ops_for_client(c, 7);
  EXPECT_EQ(total, 10u);
}

TEST(YcsbParse, Warnings) {
  const Workload w = parse(std::string(kHead) + "fieldlengthdistribution=zipfian\ninsertstart=10\n", "w.dat", {});
  ASSERT_EQ(w.warnings.size(), 2u);
  EXPECT_TRUE(has(w.warnings[0], "w.dat:3: fieldlengthdistribution=zipfian is ignored"));
  EXPECT_TRUE(has(w.warnings[1], "w.dat:4: insertstart=10 is ignored"));
  EXPECT_TRUE(parse(std::string(kHead) + "fieldlengthdistribution=constant\ninsertcount=1000\n", "w", {})
                  .warnings.empty());
}

TEST(YcsbParse, Summary) {
  EXPECT_EQ(summary(load_file(data("workloada"))),
            "read 0.5, update 0.5; zipfian (theta 0.99); 1000 records of 1000 B; 1000 ops");
  EXPECT_EQ(summary(load_file(data("workloade"))),
            "insert 0.05, scan 0.95 (1..100 uniform); zipfian (theta 0.99); 1000 records of 1000 B; 1000 ops");
}

// --- errors -----------------------------------------------------------------------------------

TEST(YcsbErrors, MalformedFilesNameTheLine) {
  const std::string dist = error_of([] { load_file(data("malformed_distribution")); });
  EXPECT_TRUE(has(dist, data("malformed_distribution").string() + ":7: unknown requestdistribution 'zipf'"));
  EXPECT_TRUE(has(dist, "uniform, zipfian, latest or hotspot"));

  const std::string sum = error_of([] { load_file(data("malformed_sum")); });
  EXPECT_TRUE(has(sum, "add up to 1.05, not 1"));
  EXPECT_TRUE(has(sum, "readproportion=0.5 (line 4)"));
  EXPECT_TRUE(has(sum, "updateproportion=0.05 (default)"));
  EXPECT_TRUE(has(sum, "insertproportion=0.5 (line 5)"));
  EXPECT_TRUE(has(sum, data("malformed_sum").string()));

  const std::string num = error_of([] { load_file(data("malformed_number")); });
  EXPECT_TRUE(has(num, data("malformed_number").string() + ":4: recordcount must be a whole number, got '1,000'"));

  const std::string eq = error_of([] { load_file(data("malformed_no_equals")); });
  EXPECT_TRUE(has(eq, data("malformed_no_equals").string() + ":5: expected name=value, got 'readproportion 0.5'"));

  EXPECT_TRUE(has(error_of([] { load_file(data("no_such_workload")); }), "cannot open YCSB workload file"));
}

TEST(YcsbErrors, Values) {
  const std::string h(kHead);  // lines 1-2
  EXPECT_TRUE(has(parse_error(h + "readproportion=-0.1\nupdateproportion=1.1\n"),
                  "test.dat:3: readproportion must not be negative, got '-0.1'"));
  EXPECT_TRUE(has(parse_error(h + "readproportion=lots\n"), "test.dat:3: readproportion must be a number, got 'lots'"));
  EXPECT_TRUE(has(parse_error(h + "readproportion=nan\n"), "test.dat:3: readproportion must be a number"));
  EXPECT_TRUE(has(parse_error(h + "operationcount=1e6\n"), "test.dat:3: operationcount must be a whole number"));
  EXPECT_TRUE(has(parse_error(h + "operationcount=-5\n"), "test.dat:3: operationcount must not be negative"));
  EXPECT_TRUE(has(parse_error(h + "operationcount=99999999999999999999999\n"), "test.dat:3: operationcount is too large"));
  EXPECT_TRUE(has(parse_error(h + "fieldcount=10 # ten fields\n"), "'#' starts a comment only at the beginning"));
  EXPECT_TRUE(has(parse_error("workload=site.ycsb.workloads.CoreWorkload\nrecordcount=0\n"),
                  "test.dat:2: recordcount must be at least 1"));
  EXPECT_TRUE(has(parse_error("workload=site.ycsb.workloads.CoreWorkload\n"), "test.dat: recordcount is not set"));
  EXPECT_TRUE(has(parse_error(h + "\nzipfianconstant=1\n"), "test.dat:4: zipfianconstant must be greater than 0 and not 1"));
  EXPECT_TRUE(has(parse_error(h + "zipfianconstant=0\n"), "test.dat:3: zipfianconstant"));
  EXPECT_TRUE(has(parse_error(h + "zipfianconstant=-0.5\n"), "test.dat:3: zipfianconstant"));
  EXPECT_TRUE(has(parse_error(h + "requestdistribution=exponential\n"),
                  "test.dat:3: requestdistribution 'exponential' is a YCSB distribution this tool does not support"));
  EXPECT_TRUE(has(parse_error(h + "hotspotopnfraction=1.5\n"), "test.dat:3: hotspotopnfraction must be between 0 and 1"));
  EXPECT_TRUE(has(parse_error(h + "insertorder=random\n"), "test.dat:3: insertorder must be hashed or ordered"));
  EXPECT_TRUE(has(parse_error(h + "scanlengthdistribution=latest\n"), "test.dat:3: unknown scanlengthdistribution"));
  EXPECT_TRUE(has(parse_error(h + "minscanlength=10\nmaxscanlength=5\n"), "test.dat:4: minscanlength (10) is larger"));
  EXPECT_TRUE(has(parse_error(h + "maxscanlength=0\n"), "test.dat:3: maxscanlength must be at least 1"));
  EXPECT_TRUE(has(parse_error(h + "fieldcount=100000\nfieldlength=100000\n"), "test.dat:3: the record size"));
  EXPECT_TRUE(has(parse_error("recordcount=10\nworkload=site.ycsb.workloads.TimeSeriesWorkload\n"),
                  "test.dat:2: workload=site.ycsb.workloads.TimeSeriesWorkload is not supported"));
  // All proportions zero.
  EXPECT_TRUE(has(parse_error(h + "readproportion=0\nupdateproportion=0\n"), "add up to 0, not 1 (every proportion is 0)"));
  // Within 1e-6 is fine.
  EXPECT_NO_THROW(parse(h + "readproportion=0.3333333\nupdateproportion=0.6666667\n", "ok", {}));
}

// Records of 0 bytes leave an update nothing to replace: refused when the mix updates (every update
// failed, and the bench still exited 0), accepted for reads and inserts (a table of keys alone).
TEST(YcsbErrors, EmptyRecordsRefuseUpdates) {
  const std::string h(kHead);  // lines 1-2
  EXPECT_TRUE(has(parse_error(h + "fieldcount=0\n"),
                  "test.dat:3: the record size fieldcount*fieldlength = 0*100 is 0 bytes, but updateproportion > 0"));
  EXPECT_TRUE(has(parse_error(h + "readproportion=0.5\nupdateproportion=0\nreadmodifywriteproportion=0.5\nfieldlength=0\n"),
                  "test.dat:6: the record size fieldcount*fieldlength = 10*0 is 0 bytes, but readmodifywriteproportion > 0"));
  EXPECT_TRUE(has(parse_error(h, {{"fieldcount", "0"}}), "-p fieldcount=0: the record size"));
  EXPECT_EQ(parse(h + "readproportion=1\nupdateproportion=0\nfieldcount=0\n", "ok", {}).value_bytes(), 0u);
  EXPECT_NO_THROW(parse(h + "readproportion=0.5\nupdateproportion=0\ninsertproportion=0.5\nfieldlength=0\n", "ok", {}));
}

TEST(YcsbErrors, Syntax) {
  const std::string h(kHead);
  EXPECT_TRUE(has(parse_error(h + "recordcount: 5\n"), "test.dat:3: expected name=value, got 'recordcount: 5' (use '='"));
  EXPECT_TRUE(has(parse_error(h + "=5\n"), "test.dat:3: there is no property name"));
  EXPECT_TRUE(has(parse_error(h + "read proportion=0.5\n"), "test.dat:3: 'read proportion' is not a property name"));
  EXPECT_TRUE(has(parse_error(h + "readproportion=0.5\\\n  0\n"), "test.dat:3: the line ends in '\\'"));
}

TEST(YcsbErrors, OverridesAreNamed) {
  const std::string bad = error_of([] { load_file(data("workloada"), {{"requestdistribution", "zipf"}}); });
  EXPECT_TRUE(has(bad, "-p requestdistribution=zipf: unknown requestdistribution 'zipf'"));
  const std::string num = error_of([] { load_file(data("workloada"), {parse_override("recordcount=many")}); });
  EXPECT_TRUE(has(num, "-p recordcount=many: recordcount must be a whole number, got 'many'"));
  const std::string sum = error_of([] { load_file(data("workloada"), {{"readproportion", "0.6"}}); });
  EXPECT_TRUE(has(sum, "add up to 1.1, not 1"));
  EXPECT_TRUE(has(sum, "readproportion=0.6 (-p)"));
  EXPECT_TRUE(has(sum, "updateproportion=0.5 (line 31)"));
}

// --- generators -------------------------------------------------------------------------------

TEST(YcsbGenerators, FnvHashMatchesYcsb) {
  // Values of YCSB's Utils.fnvhash64 (Java), computed independently.
  EXPECT_EQ(fnvhash64(0), 6284781860667377211ULL);
  EXPECT_EQ(fnvhash64(1), 8517097267634966620ULL);
  EXPECT_EQ(fnvhash64(1000), 5952875239596136740ULL);
  EXPECT_EQ(fnvhash64(123456789), 2350796791908741607ULL);
}

TEST(YcsbGenerators, Zeta) {
  double exact = 0;
  for (uint64_t i = 2'000'000; i >= 1; --i) exact += std::pow(static_cast<double>(i), -0.99);
  EXPECT_NEAR(ZipfianGenerator::zeta(2'000'000, 0.99), exact, exact * 1e-12);
  // Incremental extension agrees with computing from scratch.
  const double z1000 = ZipfianGenerator::zeta(1000, 0.99);
  EXPECT_NEAR(ZipfianGenerator::zeta(1000, 2'000'000, 0.99, z1000), exact, exact * 1e-12);
  EXPECT_NEAR(ZipfianGenerator::zeta(1000, 1001, 0.99, z1000), z1000 + std::pow(1001.0, -0.99), 1e-12);
  // YCSB's hard-coded zeta for ScrambledZipfianGenerator's 10^10 items.
  EXPECT_NEAR(ZipfianGenerator::zeta(ScrambledZipfianGenerator::kItemCount, 0.99), ScrambledZipfianGenerator::kZetan,
              1e-8);
  // theta > 1 converges to Riemann's zeta: zeta(2) = pi^2/6.
  EXPECT_NEAR(ZipfianGenerator::zeta(10'000'000'000ULL, 2.0), M_PI * M_PI / 6, 1e-9);
}

TEST(YcsbGenerators, RawZipfianHeadMatchesClosedForm) {
  constexpr uint64_t n = 1000;
  constexpr int draws = 200'000;
  ZipfianGenerator z(0, n - 1, 0.99);
  const double zeta = ZipfianGenerator::zeta(n, 0.99);
  EXPECT_DOUBLE_EQ(z.zetan(), zeta);
  Rng rng(42);
  std::vector<int> count(n, 0);
  for (int i = 0; i < draws; ++i) {
    const uint64_t v = z.next(rng);
    ASSERT_LT(v, n);
    ++count[v];
  }
  // P(item i) = (i+1)^-theta / zeta(n, theta): 12.9% for the first, 6.5% for the second.
  EXPECT_NEAR(count[0] / double(draws), 1.0 / zeta, 0.005);
  EXPECT_NEAR(count[1] / double(draws), std::pow(2.0, -0.99) / zeta, 0.005);
  // The head is ordered and the whole range is reached.
  EXPECT_GT(count[0], count[1]);
  EXPECT_GT(count[1], count[4]);
  EXPECT_GT(count[4], count[50]);
  EXPECT_GT(*std::max_element(count.begin() + 900, count.end()), 0);
  // Beyond the first two items Gray et al.'s method is a continuous approximation: the first k
  // items get 1 - (1 - (k/n)^(1-theta)) / eta of the draws (69.6% for k = 100, where the exact
  // zipfian share zeta(100)/zeta(1000) is 68.5%).
  const double eta = (1 - std::pow(2.0 / n, 0.01)) / (1 - ZipfianGenerator::zeta(2, 0.99) / zeta);
  int top = 0;
  for (uint64_t i = 0; i < 100; ++i) top += count[i];
  EXPECT_NEAR(top / double(draws), 1 - (1 - std::pow(100.0 / n, 0.01)) / eta, 0.005);
  EXPECT_NEAR(top / double(draws), ZipfianGenerator::zeta(100, 0.99) / zeta, 0.02);

  // A min offset shifts the items; a larger item count may be asked for (zeta grows incrementally).
  ZipfianGenerator shifted(10, 19, 0.5);
  Rng r2(7);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t v = shifted.next(r2);
    ASSERT_GE(v, 10u);
    ASSERT_LE(v, 19u);
  }
  for (int i = 0; i < 1000; ++i) ASSERT_LE(shifted.next(r2, 20), 29u);
  EXPECT_NEAR(shifted.zetan(), ZipfianGenerator::zeta(20, 0.5), 1e-12);
}

struct Tally {
  std::array<uint64_t, 5> ops{};
  std::map<uint64_t, uint64_t> keys;  // requested (non-insert) record -> count
  uint64_t requests = 0;
  double share(OpType t, uint64_t total) const { return ops[static_cast<int>(t)] / double(total); }
};

Tally run(const Workload& w, uint64_t n, uint64_t seed = 1, uint32_t client = 0, uint32_t clients = 1) {
  Generator g(w, client, clients, seed);
  Tally t;
  for (uint64_t i = 0; i < n; ++i) {
    const Op op = g.next();
    ++t.ops[static_cast<int>(op.type)];
    if (op.type != OpType::kInsert) {
      ++t.keys[op.key_index];
      ++t.requests;
    }
  }
  return t;
}

TEST(YcsbGenerators, OpMixMatchesProportions) {
  constexpr uint64_t n = 200'000;
  std::vector<Workload> ws;
  for (const char* f : {"workloada", "workloadb", "workloadc", "workloadd", "workloade", "workloadf"}) {
    ws.push_back(load_file(data(f)));
  }
  ws.push_back(parse(std::string(kHead) +
                         "readproportion=0.3\nupdateproportion=0.2\ninsertproportion=0.1\n"
                         "scanproportion=0.15\nreadmodifywriteproportion=0.25\nrequestdistribution=uniform\n",
                     "all5", {}));
  for (const Workload& w : ws) {
    SCOPED_TRACE(w.source);
    const Tally t = run(w, n);
    for (OpType op : {OpType::kRead, OpType::kUpdate, OpType::kInsert, OpType::kReadModifyWrite, OpType::kScan}) {
      EXPECT_NEAR(t.share(op, n), w.proportion(op), 0.01) << to_string(op);
      if (w.proportion(op) == 0) {
        EXPECT_EQ(t.ops[static_cast<int>(op)], 0u) << to_string(op);
      }
    }
  }
}

TEST(YcsbGenerators, Deterministic) {
  const Workload w = load_file(data("workloadd"));
  Generator a(w, 1, 4, 99), b(w, 1, 4, 99), c(w, 2, 4, 99), d(w, 1, 4, 100);
  bool differs_c = false, differs_d = false;
  for (int i = 0; i < 1000; ++i) {
    const Op x = a.next(), y = b.next(), z = c.next(), v = d.next();
    ASSERT_EQ(x.type, y.type);
    ASSERT_EQ(x.key_index, y.key_index);
    differs_c = differs_c || x.key_index != z.key_index || x.type != z.type;
    differs_d = differs_d || x.key_index != v.key_index || x.type != v.type;
  }
  EXPECT_TRUE(differs_c);
  EXPECT_TRUE(differs_d);
}

TEST(YcsbGenerators, ScrambledZipfianOverRecords) {
  // Workload C: the hottest record takes the share of the hottest of YCSB's 10^10 zipfian items
  // (1/26.47 = 3.8%, plus whatever else hashes onto it) and sits where FNV puts item 0.
  constexpr uint64_t n = 200'000;
  const Workload w = load_file(data("workloadc"));
  const Tally t = run(w, n);
  uint64_t hottest = 0, hottest_count = 0;
  for (const auto& [k, c] : t.keys) {
    ASSERT_LT(k, 1000u);  // only loaded records (1000 is in YCSB's range but never inserted)
    if (c > hottest_count) hottest = k, hottest_count = c;
  }
  EXPECT_EQ(hottest, fnvhash64(0) % 1001);
  const double share = hottest_count / double(n);
  EXPECT_GT(share, 1.0 / ScrambledZipfianGenerator::kZetan - 0.003);
  EXPECT_LT(share, 0.06);
  // Skewed, though less than a zipfian over 1000 items: only the head of YCSB's 10^10-item zipfian
  // lands on distinct records (zeta(1000)/zeta(10^10) = 29% of the mass); the tail spreads evenly.
  std::vector<uint64_t> counts;
  for (const auto& [k, c] : t.keys) counts.push_back(c);
  std::sort(counts.rbegin(), counts.rend());
  uint64_t top = 0;
  for (size_t i = 0; i < 100 && i < counts.size(); ++i) top += counts[i];
  EXPECT_GT(top / double(n), 0.25);  // the hottest 10% of the records
  EXPECT_LT(top / double(n), 0.4);
}

TEST(YcsbGenerators, ZipfianConstantOtherThanYcsbs) {
  // zeta over the 10^10 scrambled items is computed, not hard-coded; a smaller theta is less skewed.
  constexpr uint64_t n = 100'000;
  const Workload w7 = load_file(data("workloadc"), {{"zipfianconstant", "0.7"}});
  const Workload w99 = load_file(data("workloadc"));
  const Tally t7 = run(w7, n), t99 = run(w99, n);
  ASSERT_LT(t7.keys.rbegin()->first, 1000u);
  const auto hottest = [](const Tally& t) {
    uint64_t best = 0;
    for (const auto& [k, c] : t.keys) best = std::max(best, c);
    return best;
  };
  // Over 10^10 items theta 0.7 is nearly flat on 1000 records (item 0 gets 1/zeta = 0.03%).
  EXPECT_LT(hottest(t7) * 5, hottest(t99));
  EXPECT_LT(hottest(t7) / double(n), 0.002);

  // theta 1.5: item 0 of the 10^10 gets 1/zeta(10^10, 1.5) = 1/2.612 = 38% of the draws.
  ScrambledZipfianGenerator z(0, 9, 1.5);
  Rng rng(4);
  std::array<int, 10> count{};
  for (uint64_t i = 0; i < n; ++i) ++count[z.next(rng)];
  const int top = static_cast<int>(fnvhash64(0) % 10);
  EXPECT_EQ(*std::max_element(count.begin(), count.end()), count[top]);
  EXPECT_GT(count[top] / double(n), 1 / 2.612 - 0.01);
}

TEST(YcsbGenerators, ZipfianRequestsInsertedRecordsOnlyOnceInserted) {
  // E-like with many inserts: scans start at loaded records or at this client's own inserts,
  // never at a record not inserted yet, nor at another client's.
  const Workload w = parse(std::string(kHead) + "operationcount=20000\nreadproportion=0.5\nupdateproportion=0\n"
                                                "insertproportion=0.5\nrequestdistribution=zipfian\n",
                           "zins", {});
  for (uint32_t client = 0; client < 3; ++client) {
    Generator g(w, client, 3, 5);
    std::set<uint64_t> own;
    uint64_t new_reads = 0;
    for (int i = 0; i < 20000; ++i) {
      const Op op = g.next();
      if (op.type == OpType::kInsert) {
        ASSERT_GE(op.key_index, 1000u);
        ASSERT_EQ((op.key_index - 1000) % 3, client);
        ASSERT_TRUE(own.insert(op.key_index).second);
      } else if (op.key_index >= 1000) {
        ASSERT_TRUE(own.count(op.key_index)) << op.key_index;
        ++new_reads;
      }
    }
    EXPECT_GT(new_reads, 0u);
  }
}

TEST(YcsbGenerators, InsertsOfClientsNeverCollide) {
  const Workload w = load_file(data("workloadd"), {{"recordcount", "500"}});
  std::set<uint64_t> all;
  uint64_t inserts = 0;
  for (uint32_t c = 0; c < 4; ++c) {
    Generator g(w, c, 4, 3);
    for (int i = 0; i < 5000; ++i) {
      const Op op = g.next();
      if (op.type != OpType::kInsert) continue;
      ++inserts;
      EXPECT_EQ(op.key_index, g.insert_key(g.inserts_issued() - 1));
      ASSERT_GE(op.key_index, 500u);
      ASSERT_TRUE(all.insert(op.key_index).second) << op.key_index;
    }
  }
  EXPECT_EQ(all.size(), inserts);
  EXPECT_GT(inserts, 500u);
}

TEST(YcsbGenerators, UniformCoversTheRangeEvenly) {
  constexpr uint64_t n = 200'000, records = 100;
  const Workload w = parse("recordcount=100\nreadproportion=1\nupdateproportion=0\n", "u", {});
  const Tally t = run(w, n);
  ASSERT_EQ(t.keys.size(), records);  // every record, nothing else
  EXPECT_EQ(t.keys.begin()->first, 0u);
  EXPECT_EQ(t.keys.rbegin()->first, records - 1);
  const double expected = double(n) / records;
  double chi2 = 0;
  for (const auto& [k, c] : t.keys) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 200.0);  // 99 degrees of freedom: mean 99, sd 14
}

TEST(YcsbGenerators, LatestFavoursRecentInserts) {
  // Reads only: the last loaded record is the most popular, with zipfian shares by recency.
  constexpr uint64_t n = 200'000;
  const Workload ro = parse("recordcount=1000\nreadproportion=1\nupdateproportion=0\nrequestdistribution=latest\n",
                            "latest", {});
  const Tally t = run(ro, n);
  const double zeta = ZipfianGenerator::zeta(1000, 0.99);
  EXPECT_NEAR(t.keys.at(999) / double(n), 1.0 / zeta, 0.005);
  EXPECT_NEAR(t.keys.at(998) / double(n), std::pow(2.0, -0.99) / zeta, 0.005);
  uint64_t recent = 0;
  for (const auto& [k, c] : t.keys) recent += k >= 900 ? c : 0;
  EXPECT_NEAR(recent / double(n), ZipfianGenerator::zeta(100, 0.99) / zeta, 0.01);

  // Workload D: reads follow the inserts; the newest insert is read most.
  const Workload d = load_file(data("workloadd"));
  Generator g(d, 0, 1, 11);
  uint64_t reads = 0, newest = 0, of_inserted = 0;
  uint64_t last_insert = 999;
  for (uint64_t i = 0; i < n; ++i) {
    const Op op = g.next();
    if (op.type == OpType::kInsert) {
      EXPECT_EQ(op.key_index, last_insert + 1);
      last_insert = op.key_index;
      continue;
    }
    ++reads;
    ASSERT_LE(op.key_index, last_insert);
    newest += op.key_index == last_insert;
    of_inserted += op.key_index >= 1000;
  }
  const double zeta_end = ZipfianGenerator::zeta(last_insert + 1, 0.99);
  EXPECT_GT(newest / double(reads), 1.0 / zeta_end);  // the newest, of a growing record count
  EXPECT_LT(newest / double(reads), 1.0 / ZipfianGenerator::zeta(1000, 0.99) + 0.01);
  EXPECT_GT(of_inserted / double(reads), 0.9);  // ~10k inserts: nearly all reads are of new records
}

TEST(YcsbGenerators, HotspotSendsOpnFractionToTheHotSet) {
  constexpr uint64_t n = 200'000;
  const Workload w = parse("recordcount=10000\nrequestdistribution=hotspot\n", "hot", {});
  const Tally t = run(w, n);
  uint64_t hot = 0;
  for (const auto& [k, c] : t.keys) {
    ASSERT_LT(k, 10000u);
    hot += k < 2000 ? c : 0;  // the first 20% of the records
  }
  EXPECT_NEAR(hot / double(n), 0.8, 0.01);
  EXPECT_GT(t.keys.rbegin()->first, 9900u);  // the cold set is reached too

  const Workload w2 =
      parse("recordcount=10000\nrequestdistribution=hotspot\n", "hot",
            {{"hotspotdatafraction", "0.1"}, {"hotspotopnfraction", "0.6"}});
  const Tally t2 = run(w2, n);
  uint64_t hot2 = 0;
  for (const auto& [k, c] : t2.keys) hot2 += k < 1000 ? c : 0;
  EXPECT_NEAR(hot2 / double(n), 0.6, 0.01);

  // Degenerate hot sets do not divide by zero.
  run(parse("recordcount=10\nrequestdistribution=hotspot\nhotspotdatafraction=0\n", "h0", {}), 1000);
  const Tally all_hot = run(parse("recordcount=10\nrequestdistribution=hotspot\nhotspotdatafraction=1\n", "h1", {}), 1000);
  EXPECT_EQ(all_hot.keys.size(), 10u);
}

TEST(YcsbGenerators, ScanLengths) {
  const Workload e = load_file(data("workloade"));
  Generator g(e, 0, 1, 3);
  double sum = 0;
  uint64_t scans = 0;
  uint32_t lo = 1000, hi = 0;
  for (int i = 0; i < 100'000; ++i) {
    const Op op = g.next();
    if (op.type != OpType::kScan) {
      EXPECT_EQ(op.scan_length, 0u);
      continue;
    }
    ++scans;
    sum += op.scan_length;
    lo = std::min(lo, op.scan_length);
    hi = std::max(hi, op.scan_length);
  }
  EXPECT_EQ(lo, 1u);
  EXPECT_EQ(hi, 100u);
  EXPECT_NEAR(sum / scans, 50.5, 1.0);

  const Workload z = load_file(data("workloade"), {{"scanlengthdistribution", "zipfian"}, {"minscanlength", "5"}});
  Generator gz(z, 0, 1, 3);
  std::map<uint32_t, int> len;
  for (int i = 0; i < 100'000; ++i) {
    const Op op = gz.next();
    if (op.type == OpType::kScan) ++len[op.scan_length];
  }
  EXPECT_EQ(len.begin()->first, 5u);
  EXPECT_LE(len.rbegin()->first, 100u);
  EXPECT_GT(len[5], len[6]);
  EXPECT_GT(len[6], len[50]);
}

TEST(YcsbGenerators, AcknowledgedInsertsBecomeVisibleInOrder) {
  const Workload w = parse("recordcount=10\nreadproportion=0.5\nupdateproportion=0\ninsertproportion=0.5\n"
                           "requestdistribution=latest\n",
                           "ack", {});
  Generator g(w, 1, 2, 8, InsertVisibility::kOnAcknowledge);
  std::vector<uint64_t> pending;
  while (pending.size() < 3) {
    const Op op = g.next();
    if (op.type == OpType::kInsert) {
      pending.push_back(op.key_index);
    } else {
      ASSERT_LT(op.key_index, 10u);  // nothing acknowledged yet
    }
  }
  EXPECT_EQ(pending, (std::vector<uint64_t>{11, 13, 15}));
  EXPECT_EQ(g.inserts_visible(), 0u);
  g.acknowledge_insert(13);  // out of order: 11 is still in flight
  EXPECT_EQ(g.inserts_visible(), 0u);
  EXPECT_THROW(g.acknowledge_insert(13), std::invalid_argument);
  EXPECT_THROW(g.acknowledge_insert(12), std::invalid_argument);  // the other client's
  g.acknowledge_insert(11);
  EXPECT_EQ(g.inserts_visible(), 2u);
  // Records 11 and 13 may now be read, 15 not yet.
  bool read_13 = false;
  for (int i = 0; i < 2000; ++i) {
    const Op op = g.next();
    if (op.type == OpType::kInsert) continue;
    ASSERT_TRUE(op.key_index < 10 || op.key_index == 11 || op.key_index == 13) << op.key_index;
    read_13 = read_13 || op.key_index == 13;
  }
  EXPECT_TRUE(read_13);
}

}  // namespace
}  // namespace rdmahash::bench::ycsb
