#include "bench/ycsb.h"

#include "common/hash.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace rdmahash::bench::ycsb {

namespace {

constexpr std::string_view kBlanks = " \t\f\r\v";
constexpr std::string_view kCoreWorkload = "site.ycsb.workloads.CoreWorkload";
constexpr std::string_view kOldCoreWorkload = "com.yahoo.ycsb.workloads.CoreWorkload";

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(kBlanks);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(kBlanks);
  return s.substr(b, e - b + 1);
}

using hash::mix64;  // splitmix64's finalizer (common/hash.h)

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// Where a property's value came from.
struct Setting {
  std::string value;
  std::string origin;  // "FILE:LINE" or "-p name=value": the prefix of messages about it
  std::string brief;   // "line LINE" or "-p": for lists in messages
};

class Properties {
 public:
  explicit Properties(std::string source) : source_(std::move(source)) {}

  void set(std::string name, Setting s) { map_[std::move(name)] = std::move(s); }
  const Setting* find(std::string_view name) const {
    const auto it = map_.find(std::string(name));
    return it == map_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Setting>& all() const { return map_; }
  const std::string& source() const { return source_; }

  [[noreturn]] void fail(std::string_view name, const std::string& what) const {
    const Setting* s = find(name);
    throw YcsbError((s ? s->origin : source_) + ": " + what);
  }

  std::string str(std::string_view name, std::string_view dflt) const {
    const Setting* s = find(name);
    return s ? s->value : std::string(dflt);
  }

  uint64_t u64(std::string_view name, uint64_t dflt) const {
    const Setting* s = find(name);
    if (!s) return dflt;
    std::string_view v = s->value;
    if (v.starts_with('+')) v.remove_prefix(1);
    uint64_t out = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec == std::errc::result_out_of_range && end == v.data() + v.size()) {
      fail(name, std::string(name) + " is too large, got '" + s->value + "'");
    }
    if (v.empty() || ec != std::errc() || end != v.data() + v.size()) {
      if (s->value.starts_with('-') && s->value.size() > 1 &&
          s->value.find_first_not_of("0123456789", 1) == std::string::npos) {
        fail(name, std::string(name) + " must not be negative, got '" + s->value + "'");
      }
      fail(name, std::string(name) + " must be a whole number, got '" + s->value + "'" + comment_hint(s->value));
    }
    return out;
  }

  double dbl(std::string_view name, double dflt) const {
    const Setting* s = find(name);
    if (!s) return dflt;
    std::string_view v = s->value;
    if (v.starts_with('+')) v.remove_prefix(1);
    double out = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !std::isfinite(out)) {
      fail(name, std::string(name) + " must be a number, got '" + s->value + "'" + comment_hint(s->value));
    }
    return out;
  }

 private:
  static std::string comment_hint(const std::string& v) {
    return v.find('#') != std::string::npos ? " ('#' starts a comment only at the beginning of a line)" : "";
  }

  std::string source_;
  std::map<std::string, Setting> map_;
};

constexpr std::string_view kKnown[] = {
    "workload",           "recordcount",       "operationcount",        "readproportion",
    "updateproportion",   "insertproportion",  "readmodifywriteproportion", "scanproportion",
    "requestdistribution", "hotspotdatafraction", "hotspotopnfraction",  "zipfianconstant",
    "fieldcount",         "fieldlength",       "insertorder",           "minscanlength",
    "maxscanlength",      "scanlengthdistribution",
};

bool known(std::string_view name) {
  return std::find(std::begin(kKnown), std::end(kKnown), name) != std::end(kKnown);
}

void read_lines(std::string_view text, Properties& props) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  const std::string& src = props.source();
  uint64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    ++line_no;
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    const std::string_view line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty() || line.front() == '#' || line.front() == '!') continue;
    const std::string where = src + ":" + std::to_string(line_no);
    if (line.back() == '\\') {
      throw YcsbError(where + ": the line ends in '\\' (a Java properties line continuation), which is not supported");
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      std::string msg = where + ": expected name=value, got '" + std::string(line) + "'";
      if (line.find(':') != std::string_view::npos) msg += " (use '=' between the name and the value, not ':')";
      throw YcsbError(msg);
    }
    const std::string_view name = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    if (name.empty()) throw YcsbError(where + ": there is no property name before '='");
    if (name.find_first_of(kBlanks) != std::string_view::npos || name.find(':') != std::string_view::npos) {
      throw YcsbError(where + ": '" + std::string(name) + "' is not a property name (it contains a blank or ':')");
    }
    props.set(std::string(name), Setting{std::string(value), where, "line " + std::to_string(line_no)});
  }
}

Distribution parse_distribution(const Properties& p) {
  const std::string v = p.str("requestdistribution", "uniform");
  if (v == "uniform") return Distribution::kUniform;
  if (v == "zipfian") return Distribution::kZipfian;
  if (v == "latest") return Distribution::kLatest;
  if (v == "hotspot") return Distribution::kHotspot;
  if (v == "sequential" || v == "exponential") {
    p.fail("requestdistribution", "requestdistribution '" + v +
                                      "' is a YCSB distribution this tool does not support; use uniform, zipfian, "
                                      "latest or hotspot");
  }
  p.fail("requestdistribution",
         "unknown requestdistribution '" + v + "'; use uniform, zipfian, latest or hotspot");
}

double fraction(const Properties& p, std::string_view name, double dflt) {
  const double v = p.dbl(name, dflt);
  if (v < 0.0 || v > 1.0) {
    p.fail(name, std::string(name) + " must be between 0 and 1, got '" + p.str(name, "") + "'");
  }
  return v;
}

uint32_t scan_length(const Properties& p, std::string_view name, uint32_t dflt) {
  const uint64_t v = p.u64(name, dflt);
  if (v < 1) p.fail(name, std::string(name) + " must be at least 1");
  if (v > std::numeric_limits<uint32_t>::max()) {
    p.fail(name, std::string(name) + " is too large (at most 4294967295), got '" + p.str(name, "") + "'");
  }
  return static_cast<uint32_t>(v);
}

void read_proportions(const Properties& p, Workload& w) {
  struct Prop {
    std::string_view name;
    double dflt;
    double* out;
  };
  const Prop props[] = {
      {"readproportion", 0.95, &w.read_proportion},
      {"updateproportion", 0.05, &w.update_proportion},
      {"insertproportion", 0.0, &w.insert_proportion},
      {"scanproportion", 0.0, &w.scan_proportion},
      {"readmodifywriteproportion", 0.0, &w.read_modify_write_proportion},
  };
  double sum = 0.0;
  for (const Prop& pr : props) {
    const double v = p.dbl(pr.name, pr.dflt);
    if (v < 0.0) {
      p.fail(pr.name, std::string(pr.name) + " must not be negative, got '" + p.str(pr.name, "") + "'");
    }
    *pr.out = v;
    sum += v;
  }
  if (std::fabs(sum - 1.0) <= 1e-6) return;
  std::string terms;
  bool default_counts = false;
  for (const Prop& pr : props) {
    const Setting* s = p.find(pr.name);
    if (*pr.out == 0.0) continue;
    if (!terms.empty()) terms += " + ";
    terms += std::string(pr.name) + "=" + fmt(*pr.out) + " (" + (s ? s->brief : std::string("default")) + ")";
    default_counts = default_counts || s == nullptr;
  }
  std::string msg = p.source() + ": the operation proportions add up to " + fmt(sum) + ", not 1";
  msg += terms.empty() ? std::string(" (every proportion is 0)") : ": " + terms;
  if (default_counts) {
    msg += ". Proportions not in the file take YCSB's defaults (readproportion=0.95, updateproportion=0.05); "
           "set the ones you do not want to 0";
  }
  throw YcsbError(msg);
}

}  // namespace

// --- names --------------------------------------------------------------------------------------

std::string_view to_string(OpType t) {
  switch (t) {
    case OpType::kRead: return "read";
    case OpType::kUpdate: return "update";
    case OpType::kInsert: return "insert";
    case OpType::kReadModifyWrite: return "read-modify-write";
    case OpType::kScan: return "scan";
  }
  return "?";
}

std::string_view to_string(Distribution d) {
  switch (d) {
    case Distribution::kUniform: return "uniform";
    case Distribution::kZipfian: return "zipfian";
    case Distribution::kLatest: return "latest";
    case Distribution::kHotspot: return "hotspot";
  }
  return "?";
}

std::string_view to_string(ScanLengthDistribution d) {
  return d == ScanLengthDistribution::kUniform ? "uniform" : "zipfian";
}

std::string_view to_string(InsertOrder o) { return o == InsertOrder::kHashed ? "hashed" : "ordered"; }

// --- Workload -----------------------------------------------------------------------------------

double Workload::proportion(OpType t) const {
  switch (t) {
    case OpType::kRead: return read_proportion;
    case OpType::kUpdate: return update_proportion;
    case OpType::kInsert: return insert_proportion;
    case OpType::kReadModifyWrite: return read_modify_write_proportion;
    case OpType::kScan: return scan_proportion;
  }
  return 0.0;
}

uint64_t Workload::ops_for_client(uint32_t client, uint32_t clients) const {
  if (clients == 0 || client >= clients) throw std::invalid_argument("ops_for_client: client out of range");
  return operation_count / clients + (client < operation_count % clients ? 1 : 0);
}

std::pair<std::string, std::string> parse_override(std::string_view arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string_view::npos) {
    throw YcsbError("-p " + std::string(arg) + ": expected name=value (e.g. -p recordcount=1000000)");
  }
  const std::string_view name = trim(arg.substr(0, eq));
  if (name.empty()) throw YcsbError("-p " + std::string(arg) + ": there is no property name before '='");
  return {std::string(name), std::string(trim(arg.substr(eq + 1)))};
}

Workload parse(std::string_view file_text, std::string_view source_name,
               const std::vector<std::pair<std::string, std::string>>& overrides) {
  Properties p(source_name.empty() ? std::string("<workload>") : std::string(source_name));
  read_lines(file_text, p);
  for (const auto& [raw_name, raw_value] : overrides) {
    const std::string name(trim(raw_name));
    const std::string value(trim(raw_value));
    const std::string origin = "-p " + name + "=" + value;
    if (name.empty()) throw YcsbError(origin + ": there is no property name before '='");
    p.set(name, Setting{value, origin, "-p"});
  }

  Workload w;
  w.source = p.source();
  for (const auto& [name, s] : p.all()) {
    w.properties[name] = s.value;
    if (!known(name)) w.unknown_properties[name] = s.value;
  }

  // workload class
  if (const Setting* s = p.find("workload")) {
    if (s->value != kCoreWorkload && s->value != kOldCoreWorkload) {
      p.fail("workload", "workload=" + s->value + " is not supported: only YCSB's core workload (" +
                             std::string(kCoreWorkload) + " or " + std::string(kOldCoreWorkload) + ") is");
    }
    w.workload_class = s->value;
  }

  // counts
  w.record_count = p.u64("recordcount", 0);
  if (w.record_count == 0) {
    if (p.find("recordcount")) {
      p.fail("recordcount", "recordcount must be at least 1 (YCSB reads 0 as 'unbounded', which cannot be loaded)");
    }
    throw YcsbError(p.source() + ": recordcount is not set; set it in the file or with -p recordcount=N "
                                 "(YCSB's default, 0, means 'unbounded', which cannot be loaded)");
  }
  w.operation_count = p.u64("operationcount", 0);

  read_proportions(p, w);

  // request distribution
  w.request_distribution = parse_distribution(p);
  w.hotspot_data_fraction = fraction(p, "hotspotdatafraction", 0.2);
  w.hotspot_opn_fraction = fraction(p, "hotspotopnfraction", 0.8);
  w.zipfian_constant = p.dbl("zipfianconstant", 0.99);
  if (!(w.zipfian_constant > 0.0) || w.zipfian_constant == 1.0) {
    p.fail("zipfianconstant", "zipfianconstant must be greater than 0 and not 1 (the zipfian generator divides by "
                              "1 - zipfianconstant), got '" + p.str("zipfianconstant", "") + "'");
  }

  // record size
  w.field_count = p.u64("fieldcount", 10);
  w.field_length = p.u64("fieldlength", 100);
  constexpr uint64_t kMaxValue = std::numeric_limits<uint32_t>::max();
  if (w.field_length != 0 && w.field_count > kMaxValue / w.field_length) {
    p.fail(p.find("fieldcount") ? "fieldcount" : "fieldlength",
           "the record size fieldcount*fieldlength = " + std::to_string(w.field_count) + "*" +
               std::to_string(w.field_length) + " bytes is too large (at most 4294967295)");
  }
  // Records without a value leave an update nothing to replace (the bench refuses `--workload update
  // --value-bytes 0` alike): every update would fail, and the run would still exit 0.
  if (w.value_bytes() == 0 && (w.update_proportion > 0 || w.read_modify_write_proportion > 0)) {
    p.fail(w.field_count == 0 ? "fieldcount" : "fieldlength",
           "the record size fieldcount*fieldlength = " + std::to_string(w.field_count) + "*" +
               std::to_string(w.field_length) + " is 0 bytes, but " +
               (w.update_proportion > 0 ? "updateproportion" : "readmodifywriteproportion") +
               " > 0 and an update replaces a record's value: give fieldcount and fieldlength of at least 1");
  }

  // insert order
  const std::string order = p.str("insertorder", "hashed");
  if (order == "hashed") {
    w.insert_order = InsertOrder::kHashed;
  } else if (order == "ordered") {
    w.insert_order = InsertOrder::kOrdered;
  } else {
    p.fail("insertorder", "insertorder must be hashed or ordered, got '" + order + "'");
  }

  // scans
  w.min_scan_length = scan_length(p, "minscanlength", 1);
  w.max_scan_length = scan_length(p, "maxscanlength", 1000);
  if (w.min_scan_length > w.max_scan_length) {
    p.fail(p.find("maxscanlength") ? "maxscanlength" : "minscanlength",
           "minscanlength (" + std::to_string(w.min_scan_length) + ") is larger than maxscanlength (" +
               std::to_string(w.max_scan_length) + ")");
  }
  const std::string sld = p.str("scanlengthdistribution", "uniform");
  if (sld == "uniform") {
    w.scan_length_distribution = ScanLengthDistribution::kUniform;
  } else if (sld == "zipfian") {
    w.scan_length_distribution = ScanLengthDistribution::kZipfian;
  } else {
    p.fail("scanlengthdistribution", "unknown scanlengthdistribution '" + sld + "'; use uniform or zipfian");
  }

  // YCSB properties that change the workload but that this tool does not follow.
  if (const Setting* s = p.find("fieldlengthdistribution"); s && s->value != "constant") {
    w.warnings.push_back(s->origin + ": fieldlengthdistribution=" + s->value + " is ignored: every value is " +
                         std::to_string(w.value_bytes()) + " bytes (fieldcount*fieldlength)");
  }
  if (const Setting* s = p.find("insertstart"); s && s->value != "0") {
    w.warnings.push_back(s->origin + ": insertstart=" + s->value + " is ignored: records 0.." +
                         std::to_string(w.record_count - 1) + " are loaded and requested");
  }
  if (const Setting* s = p.find("insertcount"); s && s->value != std::to_string(w.record_count)) {
    w.warnings.push_back(s->origin + ": insertcount=" + s->value + " is ignored: all " +
                         std::to_string(w.record_count) + " records (recordcount) are loaded and requested");
  }
  return w;
}

Workload load_file(const std::filesystem::path& path,
                   const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw YcsbError("cannot open YCSB workload file '" + path.string() + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw YcsbError("cannot read YCSB workload file '" + path.string() + "'");
  return parse(text.str(), path.string(), overrides);
}

std::vector<OpType> used_op_types(const Workload& w) {
  std::vector<OpType> out;
  for (OpType t : {OpType::kRead, OpType::kUpdate, OpType::kInsert, OpType::kReadModifyWrite, OpType::kScan}) {
    if (w.proportion(t) > 0.0) out.push_back(t);
  }
  return out;
}

std::string summary(const Workload& w) {
  std::string s;
  for (OpType t : used_op_types(w)) {
    if (!s.empty()) s += ", ";
    s += std::string(to_string(t)) + " " + fmt(w.proportion(t));
    if (t == OpType::kScan) {
      s += " (" + std::to_string(w.min_scan_length) + ".." + std::to_string(w.max_scan_length) + " " +
           std::string(to_string(w.scan_length_distribution)) + ")";
    }
  }
  s += "; " + std::string(to_string(w.request_distribution));
  if (w.request_distribution == Distribution::kZipfian || w.request_distribution == Distribution::kLatest) {
    s += " (theta " + fmt(w.zipfian_constant) + ")";
  } else if (w.request_distribution == Distribution::kHotspot) {
    s += " (" + fmt(w.hotspot_opn_fraction * 100) + "% of requests on " + fmt(w.hotspot_data_fraction * 100) +
         "% of records)";
  }
  s += "; " + std::to_string(w.record_count) + " records of " + std::to_string(w.value_bytes()) + " B";
  s += "; " + (w.operation_count ? std::to_string(w.operation_count) + " ops" : std::string("no op count"));
  return s;
}

// --- random numbers -----------------------------------------------------------------------------

uint64_t Rng::next_u64() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return mix64(state_);
}

double Rng::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

uint64_t Rng::below(uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
}

uint64_t fnvhash64(uint64_t value) {
  uint64_t h = 0xCBF29CE484222325ULL;
  int64_t v = static_cast<int64_t>(value);
  for (int i = 0; i < 8; ++i) {
    const uint64_t octet = static_cast<uint64_t>(v) & 0xFF;
    v >>= 8;  // Java's >> on a long: arithmetic
    h ^= octet;
    h *= 1099511628211ULL;
  }
  return static_cast<int64_t>(h) < 0 ? 0 - h : h;  // Math.abs
}

// --- ZipfianGenerator ---------------------------------------------------------------------------

namespace {

// sum_{i=a..b} i^-theta for 1 <= a <= b: term by term while that is cheap, else the first terms
// exactly and the rest by Euler-Maclaurin (error terms beyond f''' are below 1e-20 at x >= 1024).
double zeta_range(uint64_t a, uint64_t b, double theta) {
  constexpr uint64_t kDirect = 1 << 16;
  constexpr uint64_t kTail = 1024;
  double s = 0.0;
  if (b - a < kDirect) {
    for (uint64_t i = b + 1; i-- > a;) s += std::pow(static_cast<double>(i), -theta);  // small terms first
    return s;
  }
  const uint64_t m = std::max(a, kTail);
  for (uint64_t i = m; i-- > a;) s += std::pow(static_cast<double>(i), -theta);
  const double lm = std::log(static_cast<double>(m));
  const double lb = std::log(static_cast<double>(b));
  const double one = 1.0 - theta;
  const double integral = std::exp(one * lm) * std::expm1(one * (lb - lm)) / one;
  const auto f = [&](double l) { return std::exp(-theta * l); };
  const auto d1 = [&](double l) { return -theta * std::exp((-theta - 1.0) * l); };
  const auto d3 = [&](double l) { return -theta * (theta + 1.0) * (theta + 2.0) * std::exp((-theta - 3.0) * l); };
  s += integral + (f(lm) + f(lb)) / 2.0 + (d1(lb) - d1(lm)) / 12.0 - (d3(lb) - d3(lm)) / 720.0;
  return s;
}

void check_theta(double theta) {
  if (!(theta > 0.0) || theta == 1.0 || !std::isfinite(theta)) {
    throw std::invalid_argument("zipfian constant must be > 0 and != 1");
  }
}

}  // namespace

double ZipfianGenerator::zeta(uint64_t from, uint64_t n, double theta, double initial) {
  if (n <= from) return initial;
  return initial + zeta_range(from + 1, n, theta);
}

ZipfianGenerator::ZipfianGenerator(uint64_t min, uint64_t max, double theta)
    : ZipfianGenerator(min, max, theta, (check_theta(theta), zeta(max - min + 1, theta))) {}

ZipfianGenerator::ZipfianGenerator(uint64_t min, uint64_t max, double theta, double zetan)
    : items_(max - min + 1), base_(min), theta_(theta) {
  check_theta(theta);
  if (max < min || items_ == 0) throw std::invalid_argument("ZipfianGenerator: empty or too large item range");
  alpha_ = 1.0 / (1.0 - theta_);
  zeta2_ = zeta(2, theta_);
  half_pow_theta_ = std::pow(0.5, theta_);
  zetan_ = zetan;
  count_for_zeta_ = items_;
  eta_ = items_ > 2 ? (1.0 - std::pow(2.0 / static_cast<double>(items_), 1.0 - theta_)) / (1.0 - zeta2_ / zetan_)
                    : 0.0;
}

void ZipfianGenerator::set_count(uint64_t n) {
  zetan_ = n > count_for_zeta_ ? zeta(count_for_zeta_, n, theta_, zetan_) : zeta(n, theta_);
  count_for_zeta_ = n;
  eta_ = n > 2 ? (1.0 - std::pow(2.0 / static_cast<double>(n), 1.0 - theta_)) / (1.0 - zeta2_ / zetan_) : 0.0;
}

uint64_t ZipfianGenerator::next(Rng& rng, uint64_t item_count) {
  if (item_count == 0) throw std::invalid_argument("ZipfianGenerator::next: no items");
  if (item_count != count_for_zeta_) set_count(item_count);
  const double u = rng.next_double();
  const double uz = u * zetan_;
  if (uz < 1.0) return base_;
  if (uz < 1.0 + half_pow_theta_) return base_ + 1;
  const double x = static_cast<double>(item_count) * std::pow(eta_ * u - eta_ + 1.0, alpha_);
  const uint64_t r = x >= static_cast<double>(item_count) ? item_count - 1 : static_cast<uint64_t>(x);
  return base_ + std::min(r, item_count - 1);
}

ScrambledZipfianGenerator::ScrambledZipfianGenerator(uint64_t min, uint64_t max, double theta)
    : gen_(0, kItemCount, theta, theta == 0.99 ? kZetan : (check_theta(theta), ZipfianGenerator::zeta(kItemCount + 1, theta))),
      min_(min),
      item_count_(max - min + 1) {
  if (max < min || item_count_ == 0) throw std::invalid_argument("ScrambledZipfianGenerator: bad item range");
}

uint64_t ScrambledZipfianGenerator::next(Rng& rng) { return min_ + fnvhash64(gen_.next(rng)) % item_count_; }

// --- Generator ----------------------------------------------------------------------------------

Generator::Generator(const Workload& w, uint32_t client, uint32_t clients, uint64_t seed,
                     InsertVisibility visibility)
    : rng_(mix64(mix64(seed ^ 0x59435342ULL) + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(client) + 1))),
      record_count_(w.record_count),
      client_(client),
      clients_(clients),
      hashed_(w.hashed_keys()),
      visibility_(visibility),
      dist_(w.request_distribution) {
  if (clients == 0 || client >= clients) throw std::invalid_argument("ycsb::Generator: client index out of range");
  if (w.record_count == 0) throw std::invalid_argument("ycsb::Generator: recordcount is 0");
  // YCSB's DiscreteGenerator order.
  const std::pair<double, OpType> weights[] = {
      {w.read_proportion, OpType::kRead},
      {w.update_proportion, OpType::kUpdate},
      {w.insert_proportion, OpType::kInsert},
      {w.scan_proportion, OpType::kScan},
      {w.read_modify_write_proportion, OpType::kReadModifyWrite},
  };
  double sum = 0.0;
  for (const auto& [p, t] : weights) {
    if (p > 0.0) {
      op_weights_.emplace_back(p, t);
      sum += p;
    }
  }
  if (op_weights_.empty()) throw std::invalid_argument("ycsb::Generator: every proportion is 0");
  for (auto& [p, t] : op_weights_) p /= sum;

  switch (dist_) {
    case Distribution::kUniform: break;
    case Distribution::kHotspot:
      hot_items_ = static_cast<uint64_t>(static_cast<double>(record_count_) * w.hotspot_data_fraction);
      hot_items_ = std::min(hot_items_, record_count_);
      hot_opn_fraction_ = w.hotspot_opn_fraction;
      break;
    case Distribution::kZipfian: {
      // CoreWorkload: room for twice the inserts the run is expected to make (its "fudge factor").
      const auto expected_new = static_cast<uint64_t>(static_cast<double>(w.operation_count) * w.insert_proportion * 2.0);
      scrambled_.emplace(0, record_count_ + expected_new, w.zipfian_constant);
      break;
    }
    case Distribution::kLatest: latest_.emplace(0, record_count_ - 1, w.zipfian_constant); break;
  }
  min_scan_ = w.min_scan_length;
  max_scan_ = w.max_scan_length;
  if (w.scan_length_distribution == ScanLengthDistribution::kZipfian) scan_zipf_.emplace(min_scan_, max_scan_, 0.99);
}

OpType Generator::choose_op() {
  double u = rng_.next_double();
  for (const auto& [p, t] : op_weights_) {
    if (u < p) return t;
    u -= p;
  }
  return op_weights_.back().second;  // rounding
}

bool Generator::visible(uint64_t key) const {
  if (key < record_count_) return true;
  const uint64_t rel = key - record_count_;
  return rel % clients_ == client_ && rel / clients_ < visible_;
}

uint64_t Generator::choose_key() {
  switch (dist_) {
    case Distribution::kUniform: return rng_.below(record_count_);
    case Distribution::kHotspot: {
      bool hot = rng_.next_double() < hot_opn_fraction_;
      if (hot_items_ == 0) hot = false;
      if (hot_items_ == record_count_) hot = true;
      return hot ? rng_.below(hot_items_) : hot_items_ + rng_.below(record_count_ - hot_items_);
    }
    case Distribution::kZipfian:
      for (;;) {
        const uint64_t k = scrambled_->next(rng_);
        if (visible(k)) return k;
      }
    case Distribution::kLatest: {
      // Positions in insertion order as this client knows it: the loaded records, then its own inserts.
      const uint64_t count = record_count_ + visible_;
      const uint64_t pos = count - 1 - latest_->next(rng_, count);
      return pos < record_count_ ? pos : insert_key(pos - record_count_);
    }
  }
  return 0;
}

uint32_t Generator::choose_scan_length() {
  if (scan_zipf_) return static_cast<uint32_t>(scan_zipf_->next(rng_));
  return min_scan_ + static_cast<uint32_t>(rng_.below(static_cast<uint64_t>(max_scan_) - min_scan_ + 1));
}

Op Generator::next() {
  Op op{choose_op(), 0, 0};
  switch (op.type) {
    case OpType::kInsert:
      op.key_index = insert_key(issued_++);
      if (visibility_ == InsertVisibility::kOnIssue) {
        visible_ = issued_;
      } else {
        acked_.push_back(false);
      }
      break;
    case OpType::kScan:
      op.key_index = choose_key();
      op.scan_length = choose_scan_length();
      break;
    default: op.key_index = choose_key(); break;
  }
  return op;
}

void Generator::acknowledge_insert(uint64_t key_index) {
  if (visibility_ == InsertVisibility::kOnIssue) return;
  const auto bad = [&] {
    throw std::invalid_argument("ycsb::Generator::acknowledge_insert: record " + std::to_string(key_index) +
                                " is not an unacknowledged insert of this client");
  };
  if (key_index < record_count_) bad();
  const uint64_t rel = key_index - record_count_;
  if (rel % clients_ != client_) bad();
  const uint64_t k = rel / clients_;
  if (k < visible_ || k >= issued_ || acked_[k - visible_]) bad();
  acked_[k - visible_] = true;
  while (!acked_.empty() && acked_.front()) {
    acked_.pop_front();
    ++visible_;
  }
}

}  // namespace rdmahash::bench::ycsb
