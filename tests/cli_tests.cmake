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
set_tests_properties(cli_ucx_no_clients PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV};EXPECT_FAIL_SECONDS=120" TIMEOUT 120)

# The bench runs and its JSON carries the documented fields and consistent outcomes. The inserts
# take a table at load factor 0.8 to 0.88 (2 clients x 1000 new keys): never full, so check_bench_json
# treats any `full` outcome as a failure.
set(CHECK_JSON ${CMAKE_CURRENT_SOURCE_DIR}/check_bench_json.py)
add_test(NAME bench_local_json COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 20000 --load-factor 0.5,0.8
  --workload raw-read,get,find-or-put,mixed --ops 1000 --depth 8)
# Seed 004's per-operation figures and seed 002's update-only latency: update of loaded keys and
# erase of each client's own loaded keys, every scheme (the erase point ends 2000 records lighter;
# a get after it starts from the reloaded table).
foreach(entry IN ITEMS "linear|--value-bytes 16" "linear_heap|--storage heap --value-bytes 16"
                       "cuckoo|--scheme cuckoo --value-bytes 16" "race|--scheme race --key-bytes 16 --value-bytes 32"
                       "continuity|--scheme continuity --value-bytes 16 --load-factor 0.25"
                       "level|--scheme level --value-bytes 16" "hopscotch|--scheme hopscotch --value-bytes 16 --load-factor 0.3"
                       "cluster|--scheme cluster --value-bytes 16 --load-factor 0.8")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 args)
  separate_arguments(args)
  add_test(NAME bench_local_update_erase_${name} COMMAND python3 ${CHECK_JSON} --
    ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 20000 --workload update,erase,get --ops 1000 --depth 8 ${args})
endforeach()
# Hopscotch at load factor 0.8 (issue 28 item 1): H=8 neighbourhoods alone refused keys from about
# 0.5 on; the overflow chains take them, so the bulk load, the gets and new inserts all succeed. A
# load the pool cannot hold (H=2 at 0.95) is refused with a message naming the pool.
add_test(NAME bench_local_hopscotch_lf08 COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme hopscotch --load-factor 0.8 --records 100000 --value-bytes 16
  --workload get,find-or-put --ops 2000 --depth 8)
add_test(NAME cli_hopscotch_pool_exhausted COMMAND ${EXPECT_FAIL} "neighbourhood of 2 slots is full and the overflow pool's [0-9]+ blocks are all in use"
  ${RDMAHASH_BIN} bench --fabric local --scheme hopscotch --neighborhood 2 --load-factor 0.95 --records 100000 --ops 10)
# Past the loaded records a client's erases wrap and miss (outcomes.not_found), never fail.
add_test(NAME bench_local_erase_wraps COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 1500 --workload erase --ops 1000 --depth 8 --value-bytes 8)
add_test(NAME bench_local_erase_same_keys COMMAND python3 ${CHECK_JSON} --same-keys --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 20000 --workload erase --ops 1000 --same-keys --value-bytes 8)
# Updates write each key's own value: a get after them on the same table (--keep-table) checks it.
add_test(NAME bench_local_update_keep_table COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 20000 --workload update,get --keep-table --ops 2000
  --value-bytes 24 --storage heap)
# Seed 001's Table 1: find-or-put over chunk sizes on one table (each point reloads it).
add_test(NAME bench_local_chunk_sweep COMMAND python3 ${CHECK_JSON} --chunk-sweep --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 20000 --load-factor 0.8 --workload find-or-put,get
  --chunk 8,64 --ops 1000 --depth 8)
# Seed 000 Table 2 on one table: --assumed-load-factor sweeps the get points (0: the table's own).
add_test(NAME bench_local_assumed_load_factor_sweep COMMAND python3 ${CHECK_JSON} --assumed-sweep --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 20000 --load-factor 0.25,0.65 --workload get
  --read-size model --assumed-load-factor 0,0.25,0.65 --key-bytes 4 --value-bytes 4 --ops 1000 --depth 8 --repeat 2)
add_test(NAME cli_assumed_load_factor_bad COMMAND ${EXPECT_FAIL} "--assumed-load-factor must be in"
  ${RDMAHASH_BIN} bench --assumed-load-factor 0.5,1.5 --records 100 --ops 10)
# --memory-limit: each row carries this machine's random-read limit on a region of the table's size.
add_test(NAME bench_local_memory_limit COMMAND python3 ${CHECK_JSON} --memory-limit --
  ${RDMAHASH_BIN} bench --fabric local --clients 1 --memory-nodes 2 --records 100000 --load-factor 0.5 --workload get,find-or-put
  --ops 1000 --memory-limit 4k)
# --memory-limit thp: the probe reports what the kernel gave it (THP or 4 KB pages, from smaps).
add_test(NAME bench_local_memory_limit_thp COMMAND python3 ${CHECK_JSON} --memory-limit --
  ${RDMAHASH_BIN} bench --fabric local --clients 1 --memory-nodes 1 --records 100000 --load-factor 0.5 --workload get
  --ops 1000 --memory-limit thp)
# --huge-pages off: the regions on 4 KB pages (local: MADV_NOHUGEPAGE; UCX: no hugetlb), as smaps says.
add_test(NAME bench_local_huge_pages_off COMMAND python3 ${CHECK_JSON} --expect huge_pages=off --expect region_pages=4k --
  ${RDMAHASH_BIN} bench --fabric local --records 1000000 --load-factor 0.5 --workload get --ops 1000 --huge-pages off)
add_test(NAME cli_huge_pages_bad COMMAND ${EXPECT_FAIL} "--huge-pages"
  ${RDMAHASH_BIN} bench --huge-pages maybe --records 100 --ops 10)
add_test(NAME cli_memory_limit_bad COMMAND ${EXPECT_FAIL} "--memory-limit"
  ${RDMAHASH_BIN} bench --memory-limit huge --records 100 --ops 10)
add_test(NAME cli_chunk_sweep_needs_chunks COMMAND ${EXPECT_FAIL} "does not probe in chunks"
  ${RDMAHASH_BIN} bench --scheme cuckoo --chunk 8,16 --records 100 --ops 10)
add_test(NAME cli_update_needs_values COMMAND ${EXPECT_FAIL} "workload update replaces values"
  ${RDMAHASH_BIN} bench --workload update --records 100 --ops 10)
add_test(NAME bench_ucx_1mem_2clients COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 20000 --load-factor 0.8
  --workload raw-read,get,find-or-put,write-intensive --ops 1000 --depth 8 --value-bytes 16)
add_test(NAME bench_ucx_symmetric COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --symmetric --records 20000 --load-factor 0.5
  --workload get,find-or-put --ops 2000 --depth 8)
add_test(NAME bench_ucx_same_keys COMMAND python3 ${CHECK_JSON} --same-keys --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 20000 --load-factor 0.5
  --workload find-or-put --ops 3000 --depth 4 --same-keys --key-bytes 8 --value-bytes 8)
set_tests_properties(bench_ucx_1mem_2clients bench_ucx_symmetric bench_ucx_same_keys PROPERTIES
  ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
# How the memory node waits (--serve-mode, rdmahash::ServeMode): over TCP (every one-sided
# operation is an active message the memory node executes) in each mode, with the JSON's outcome
# checks; auto resolves to hybrid when UCX may use TCP only and to event when shared memory is there.
foreach(entry "tcp_auto|tcp|auto|hybrid" "tcp_event|tcp|event|event" "tcp_hybrid|tcp|hybrid|hybrid"
              "tcp_poll|tcp|poll|poll" "shm_auto|self,sm|auto|event")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 tls)
  list(GET parts 2 mode)
  list(GET parts 3 resolved)
  add_test(NAME bench_ucx_serve_mode_${name} COMMAND python3 ${CHECK_JSON} --expect serve_mode=${resolved} --
    ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 5000 --slot-format inline
    --value-bytes 16 --workload raw-read,get,find-or-put --ops 1000 --depth 16 --serve-mode ${mode} --serve-spin-us 20)
  set(env ${RDMAHASH_MPI_ENV})
  list(FILTER env EXCLUDE REGEX "^UCX_TLS=")
  set_tests_properties(bench_ucx_serve_mode_${name} PROPERTIES ENVIRONMENT "${env};UCX_TLS=${tls}" TIMEOUT 300)
endforeach()

# How the clients wait (--client-wait, rdmahash::ClientWait): over TCP in each policy and auto, and
# auto over shared memory, with the JSON's outcome checks and `client_wait` resolved as documented
# (hybrid for TCP only, poll with shared memory). A 2-client job (3 processes on the 2 cores) too.
foreach(entry "tcp_auto|tcp|auto|hybrid|2" "tcp_poll|tcp|poll|poll|2" "tcp_hybrid|tcp|hybrid|hybrid|2"
              "tcp_event|tcp|event|event|2" "tcp_event_2clients|tcp|event|event|3" "shm_auto|self,sm|auto|poll|2")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 tls)
  list(GET parts 2 wait)
  list(GET parts 3 resolved)
  list(GET parts 4 ranks)
  add_test(NAME bench_ucx_client_wait_${name} COMMAND python3 ${CHECK_JSON} --expect client_wait=${resolved} --
    ${RDMAHASH_MPIRUN} -n ${ranks} ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 5000 --slot-format inline
    --value-bytes 16 --workload raw-read,get,find-or-put --ops 1000 --depth 16 --client-wait ${wait} --client-spin-us 5)
  set(env ${RDMAHASH_MPI_ENV})
  list(FILTER env EXCLUDE REGEX "^UCX_TLS=")
  set_tests_properties(bench_ucx_client_wait_${name} PROPERTIES ENVIRONMENT "${env};UCX_TLS=${tls}" TIMEOUT 300)
endforeach()
# Hybrid clients do not spin while the machine has more runnable tasks than CPUs
# (detail::ClientSpin): one more client than the machine has cores, and a memory node, unbound,
# at depth 1 (every client's spin runs while the memory node needs a CPU): the clients must sleep
# without spinning first (client_unspun_sleeps_per_op > 0, and never more than they sleep).
cmake_host_system_information(RESULT host_cores QUERY NUMBER_OF_LOGICAL_CORES)
math(EXPR contended_ranks "${host_cores} + 2")
add_test(NAME bench_ucx_client_wait_tcp_hybrid_contended COMMAND python3 ${CHECK_JSON} --expect client_wait=hybrid --expect-unspun --
  ${RDMAHASH_MPIRUN} --bind-to none -n ${contended_ranks} ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 5000
  --slot-format inline --value-bytes 16 --workload get --ops 3000 --depth 1 --client-wait hybrid)
set(env ${RDMAHASH_MPI_ENV})
list(FILTER env EXCLUDE REGEX "^UCX_TLS=")
set_tests_properties(bench_ucx_client_wait_tcp_hybrid_contended PROPERTIES ENVIRONMENT "${env};UCX_TLS=tcp" TIMEOUT 300)
# --read-coalescing auto resolves to on where UCX has only TCP, off with shared memory (JSON field
# read_coalescing), with the JSON's outcome checks.
foreach(entry "tcp|on" "self,sm|off")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 tls)
  list(GET parts 1 resolved)
  string(REPLACE "," "_" name "${tls}")
  add_test(NAME bench_ucx_read_coalescing_auto_${name} COMMAND python3 ${CHECK_JSON} --expect read_coalescing=${resolved} --
    ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 5000 --slot-format inline
    --value-bytes 16 --workload raw-read,get --ops 1000 --depth 16)
  set(env ${RDMAHASH_MPI_ENV})
  list(FILTER env EXCLUDE REGEX "^UCX_TLS=")
  set_tests_properties(bench_ucx_read_coalescing_auto_${name} PROPERTIES ENVIRONMENT "${env};UCX_TLS=${tls}" TIMEOUT 300)
endforeach()
# Symmetric over TCP with sleeping clients: a rank that sleeps while its own batch is in flight
# must still serve the other rank's one-sided operations on its shard (their events wake it).
add_test(NAME bench_ucx_client_wait_tcp_event_symmetric COMMAND python3 ${CHECK_JSON} --expect client_wait=event --
  ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --symmetric --records 5000 --slot-format inline
  --value-bytes 16 --workload raw-read,get,find-or-put --ops 1000 --depth 16 --client-wait event)
set(env ${RDMAHASH_MPI_ENV})
list(FILTER env EXCLUDE REGEX "^UCX_TLS=")
set_tests_properties(bench_ucx_client_wait_tcp_event_symmetric PROPERTIES ENVIRONMENT "${env};UCX_TLS=tcp" TIMEOUT 300)

# Every point starts from a stated table state (issue 14): repetitions of an insert workload and an
# insert workload after another one report the same outcomes as a first point would.
add_test(NAME bench_local_repeat_find_or_put COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --records 20000 --workload find-or-put --repeat 3 --ops 2000)
add_test(NAME bench_local_inserts_after_inserts COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --records 20000 --workload find-or-put,mixed,get,read-intensive,write-intensive
  --repeat 2 --ops 4000)
add_test(NAME bench_local_cuckoo_heap_repeat COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme cuckoo --storage heap --records 20000 --value-bytes 16
  --workload mixed,find-or-put --repeat 2 --ops 4000)
add_test(NAME bench_local_linear_heap_repeat COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --storage heap --key-bytes 8 --records 20000 --value-bytes 16
  --workload mixed,find-or-put --repeat 2 --ops 4000 --cold)
add_test(NAME bench_local_keep_table COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --records 20000 --workload find-or-put,find-or-put --ops 2000 --keep-table)
add_test(NAME bench_ucx_repeat_inserts COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 20000 --value-bytes 8
  --workload find-or-put,mixed --repeat 2 --ops 2000)
set_tests_properties(bench_ucx_repeat_inserts PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)

# Cuckoo baseline and read-size policies through the same driver.
add_test(NAME bench_local_cuckoo COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme cuckoo --clients 2 --records 20000 --load-factor 0.5,0.85
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
# YCSB files run unmodified (default 10 x 100-byte records) on heap storage; --repeat reloads.
add_test(NAME bench_local_ycsb_a_default_records_heap COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --storage heap --ycsb ${YCSB_DIR}/workloada -p recordcount=5000 -p operationcount=5000
  --clients 2 --depth 8 --repeat 2)
add_test(NAME bench_local_ycsb_b_default_records_cuckoo_heap COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --scheme cuckoo --storage heap --ycsb ${YCSB_DIR}/workloadb -p recordcount=5000
  -p operationcount=5000 --clients 2 --depth 8 --repeat 2)
add_test(NAME bench_ucx_ycsb_d_default_records_heap COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --storage heap --ycsb ${YCSB_DIR}/workloadd
  -p recordcount=4000 -p operationcount=4000 --depth 8 --repeat 2)
set_tests_properties(bench_ucx_ycsb_d_default_records_heap PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME bench_local_heap_4096_byte_values COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --storage heap --records 5000 --value-bytes 4096 --workload get,find-or-put --ops 2000)
add_test(NAME cli_heap_value_too_big COMMAND ${EXPECT_FAIL} "value-bytes must be at most 4096 for --storage heap"
  ${RDMAHASH_BIN} bench --storage heap --value-bytes 4097)
add_test(NAME cli_ycsb_value_too_big COMMAND ${EXPECT_FAIL} "do not fit the 120 value bytes of an inline record: use --storage heap"
  ${RDMAHASH_BIN} bench --ycsb ${YCSB_DIR}/workloada -p recordcount=100 -p operationcount=100)
add_test(NAME cli_ycsb_malformed COMMAND ${EXPECT_FAIL} "add up to 1.05, not 1.*line 4"
  ${RDMAHASH_BIN} bench --ycsb ${YCSB_DIR}/malformed_sum)
add_test(NAME cli_ycsb_missing_file COMMAND ${EXPECT_FAIL} "ycsb" ${RDMAHASH_BIN} bench --ycsb /no/such/workload)
# One error contract (issue 14): every bad input is `rdmahash <cmd>: error: ...` with exit status 2,
# including CLI11's own parse errors and a table that cannot fit in memory. The two memory tests run
# under an 8 GiB address-space limit, so that with the check removed (a mutant) the run fails fast
# instead of filling the machine's memory.
add_test(NAME cli_ycsb_nonexistent_contract COMMAND ${EXPECT_FAIL} "^rdmahash bench: error: .*ycsb.*/nonexistent"
  ${RDMAHASH_BIN} bench --ycsb /nonexistent)
add_test(NAME cli_records_too_big_for_memory COMMAND ${EXPECT_FAIL}
  "^rdmahash bench: error: the table does not fit in memory: .* needs .* bytes.* but MemAvailable is .* bytes"
  prlimit --as=8589934592 ${RDMAHASH_BIN} bench --records 10000000000)
add_test(NAME cli_unknown_option_contract COMMAND ${EXPECT_FAIL} "^rdmahash bench: error: .*--no-such-option"
  ${RDMAHASH_BIN} bench --no-such-option)
add_test(NAME cli_model_unknown_option_contract COMMAND ${EXPECT_FAIL} "^rdmahash model: error: .*--nope"
  ${RDMAHASH_BIN} model --nope)
add_test(NAME cli_ucx_records_too_big_for_memory COMMAND ${EXPECT_FAIL}
  "^rdmahash bench: error: the table does not fit in memory"
  prlimit --as=8589934592 ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --records 10000000000)
# UCX allocates regions from POSIX shared memory by default, which an address-space limit does not
# bound (tmpfs pages): allocate from anonymous mmap here, so that the limit applies.
set_tests_properties(cli_ucx_records_too_big_for_memory PROPERTIES
  ENVIRONMENT "${RDMAHASH_MPI_ENV};UCX_ALLOC_PRIO=mmap;EXPECT_FAIL_SECONDS=120" TIMEOUT 120)
# expect_fail.sh prints "ok (exit N)" when it passes: these must exit with exactly 2.
set_tests_properties(cli_ycsb_nonexistent_contract cli_records_too_big_for_memory cli_unknown_option_contract
  cli_model_unknown_option_contract cli_ucx_records_too_big_for_memory PROPERTIES PASS_REGULAR_EXPRESSION "ok \\(exit 2\\)")
add_test(NAME cli_p_without_ycsb COMMAND ${EXPECT_FAIL} "needs --ycsb" ${RDMAHASH_BIN} bench -p recordcount=5)
add_test(NAME cli_heap4_model_read_size COMMAND ${EXPECT_FAIL} "fixed read size with --storage heap4"
  ${RDMAHASH_BIN} bench --storage heap4 --key-bytes 4 --value-bytes 4 --read-size model --records 100 --ops 10)

# Smallest valid, largest valid and first invalid value of every numeric option.
include(${CMAKE_CURRENT_SOURCE_DIR}/cli_edges.cmake)

# RACE (issue 9): byte-string keys (16 bytes from the bench's uint64 keys), growth from one
# subtable, YCSB's unmodified 1000-byte records, over threads and over UCX.
add_test(NAME bench_local_race COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --scheme race --key-bytes 16 --value-bytes 32 --clients 2 --records 20000
  --workload get,find-or-put,mixed,write-intensive --ops 3000 --depth 8)
add_test(NAME bench_local_race_nocache COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --scheme race --race-dir-cache off --initial-depth 2 --key-bytes 16 --value-bytes 32
  --clients 2 --records 20000 --workload get,find-or-put --ops 3000 --depth 8)
add_test(NAME bench_local_ycsb_a_race COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --scheme race --key-bytes 16 --ycsb ${YCSB_DIR}/workloada -p recordcount=10000
  -p operationcount=10000 --clients 2 --depth 8)
add_test(NAME bench_ucx_race COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --scheme race --memory-nodes 1 --records 20000
  --key-bytes 16 --value-bytes 32 --workload get,find-or-put,write-intensive --ops 2000 --depth 8)
add_test(NAME bench_ucx_ycsb_f_race_2mem COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 4 ${RDMAHASH_BIN} bench --fabric ucx --scheme race --memory-nodes 2 --key-bytes 16
  --ycsb ${YCSB_DIR}/workloadf -p recordcount=5000 -p operationcount=5000 --depth 8)
set_tests_properties(bench_ucx_race bench_ucx_ycsb_f_race_2mem PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME cli_race_key_bytes COMMAND ${EXPECT_FAIL} "key-bytes must be in \\[8, 256\\] with --scheme race"
  ${RDMAHASH_BIN} bench --scheme race --key-bytes 300)
add_test(NAME cli_race_value_bytes COMMAND ${EXPECT_FAIL} "value-bytes must be at most 15360"
  ${RDMAHASH_BIN} bench --scheme race --value-bytes 20000)
add_test(NAME cli_race_ucx_bulk_2mem COMMAND ${EXPECT_FAIL} "bulk-loads its records"
  ${RDMAHASH_BIN} bench --scheme race --fabric ucx --memory-nodes 2)
# Level hashing (OSDI'18, seed 002's baseline): bench rows over LocalFabric and UCX (their
# linearizability: history_level_*), bad input.
add_test(NAME bench_local_level COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme level --clients 2 --records 20000 --load-factor 0.5
  --value-bytes 8 --workload get,find-or-put,mixed --ops 2000 --depth 8)
add_test(NAME bench_ucx_level COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --scheme level --memory-nodes 1 --records 20000
  --load-factor 0.5 --value-bytes 8 --workload get,find-or-put --ops 1000 --depth 8)
set_tests_properties(bench_ucx_level PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME cli_level_key_bytes COMMAND ${EXPECT_FAIL} "scheme level stores 8-byte keys"
  ${RDMAHASH_BIN} bench --scheme level --key-bytes 4 --ops 10)
# Continuity hashing (seed 002): volatile and --pm-path runs, reopen-and-recover, bad input.
add_test(NAME bench_local_continuity COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme continuity --clients 2 --records 20000 --load-factor 0.2
  --value-bytes 8 --workload get,find-or-put,mixed --ops 2000 --depth 8)
# Growing online: starts 32 times smaller; the bulk load grows it three times, the find-or-put point
# once more (online, while the clients run). The get points (no resize in progress) are one READ
# per lookup plus the few that teach each client the level (check_bench_json.py).
add_test(NAME bench_local_continuity_grow COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme continuity --clients 2 --records 20000 --load-factor 0.1
  --max-resizes 5 --value-bytes 8 --workload get,find-or-put,get --keep-table --ops 8000 --depth 8)
# Added SBuckets for 1/10 of the pairs: a table loaded to 0.65 (without them its first segment
# overflows near 0.45) loads; lookups take one READ, or two when the pair claims added slots.
add_test(NAME bench_local_continuity_added COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme continuity --clients 2 --records 20000 --load-factor 0.65
  --added-sbuckets 1/10 --value-bytes 8 --workload get,mixed --ops 2000 --depth 8)
# Added SBuckets with online growth: the bulk load grows the table (each resize once a segment and
# its group are full), the find-or-put point once more while the clients run.
add_test(NAME bench_local_continuity_added_grow COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_BIN} bench --fabric local --scheme continuity --clients 2 --records 20000 --load-factor 0.3
  --max-resizes 3 --added-sbuckets 1/10 --value-bytes 8 --workload get,find-or-put,get --keep-table --ops 8000 --depth 8)
add_test(NAME bench_ucx_continuity_added COMMAND python3 ${CHECK_JSON} --
  ${RDMAHASH_MPIRUN} -n 3 ${RDMAHASH_BIN} bench --fabric ucx --scheme continuity --memory-nodes 1 --records 20000
  --load-factor 0.65 --added-sbuckets 1/10 --value-bytes 8 --workload get,find-or-put,mixed --ops 1000 --depth 8)
set_tests_properties(bench_ucx_continuity_added PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME cli_continuity_bad_added_sbuckets COMMAND ${EXPECT_FAIL} "added-sbuckets must be 0 or 1/D"
  ${RDMAHASH_BIN} bench --scheme continuity --added-sbuckets 2/10)
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
add_test(NAME cli_pm_path_needs_continuity COMMAND ${EXPECT_FAIL} "pm-path applies to --scheme continuity, level or hopscotch"
  ${RDMAHASH_BIN} bench --scheme linear --pm-path /tmp/x.pm)
add_test(NAME cli_continuity_full_fails_cleanly COMMAND ${EXPECT_FAIL} "is full at [0-9]+ of [0-9]+ slots"
  ${RDMAHASH_BIN} bench --scheme continuity --records 20000 --load-factor 0.9 --ops 10)
add_test(NAME cli_continuity_pm_path_directory COMMAND ${EXPECT_FAIL} "pm-path: .*not a regular file"
  ${RDMAHASH_BIN} bench --scheme continuity --records 100 --load-factor 0.2 --ops 10 --pm-path /tmp)
# Level hashing on a --pm-path file: reopen-and-recover over both fabrics, reloads, and the refused
# images (another geometry, a continuity image, truncated, a flipped header bit: exit 2, untouched).
add_test(NAME bench_level_pm_reopen
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/level_pm_reopen.sh ${RDMAHASH_BIN} ${CMAKE_CURRENT_BINARY_DIR}/level_pm_reopen
          ${CHECK_JSON} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(bench_level_pm_reopen PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
# P-FaRM-KV (--scheme hopscotch --pm-path): reopen-and-recover over both fabrics, persists per write
# in the bench JSON, and the refused images (another geometry, a level image, truncated, a flipped
# header bit, zeros, a run killed while loading: exit 2, untouched).
add_test(NAME bench_hopscotch_pm_reopen
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/hopscotch_pm_reopen.sh ${RDMAHASH_BIN} ${CMAKE_CURRENT_BINARY_DIR}/hopscotch_pm_reopen
          ${CHECK_JSON} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(bench_hopscotch_pm_reopen PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
# Who may write a --pm-path file (issue 26, tests/pm_owner_test.sh): only a file this run created is
# formatted (an existing image with its first 128 bytes zeroed, a data file starting with 128 zero
# bytes, a file of zeros: bench and serve exit 2, the file untouched); one owner at a time (a second
# serve or bench on a served image: exit 2, the holder's pid named); level: another --records of the
# same geometry and a corrupt header field are refused as such.
foreach(scheme continuity level hopscotch)
  add_test(NAME bench_${scheme}_pm_owner
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/pm_owner_test.sh ${RDMAHASH_BIN} ${CMAKE_CURRENT_BINARY_DIR}/pm_owner_${scheme}
            ${scheme})
  set_tests_properties(bench_${scheme}_pm_owner PROPERTIES PASS_REGULAR_EXPRESSION "pm owner ok" FAIL_REGULAR_EXPRESSION "FAIL"
    TIMEOUT 300)
endforeach()
add_test(NAME cli_level_pm_path_directory COMMAND ${EXPECT_FAIL} "pm-path: .*not a regular file"
  ${RDMAHASH_BIN} bench --scheme level --records 100 --load-factor 0.2 --ops 10 --pm-path /tmp)
add_test(NAME cli_level_pm_path_two_nodes COMMAND ${EXPECT_FAIL} "pm-path holds one memory node's table"
  ${RDMAHASH_BIN} bench --scheme level --memory-nodes 2 --records 100 --load-factor 0.2 --ops 10 --pm-path /tmp/x.pm)
add_test(NAME cli_serve_level_pm_path_device COMMAND ${EXPECT_FAIL} "pm-path: /dev/null: not a regular file"
  ${RDMAHASH_BIN} serve --scheme level --records 100 --load-factor 0.2 --pm-path /dev/null --listen 127.0.0.1:0)

# --direct-access takes on or off.
add_test(NAME cli_bad_direct_access COMMAND ${EXPECT_FAIL} "--direct-access: maybe not in"
  ${RDMAHASH_BIN} bench --direct-access maybe --records 10)

# --speculative-claim takes auto, on or off; the row says which (linear find-or-put, linear.h).
add_test(NAME cli_bad_speculative_claim COMMAND ${EXPECT_FAIL} "--speculative-claim: maybe not in"
  ${RDMAHASH_BIN} bench --speculative-claim maybe --records 10)
foreach(claim on off)
  add_test(NAME bench_local_speculative_claim_${claim} COMMAND python3 ${CHECK_JSON} --expect speculative_claim=${claim} --
    ${RDMAHASH_BIN} bench --fabric local --clients 2 --slot-format inline --key-bytes 8 --value-bytes 8 --records 20000
    --workload find-or-put,mixed --repeat 2 --ops 2000 --speculative-claim ${claim})
endforeach()

# --chunk-order linear|quadratic (issue 28, linear.h ChunkOrder): bad values and the combinations a
# quadratic table refuses, then a local run whose JSON rows say quadratic.
add_test(NAME cli_bad_chunk_order COMMAND ${EXPECT_FAIL} "--chunk-order must be linear or quadratic, got 'cubic'"
  ${RDMAHASH_BIN} bench --chunk-order cubic --records 10)
add_test(NAME cli_chunk_order_quadratic_chunk_list COMMAND ${EXPECT_FAIL} "give one --chunk per run"
  ${RDMAHASH_BIN} bench --chunk-order quadratic --chunk 8,16 --workload find-or-put --records 100)
add_test(NAME cli_chunk_order_quadratic_read_size_model COMMAND ${EXPECT_FAIL} "--read-size model .*contiguous probing"
  ${RDMAHASH_BIN} bench --chunk-order quadratic --read-size model --records 100)
add_test(NAME cli_chunk_order_quadratic_cluster_hints COMMAND ${EXPECT_FAIL} "--read-size cluster .*contiguous probing"
  ${RDMAHASH_BIN} bench --chunk-order quadratic --read-size 8,cluster --records 100)
add_test(NAME cli_chunk_order_quadratic_heap COMMAND ${EXPECT_FAIL} "--chunk-order quadratic applies to set and inline slots"
  ${RDMAHASH_BIN} bench --chunk-order quadratic --storage heap --value-bytes 8 --records 100)
add_test(NAME cli_chunk_order_quadratic_other_scheme COMMAND ${EXPECT_FAIL} "--chunk-order quadratic applies to --scheme linear"
  ${RDMAHASH_BIN} bench --scheme cuckoo --chunk-order quadratic --records 100)
add_test(NAME cli_serve_chunk_order_quadratic_heap COMMAND ${EXPECT_FAIL} "--chunk-order quadratic applies to set and inline slots"
  ${RDMAHASH_BIN} serve --chunk-order quadratic --chunk 16 --storage heap --value-bytes 8 --records 100 --load-factor 0.5
  --listen 127.0.0.1:0)
foreach(entry IN ITEMS "set|0" "inline|8")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 fmt)
  list(GET parts 1 vb)
  add_test(NAME bench_local_chunk_order_quadratic_${fmt} COMMAND python3 ${CHECK_JSON} --expect chunk_order=quadratic --
    ${RDMAHASH_BIN} bench --fabric local --clients 2 --slot-format ${fmt} --value-bytes ${vb} --records 20000
    --load-factor 0.7 --chunk 16 --chunk-order quadratic --workload find-or-put,mixed,get --repeat 2 --ops 1000)
endforeach()
# --multi-get: gets (and raw READs) posted --depth at a time as one multi-get cost per op exactly
# what one coroutine per get costs (round trips, requests, bytes, outcomes), at a load where lookups
# run past their first window (0.9, R = 2), with inline slots (the multi-get) and heap records (no
# multi-get: the get loop); local and UCX (direct access on and off).
set(MULTI_GET_SAME ${CMAKE_CURRENT_SOURCE_DIR}/multi_get_same_cost.py)
add_test(NAME bench_local_multi_get COMMAND python3 ${MULTI_GET_SAME} --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --memory-nodes 2 --records 20000 --load-factor 0.5,0.9 --value-bytes 8
  --workload raw-read,get --read-size 2,8 --ops 3000 --depth 16 --quiet)
add_test(NAME bench_local_multi_get_heap COMMAND python3 ${MULTI_GET_SAME} --no-multi --
  ${RDMAHASH_BIN} bench --fabric local --records 20000 --load-factor 0.9 --value-bytes 8 --storage heap
  --workload get --ops 2000 --depth 16 --quiet)
# Cuckoo (inline, parallel probing) has a multi-get; sequential probing has none.
add_test(NAME bench_local_multi_get_cuckoo COMMAND python3 ${MULTI_GET_SAME} --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --memory-nodes 2 --scheme cuckoo --records 20000
  --load-factor 0.5,0.85 --value-bytes 8 --workload raw-read,get --ops 3000 --depth 16 --quiet)
add_test(NAME bench_local_multi_get_cuckoo_sequential COMMAND python3 ${MULTI_GET_SAME} --no-multi --
  ${RDMAHASH_BIN} bench --fabric local --scheme cuckoo --cuckoo-probe sequential --records 20000 --load-factor 0.85
  --value-bytes 8 --workload get --ops 2000 --depth 16 --quiet)
foreach(direct IN ITEMS on off)
  add_test(NAME bench_ucx_multi_get_direct_${direct} COMMAND python3 ${MULTI_GET_SAME} --
    ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 20000 --load-factor 0.9
    --value-bytes 8 --workload raw-read,get --read-size 2 --ops 3000 --depth 16 --direct-access ${direct} --quiet)
  set_tests_properties(bench_ucx_multi_get_direct_${direct} PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
endforeach()
# --multi-get on with find-or-put: a multi-find-or-put (linear inline), the same outcomes and WRITEs
# per op as one coroutine per insert; heap records have none (their find-or-puts run as with off).
add_test(NAME bench_local_multi_find_or_put COMMAND python3 ${MULTI_GET_SAME} --
  ${RDMAHASH_BIN} bench --fabric local --clients 2 --memory-nodes 2 --records 20000 --load-factor 0.5,0.8 --value-bytes 8
  --workload find-or-put --ops 1000 --depth 16 --quiet)
foreach(claim IN ITEMS on off)
  add_test(NAME bench_local_multi_find_or_put_rt_${claim} COMMAND python3 ${MULTI_GET_SAME} --exact-round-trips --
    ${RDMAHASH_BIN} bench --fabric local --records 20000 --load-factor 0.5,0.8 --value-bytes 8 --speculative-claim ${claim}
    --workload find-or-put --ops 2000 --depth 16 --quiet)
endforeach()
add_test(NAME bench_local_multi_find_or_put_heap COMMAND python3 ${MULTI_GET_SAME} --no-multi-find-or-put --
  ${RDMAHASH_BIN} bench --fabric local --records 20000 --load-factor 0.5 --value-bytes 8 --storage heap
  --workload find-or-put --ops 1000 --depth 16 --quiet)
add_test(NAME bench_ucx_multi_find_or_put COMMAND python3 ${MULTI_GET_SAME} --
  ${RDMAHASH_MPIRUN} -n 2 ${RDMAHASH_BIN} bench --fabric ucx --memory-nodes 1 --records 20000 --load-factor 0.8
  --value-bytes 8 --workload find-or-put --ops 2000 --depth 16 --direct-access on --quiet)
set_tests_properties(bench_ucx_multi_find_or_put PROPERTIES ENVIRONMENT "${RDMAHASH_MPI_ENV}" TIMEOUT 300)
add_test(NAME cli_multi_get_bad COMMAND ${EXPECT_FAIL} "--multi-get: maybe not in"
  ${RDMAHASH_BIN} bench --multi-get maybe --records 10)
