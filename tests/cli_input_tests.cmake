# Bad input (issue 26 items 4 and 7): every numeric option of every subcommand at extreme values,
# sizes from options by checked arithmetic, messages that name the flag, help texts, outputs kept
# when a run is refused. Included from tests/CMakeLists.txt after cli_tests.cmake (RDMAHASH_BIN,
# EXPECT_FAIL).

# serve: out-of-range --capacity (2^64-1 wrapped to a 0.1 MiB heap), a port in use (exit 2, not 1).
add_test(NAME serve_capacity_out_of_range COMMAND ${EXPECT_FAIL} "--capacity must be in \\[--records, 2\\^34\\]"
  timeout 60 ${RDMAHASH_BIN} serve --storage heap --capacity 18446744073709551615 --records 100 --listen 127.0.0.1:0)
add_test(NAME serve_capacity_race_out_of_range COMMAND ${EXPECT_FAIL} "--capacity must be in \\[--records, 2\\^34\\]"
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

