# Bad input (issue 26 items 4 and 7): every numeric option of every subcommand at extreme values,
# sizes from options by checked arithmetic, messages that name the flag, help texts, outputs kept
# when a run is refused. Included from tests/CMakeLists.txt after cli_tests.cmake (RDMAHASH_BIN,
# EXPECT_FAIL).

# Every numeric option found in the --help of bench, serve, check-history, model and calibrate
# (bench and serve: under each scheme), with 0, -1, 2^31, 2^32, 2^61, 2^62, 2^63, 2^64-1, 1e-15,
# nan and inf: exit 0 or 2, never a signal or a hang (60 s per run).
add_test(NAME cli_option_fuzz COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/option_fuzz.py ${RDMAHASH_BIN} --timeout 60 --jobs 2)
set_tests_properties(cli_option_fuzz PROPERTIES TIMEOUT 1200 RUN_SERIAL ON)

# --tail-slots 2^61 wrapped the region size: the loader wrote past the region (SIGSEGV); 2^62 ran
# with a wrong table (4946 of 5000 find-or-puts failed).
set(tiny_bench ${RDMAHASH_BIN} bench --fabric local --no-progress --quiet)
add_test(NAME cli_tail_slots_2p61 COMMAND ${EXPECT_FAIL} "--tail-slots must be at most 2\\^36"
  ${tiny_bench} --tail-slots 2305843009213693952 --records 1000000 --load-factor 0.9999 --ops 1000)
add_test(NAME cli_tail_slots_2p62 COMMAND ${EXPECT_FAIL} "--tail-slots must be at most 2\\^36"
  ${tiny_bench} --tail-slots 4611686018427387904 --records 1000 --workload find-or-put --ops 5000)
add_test(NAME cli_tail_slots_over COMMAND ${EXPECT_FAIL} "--tail-slots must be at most 2\\^36"
  ${tiny_bench} --tail-slots 68719476737 --records 100 --ops 1)
add_test(NAME cli_tail_slots_max COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_ok.sh "ops/s.*local"
  ${RDMAHASH_BIN} bench --fabric local --no-progress --tail-slots 1048576 --records 100 --ops 1)
# Messages that say what is wrong.
add_test(NAME cli_load_factor_too_small COMMAND ${EXPECT_FAIL}
  "--load-factor 1e-15 is too small for --records 100000: .*the load factor must be in \\[1\\.4[0-9e.-]*, 1\\)"
  ${tiny_bench} --load-factor 1e-15 --ops 1)
add_test(NAME cli_records_negative COMMAND ${EXPECT_FAIL} "--records: must not be negative, got -5"
  ${tiny_bench} --records -5)
add_test(NAME cli_seed_negative COMMAND ${EXPECT_FAIL} "--seed: must not be negative, got -1"
  ${tiny_bench} --seed -1 --records 100 --ops 1)
add_test(NAME cli_model_negative COMMAND ${EXPECT_FAIL} "--slots: must not be negative"
  ${RDMAHASH_BIN} model --records 10 --slots -1)
add_test(NAME cli_workload_empty_element COMMAND ${EXPECT_FAIL} "--workload ',' has an empty element"
  ${tiny_bench} --workload , --records 100 --ops 1)
add_test(NAME cli_workload_trailing_comma COMMAND ${EXPECT_FAIL} "--workload 'get,' has an empty element"
  ${tiny_bench} --workload=get, --records 100 --ops 1)
add_test(NAME cli_read_size_empty_element COMMAND ${EXPECT_FAIL} "--read-size '8,,16' has an empty element"
  ${tiny_bench} --read-size 8,,16 --records 100 --ops 1)
add_test(NAME cli_initial_depth_any_scheme COMMAND ${EXPECT_FAIL} "--initial-depth must be at most 20"
  ${tiny_bench} --initial-depth 2147483648 --records 100 --ops 1)
add_test(NAME cli_calibrate_region_bytes_huge COMMAND ${EXPECT_FAIL} "--region-bytes must be in \\[4096, 2\\^40\\]"
  ${RDMAHASH_BIN} calibrate --region-bytes 18446744073709551615)
add_test(NAME cli_calibrate_iterations_huge COMMAND ${EXPECT_FAIL} "iterations must be in \\[1, 10\\^6\\]"
  ${RDMAHASH_BIN} calibrate --iterations 2147483648)
set_tests_properties(cli_tail_slots_2p61 cli_tail_slots_2p62 cli_tail_slots_over cli_tail_slots_max
  cli_load_factor_too_small cli_records_negative cli_seed_negative cli_model_negative cli_workload_empty_element
  cli_workload_trailing_comma cli_read_size_empty_element cli_initial_depth_any_scheme
  cli_calibrate_region_bytes_huge cli_calibrate_iterations_huge PROPERTIES TIMEOUT 120)

# serve: out-of-range --capacity (2^64-1 wrapped to a 0.1 MiB heap), a port in use (exit 2, not 1).
add_test(NAME serve_capacity_out_of_range COMMAND ${EXPECT_FAIL} "--capacity must be at most 2\\^34"
  timeout 60 ${RDMAHASH_BIN} serve --storage heap --capacity 18446744073709551615 --records 100 --listen 127.0.0.1:0)
add_test(NAME serve_capacity_race_out_of_range COMMAND ${EXPECT_FAIL} "--capacity must be at most 2\\^34"
  timeout 60 ${RDMAHASH_BIN} serve --scheme race --capacity 17179869185 --records 100 --listen 127.0.0.1:0)
add_test(NAME serve_port_in_use COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve_port_in_use_test.py ${RDMAHASH_BIN})
set_tests_properties(serve_port_in_use PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 120 LABELS serve)
set_tests_properties(serve_capacity_out_of_range serve_capacity_race_out_of_range PROPERTIES TIMEOUT 120 LABELS serve)

# --history: a run refused after the options passed (a corrupt --pm-path) leaves an earlier
# history byte-identical (it was truncated to 0 bytes).
add_test(NAME cli_refused_run_keeps_history
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/refused_run_keeps_history.sh ${RDMAHASH_BIN} ${CMAKE_CURRENT_BINARY_DIR}/refused_run_keeps_history)
set_tests_properties(cli_refused_run_keeps_history PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 120)

# --history replaces its file by a rename: a path that is there and not a regular file is refused by
# name before the run, at once, and left as it was. A FIFO blocked the writability check's open()
# forever; a device (as root: /dev/null, /dev/full) was replaced by a regular file. Tested with a
# FIFO and symlinks in a directory of the build, never with real devices.
set(HISTORY_TARGETS ${CMAKE_CURRENT_BINARY_DIR}/history_targets)
set(kv_mix_bench ${tiny_bench} --records 100 --ops 10 --workload kv-mix)
add_test(NAME cli_history_fifo
  COMMAND sh -c "d=\"$1\"; shift; rm -rf \"$d\" && mkdir -p \"$d\" && mkfifo \"$d/h.bin\" && \"$@\" --history \"$d/h.bin\" && test -p \"$d/h.bin\""
          sh ${HISTORY_TARGETS}/fifo ${EXPECT_FAIL} "--history file '.*/fifo/h\\.bin' is a FIFO, not a regular file" ${kv_mix_bench})
# A symlink to a FIFO: the target decides.
add_test(NAME cli_history_symlink_to_fifo
  COMMAND sh -c "d=\"$1\"; shift; rm -rf \"$d\" && mkdir -p \"$d\" && mkfifo \"$d/fifo\" && ln -s fifo \"$d/h.bin\" && \"$@\" --history \"$d/h.bin\" && test -p \"$d/fifo\" && test -L \"$d/h.bin\""
          sh ${HISTORY_TARGETS}/symlink_fifo ${EXPECT_FAIL} "--history file '.*/h\\.bin' is a FIFO, not a regular file" ${kv_mix_bench})
add_test(NAME cli_history_directory
  COMMAND sh -c "d=\"$1\"; shift; rm -rf \"$d\" && mkdir -p \"$d/h.bin\" && \"$@\" --history \"$d/h.bin\" && test -d \"$d/h.bin\""
          sh ${HISTORY_TARGETS}/directory ${EXPECT_FAIL} "--history file '.*/h\\.bin' is a directory, not a regular file" ${kv_mix_bench})
# Over UCX rank 0 checks and every rank refuses alike (no rank left waiting in a collective).
add_test(NAME cli_history_fifo_ucx
  COMMAND sh -c "d=\"$1\"; shift; rm -rf \"$d\" && mkdir -p \"$d\" && mkfifo \"$d/h.bin\" && \"$@\" --history \"$d/h.bin\" && test -p \"$d/h.bin\""
          sh ${HISTORY_TARGETS}/fifo_ucx ${EXPECT_FAIL} "--history file '.*/h\\.bin' is a FIFO, not a regular file"
          ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --no-progress --quiet --records 100 --ops 10 --workload kv-mix)
set_tests_properties(cli_history_fifo_ucx PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV};EXPECT_FAIL_SECONDS=120" TIMEOUT 180)
# The history is written to FILE.tmp, then renamed: a symlink planted at FILE.tmp is not written
# through (it was: fopen("wb") truncated and filled its target), it is replaced by a new file.
add_test(NAME cli_history_tmp_symlink
  COMMAND sh -c "d=\"$1\"; shift; rm -rf \"$d\" && mkdir -p \"$d\" && printf precious > \"$d/victim\" && ln -s victim \"$d/h.bin.tmp\" || exit 1
                 \"$@\" --history \"$d/h.bin\" || { echo \"FAIL: the run failed\"; exit 1; }
                 [ \"$(cat \"$d/victim\")\" = precious ] || { echo \"FAIL: the history was written through the symlink h.bin.tmp\"; exit 1; }
                 [ -f \"$d/h.bin\" ] && [ ! -L \"$d/h.bin\" ] && [ -s \"$d/h.bin\" ] || { echo \"FAIL: h.bin is not a regular file with the history\"; exit 1; }
                 [ -e \"$d/h.bin.tmp\" ] || [ -L \"$d/h.bin.tmp\" ] && { echo \"FAIL: h.bin.tmp left behind\"; exit 1; }
                 echo \"PASS: the history replaced the planted h.bin.tmp, its target kept\""
          sh ${HISTORY_TARGETS}/tmp_symlink ${kv_mix_bench})
# The rename after the run looks again: a FIFO made at FILE after the check (here while repetition 2
# runs, once repetition 1's row is out) fails the write naming FILE, and stays a FIFO. `out` exists
# before the loop reads it, and the FIFO is made only after repetition 1's row: made earlier, the
# check before the run would refuse it with the same words and the write's check would go untested.
# Each repetition runs for seconds (300 000 kv-mix operations), the loop polls every 0.1 s.
add_test(NAME cli_history_fifo_after_check
  COMMAND sh -c "d=\"$1\"; shift; rm -rf \"$d\" && mkdir -p \"$d\" && : > \"$d/out\" || exit 1
                 stdbuf -oL \"$@\" --repeat 2 --history \"$d/h.bin\" > \"$d/out\" 2> \"$d/err\" & pid=$!
                 i=0; while [ \"$(wc -l < \"$d/out\")\" -lt 2 ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
                 [ \"$(wc -l < \"$d/out\")\" -ge 2 ] || { kill $pid; echo \"FAIL: repetition 1 gave no row in 90 s\"; exit 1; }
                 mkfifo \"$d/h.bin\"; wait $pid; rc=$?
                 grep -q \"is a FIFO, not a regular file\" \"$d/err\" && [ $rc -ne 0 ] && [ -p \"$d/h.bin\" ] ||
                   { echo \"FAIL: exit $rc, h.bin $(ls -l \"$d/h.bin\"): $(cat \"$d/err\")\"; exit 1; }
                 echo \"PASS: $(cat \"$d/err\")\""
          sh ${HISTORY_TARGETS}/fifo_after_check ${RDMAHASH_BIN} bench --fabric local --no-progress --records 100 --ops 300000
          --workload kv-mix)
set_tests_properties(cli_history_fifo cli_history_symlink_to_fifo cli_history_directory cli_history_tmp_symlink
  PROPERTIES TIMEOUT 120)
set_tests_properties(cli_history_fifo_after_check PROPERTIES TIMEOUT 300)
set_tests_properties(cli_history_tmp_symlink cli_history_fifo_after_check PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL")

# --ycsb: the file's counts are held to the bounds of --ops and --records before anything is
# loaded (recordcount 2^64-1 with inserts wrapped the table size: "error: vector::reserve";
# operationcount 2^64-1 ran the load phase, then failed). Records without a value refuse updates
# (as --workload update --value-bytes 0): every update failed and the run exited 0.
set(ycsb_bench ${tiny_bench} --ycsb ${CMAKE_CURRENT_SOURCE_DIR}/data/ycsb/workloada -p fieldcount=1)
add_test(NAME cli_ycsb_recordcount_over COMMAND ${EXPECT_FAIL} "workloada: recordcount 18446744073709551615 is more than 2\\^34"
  ${ycsb_bench} -p recordcount=18446744073709551615 -p operationcount=1000 -p insertproportion=0.5 -p updateproportion=0)
add_test(NAME cli_ycsb_operationcount_over COMMAND ${EXPECT_FAIL} "workloada: operationcount 18446744073709551615 is more than 2\\^32"
  ${ycsb_bench} -p recordcount=100 -p operationcount=18446744073709551615)
add_test(NAME cli_ycsb_operationcount_2p32_plus_1 COMMAND ${EXPECT_FAIL} "workloada: operationcount 4294967297 is more than 2\\^32"
  ${ycsb_bench} -p recordcount=100 -p operationcount=4294967297)
add_test(NAME cli_ycsb_records_plus_inserts_over COMMAND ${EXPECT_FAIL}
  "workloada: recordcount 17179869184 plus the 500 inserts expected .* more than 2\\^34 records"
  ${ycsb_bench} -p recordcount=17179869184 -p operationcount=1000 -p insertproportion=0.5 -p updateproportion=0)
add_test(NAME cli_ycsb_fieldcount_zero COMMAND ${EXPECT_FAIL}
  "-p fieldcount=0: the record size fieldcount\\*fieldlength = 0\\*100 is 0 bytes, but updateproportion > 0"
  ${tiny_bench} --ycsb ${CMAKE_CURRENT_SOURCE_DIR}/data/ycsb/workloada -p recordcount=100 -p operationcount=100 -p fieldcount=0)
add_test(NAME cli_ycsb_fieldlength_zero_rmw COMMAND ${EXPECT_FAIL}
  "-p fieldlength=0: the record size .* is 0 bytes, but readmodifywriteproportion > 0"
  ${tiny_bench} --ycsb ${CMAKE_CURRENT_SOURCE_DIR}/data/ycsb/workloadf -p recordcount=100 -p operationcount=100 -p fieldlength=0)
# Without updates a table of keys alone is fine (reads find the loaded keys, inserts add keys).
add_test(NAME cli_ycsb_fieldcount_zero_read_only COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_ok.sh "ops/s"
  ${RDMAHASH_BIN} bench --fabric local --no-progress --ycsb ${CMAKE_CURRENT_SOURCE_DIR}/data/ycsb/workloadc
  -p recordcount=100 -p operationcount=100 -p fieldcount=0)
set_tests_properties(cli_ycsb_recordcount_over cli_ycsb_operationcount_over cli_ycsb_operationcount_2p32_plus_1
  cli_ycsb_records_plus_inserts_over cli_ycsb_fieldcount_zero cli_ycsb_fieldlength_zero_rmw
  cli_ycsb_fieldcount_zero_read_only PROPERTIES TIMEOUT 120)

# Help texts: no CLI11 artefacts ({false}, BenchOptions::error), defaults shown, serve's texts about
# serve (one load factor, no points, no ranks), check-history's exit 2.
foreach(cmd bench serve check-history)
  add_test(NAME cli_help_${cmd} COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/help_text_test.py ${RDMAHASH_BIN} ${cmd})
  set_tests_properties(cli_help_${cmd} PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL" TIMEOUT 60)
endforeach()
