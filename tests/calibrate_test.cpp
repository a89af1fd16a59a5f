// Model bootstrapping (seed 000 §3.5): the least-squares fit, calibration on LocalFabric, and the
// profile's JSON form. No assertion depends on how fast this machine is beyond "positive, finite".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "model/calibrate.h"
#include "rdmahash/engine.h"
#include "rdmahash/fabric.h"
#include "rdmahash/model.h"

namespace m = rdmahash::model;

namespace {

bool positive_finite(double x) { return std::isfinite(x) && x > 0; }

m::CalibrateOptions quick_options() {
  m::CalibrateOptions o;
  o.iterations = 300;
  o.latency_sizes = {8, 256, 4096, 65536};
  o.rate_depths = {64, 256};
  o.rate_ops = 3000;
  o.bandwidth_ops = 200;
  return o;
}

m::Profile sample_profile() {
  m::Profile p;
  p.c_ns = 1290.5;
  p.rho0_ops_per_s = 87.17e6;
  p.alpha_ns_per_byte = 0.08;
  p.link_bytes_per_s = 12.5e9;
  p.alpha_source = "fit";
  p.latency_fit = {0.0812345678901, 1288.25, 0.9993};
  p.latency = {{8, 1000, 1290.5, 1200, 1500, 1100, 1301.25}, {65536, 1000, 6533.0, 6400, 6700, 6300, 6550.5}};
  p.rate = {{8, 64, 100000, 0.00114, 87.17e6, 697.36e6}};
  p.bandwidth = {{65536, 16, 2000, 0.0105, 190476.19, 12.48e9}};
  p.fabric = "ucx";
  p.env = {{"UCX_NET_DEVICES", "mlx5_0:1"}, {"UCX_TLS", "rc,self"}};
  p.host = "node17";
  p.date = "2024-05-01T12:00:00Z";
  p.region_bytes = 1ull << 26;
  p.iterations = 10000;
  p.execute_cpu = {16, 10000, 61.25, 451.5, 35.25, 26.0};
  p.throughput = {{8, 16, 10000, 0.0119, 840336.1, 6722689.0}, {4096, 16, 10000, 0.0631, 158478.6, 649128348.0}};
  p.throughput_fit = {1.2461234, 1182.5, 0.998};
  return p;
}

// Expects profile_from_json(text) to throw a ProfileError whose message contains `needle`.
void expect_rejected(const std::string& text, const std::string& needle) {
  try {
    m::profile_from_json(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const m::ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

}  // namespace

TEST(LinearFit, ExactOnALine) {
  // y = 0.08 x + 1290 on the calibration sizes: the fit must recover slope and intercept.
  const std::vector<double> x{8, 64, 256, 1024, 4096, 16384, 65536};
  std::vector<double> y;
  for (double v : x) y.push_back(0.08 * v + 1290.0);
  const m::LinearFit f = m::fit_line(x, y);
  EXPECT_NEAR(f.slope, 0.08, 1e-12);
  EXPECT_NEAR(f.intercept, 1290.0, 1e-9);
  EXPECT_NEAR(f.r2, 1.0, 1e-12);
}

TEST(LinearFit, KnownLeastSquaresSolution) {
  // Points off a line: (0,1), (1,3), (2,2), (3,5). Normal equations give slope 1.1, intercept 1.1.
  const std::vector<double> x{0, 1, 2, 3}, y{1, 3, 2, 5};
  const m::LinearFit f = m::fit_line(x, y);
  EXPECT_NEAR(f.slope, 1.1, 1e-12);
  EXPECT_NEAR(f.intercept, 1.1, 1e-12);
  // Residuals -0.1, 0.8, -1.3, 0.6: SS_res = 2.7; SS_tot = 8.75.
  EXPECT_NEAR(f.r2, 1.0 - 2.7 / 8.75, 1e-12);
}

TEST(LinearFit, NegativeAndZeroSlopes) {
  const std::vector<double> x{1, 2, 3}, down{5, 3, 1}, flat{7, 7, 7};
  EXPECT_NEAR(m::fit_line(x, down).slope, -2.0, 1e-12);
  EXPECT_NEAR(m::fit_line(x, down).intercept, 7.0, 1e-12);
  const m::LinearFit f = m::fit_line(x, flat);
  EXPECT_EQ(f.slope, 0.0);
  EXPECT_EQ(f.intercept, 7.0);
  EXPECT_EQ(f.r2, 1.0);
}

TEST(LinearFit, RejectsDegenerateInput) {
  const std::vector<double> one{1}, two{1, 2}, same{4, 4}, nan{1, NAN};
  EXPECT_THROW(m::fit_line(one, one), std::invalid_argument);
  EXPECT_THROW(m::fit_line(two, one), std::invalid_argument);
  EXPECT_THROW(m::fit_line(same, two), std::invalid_argument);
  EXPECT_THROW(m::fit_line(two, nan), std::invalid_argument);
}

TEST(Calibrate, LocalFabricGivesUsableParameters) {
  const uint64_t region = 1ull << 20;
  auto fabric = rdmahash::make_local_fabric({region});
  auto transport = fabric->connect();
  rdmahash::Engine engine(*transport);
  const m::CalibrateOptions o = quick_options();
  m::Profile p = m::calibrate(engine, 0, region, o);
  p.fabric = "local";

  EXPECT_TRUE(positive_finite(p.c_ns)) << p.c_ns;
  EXPECT_TRUE(positive_finite(p.rho0_ops_per_s)) << p.rho0_ops_per_s;
  EXPECT_TRUE(positive_finite(p.alpha_ns_per_byte)) << p.alpha_ns_per_byte;
  EXPECT_GE(p.alpha_ns_per_byte, 0.0);
  EXPECT_TRUE(positive_finite(p.link_bytes_per_s)) << p.link_bytes_per_s;
  EXPECT_NO_THROW(p.validate());
  EXPECT_TRUE(p.alpha_source == "fit" || p.alpha_source == "inverse_bandwidth") << p.alpha_source;
  if (p.alpha_source == "fit") {
    EXPECT_EQ(p.alpha_ns_per_byte, p.latency_fit.slope);
  }

  // Raw measurements: one latency row per size (8 B is among them, so it gives c), one rate row
  // per depth, one bandwidth row; every READ was issued.
  ASSERT_EQ(p.latency.size(), o.latency_sizes.size());
  for (size_t i = 0; i < p.latency.size(); ++i) {
    EXPECT_EQ(p.latency[i].bytes, o.latency_sizes[i]);
    EXPECT_EQ(p.latency[i].samples, o.iterations);
    EXPECT_LE(p.latency[i].min_ns, p.latency[i].median_ns);
    EXPECT_LE(p.latency[i].p10_ns, p.latency[i].median_ns);
    EXPECT_LE(p.latency[i].median_ns, p.latency[i].p90_ns);
  }
  EXPECT_EQ(p.c_ns, p.latency[0].median_ns);
  ASSERT_EQ(p.rate.size(), o.rate_depths.size());
  for (const auto& r : p.rate) {
    EXPECT_EQ(r.ops, o.rate_ops);
    EXPECT_TRUE(positive_finite(r.ops_per_s));
    EXPECT_LE(r.ops_per_s, p.rho0_ops_per_s);
  }
  // Each parameter is the statistic of its raw rows that the model defines, not just finite:
  // ρ0 is the best rate over the depths, l the bandwidth row, α the latency fit's slope (or 1/l
  // when the slope is not positive), and the fit is the least-squares line through the medians.
  double best_rate = 0;
  for (const auto& r : p.rate) best_rate = std::max(best_rate, r.ops_per_s);
  EXPECT_EQ(p.rho0_ops_per_s, best_rate);
  for (const auto& r : p.rate) EXPECT_NEAR(r.ops_per_s, static_cast<double>(r.ops) / r.seconds, 1e-6 * r.ops_per_s);
  std::vector<double> xs, ys;
  for (const auto& l : p.latency) xs.push_back(static_cast<double>(l.bytes)), ys.push_back(l.median_ns);
  const m::LinearFit refit = m::fit_line(xs, ys);
  EXPECT_NEAR(p.latency_fit.slope, refit.slope, 1e-9 * std::abs(refit.slope) + 1e-12);
  EXPECT_NEAR(p.latency_fit.intercept, refit.intercept, 1e-9 * std::abs(refit.intercept) + 1e-9);
  EXPECT_EQ(p.alpha_ns_per_byte, refit.slope > 0 ? refit.slope : 1e9 / p.link_bytes_per_s);
  ASSERT_EQ(p.bandwidth.size(), 1u);
  EXPECT_EQ(p.bandwidth[0].bytes, o.bandwidth_bytes);
  EXPECT_EQ(p.link_bytes_per_s, p.bandwidth[0].bytes_per_s);
  EXPECT_NEAR(p.bandwidth[0].bytes_per_s,
              static_cast<double>(p.bandwidth[0].bytes) * static_cast<double>(p.bandwidth[0].ops) / p.bandwidth[0].seconds,
              1e-6 * p.bandwidth[0].bytes_per_s);
  EXPECT_EQ(transport->counters().writes, 0u);

  // The transport's own CPU per execute(): measured, a batch of D READs costs more than a batch
  // of 1, and the two constants are the fit through those two points (clamped at 0).
  const m::ExecuteCpu& x = p.execute_cpu;
  ASSERT_TRUE(x.measured());
  EXPECT_EQ(x.depth, o.execute_depth);
  EXPECT_TRUE(positive_finite(x.batch_of_1_ns)) << x.batch_of_1_ns;
  EXPECT_GT(x.batch_of_d_ns, x.batch_of_1_ns);
  EXPECT_DOUBLE_EQ(x.per_request_ns, (x.batch_of_d_ns - x.batch_of_1_ns) / (x.depth - 1));
  EXPECT_DOUBLE_EQ(x.per_batch_ns, std::max(0.0, x.batch_of_1_ns - x.per_request_ns));
  // Every READ accounted for: the sweep (64 KiB chunks), warm-up + measured READs of each latency
  // size, rate depth and the bandwidth run, then the execute-CPU loops' (warm-up + 5 loops of
  // `batches` batches, of 1 and of D READs).
  auto warm = [](uint64_t n) { return std::min<uint64_t>(std::max<uint64_t>(n / 10, 16), 2000); };
  uint64_t expected = region / 65536;
  expected += o.latency_sizes.size() * (warm(o.iterations) + o.iterations);
  expected += o.rate_depths.size() * (warm(o.rate_ops) + o.rate_ops);
  expected += warm(o.bandwidth_ops) + o.bandwidth_ops;
  expected += (std::min<uint64_t>(x.batches, 1000) + 5 * x.batches) * (1 + x.depth);
  expected += o.throughput_sizes.size() * (warm(o.iterations) + o.iterations);
  EXPECT_EQ(transport->counters().reads, expected);

  // The throughput test: one row per size at the throughput depth, the fit is the least-squares
  // line through ns per READ (1 / rate), and throughput_cost_params() puts it in c's and α's place.
  ASSERT_TRUE(p.has_throughput());
  ASSERT_EQ(p.throughput.size(), o.throughput_sizes.size());
  std::vector<double> tx, ty;
  for (size_t i = 0; i < p.throughput.size(); ++i) {
    EXPECT_EQ(p.throughput[i].bytes, o.throughput_sizes[i]);
    EXPECT_EQ(p.throughput[i].depth, o.throughput_depth);
    EXPECT_EQ(p.throughput[i].ops, o.iterations);
    tx.push_back(p.throughput[i].bytes);
    ty.push_back(1e9 / p.throughput[i].ops_per_s);
  }
  const m::LinearFit tfit = m::fit_line(tx, ty);
  EXPECT_NEAR(p.throughput_fit.slope, tfit.slope, 1e-9 * std::abs(tfit.slope) + 1e-12);
  EXPECT_NEAR(p.throughput_fit.intercept, tfit.intercept, 1e-9 * std::abs(tfit.intercept) + 1e-9);
  const m::CostParams tp = p.throughput_cost_params(32.0);
  EXPECT_EQ(tp.c_ns, std::max(p.throughput_fit.intercept, 1.0));
  EXPECT_EQ(tp.alpha_ns_per_byte, p.throughput_fit.slope > 0 ? p.throughput_fit.slope : 1e9 / p.link_bytes_per_s);
  EXPECT_EQ(tp.rho0_ops_per_s, p.rho0_ops_per_s);
  EXPECT_EQ(tp.link_bytes_per_s, p.link_bytes_per_s);
  EXPECT_EQ(tp.slot_bytes, 32.0);

  // The profile feeds the model.
  const m::FirstEmptyDistribution dist(1000, 800);
  const m::ReadSizeChoice choice = m::optimal_read_size(dist, p.cost_params(8.0), true);
  EXPECT_GE(choice.read_size, 1u);
  EXPECT_TRUE(std::isfinite(choice.cost_ns));
}

TEST(Calibrate, AddsTheSmallReadWhenNotAmongTheSizes) {
  const uint64_t region = 1ull << 16;
  auto fabric = rdmahash::make_local_fabric({region});
  auto transport = fabric->connect();
  rdmahash::Engine engine(*transport);
  m::CalibrateOptions o = quick_options();
  o.iterations = 50;
  o.latency_sizes = {64, 4096};
  o.rate_depths = {8};
  o.rate_ops = 200;
  o.bandwidth_bytes = 4096;
  o.bandwidth_ops = 50;
  const m::Profile p = m::calibrate(engine, 0, region, o);
  ASSERT_EQ(p.latency.size(), 3u);
  EXPECT_EQ(p.latency[2].bytes, 8u);
  EXPECT_EQ(p.c_ns, p.latency[2].median_ns);
  EXPECT_NO_THROW(p.validate());
}

TEST(Calibrate, RejectsBadOptions) {
  auto fabric = rdmahash::make_local_fabric({4096});
  auto transport = fabric->connect();
  rdmahash::Engine engine(*transport);
  m::CalibrateOptions o = quick_options();
  EXPECT_THROW(m::calibrate(engine, 0, 4096, o), std::invalid_argument);  // 64 KiB READs > region
  o.latency_sizes = {8, 64};
  o.bandwidth_bytes = 1024;
  o.iterations = 0;
  EXPECT_THROW(m::calibrate(engine, 0, 4096, o), std::invalid_argument);
  o.iterations = 10;
  o.latency_sizes = {8};
  EXPECT_THROW(m::calibrate(engine, 0, 4096, o), std::invalid_argument);  // cannot fit alpha
  o.latency_sizes = {8, 64};
  o.rate_depths = {};
  EXPECT_THROW(m::calibrate(engine, 0, 4096, o), std::invalid_argument);
  o.rate_depths = {8};
  auto expect_invalid = [&](const std::string& needle) {
    try {
      m::calibrate(engine, 0, 4096, o);
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  o.throughput_sizes = {64};
  expect_invalid("need at least 2 throughput sizes");
  o.throughput_sizes = {64, 64};
  expect_invalid("throughput sizes must not all be equal");
  o.throughput_sizes = {8, 8192};
  expect_invalid("must be at least the largest READ (8192 bytes)");
  o.throughput_sizes = {8, 64};
  o.throughput_depth = 0;
  expect_invalid("the throughput depth must be in [1, 4096]");
  EXPECT_EQ(transport->counters().reads, 0u);  // validated before any READ
}

TEST(ProfileJson, RoundTrips) {
  const m::Profile p = sample_profile();
  for (int indent : {-1, 2}) {
    const m::Profile q = m::profile_from_json(m::to_json(p, indent));
    EXPECT_EQ(q.c_ns, p.c_ns);
    EXPECT_EQ(q.rho0_ops_per_s, p.rho0_ops_per_s);
    EXPECT_EQ(q.alpha_ns_per_byte, p.alpha_ns_per_byte);
    EXPECT_EQ(q.link_bytes_per_s, p.link_bytes_per_s);
    EXPECT_EQ(q.alpha_source, p.alpha_source);
    EXPECT_EQ(q.latency_fit.slope, p.latency_fit.slope);
    EXPECT_EQ(q.latency_fit.intercept, p.latency_fit.intercept);
    EXPECT_EQ(q.latency_fit.r2, p.latency_fit.r2);
    ASSERT_EQ(q.latency.size(), p.latency.size());
    for (size_t i = 0; i < p.latency.size(); ++i) {
      EXPECT_EQ(q.latency[i].bytes, p.latency[i].bytes);
      EXPECT_EQ(q.latency[i].samples, p.latency[i].samples);
      EXPECT_EQ(q.latency[i].median_ns, p.latency[i].median_ns);
      EXPECT_EQ(q.latency[i].p10_ns, p.latency[i].p10_ns);
      EXPECT_EQ(q.latency[i].p90_ns, p.latency[i].p90_ns);
      EXPECT_EQ(q.latency[i].min_ns, p.latency[i].min_ns);
      EXPECT_EQ(q.latency[i].mean_ns, p.latency[i].mean_ns);
    }
    ASSERT_EQ(q.rate.size(), 1u);
    EXPECT_EQ(q.rate[0].depth, 64u);
    EXPECT_EQ(q.rate[0].ops, 100000u);
    EXPECT_EQ(q.rate[0].seconds, p.rate[0].seconds);
    EXPECT_EQ(q.rate[0].ops_per_s, p.rate[0].ops_per_s);
    EXPECT_EQ(q.rate[0].bytes_per_s, p.rate[0].bytes_per_s);
    ASSERT_EQ(q.bandwidth.size(), 1u);
    EXPECT_EQ(q.bandwidth[0].bytes, 65536u);
    EXPECT_EQ(q.bandwidth[0].bytes_per_s, p.bandwidth[0].bytes_per_s);
    EXPECT_EQ(q.fabric, p.fabric);
    EXPECT_EQ(q.env, p.env);
    EXPECT_EQ(q.host, p.host);
    EXPECT_EQ(q.date, p.date);
    EXPECT_EQ(q.region_bytes, p.region_bytes);
    EXPECT_EQ(q.iterations, p.iterations);
    EXPECT_EQ(q.execute_cpu.depth, 16u);
    EXPECT_EQ(q.execute_cpu.batches, 10000u);
    EXPECT_EQ(q.execute_cpu.batch_of_1_ns, 61.25);
    EXPECT_EQ(q.execute_cpu.batch_of_d_ns, 451.5);
    EXPECT_EQ(q.execute_cpu.per_batch_ns, 35.25);
    EXPECT_EQ(q.execute_cpu.per_request_ns, 26.0);
    ASSERT_TRUE(q.has_throughput());
    ASSERT_EQ(q.throughput.size(), 2u);
    EXPECT_EQ(q.throughput[1].bytes, 4096u);
    EXPECT_EQ(q.throughput[1].depth, 16u);
    EXPECT_EQ(q.throughput[1].ops_per_s, p.throughput[1].ops_per_s);
    EXPECT_EQ(q.throughput_fit.slope, p.throughput_fit.slope);
    EXPECT_EQ(q.throughput_fit.intercept, p.throughput_fit.intercept);
    EXPECT_EQ(q.throughput_fit.r2, p.throughput_fit.r2);
    EXPECT_EQ(q.throughput_cost_params(8.0).c_ns, 1182.5);
    EXPECT_EQ(q.throughput_cost_params(8.0).alpha_ns_per_byte, 1.2461234);
    EXPECT_EQ(m::to_json(q), m::to_json(p));
  }
}

TEST(ProfileJson, OnlyTheFourParametersAreRequired) {
  const m::Profile p =
      m::profile_from_json(R"({"c_ns": 2000, "rho0_ops_per_s": 1e7, "alpha_ns_per_byte": 0.1, "link_bytes_per_s": 5e9})");
  EXPECT_EQ(p.c_ns, 2000);
  EXPECT_EQ(p.rho0_ops_per_s, 1e7);
  const m::CostParams cp = p.cost_params(32.0, 30.0);
  EXPECT_EQ(cp.slot_bytes, 32.0);
  EXPECT_EQ(cp.alpha_ns_per_byte, 0.1);
  EXPECT_EQ(cp.link_bytes_per_s, 5e9);
  // A profile from before the throughput test: model-throughput must refuse it, not guess.
  EXPECT_FALSE(p.has_throughput());
  EXPECT_THROW(p.throughput_cost_params(32.0), m::ProfileError);
}

TEST(ProfileJson, ThroughputFitClampsToAUsableModel) {
  m::Profile p = sample_profile();
  p.throughput_fit = {-0.01, -50.0, 0.1};  // noisy points: a falling line through a negative intercept
  const m::CostParams tp = p.throughput_cost_params(8.0);
  EXPECT_EQ(tp.c_ns, 1.0);
  EXPECT_EQ(tp.alpha_ns_per_byte, 1e9 / p.link_bytes_per_s);
}

TEST(ProfileJson, MalformedProfilesAreRejected) {
  const std::string ok_tail = R"("rho0_ops_per_s": 1e7, "alpha_ns_per_byte": 0.1, "link_bytes_per_s": 5e9)";
  expect_rejected("", "not valid JSON");
  expect_rejected("{\"c_ns\": 12,", "not valid JSON");
  expect_rejected("[1, 2]", "top level must be a JSON object");
  expect_rejected("{" + ok_tail + "}", "field 'c_ns' is missing");
  expect_rejected("{\"c_ns\": \"fast\", " + ok_tail + "}", "field 'c_ns' must be a number");
  expect_rejected("{\"c_ns\": 0, " + ok_tail + "}", "field 'c_ns' must be > 0");
  expect_rejected("{\"c_ns\": -5, " + ok_tail + "}", "field 'c_ns' must be > 0");
  expect_rejected("{\"c_ns\": null, " + ok_tail + "}", "field 'c_ns' is missing");
  expect_rejected(R"({"c_ns": 1, "rho0_ops_per_s": 1e7, "alpha_ns_per_byte": 0.1})", "field 'link_bytes_per_s' is missing");
  expect_rejected("{\"format\": \"something-else\", \"c_ns\": 1, " + ok_tail + "}", "field 'format' must be");
  expect_rejected("{\"version\": 99, \"c_ns\": 1, " + ok_tail + "}", "field 'version' must be 1");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"rate": [{"bytes": 8}]}})",
                  "field 'measurements.rate[0].depth' is missing");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"latency": {}}})",
                  "field 'measurements.latency' must be an array");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "ucx_env": {"UCX_TLS": 5}})", "field 'ucx_env.UCX_TLS' must be a string");
  const std::string x_ok = R"("batch_of_1_ns": 60, "batch_of_d_ns": 450, "per_batch_ns": 34, "per_request_ns": 26)";
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"execute_cpu": {"depth": 1, "batches": 9, )" + x_ok + "}}}",
                  "field 'measurements.execute_cpu.depth' must be at least 2");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"execute_cpu": {"depth": 16, "batches": 9, )" +
                      R"("batch_of_1_ns": 60, "batch_of_d_ns": 450, "per_batch_ns": 34, "per_request_ns": -1}}})",
                  "field 'measurements.execute_cpu.per_request_ns' must be >= 0");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"execute_cpu": {"depth": 16, "batches": 9}}})",
                  "field 'measurements.execute_cpu.batch_of_1_ns' is missing");
  const std::string tp_row = R"({"bytes": 8, "depth": 16, "ops": 10, "seconds": 1, "ops_per_s": 10, "bytes_per_s": 80})";
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"throughput_fit": {"slope_ns_per_byte": 1, "intercept_ns": 9}}})",
                  "field 'measurements.throughput_fit' and throughput");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"throughput": [)" + tp_row + "," + tp_row + "]}}",
                  "field 'measurements.throughput_fit' and throughput");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"throughput": [)" + tp_row + "," + tp_row +
                      R"(], "throughput_fit": {"intercept_ns": 9}}})",
                  "field 'measurements.throughput_fit.slope_ns_per_byte' is missing");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"throughput": [)" + tp_row + "]}}",
                  "field 'measurements.throughput' needs at least 2 sizes");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"throughput": [)" + tp_row + "," + tp_row +
                      R"(], "throughput_fit": {"slope_ns_per_byte": 1, "intercept_ns": 1e300}}})",
                  "field 'measurements.throughput_fit.intercept_ns' must be within");
  expect_rejected("{\"c_ns\": 1, " + ok_tail + R"(, "measurements": {"throughput": [)" + tp_row + "," + tp_row +
                      R"(], "throughput_fit": {"slope_ns_per_byte": -1e10, "intercept_ns": 5}}})",
                  "field 'measurements.throughput_fit.slope_ns_per_byte' must be within");
}

TEST(ProfileJson, LoadProfileNamesTheFile) {
  try {
    m::load_profile("/nonexistent/dir/profile.json");
    ADD_FAILURE();
  } catch (const m::ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read profile '/nonexistent/dir/profile.json'"), std::string::npos);
  }
  const std::string path = ::testing::TempDir() + "calibrate_test_bad_profile.json";
  {
    std::ofstream f(path);
    f << R"({"c_ns": 1, "rho0_ops_per_s": -1, "alpha_ns_per_byte": 0.1, "link_bytes_per_s": 5e9})";
  }
  try {
    m::load_profile(path);
    ADD_FAILURE();
  } catch (const m::ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("profile '" + path + "': field 'rho0_ops_per_s' must be > 0"), std::string::npos)
        << e.what();
  }
  {
    std::ofstream f(path);
    f << m::to_json(sample_profile());
  }
  EXPECT_EQ(m::load_profile(path).c_ns, 1290.5);
  std::remove(path.c_str());
}
