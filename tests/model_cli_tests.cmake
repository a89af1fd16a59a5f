# End-to-end tests of `rdmahash model` and `rdmahash calibrate`.
# Included from tests/CMakeLists.txt after RDMAHASH_MPIRUN and RDMAHASH_MPI_ENV are set.
set(MODEL_CLI_BIN $<TARGET_FILE:rdmahash_cli>)
set(MODEL_CLI_EXPECT_FAIL ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh)
set(MODEL_CLI_OUT ${CMAKE_CURRENT_BINARY_DIR}/model_cli)
file(MAKE_DIRECTORY ${MODEL_CLI_OUT})

# python3 -c "${MODEL_CLI_CHECK}" EXPECTATION... -- COMMAND...
# Runs COMMAND, requires exit 0 and one JSON object on stdout, then checks each EXPECTATION:
# `a.b` (the field exists and is not null) or `a.b=VALUE` (VALUE parsed as JSON if it can be,
# else a string; numbers compared to 1e-9 relative). Model output (it has `read_size`) must also be
# self-consistent: cost = E[X(R)]·T(R), a constrained optimum within the bandwidth bound, and every
# curve row's cost = E·T.
set(MODEL_CLI_CHECK [=[
import json, math, subprocess, sys
sep = sys.argv.index('--')
expectations, cmd = sys.argv[1:sep], sys.argv[sep + 1:]
run = subprocess.run(cmd, capture_output=True, text=True)
if run.returncode != 0:
    sys.exit('exit status %d: %s' % (run.returncode, run.stderr))
out = json.loads(run.stdout)
def field(path):
    v = out
    for k in path.split('.'):
        if not isinstance(v, dict) or v.get(k) is None:
            sys.exit('missing field %s in %s' % (path, run.stdout))
        v = v[k]
    return v
def same(a, b):
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9)
for e in expectations:
    path, eq, want = e.partition('=')
    got = field(path)
    if eq:
        try:
            want = json.loads(want)
        except ValueError:
            pass
        if not same(got, want):
            sys.exit('%s: expected %r, got %r' % (path, want, got))
if 'read_size' in out:
    if not same(out['cost_ns'], out['expected_reads'] * out['read_cost_ns']):
        sys.exit('cost_ns != expected_reads * read_cost_ns')
    if out['mode'] == 'optimize' and out['constrained'] and not out['exceeds_bandwidth'] and out['read_size'] > out['max_read_size_by_bandwidth']:
        sys.exit('constrained read size above the bandwidth bound')
    if out['expected_reads'] < 1:
        sys.exit('expected_reads < 1')
    for row in out.get('curve', []):
        if not same(row['cost_ns'], row['expected_reads'] * row['read_cost_ns']) or row['expected_reads'] < 1:
            sys.exit('bad curve row %r' % row)
print('ok: ' + ' '.join(expectations))
]=])
set(MODEL_CLI_FIELDS read_size expected_reads cost_ns constrained max_read_size_by_bandwidth
    slots records load_factor slot_bytes header_bytes c_ns alpha_ns_per_byte rho0_ops_per_s link_bytes_per_s)
set(MODEL_CLI_SEED c_ns=1290 alpha_ns_per_byte=0.08 rho0_ops_per_s=87170000 link_bytes_per_s=12500000000)

# Seed 000 §5.1: N = 120·2^20 records, 8-byte slots, the paper's parameters (the defaults).
# Eq. 2 bounds R by floor(l(h+w)/(w ρ0 h)) = 22 slots (see model.h).
add_test(NAME model_json_seed_lf050 COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS} ${MODEL_CLI_SEED}
  records=125829120 slots=251658240 load_factor=0.5 constrained=true max_read_size_by_bandwidth=22 mode=optimize
  -- ${MODEL_CLI_BIN} model --records 125829120 --load-factor 0.5 --json)
add_test(NAME model_json_seed_lf090 COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS} ${MODEL_CLI_SEED}
  records=125829120 slots=139810134 constrained=true max_read_size_by_bandwidth=22 read_size=22
  -- ${MODEL_CLI_BIN} model --records 125829120 --load-factor 0.9 --json)
add_test(NAME model_json_unconstrained_curve COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS}
  constrained=false curve slots=1000 records=850
  -- ${MODEL_CLI_BIN} model --slots 1000 --records 850 --unconstrained --curve 1-64 --json)
add_test(NAME model_json_evaluate COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS}
  mode=evaluate read_size=32 exceeds_bandwidth=true read_bytes=256
  -- ${MODEL_CLI_BIN} model --records 125829120 --load-factor 0.8 --read-size 32 --json)
# A cluster starting at the probe start: one READ of L+1 slots reaches the empty slot (§4.4).
add_test(NAME model_json_cluster_hint COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS}
  read_size=6 expected_reads=1 cluster_offset=0 cluster_length=5
  -- ${MODEL_CLI_BIN} model --records 800 --slots 1000 --cluster-offset 0 --cluster-length 5 --json)
add_test(NAME model_json_flags_and_slot_bytes COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS}
  c_ns=500 slot_bytes=32 header_bytes=40 param_sources.c_ns=flag param_sources.rho0_ops_per_s=seed000
  -- ${MODEL_CLI_BIN} model --records 1000 --load-factor 0.75 --c-ns 500 --slot-bytes 32 --header-bytes 40 --json)
# expect_ok.sh: exit 0 AND the text (PASS_REGULAR_EXPRESSION alone would ignore the exit status).
set(MODEL_CLI_EXPECT_OK ${CMAKE_CURRENT_SOURCE_DIR}/expect_ok.sh)
add_test(NAME model_text COMMAND ${MODEL_CLI_EXPECT_OK} "optimal R = [0-9]+ slots.*E\\[X\\(R\\)\\] = "
  ${MODEL_CLI_BIN} model --records 125829120 --load-factor 0.65 --curve 20-24)

# Impossible inputs: exit status 2 and a message naming the problem.
add_test(NAME model_fail_n_ge_m COMMAND ${MODEL_CLI_EXPECT_FAIL} "records N \\(100\\) must be less than slots M \\(100\\)"
  ${MODEL_CLI_BIN} model --records 100 --slots 100)
add_test(NAME model_fail_read_size_zero COMMAND ${MODEL_CLI_EXPECT_FAIL} "--read-size must be at least 1"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --read-size 0)
add_test(NAME model_fail_negative_cost COMMAND ${MODEL_CLI_EXPECT_FAIL} "--c-ns must be a positive number"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --c-ns -5)
add_test(NAME model_fail_zero_alpha COMMAND ${MODEL_CLI_EXPECT_FAIL} "--alpha-ns-per-byte must be a positive number"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --alpha-ns-per-byte 0)
add_test(NAME model_fail_load_factor_one COMMAND ${MODEL_CLI_EXPECT_FAIL} "--load-factor must be in \\(0,1\\)"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 1)
add_test(NAME model_fail_missing_records COMMAND ${MODEL_CLI_EXPECT_FAIL} "--records is required"
  ${MODEL_CLI_BIN} model --load-factor 0.5)
add_test(NAME model_fail_missing_size COMMAND ${MODEL_CLI_EXPECT_FAIL} "give --slots M or --load-factor F"
  ${MODEL_CLI_BIN} model --records 100)
add_test(NAME model_fail_profile_path COMMAND ${MODEL_CLI_EXPECT_FAIL} "cannot read profile '/nonexistent/profile.json'"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --profile /nonexistent/profile.json)
add_test(NAME model_fail_profile_malformed COMMAND ${MODEL_CLI_EXPECT_FAIL} "profile '.*expect_fail.sh': not valid JSON"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --profile ${MODEL_CLI_EXPECT_FAIL})
# A number beyond double in a profile (1e400: nlohmann's out_of_range, not a parse_error) aborted
# `model` (exit 134); it is bad input naming the file, for `model` and for `bench --profile` alike.
set(MODEL_CLI_OVERFLOW_PROFILE ${CMAKE_CURRENT_SOURCE_DIR}/data/profile_number_overflow.json)
add_test(NAME model_fail_profile_number_overflow COMMAND ${MODEL_CLI_EXPECT_FAIL}
  "profile '.*profile_number_overflow.json': not valid JSON: .*number overflow"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --profile ${MODEL_CLI_OVERFLOW_PROFILE})
add_test(NAME bench_fail_profile_number_overflow COMMAND ${MODEL_CLI_EXPECT_FAIL}
  "profile '.*profile_number_overflow.json': not valid JSON: .*number overflow"
  ${MODEL_CLI_BIN} bench --fabric local --records 100 --ops 1 --profile ${MODEL_CLI_OVERFLOW_PROFILE})
add_test(NAME model_fail_curve COMMAND ${MODEL_CLI_EXPECT_FAIL} "--curve must be R1-R2"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --curve 9-3)
add_test(NAME calibrate_fail_fabric COMMAND ${MODEL_CLI_EXPECT_FAIL} "--fabric must be local or ucx"
  ${MODEL_CLI_BIN} calibrate --fabric verbs)
add_test(NAME calibrate_fail_region COMMAND ${MODEL_CLI_EXPECT_FAIL} "region-bytes .* must be at least the largest READ"
  ${MODEL_CLI_BIN} calibrate --region-bytes 8192)
add_test(NAME calibrate_fail_out COMMAND ${MODEL_CLI_EXPECT_FAIL} "cannot open --out file"
  ${MODEL_CLI_BIN} calibrate --iterations 10 --out /nonexistent/dir/profile.json)

# calibrate → profile → model, in process and over UCX (rank 0 memory node, rank 1 client).
set(MODEL_CLI_CAL --iterations 2000 --region-bytes 4194304)
add_test(NAME calibrate_local_stdout COMMAND python3 -c "${MODEL_CLI_CHECK}"
  c_ns rho0_ops_per_s alpha_ns_per_byte link_bytes_per_s fabric=local format=rdmahash-calibration
  measurements.latency measurements.rate measurements.bandwidth measurements.latency_fit date
  -- ${MODEL_CLI_BIN} calibrate --fabric local --iterations 300)
add_test(NAME calibrate_local COMMAND ${MODEL_CLI_EXPECT_OK} "fabric local: c = .* -> " ${MODEL_CLI_BIN} calibrate --fabric local ${MODEL_CLI_CAL}
  --out ${MODEL_CLI_OUT}/profile_local.json)
add_test(NAME model_profile_local COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS}
  param_sources.c_ns=profile param_sources.link_bytes_per_s=profile records=1000000 slots=1250000
  -- ${MODEL_CLI_BIN} model --profile ${MODEL_CLI_OUT}/profile_local.json --load-factor 0.8 --records 1000000 --json)
add_test(NAME model_profile_override COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS}
  c_ns=1290 param_sources.c_ns=flag param_sources.rho0_ops_per_s=profile
  -- ${MODEL_CLI_BIN} model --profile ${MODEL_CLI_OUT}/profile_local.json --c-ns 1290 --load-factor 0.5 --records 1000 --json)
set_tests_properties(calibrate_local PROPERTIES FIXTURES_SETUP model_cli_profile_local)
set_tests_properties(model_profile_local model_profile_override PROPERTIES FIXTURES_REQUIRED model_cli_profile_local)

add_test(NAME calibrate_ucx COMMAND ${MODEL_CLI_EXPECT_OK} "fabric ucx \\(UCX_TLS=self,sm\\): c = .* -> " ${RDMAHASH_MPIRUN} -n 2 ${MODEL_CLI_BIN} calibrate --fabric ucx ${MODEL_CLI_CAL}
  --out ${MODEL_CLI_OUT}/profile_ucx.json)
add_test(NAME model_profile_ucx COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS}
  param_sources.c_ns=profile profile=${MODEL_CLI_OUT}/profile_ucx.json
  -- ${MODEL_CLI_BIN} model --profile ${MODEL_CLI_OUT}/profile_ucx.json --load-factor 0.8 --records 1000000 --json)
add_test(NAME calibrate_ucx_profile_fields COMMAND python3 -c
  "import json, sys\np = json.load(open(sys.argv[1]))\nassert p['fabric'] == 'ucx' and p['ucx_tls'] == 'self,sm', p\nprint('ok')"
  ${MODEL_CLI_OUT}/profile_ucx.json)
add_test(NAME calibrate_ucx_three_ranks COMMAND ${MODEL_CLI_EXPECT_FAIL} "exactly 2 ranks"
  ${RDMAHASH_MPIRUN} -n 3 ${MODEL_CLI_BIN} calibrate --fabric ucx --iterations 10)
set_tests_properties(calibrate_ucx PROPERTIES FIXTURES_SETUP model_cli_profile_ucx)
set_tests_properties(model_profile_ucx calibrate_ucx_profile_fields PROPERTIES FIXTURES_REQUIRED model_cli_profile_ucx)
set_tests_properties(calibrate_ucx calibrate_ucx_three_ranks PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV};EXPECT_FAIL_SECONDS=120" TIMEOUT 120)
set_tests_properties(calibrate_local calibrate_local_stdout PROPERTIES TIMEOUT 120)

# --read-size model-throughput: the model with the profile's throughput fit (time per READ at
# depth vs size) in place of c and alpha. The profile is one measured over loopback TCP on the
# development machine (tests/data/profile_tcp_loopback.json), where the latency model and the
# throughput model disagree (a round trip costs ~19 us, a byte 1.2 ns at depth): bench's R for each
# policy must be what `rdmahash model` (with and without --throughput) computes for the same table,
# and the two must differ.
set(MODEL_CLI_TCP_PROFILE ${CMAKE_CURRENT_SOURCE_DIR}/data/profile_tcp_loopback.json)
add_test(NAME model_throughput_fail_no_profile COMMAND ${MODEL_CLI_EXPECT_FAIL} "--throughput takes c and alpha from a profile"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --throughput)
add_test(NAME model_throughput_fail_old_profile COMMAND ${MODEL_CLI_EXPECT_FAIL} "has no throughput test"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --throughput --profile ${CMAKE_CURRENT_SOURCE_DIR}/data/profile_no_throughput.json)
add_test(NAME bench_model_throughput_fail_no_profile COMMAND ${MODEL_CLI_EXPECT_FAIL} "model-throughput needs --profile FILE"
  ${MODEL_CLI_BIN} bench --fabric local --records 1000 --ops 100 --read-size model-throughput --no-progress --quiet)
add_test(NAME bench_model_throughput_fail_old_profile COMMAND ${MODEL_CLI_EXPECT_FAIL} "has no throughput test"
  ${MODEL_CLI_BIN} bench --fabric local --records 1000 --ops 100 --read-size model,model-throughput
  --profile ${CMAKE_CURRENT_SOURCE_DIR}/data/profile_no_throughput.json --no-progress --quiet)
add_test(NAME calibrate_fail_direct_access_local COMMAND ${MODEL_CLI_EXPECT_FAIL} "--direct-access applies to --fabric ucx"
  ${MODEL_CLI_BIN} calibrate --fabric local --direct-access off --iterations 10)
add_test(NAME model_throughput_profile COMMAND python3 -c "${MODEL_CLI_CHECK}" ${MODEL_CLI_FIELDS}
  "param_sources.c_ns=profile throughput fit" "param_sources.rho0_ops_per_s=profile" c_ns=1380.665138293783
  alpha_ns_per_byte=1.2461266351929305 read_size=4
  -- ${MODEL_CLI_BIN} model --profile ${MODEL_CLI_TCP_PROFILE} --throughput --records 20000 --slots 40000 --slot-bytes 128 --json)
add_test(NAME bench_model_throughput_matches_model COMMAND python3 -c [=[
import json, os, subprocess, sys
bin, profile, out = sys.argv[1:4]
for vb, lf in ((8, 0.8), (100, 0.5)):
    if os.path.exists(out):
        os.remove(out)  # --json appends
    subprocess.run([bin, "bench", "--fabric", "local", "--records", "20000", "--load-factor", str(lf), "--key-bytes", "8",
                    "--value-bytes", str(vb), "--slot-format", "inline", "--ops", "2000", "--read-size", "model,model-throughput",
                    "--profile", profile, "--json", out, "--quiet", "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(l) for l in open(out)]
    got = {r["read_size_policy"]: r for r in rows}
    assert set(got) == {"model", "model-throughput"}, got.keys()
    want = {}
    for policy, extra in (("model", []), ("model-throughput", ["--throughput"])):
        r = got[policy]
        slot = int(r["scheme_detail"].split("slot=")[1].split("B")[0])
        m = json.loads(subprocess.run([bin, "model", "--profile", profile, "--records", str(r["records_start"]), "--slots",
                                       str(r["slots"]), "--slot-bytes", str(slot), "--json",
                                       "--present-fraction", str(r["model_present_fraction"])] + extra,
                                      check=True, capture_output=True, text=True).stdout)
        assert r["read_size"] == m["read_size"], (policy, vb, r["read_size"], m["read_size"])
        assert r["outcomes"]["found"] == r["ops"], (policy, r["outcomes"])
        want[policy] = r["read_size"]
    assert want["model"] != want["model-throughput"], want
    print(vb, want)
]=] $<TARGET_FILE:rdmahash_cli> ${MODEL_CLI_TCP_PROFILE} ${MODEL_CLI_OUT}/bench_model_throughput.jsonl)

# --present-fraction: gets of loaded keys stop at the key (Knuth's successful search), get-all
# reads to the first empty slot (seed 000's model). With the TCP profile the two price R apart.
# Each bench row's R must be what `rdmahash model` computes for the row's table and reported
# fraction; auto must report 1 for get and update (loaded keys) and 0 for get-all and erase (scans,
# misses); an explicit fraction reaches every row.
add_test(NAME bench_model_present_fraction_matches_model COMMAND python3 -c [=[
import json, os, subprocess, sys
bin, profile, out = sys.argv[1:4]
rows = []
for fraction in ("auto", "0", "0.5"):
    if os.path.exists(out):
        os.remove(out)  # --json appends
    subprocess.run([bin, "bench", "--fabric", "local", "--records", "20000", "--load-factor", "0.8", "--key-bytes", "8",
                    "--value-bytes", "8", "--slot-format", "inline", "--ops", "2000", "--workload", "get,get-all,update,erase",
                    "--read-size", "model-throughput,8", "--present-fraction", fraction, "--profile", profile,
                    "--json", out, "--quiet", "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    rows += [(fraction, json.loads(l)) for l in open(out)]
seen = {}
for fraction, r in rows:
    if r["read_size_policy"] == "fixed:8":
        assert r["model_present_fraction"] is None, r["model_present_fraction"]
        continue
    want = {"auto": 1.0 if r["workload"] in ("get", "update") else 0.0, "0": 0.0, "0.5": 0.5}[fraction]
    assert r["model_present_fraction"] == want, (fraction, r["workload"], r["model_present_fraction"])
    slot = int(r["scheme_detail"].split("slot=")[1].split("B")[0])
    m = json.loads(subprocess.run([bin, "model", "--profile", profile, "--throughput", "--records", str(r["records_start"]),
                                   "--slots", str(r["slots"]), "--slot-bytes", str(slot), "--json",
                                   "--present-fraction", str(want)], check=True, capture_output=True, text=True).stdout)
    assert r["read_size"] == m["read_size"], (fraction, r["workload"], r["read_size"], m["read_size"])
    assert m["present_fraction"] == want
    seen[(r["workload"], want)] = r["read_size"]
print(seen)
assert seen[("get", 1.0)] < seen[("get", 0.5)] < seen[("get", 0.0)], seen
assert seen[("get-all", 0.0)] == seen[("get", 0.0)] == seen[("erase", 0.0)], seen
assert seen[("update", 1.0)] == seen[("get", 1.0)], seen
]=] $<TARGET_FILE:rdmahash_cli> ${MODEL_CLI_TCP_PROFILE} ${MODEL_CLI_OUT}/bench_model_present_fraction.jsonl)
# Knuth's successful search: one-slot READs of a present key at load 0.8 cost (1 + 1/(1 - 0.8))/2 = 3
# (to 1e-4 at this size; the exact finite-table value is in model_test).
add_test(NAME model_present_fraction_knuth COMMAND python3 -c [=[
import json, subprocess, sys
m = json.loads(subprocess.run([sys.argv[1], "model", "--records", "80000000", "--slots", "100000000", "--read-size", "1",
                               "--present-fraction", "1", "--json"], check=True, capture_output=True, text=True).stdout)
assert abs(m["expected_reads"] - 3.0) < 1e-4, m["expected_reads"]
assert abs(m["expected_reads_one_slot"] - 3.0) < 1e-4, m["expected_reads_one_slot"]
]=] ${MODEL_CLI_BIN})
add_test(NAME model_present_fraction_bad COMMAND ${MODEL_CLI_EXPECT_FAIL} "--present-fraction must be a number in \\[0, 1\\] \\(got '1.5'\\)"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --present-fraction 1.5)
add_test(NAME model_present_fraction_empty COMMAND ${MODEL_CLI_EXPECT_FAIL} "--present-fraction must be a number in \\[0, 1\\] \\(got ''\\)"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --present-fraction "")
add_test(NAME model_present_fraction_cluster COMMAND ${MODEL_CLI_EXPECT_FAIL} "cluster hints .* price scans"
  ${MODEL_CLI_BIN} model --records 100 --load-factor 0.5 --present-fraction 1 --cluster-offset 3 --cluster-length 4)
add_test(NAME bench_present_fraction_bad COMMAND ${MODEL_CLI_EXPECT_FAIL} "--present-fraction must be auto or a number in \\[0, 1\\]"
  ${MODEL_CLI_BIN} bench --fabric local --records 100 --ops 10 --read-size model --present-fraction 2)
