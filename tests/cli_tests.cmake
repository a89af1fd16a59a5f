# End-to-end tests of the `rdmahash` CLI.
set(RDMAHASH_BIN $<TARGET_FILE:rdmahash_cli>)
set(EXPECT_FAIL ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh)

# Bad input: a clear message and a non-zero exit, never a crash.
add_test(NAME cli_unknown_option COMMAND ${EXPECT_FAIL} "--no-such-option" ${RDMAHASH_BIN} bench --no-such-option)
add_test(NAME cli_load_factor_one COMMAND ${EXPECT_FAIL} "load-factor must be in" ${RDMAHASH_BIN} bench --load-factor 1.0)
add_test(NAME cli_load_factor_list_bad COMMAND ${EXPECT_FAIL} "load-factor must be in" ${RDMAHASH_BIN} bench --load-factor 0.5,1.2)
add_test(NAME cli_zero_records COMMAND ${EXPECT_FAIL} "records must be at least 1" ${RDMAHASH_BIN} bench --records 0)
add_test(NAME cli_oversize_value COMMAND ${EXPECT_FAIL} "value-bytes must be at most 120" ${RDMAHASH_BIN} bench --value-bytes 121)
add_test(NAME cli_bad_key_bytes COMMAND ${EXPECT_FAIL} "key-bytes must be 4 or 8" ${RDMAHASH_BIN} bench --key-bytes 5)
add_test(NAME cli_bad_workload COMMAND ${EXPECT_FAIL} "unknown workload" ${RDMAHASH_BIN} bench --workload nope)
add_test(NAME cli_bad_fabric COMMAND ${EXPECT_FAIL} "fabric must be" ${RDMAHASH_BIN} bench --fabric verbs)
add_test(NAME cli_non_numeric COMMAND ${EXPECT_FAIL} "records" ${RDMAHASH_BIN} bench --records many)
add_test(NAME cli_zero_depth COMMAND ${EXPECT_FAIL} "depth must be" ${RDMAHASH_BIN} bench --depth 0)
add_test(NAME cli_bad_json_path COMMAND ${EXPECT_FAIL} "cannot open --json" ${RDMAHASH_BIN} bench --records 100 --ops 10 --json /nonexistent/dir/x.jsonl)
add_test(NAME cli_ucx_no_clients COMMAND ${EXPECT_FAIL} "no client ranks"
  ${RDMAHASH_MPIRUN} -n 1 ${RDMAHASH_BIN} bench --fabric ucx --records 100 --ops 10)
set_tests_properties(cli_ucx_no_clients PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 120)

# The bench runs and its JSON carries the documented fields and consistent outcomes.
set(CHECK_JSON ${CMAKE_CURRENT_SOURCE_DIR}/check_bench_json.py)
add_test(NAME bench_local_json COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 20000 --load-factor 0.5,0.8
  --workload raw-read,get,find-or-put,mixed --ops 2000 --depth 8)
add_test(NAME bench_ucx_1mem_2clients COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 20000 --load-factor 0.8
  --workload raw-read,get,find-or-put,write-intensive --ops 2000 --depth 8 --value-bytes 16)
add_test(NAME bench_ucx_symmetric COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --symmetric --records 20000 --load-factor 0.5
  --workload get,find-or-put --ops 2000 --depth 8)
add_test(NAME bench_ucx_same_keys COMMAND python3 ${CHECK_JSON} --same-keys --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 20000 --load-factor 0.5
  --workload find-or-put --ops 3000 --depth 4 --same-keys --key-bytes 8 --value-bytes 8)
set_tests_properties(bench_ucx_1mem_2clients bench_ucx_symmetric bench_ucx_same_keys PROPERTIES
  ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)

# Cuckoo baseline and read-size policies through the same driver.
add_test(NAME bench_local_cuckoo COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme cuckoo --clients 2 --records 20000 --load-factor 0.5,0.9
  --key-bytes 8 --value-bytes 8 --workload get,find-or-put --ops 1000 --depth 8)
add_test(NAME bench_local_cuckoo_heap_sequential COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme cuckoo --storage heap --cuckoo-probe sequential --slots-per-bucket 1
  --records 20000 --load-factor 0.5 --value-bytes 32 --workload get --ops 2000)
add_test(NAME bench_ucx_cuckoo COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --scheme cuckoo --memory-nodes 1 --records 20000
  --load-factor 0.8 --value-bytes 8 --workload get,find-or-put --ops 1000 --depth 8)
add_test(NAME bench_local_read_sizes COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --records 50000 --key-bytes 4 --value-bytes 4 --load-factor 0.5,0.9
  --workload get,get-all --read-size 8,model,model-unconstrained,cluster --ops 2000 --depth 8)
add_test(NAME bench_local_zipf_multimap COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --records 50000 --key-bytes 4 --value-bytes 4 --load-factor 0.65
  --distribution zipf:0.9 --workload get-all --read-size model,cluster --ops 500 --depth 8)
set_tests_properties(bench_ucx_cuckoo PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME cli_cuckoo_build_fails_cleanly COMMAND ${EXPECT_FAIL} "reached load factor 0\\.[0-9]+"
  ${RDMAHASH_BIN} bench --scheme cuckoo --slots-per-bucket 1 --records 20000 --load-factor 0.97 --ops 10)
add_test(NAME cli_bad_read_size COMMAND ${EXPECT_FAIL} "read-size 'biggest'" ${RDMAHASH_BIN} bench --read-size biggest)
add_test(NAME cli_bad_distribution COMMAND ${EXPECT_FAIL} "distribution 'zipf:x'" ${RDMAHASH_BIN} bench --distribution zipf:x)
add_test(NAME cli_zipf_needs_multimap_workload COMMAND ${EXPECT_FAIL} "multimap"
  ${RDMAHASH_BIN} bench --distribution zipf:0.9 --workload find-or-put)
add_test(NAME cli_cuckoo_model_read_size COMMAND ${EXPECT_FAIL} "applies to linear probing"
  ${RDMAHASH_BIN} bench --scheme cuckoo --records 1000 --ops 10 --read-size model)

# YCSB workload files: load phase, run phase; overrides as YCSB's -p.
set(YCSB_DIR ${CMAKE_CURRENT_SOURCE_DIR}/data/ycsb)
add_test(NAME bench_local_ycsb_a COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --ycsb ${YCSB_DIR}/workloada -p recordcount=20000 -p operationcount=20000
  -p fieldcount=1 -p fieldlength=32 --clients 2 --depth 8)
add_test(NAME bench_local_ycsb_d_cuckoo COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --scheme cuckoo --ycsb ${YCSB_DIR}/workloadd -p recordcount=20000 -p operationcount=20000
  -p fieldcount=1 -p fieldlength=8 --clients 2 --depth 8)
add_test(NAME bench_ucx_ycsb_f COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --ycsb ${YCSB_DIR}/workloadf -p recordcount=20000
  -p operationcount=10000 -p fieldcount=2 -p fieldlength=8 --depth 8)
set_tests_properties(bench_ucx_ycsb_f PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME cli_ycsb_scan_unsupported COMMAND ${EXPECT_FAIL} "operation 'scan' is not supported by --scheme linear"
  ${RDMAHASH_BIN} bench --ycsb ${YCSB_DIR}/workloade -p recordcount=100 -p operationcount=100 -p fieldcount=1)
add_test(NAME cli_ycsb_value_too_big COMMAND ${EXPECT_FAIL} "do not fit the 120 value bytes"
  ${RDMAHASH_BIN} bench --ycsb ${YCSB_DIR}/workloada -p recordcount=100 -p operationcount=100)
add_test(NAME cli_ycsb_malformed COMMAND ${EXPECT_FAIL} "add up to 1.05, not 1.*line 4"
  ${RDMAHASH_BIN} bench --ycsb ${YCSB_DIR}/malformed_sum)
add_test(NAME cli_ycsb_missing_file COMMAND ${EXPECT_FAIL} "ycsb" ${RDMAHASH_BIN} bench --ycsb /no/such/workload)
add_test(NAME cli_p_without_ycsb COMMAND ${EXPECT_FAIL} "needs --ycsb" ${RDMAHASH_BIN} bench -p recordcount=5)
add_test(NAME cli_heap4_model_read_size COMMAND ${EXPECT_FAIL} "fixed read size with --storage heap4"
  ${RDMAHASH_BIN} bench --storage heap4 --key-bytes 4 --value-bytes 4 --read-size model --records 100 --ops 10)

# Continuity hashing (seed 002): volatile and --pm-path runs, reopen-and-recover, bad input.
add_test(NAME bench_local_continuity COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme continuity --clients 2 --records 20000 --load-factor 0.2
  --value-bytes 8 --workload get,find-or-put,mixed --ops 2000 --depth 8)
add_test(NAME bench_ucx_continuity COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --scheme continuity --memory-nodes 1 --records 20000
  --load-factor 0.2 --value-bytes 8 --workload get,find-or-put --ops 1000 --depth 8)
set_tests_properties(bench_ucx_continuity PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME bench_continuity_pm_reopen
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/continuity_pm_reopen.sh ${RDMAHASH_BIN} ${CMAKE_CURRENT_BINARY_DIR}/pm_reopen
          ${CHECK_JSON} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(bench_continuity_pm_reopen PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME cli_continuity_bad_sbuckets COMMAND ${EXPECT_FAIL} "sbuckets must be in"
  ${RDMAHASH_BIN} bench --scheme continuity --sbuckets 7)
add_test(NAME cli_pm_path_needs_continuity COMMAND ${EXPECT_FAIL} "pm-path applies to --scheme continuity"
  ${RDMAHASH_BIN} bench --scheme linear --pm-path /tmp/x.pm)
add_test(NAME cli_continuity_full_fails_cleanly COMMAND ${EXPECT_FAIL} "is full at [0-9]+ of [0-9]+ slots"
  ${RDMAHASH_BIN} bench --scheme continuity --records 20000 --load-factor 0.9 --ops 10)
add_test(NAME cli_continuity_pm_path_directory COMMAND ${EXPECT_FAIL} "pm-path: .*not a regular file"
  ${RDMAHASH_BIN} bench --scheme continuity --records 100 --load-factor 0.2 --ops 10 --pm-path /tmp)
