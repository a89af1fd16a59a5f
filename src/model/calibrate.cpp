// Model bootstrapping: see model/calibrate.h.
#include "model/calibrate.h"
#include "common/cpu_clock.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

extern char** environ;

namespace rdmahash::model {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Local buffers for the READs in flight: each operation takes one for its lifetime.
class BufferPool {
 public:
  BufferPool(uint32_t count, uint32_t bytes) : bufs_(count, std::vector<std::byte>(bytes)) {
    for (uint32_t i = 0; i < count; ++i) free_.push_back(count - 1 - i);
  }
  struct Lease {
    BufferPool* pool;
    uint32_t index;
    explicit Lease(BufferPool* p) : pool(p), index(p->free_.back()) { p->free_.pop_back(); }
    ~Lease() { pool->free_.push_back(index); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    std::byte* data() { return pool->bufs_[index].data(); }
  };

 private:
  std::vector<std::vector<std::byte>> bufs_;
  std::vector<uint32_t> free_;
};

Task<void> read_op(Engine* engine, RemoteAddr addr, uint32_t len, BufferPool* pool) {
  BufferPool::Lease buf(pool);
  co_await engine->read(addr, buf.data(), len);
}

class Runner {
 public:
  Runner(Engine& e, uint32_t node, uint64_t region, uint64_t seed) : e_(e), node_(node), region_(region), seed_(seed) {}

  // `count` READs of `bytes` at depth `depth`; calls on_latency(ns) per READ; returns seconds.
  template <class F>
  double run(uint64_t count, uint32_t depth, uint32_t bytes, F&& on_latency) {
    BufferPool pool(depth, bytes);
    const uint64_t positions = (region_ - bytes) / 8 + 1;
    const uint64_t stream = splitmix64(seed_ ^ (++phase_ * 0x2545f4914f6cdd1dULL));
    std::exception_ptr error;
    const auto start = Clock::now();
    e_.run_many(
        count, depth,
        [&](uint64_t i) {
          const uint64_t off = (splitmix64(stream + i) % positions) * 8;
          return read_op(&e_, RemoteAddr{node_, off}, bytes, &pool);
        },
        [&](const Engine::Completion& c) {
          if (c.error && !error) error = c.error;
          on_latency(static_cast<double>(c.latency.count()));
        });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (error) std::rethrow_exception(error);
    return seconds;
  }
  double run(uint64_t count, uint32_t depth, uint32_t bytes) {
    return run(count, depth, bytes, [](double) {});
  }

  // READs every byte of the region once, in order (depth 16, chunks of up to 64 KiB), so that
  // first-touch costs (page faults on either side, e.g. a shared-memory mapping's page tables
  // being filled in on the client) are paid before anything is measured.
  void sweep() {
    const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(region_, 65536));
    const uint32_t depth = 16;
    const uint64_t count = (region_ + chunk - 1) / chunk;
    BufferPool pool(depth, chunk);
    std::exception_ptr error;
    e_.run_many(
        count, depth,
        [&](uint64_t i) {
          const uint64_t off = std::min<uint64_t>(i * chunk, region_ - chunk);
          return read_op(&e_, RemoteAddr{node_, off}, chunk, &pool);
        },
        [&](const Engine::Completion& c) {
          if (c.error && !error) error = c.error;
        });
    if (error) std::rethrow_exception(error);
  }

 private:
  Engine& e_;
  uint32_t node_;
  uint64_t region_;
  uint64_t seed_;
  uint64_t phase_ = 0;
};

uint64_t warmup_count(uint64_t n) { return std::min<uint64_t>(std::max<uint64_t>(n / 10, 16), 2000); }

double quantile_sorted(const std::vector<double>& v, double q) {
  const size_t i = static_cast<size_t>(std::floor(q * static_cast<double>(v.size() - 1)));
  return v[i];
}

LatencySample measure_latency(Runner& r, uint32_t bytes, uint64_t iterations) {
  r.run(warmup_count(iterations), 1, bytes);
  std::vector<double> ns;
  ns.reserve(iterations);
  r.run(iterations, 1, bytes, [&](double x) { ns.push_back(x); });
  std::sort(ns.begin(), ns.end());
  LatencySample s;
  s.bytes = bytes;
  s.samples = ns.size();
  const size_t n = ns.size();
  s.median_ns = n % 2 ? ns[n / 2] : 0.5 * (ns[n / 2 - 1] + ns[n / 2]);
  s.p10_ns = quantile_sorted(ns, 0.10);
  s.p90_ns = quantile_sorted(ns, 0.90);
  s.min_ns = ns.front();
  double sum = 0;
  for (double x : ns) sum += x;
  s.mean_ns = sum / static_cast<double>(n);
  return s;
}

RateSample measure_rate(Runner& r, uint32_t bytes, uint32_t depth, uint64_t ops) {
  r.run(warmup_count(ops), depth, bytes);
  RateSample s;
  s.bytes = bytes;
  s.depth = depth;
  s.ops = ops;
  s.seconds = r.run(ops, depth, bytes);
  // A clock that did not advance (impossible in practice) must not produce inf.
  const double sec = std::max(s.seconds, 1e-9);
  s.ops_per_s = static_cast<double>(ops) / sec;
  s.bytes_per_s = s.ops_per_s * bytes;
  return s;
}

double thread_cpu_ns() { return static_cast<double>(common::thread_cpu_ns()); }

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The transport's own CPU per execute() of `depth` small READs: `batches` calls in a tight loop,
// the thread's CPU clock read once before and once after (a clock read is a system call, ~0.5 µs
// on a VM: per batch it would swamp what is measured), median over `loops` loops. The loop's own
// work per batch (an offset per request) is a few ns and is included.
double execute_cpu_per_batch(Transport& t, uint32_t node, uint64_t region, uint32_t bytes, uint32_t depth,
                             uint64_t batches, uint64_t seed, int loops) {
  std::vector<std::byte> buf(static_cast<size_t>(bytes) * depth);
  std::vector<Request> batch(depth);
  for (uint32_t i = 0; i < depth; ++i) {
    batch[i].kind = ReqKind::kRead;
    batch[i].buf = buf.data() + static_cast<size_t>(i) * bytes;
    batch[i].len = bytes;
  }
  const uint64_t positions = (region - bytes) / 8 + 1;
  uint64_t x = seed;
  auto post = [&] {
    for (Request& r : batch) {
      r.addr = RemoteAddr{node, (splitmix64(++x) % positions) * 8};
      r.status = ReqStatus::kUnknown;
    }
    t.execute(batch);
  };
  for (uint64_t i = 0; i < std::min<uint64_t>(batches, 1000); ++i) post();  // warm-up
  std::vector<double> per;
  for (int l = 0; l < loops; ++l) {
    const double c0 = thread_cpu_ns();
    for (uint64_t i = 0; i < batches; ++i) post();
    per.push_back((thread_cpu_ns() - c0) / static_cast<double>(batches));
  }
  return median_of(std::move(per));
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

bool positive_finite(double x) { return std::isfinite(x) && x > 0; }

// --- JSON -----------------------------------------------------------------------------------

using nlohmann::json;

constexpr const char* kFormat = "rdmahash-calibration";
constexpr int kVersion = 1;

json to_j(const LatencySample& s) {
  return {{"bytes", s.bytes},         {"samples", s.samples}, {"median_ns", s.median_ns},
          {"p10_ns", s.p10_ns},       {"p90_ns", s.p90_ns},   {"min_ns", s.min_ns},
          {"mean_ns", s.mean_ns}};
}
json to_j(const RateSample& s) {
  return {{"bytes", s.bytes},         {"depth", s.depth},         {"ops", s.ops},
          {"seconds", s.seconds},     {"ops_per_s", s.ops_per_s}, {"bytes_per_s", s.bytes_per_s}};
}

// Field access with messages naming the field (`where` is its path, e.g. "measurements.rate[2]").
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) fail("", where_.empty() ? "top level must be a JSON object" : "must be a JSON object");
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    std::string path = where_;
    if (!key.empty()) path += path.empty() ? key : "." + key;
    throw ProfileError(path.empty() ? what : "field '" + path + "' " + what);
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const char* key) const {
    if (!has(key)) fail(key, "is missing");
    return j_.at(key);
  }
  double number(const char* key) const {
    const json& v = at(key);
    if (!v.is_number()) fail(key, "must be a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "must be finite");
    return d;
  }
  double positive(const char* key) const {
    const double d = number(key);
    if (!(d > 0)) fail(key, "must be > 0 (got " + v_str(at(key)) + ")");
    return d;
  }
  template <class T>
  T unsigned_int(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(key, "must be a non-negative integer");
    const uint64_t u = v.get<uint64_t>();
    if (u > std::numeric_limits<T>::max()) fail(key, "is too large");
    return static_cast<T>(u);
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) fail(key, "must be a string");
    return v.get<std::string>();
  }
  const json& array(const char* key) const {
    const json& v = at(key);
    if (!v.is_array()) fail(key, "must be an array");
    return v;
  }
  std::string path(const char* key) const { return where_.empty() ? key : where_ + "." + key; }

 private:
  static std::string v_str(const json& v) { return v.dump(); }
  const json& j_;
  std::string where_;
};

LatencySample latency_from(const json& j, const std::string& where) {
  Reader r(j, where);
  LatencySample s;
  s.bytes = r.unsigned_int<uint32_t>("bytes");
  s.samples = r.unsigned_int<uint64_t>("samples");
  s.median_ns = r.number("median_ns");
  if (r.has("p10_ns")) s.p10_ns = r.number("p10_ns");
  if (r.has("p90_ns")) s.p90_ns = r.number("p90_ns");
  if (r.has("min_ns")) s.min_ns = r.number("min_ns");
  if (r.has("mean_ns")) s.mean_ns = r.number("mean_ns");
  return s;
}

RateSample rate_from(const json& j, const std::string& where) {
  Reader r(j, where);
  RateSample s;
  s.bytes = r.unsigned_int<uint32_t>("bytes");
  s.depth = r.unsigned_int<uint32_t>("depth");
  s.ops = r.unsigned_int<uint64_t>("ops");
  s.seconds = r.number("seconds");
  s.ops_per_s = r.number("ops_per_s");
  if (r.has("bytes_per_s")) s.bytes_per_s = r.number("bytes_per_s");
  return s;
}

}  // namespace

LinearFit fit_line(std::span<const double> x, std::span<const double> y) {
  if (x.size() != y.size()) throw std::invalid_argument("fit_line: x and y differ in length");
  if (x.size() < 2) throw std::invalid_argument("fit_line: need at least 2 points");
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) throw std::invalid_argument("fit_line: non-finite point");
    mx += x[i];
    my += y[i];
  }
  mx /= n;
  my /= n;
  // Centred sums: numerically stable for x spanning 8 … 65536.
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double dx = x[i] - mx, dy = y[i] - my;
    sxx += dx * dx;
    sxy += dx * dy;
    syy += dy * dy;
  }
  if (!(sxx > 0)) throw std::invalid_argument("fit_line: every x is the same");
  LinearFit f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  double ss_res = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = y[i] - (f.slope * x[i] + f.intercept);
    ss_res += e * e;
  }
  f.r2 = syy > 0 ? std::max(0.0, 1.0 - ss_res / syy) : 1.0;
  return f;
}

void CalibrateOptions::validate(uint64_t region_bytes) const {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  // Upper bounds too: the rate test runs 10 x iterations READs and every test keeps its samples.
  if (iterations == 0 || iterations > 1000000) fail("iterations must be in [1, 10^6]");
  if (small_bytes == 0) fail("the small READ size must be at least 1 byte");
  if (latency_sizes.size() < 2) fail("need at least 2 latency sizes to fit alpha");
  for (uint32_t s : latency_sizes)
    if (s == 0 || s > (1u << 24)) fail("latency sizes must be in [1, 2^24] bytes");
  if (std::adjacent_find(latency_sizes.begin(), latency_sizes.end(), std::not_equal_to<>()) == latency_sizes.end())
    fail("latency sizes must not all be equal");
  if (rate_depths.empty()) fail("need at least one rate depth");
  for (uint32_t d : rate_depths)
    if (d == 0 || d > 4096) fail("rate depths must be in [1, 4096]");
  if (bandwidth_bytes == 0 || bandwidth_bytes > (1u << 24)) fail("the bandwidth READ size must be in [1, 2^24] bytes");
  if (bandwidth_depth == 0 || bandwidth_depth > 4096) fail("the bandwidth depth must be in [1, 4096]");
  if (execute_depth < 2 || execute_depth > 4096) fail("the execute-CPU depth must be in [2, 4096]");
  if (throughput_sizes.size() < 2) fail("need at least 2 throughput sizes to fit the throughput model");
  for (uint32_t s : throughput_sizes)
    if (s == 0 || s > (1u << 24)) fail("throughput sizes must be in [1, 2^24] bytes");
  if (std::adjacent_find(throughput_sizes.begin(), throughput_sizes.end(), std::not_equal_to<>()) ==
      throughput_sizes.end())
    fail("throughput sizes must not all be equal");
  if (throughput_depth == 0 || throughput_depth > 4096) fail("the throughput depth must be in [1, 4096]");
  uint64_t largest = std::max<uint64_t>(small_bytes, bandwidth_bytes);
  for (uint32_t s : latency_sizes) largest = std::max<uint64_t>(largest, s);
  for (uint32_t s : throughput_sizes) largest = std::max<uint64_t>(largest, s);
  if (region_bytes < largest)
    fail("region-bytes (" + std::to_string(region_bytes) + ") must be at least the largest READ (" +
         std::to_string(largest) + " bytes)");
}

void Profile::validate() const {
  auto check = [](const char* name, double v) {
    if (!positive_finite(v))
      throw ProfileError(std::string("field '") + name + "' must be finite and > 0 (got " + std::to_string(v) + ")");
  };
  check("c_ns", c_ns);
  check("rho0_ops_per_s", rho0_ops_per_s);
  check("alpha_ns_per_byte", alpha_ns_per_byte);
  check("link_bytes_per_s", link_bytes_per_s);
}

CostParams Profile::cost_params(double slot_bytes, double header_bytes) const {
  CostParams p;
  p.c_ns = c_ns;
  p.alpha_ns_per_byte = alpha_ns_per_byte;
  p.rho0_ops_per_s = rho0_ops_per_s;
  p.link_bytes_per_s = link_bytes_per_s;
  p.header_bytes = header_bytes;
  p.slot_bytes = slot_bytes;
  return p;
}

CostParams Profile::throughput_cost_params(double slot_bytes, double header_bytes) const {
  if (!has_throughput())
    throw ProfileError("the profile has no throughput test (written by an older rdmahash calibrate): calibrate again");
  CostParams p = cost_params(slot_bytes, header_bytes);
  // A fit through noisy points can cross zero at 0 bytes; a READ is never free.
  p.c_ns = std::max(throughput_fit.intercept, 1.0);
  p.alpha_ns_per_byte = throughput_fit.slope > 0 ? throughput_fit.slope : 1e9 / link_bytes_per_s;
  return p;
}

std::vector<std::pair<std::string, std::string>> ucx_environment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view kv(*e);
    if (!kv.starts_with("UCX_")) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace_back(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Profile calibrate(Engine& engine, uint32_t node, uint64_t region_bytes, const CalibrateOptions& o) {
  o.validate(region_bytes);
  Runner runner(engine, node, region_bytes, o.seed);
  runner.sweep();
  Profile p;
  p.region_bytes = region_bytes;
  p.iterations = o.iterations;

  // Latency vs size (depth 1) → c and α.
  std::vector<double> xs, ys;
  bool small_measured = false;
  for (uint32_t bytes : o.latency_sizes) {
    p.latency.push_back(measure_latency(runner, bytes, o.iterations));
    xs.push_back(bytes);
    ys.push_back(p.latency.back().median_ns);
    if (bytes == o.small_bytes && !small_measured) {
      p.c_ns = p.latency.back().median_ns;
      small_measured = true;
    }
  }
  if (!small_measured) {
    p.latency.push_back(measure_latency(runner, o.small_bytes, o.iterations));
    p.c_ns = p.latency.back().median_ns;
  }
  p.latency_fit = fit_line(xs, ys);

  // Peak message rate of small READs → ρ0.
  const uint64_t rate_ops = o.rate_ops ? o.rate_ops : 10 * o.iterations;
  for (uint32_t depth : o.rate_depths) {
    p.rate.push_back(measure_rate(runner, o.small_bytes, depth, rate_ops));
    p.rho0_ops_per_s = std::max(p.rho0_ops_per_s, p.rate.back().ops_per_s);
  }

  // Large READs → l.
  const uint64_t bw_ops = o.bandwidth_ops ? o.bandwidth_ops : o.iterations;
  p.bandwidth.push_back(measure_rate(runner, o.bandwidth_bytes, o.bandwidth_depth, bw_ops));
  p.link_bytes_per_s = p.bandwidth.back().bytes_per_s;

  // Time per READ at depth vs size → the throughput model's c and α.
  {
    std::vector<double> bx, by;
    for (uint32_t bytes : o.throughput_sizes) {
      p.throughput.push_back(measure_rate(runner, bytes, o.throughput_depth, o.iterations));
      bx.push_back(bytes);
      by.push_back(1e9 / p.throughput.back().ops_per_s);
    }
    p.throughput_fit = fit_line(bx, by);
  }

  // The transport's own CPU per batch and per request (after the sweep and the runs above, so warm).
  {
    ExecuteCpu& x = p.execute_cpu;
    x.depth = o.execute_depth;
    x.batches = std::max<uint64_t>(o.iterations, 100);
    const uint64_t s = splitmix64(o.seed ^ 0x65786563ULL);
    x.batch_of_1_ns = execute_cpu_per_batch(engine.transport(), node, region_bytes, o.small_bytes, 1, x.batches, s, 5);
    x.batch_of_d_ns =
        execute_cpu_per_batch(engine.transport(), node, region_bytes, o.small_bytes, x.depth, x.batches, s + 1, 5);
    x.per_request_ns = std::max(0.0, (x.batch_of_d_ns - x.batch_of_1_ns) / static_cast<double>(x.depth - 1));
    x.per_batch_ns = std::max(0.0, x.batch_of_1_ns - x.per_request_ns);
  }

  if (p.latency_fit.slope > 0) {
    p.alpha_ns_per_byte = p.latency_fit.slope;
    p.alpha_source = "fit";
  } else {
    p.alpha_ns_per_byte = 1e9 / p.link_bytes_per_s;
    p.alpha_source = "inverse_bandwidth";
  }
  // A sub-nanosecond engine on a coarse clock could in principle measure 0 ns.
  if (!(p.c_ns > 0)) p.c_ns = std::max(p.latency_fit.intercept, 1.0);

  p.host = host_name();
  p.date = utc_now();
  return p;
}

std::string to_json(const Profile& p, int indent) {
  json env = json::object();
  for (const auto& [k, v] : p.env) env[k] = v;
  json lat = json::array(), rate = json::array(), bw = json::array();
  for (const auto& s : p.latency) lat.push_back(to_j(s));
  for (const auto& s : p.rate) rate.push_back(to_j(s));
  for (const auto& s : p.bandwidth) bw.push_back(to_j(s));
  json j = {
      {"format", kFormat},
      {"version", kVersion},
      {"c_ns", p.c_ns},
      {"rho0_ops_per_s", p.rho0_ops_per_s},
      {"alpha_ns_per_byte", p.alpha_ns_per_byte},
      {"link_bytes_per_s", p.link_bytes_per_s},
      {"alpha_source", p.alpha_source},
      {"fabric", p.fabric},
      {"ucx_tls", env.contains("UCX_TLS") ? env["UCX_TLS"] : json(nullptr)},
      {"ucx_env", env},
      {"host", p.host},
      {"date", p.date},
      {"region_bytes", p.region_bytes},
      {"iterations", p.iterations},
      {"measurements",
       {{"latency", lat},
        {"latency_fit",
         {{"slope_ns_per_byte", p.latency_fit.slope},
          {"intercept_ns", p.latency_fit.intercept},
          {"r2", p.latency_fit.r2}}},
        {"rate", rate},
        {"bandwidth", bw}}},
  };
  if (p.has_throughput()) {
    json tp = json::array();
    for (const auto& s : p.throughput) tp.push_back(to_j(s));
    j["measurements"]["throughput"] = tp;
    j["measurements"]["throughput_fit"] = {{"slope_ns_per_byte", p.throughput_fit.slope},
                                           {"intercept_ns", p.throughput_fit.intercept},
                                           {"r2", p.throughput_fit.r2}};
  }
  if (p.execute_cpu.measured()) {
    const ExecuteCpu& x = p.execute_cpu;
    j["measurements"]["execute_cpu"] = {{"depth", x.depth},
                                        {"batches", x.batches},
                                        {"batch_of_1_ns", x.batch_of_1_ns},
                                        {"batch_of_d_ns", x.batch_of_d_ns},
                                        {"per_batch_ns", x.per_batch_ns},
                                        {"per_request_ns", x.per_request_ns}};
  }
  return j.dump(indent);
}

Profile profile_from_json(std::string_view text) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw ProfileError(std::string("not valid JSON: ") + e.what());
  }
  try {
    Reader r(j, "");
    if (r.has("format") && r.string("format") != kFormat)
      r.fail("format", "must be \"" + std::string(kFormat) + "\"");
    if (r.has("version") && r.unsigned_int<uint32_t>("version") != kVersion)
      r.fail("version", "must be " + std::to_string(kVersion) + " (a newer rdmahash wrote this profile?)");
    Profile p;
    p.c_ns = r.positive("c_ns");
    p.rho0_ops_per_s = r.positive("rho0_ops_per_s");
    p.alpha_ns_per_byte = r.positive("alpha_ns_per_byte");
    p.link_bytes_per_s = r.positive("link_bytes_per_s");
    if (r.has("alpha_source")) p.alpha_source = r.string("alpha_source");
    if (r.has("fabric")) p.fabric = r.string("fabric");
    if (r.has("host")) p.host = r.string("host");
    if (r.has("date")) p.date = r.string("date");
    if (r.has("region_bytes")) p.region_bytes = r.unsigned_int<uint64_t>("region_bytes");
    if (r.has("iterations")) p.iterations = r.unsigned_int<uint64_t>("iterations");
    if (r.has("ucx_env")) {
      Reader env(r.at("ucx_env"), "ucx_env");
      for (const auto& [k, v] : r.at("ucx_env").items()) {
        if (!v.is_string()) env.fail(k, "must be a string");
        p.env.emplace_back(k, v.get<std::string>());
      }
    }
    if (r.has("measurements")) {
      Reader m(r.at("measurements"), "measurements");
      auto list = [&](const char* key, auto parse, auto& out) {
        if (!m.has(key)) return;
        const json& a = m.array(key);
        for (size_t i = 0; i < a.size(); ++i)
          out.push_back(parse(a[i], m.path(key) + "[" + std::to_string(i) + "]"));
      };
      list("latency", latency_from, p.latency);
      list("rate", rate_from, p.rate);
      list("bandwidth", rate_from, p.bandwidth);
      if (m.has("latency_fit")) {
        Reader f(m.at("latency_fit"), m.path("latency_fit"));
        p.latency_fit.slope = f.number("slope_ns_per_byte");
        p.latency_fit.intercept = f.number("intercept_ns");
        if (f.has("r2")) p.latency_fit.r2 = f.number("r2");
      }
      list("throughput", rate_from, p.throughput);
      if (m.has("throughput") && !p.has_throughput()) m.fail("throughput", "needs at least 2 sizes");
      if (m.has("throughput_fit") != p.has_throughput())
        m.fail("throughput_fit", "and throughput (at least 2 sizes) come together");
      if (m.has("throughput_fit")) {
        Reader f(m.at("throughput_fit"), m.path("throughput_fit"));
        p.throughput_fit.slope = f.number("slope_ns_per_byte");
        p.throughput_fit.intercept = f.number("intercept_ns");
        if (f.has("r2")) p.throughput_fit.r2 = f.number("r2");
        // A READ occupying a client for more than 1000 s, or 1 s per byte, is no measurement.
        if (!(std::abs(p.throughput_fit.intercept) < 1e12)) f.fail("intercept_ns", "must be within ±1e12 ns");
        if (!(std::abs(p.throughput_fit.slope) < 1e9)) f.fail("slope_ns_per_byte", "must be within ±1e9 ns/B");
      }
      if (m.has("execute_cpu")) {
        Reader x(m.at("execute_cpu"), m.path("execute_cpu"));
        ExecuteCpu& e = p.execute_cpu;
        e.depth = x.unsigned_int<uint32_t>("depth");
        e.batches = x.unsigned_int<uint64_t>("batches");
        if (!e.measured()) x.fail("depth", "must be at least 2, with batches at least 1");
        auto non_negative = [&](const char* key) {
          const double d = x.number(key);
          if (d < 0) x.fail(key, "must be >= 0");
          return d;
        };
        e.batch_of_1_ns = non_negative("batch_of_1_ns");
        e.batch_of_d_ns = non_negative("batch_of_d_ns");
        e.per_batch_ns = non_negative("per_batch_ns");
        e.per_request_ns = non_negative("per_request_ns");
      }
    }
    return p;
  } catch (const json::exception& e) {  // defensive: a type our checks did not foresee
    throw ProfileError(std::string("malformed: ") + e.what());
  }
}

Profile load_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ProfileError("cannot read profile '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ProfileError("cannot read profile '" + path + "'");
  try {
    return profile_from_json(ss.str());
  } catch (const ProfileError& e) {
    throw ProfileError("profile '" + path + "': " + e.what());
  }
}

}  // namespace rdmahash::model
