# Checked histories (issue 10): for every scheme and storage, a contended kv-mix run (16 keys,
# 4 clients, get/put/update/erase/find_or_put) over LocalFabric, over UCX (mpirun) and over the
# simulated fabric (--fabric sim, 4 simulated clients) records a history of > 10^5 operations,
# and Porcupine must find it linearizable. Then deliberately broken
# histories (a stale read, a torn read, a duplicate insert) must be rejected.
if(NOT RDMAHASH_GO)
  message(WARNING "Go not found: the history checker tests are skipped")
  return()
endif()
set(HISTORY_DIR ${CMAKE_CURRENT_BINARY_DIR}/histories)
file(MAKE_DIRECTORY ${HISTORY_DIR})
set(HISTORY_RUN --workload kv-mix --keys 16 --depth 4 --ops 25000 --records 100000 --no-progress --quiet)
set(HISTORY_SCHEMES
  "linear_set|--scheme linear --slot-format set"
  "linear_inline|--scheme linear --slot-format inline --value-bytes 16"
  "linear_heap|--scheme linear --storage heap --value-bytes 16"
  "cuckoo_inline|--scheme cuckoo --value-bytes 16"
  "cuckoo_heap|--scheme cuckoo --storage heap --value-bytes 16"
  "hopscotch|--scheme hopscotch --value-bytes 16 --load-factor 0.8"
  "cluster|--scheme cluster --value-bytes 16"
  "cluster_location_cache|--scheme cluster --value-bytes 16 --location-cache 4096"
  "race|--scheme race --key-bytes 16 --value-bytes 16"
  "level|--scheme level --value-bytes 16")
foreach(entry IN LISTS HISTORY_SCHEMES)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 flags)
  separate_arguments(flags)
  set(local_file ${HISTORY_DIR}/${name}_local.bin)
  add_test(NAME history_${name}_local
    COMMAND sh -c "b=\"$1\" f=\"$2\"; shift 2; rm -f \"$f\" && \"$b\" bench --fabric local --clients 4 \"\$@\" --history \"$f\" && \"$b\" check-history --timeout-per-key 120 \"$f\""
            sh $<TARGET_FILE:rdmahash_cli> ${local_file} ${flags} ${HISTORY_RUN})
  set(ucx_file ${HISTORY_DIR}/${name}_ucx.bin)
  add_test(NAME history_${name}_ucx
    COMMAND sh -c "m=\"$1\" b=\"$2\" f=\"$3\"; shift 3; rm -f \"$f\" && $m -n 5 \"$b\" bench --fabric ucx --memory-nodes 1 \"\$@\" --history \"$f\" && \"$b\" check-history --timeout-per-key 120 \"$f\""
            sh "${MPIEXEC_EXECUTABLE} --oversubscribe" $<TARGET_FILE:rdmahash_cli> ${ucx_file} ${flags} ${HISTORY_RUN})
  # The same contended history with 4 simulated clients in virtual time (--fabric sim).
  set(sim_file ${HISTORY_DIR}/${name}_sim.bin)
  add_test(NAME history_${name}_sim
    COMMAND sh -c "b=\"$1\" f=\"$2\"; shift 2; rm -f \"$f\" && \"$b\" bench --fabric sim --clients 4 \"\$@\" --history \"$f\" && \"$b\" check-history --timeout-per-key 120 \"$f\""
            sh $<TARGET_FILE:rdmahash_cli> ${sim_file} ${flags} ${HISTORY_RUN})
  set_tests_properties(history_${name}_local history_${name}_ucx history_${name}_sim PROPERTIES
    PASS_REGULAR_EXPRESSION "linearizable: [0-9][0-9][0-9][0-9][0-9][0-9]+ events" TIMEOUT 600
    ENVIRONMENT "${RDMAHASH_MPI_ENV}" LABELS history)
endforeach()
# history_ucx(TEST FILE ENV ARGS...): mpirun -n 5 bench over UCX with ARGS recording FILE, then
# check-history must find it linearizable. Used by the variants below.
function(history_ucx test file env)
  add_test(NAME ${test}
    COMMAND sh -c "m=\"$1\" b=\"$2\" f=\"$3\"; shift 3; rm -f \"$f\" && $m -n 5 \"$b\" bench --fabric ucx --memory-nodes 1 \"\$@\" --history \"$f\" && \"$b\" check-history --timeout-per-key 120 \"$f\""
            sh "${MPIEXEC_EXECUTABLE} --oversubscribe" $<TARGET_FILE:rdmahash_cli> ${file} ${ARGN})
  set_tests_properties(${test} PROPERTIES
    PASS_REGULAR_EXPRESSION "linearizable: [0-9][0-9][0-9][0-9][0-9][0-9]+ events" TIMEOUT 600
    ENVIRONMENT "${env}" LABELS history)
endfunction()

# The same over UCX with the same-host fast path off (the runs above use the default, on), and over
# TCP (UCX_TLS=tcp), where coalescing is on (auto): a batch's READs, CASes and fenced WRITEs to the
# memory node travel as one kAmOpv message performed in posting order. Over TCP 64 keys instead of
# 16: with 16, 4 clients and the memory node on 2 cores, linear's find-or-puts spin ~70 round trips
# per op on each other's locks (45 s with coalescing, 91 s without); 64 keys: ~10 s.
set(HISTORY_RUN_TCP ${HISTORY_RUN})
list(TRANSFORM HISTORY_RUN_TCP REPLACE "^16$" "64")
set(history_tcp_env ${RDMAHASH_MPI_ENV})
list(FILTER history_tcp_env EXCLUDE REGEX "^UCX_TLS=")
foreach(entry IN LISTS HISTORY_SCHEMES)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 flags)
  separate_arguments(flags)
  if(name MATCHES "^(linear_inline|race)$")
    history_ucx(history_${name}_ucx_direct_off ${HISTORY_DIR}/${name}_ucx_direct_off.bin "${RDMAHASH_MPI_ENV}"
                ${flags} ${HISTORY_RUN} --direct-access off)
  endif()
  # cuckoo and level write through RPCs: over TCP a batch's RPC goes beside its coalesced message.
  if(name MATCHES "^(linear_inline|race|cuckoo_inline|level)$")
    history_ucx(history_${name}_ucx_tcp ${HISTORY_DIR}/${name}_ucx_tcp.bin "${history_tcp_env};UCX_TLS=tcp"
                ${flags} ${HISTORY_RUN_TCP} --read-coalescing on)
  endif()
endforeach()

# Continuity while its table grows online: 8000 keys of which the 2000 bulk-loaded ones are present
# at start; the table starts 64 times smaller than 2000 records at 0.1 need, the bulk load grows
# it to level 4 and the clients' inserts to level 6, with --resize-pace 0 (a resize advances by the
# pairs the clients write, so it is in progress during most of the run): reads cross MOVED and
# UNBORN marks while writes migrate pairs, and the history must stay linearizable.
set(HISTORY_RESIZE --scheme continuity --value-bytes 16 --max-resizes 6 --resize-pace 0 --records 2000
    --load-factor 0.1 --workload kv-mix --keys 8000 --depth 4 --ops 25000 --no-progress --quiet)
add_test(NAME history_continuity_resize_local
  COMMAND sh -c "b=\"$1\" f=\"$2\"; shift 2; rm -f \"$f\" && \"$b\" bench --fabric local --clients 4 \"\$@\" --history \"$f\" && \"$b\" check-history --timeout-per-key 120 \"$f\""
          sh $<TARGET_FILE:rdmahash_cli> ${HISTORY_DIR}/continuity_resize_local.bin ${HISTORY_RESIZE})
add_test(NAME history_continuity_resize_ucx
  COMMAND sh -c "m=\"$1\" b=\"$2\" f=\"$3\"; shift 3; rm -f \"$f\" && $m -n 5 \"$b\" bench --fabric ucx --memory-nodes 1 \"\$@\" --history \"$f\" && \"$b\" check-history --timeout-per-key 120 \"$f\""
          sh "${MPIEXEC_EXECUTABLE} --oversubscribe" $<TARGET_FILE:rdmahash_cli> ${HISTORY_DIR}/continuity_resize_ucx.bin ${HISTORY_RESIZE})
# The same with the memory node's background migration thread (--resize-pace 1) racing the writes.
string(REPLACE "--resize-pace 0" "--resize-pace 1" HISTORY_RESIZE_BG "${HISTORY_RESIZE}")
add_test(NAME history_continuity_resize_bg_local
  COMMAND sh -c "b=\"$1\" f=\"$2\"; shift 2; rm -f \"$f\" && \"$b\" bench --fabric local --clients 4 \"\$@\" --history \"$f\" && \"$b\" check-history --timeout-per-key 120 \"$f\""
          sh $<TARGET_FILE:rdmahash_cli> ${HISTORY_DIR}/continuity_resize_bg_local.bin ${HISTORY_RESIZE_BG})
set_tests_properties(history_continuity_resize_local history_continuity_resize_ucx history_continuity_resize_bg_local PROPERTIES
  PASS_REGULAR_EXPRESSION "linearizable: [0-9][0-9][0-9][0-9][0-9][0-9]+ events" TIMEOUT 600
  ENVIRONMENT "${RDMAHASH_MPI_ENV}" LABELS history)

# Added SBuckets for 1/10 of the pairs on a table that starts 8 times smaller and grows three times
# (--resize-pace 0): a resize starts only when a write finds its segment AND its group full, so
# before each one a group's 12 slots are claimed; lookups READ groups whose slots change hands,
# migrations move added items, and the history must stay linearizable (no write may answer full:
# the checker has no full, hence the low final load).
add_test(NAME history_continuity_added_local
  COMMAND sh -c "b=\"$1\" f=\"$2\"; shift 2; rm -f \"$f\" && \"$b\" bench --fabric local --clients 4 \"\$@\" --history \"$f\" && \"$b\" check-history --timeout-per-key 120 \"$f\""
          sh $<TARGET_FILE:rdmahash_cli> ${HISTORY_DIR}/continuity_added_local.bin --scheme continuity --value-bytes 16
          --added-sbuckets 1/10 --max-resizes 3 --resize-pace 0 --records 1000 --load-factor 0.3 --workload kv-mix
          --keys 1200 --depth 4 --ops 25000 --no-progress --quiet)
set_tests_properties(history_continuity_added_local PROPERTIES
  PASS_REGULAR_EXPRESSION "linearizable: [0-9][0-9][0-9][0-9][0-9][0-9]+ events" TIMEOUT 600
  ENVIRONMENT "${RDMAHASH_MPI_ENV}" LABELS history)

# The checker catches broken histories: each takes the linear inline history and breaks one op.
# A fixture, not DEPENDS: `ctest -R history_catches` (a mutant's tests) then writes the history first.
set_tests_properties(history_linear_inline_local PROPERTIES FIXTURES_SETUP linear_inline_history)
foreach(mode stale-read torn-read lost-insert)
  add_test(NAME history_catches_${mode}
    COMMAND sh -c "python3 \"$1\" ${mode} \"$3\" \"$3.${mode}\" && \"$2\" check-history --html \"$3.${mode}.html\" \"$3.${mode}\"; rc=$?; echo \"exit $rc\"; [ $rc -eq 1 ] && [ -s \"$3.${mode}.html\" ]"
            sh ${CMAKE_CURRENT_SOURCE_DIR}/history_inject.py $<TARGET_FILE:rdmahash_cli> ${HISTORY_DIR}/linear_inline_local.bin)
  set_tests_properties(history_catches_${mode} PROPERTIES FIXTURES_REQUIRED linear_inline_history
    PASS_REGULAR_EXPRESSION "not linearizable: key.*exit 1" TIMEOUT 300 LABELS history)
endforeach()

# Bad input: a clear message, exit 2.
add_test(NAME history_bad_file COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh "not an rdmahash history file"
  $<TARGET_FILE:rdmahash_cli> check-history ${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt)
add_test(NAME history_missing_file COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh "cannot open history file"
  $<TARGET_FILE:rdmahash_cli> check-history ${HISTORY_DIR}/no-such-file)
add_test(NAME history_truncated_file
  COMMAND sh -c "head -c 1000 \"$2\" > \"$2.truncated\" && \"$1\" check-history \"$2.truncated\"; rc=$?; echo \"exit $rc\"; [ $rc -eq 2 ]"
          sh $<TARGET_FILE:rdmahash_cli> ${HISTORY_DIR}/linear_inline_local.bin)
set_tests_properties(history_truncated_file PROPERTIES FIXTURES_REQUIRED linear_inline_history
  PASS_REGULAR_EXPRESSION "truncated [(]header says [0-9]+ events[)].*exit 2")
add_test(NAME history_needs_kv_mix COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh "history records workload kv-mix only"
  $<TARGET_FILE:rdmahash_cli> bench --records 100 --ops 10 --workload get --history ${HISTORY_DIR}/x.bin)
add_test(NAME history_kv_mix_small_values COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh "value-bytes must be 0 or at least 8"
  $<TARGET_FILE:rdmahash_cli> bench --records 100 --ops 10 --workload kv-mix --value-bytes 4)
add_test(NAME history_unwritable COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh "cannot open --history file"
  $<TARGET_FILE:rdmahash_cli> bench --records 100 --ops 10 --workload kv-mix --history /nonexistent/dir/h.bin)
