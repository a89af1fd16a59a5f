# Bad input (issue 26 items 4 and 7): every numeric option of every subcommand at extreme values,
# sizes from options by checked arithmetic, messages that name the flag, help texts, outputs kept
# when a run is refused. Included from tests/CMakeLists.txt after cli_tests.cmake (RDMAHASH_BIN,
# EXPECT_FAIL).

# --history: a run refused after the options passed (a corrupt --pm-path) leaves an earlier
# history byte-identical (it was truncated to 0 bytes).
add_test(NAME cli_refused_run_keeps_history
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/refused_run_keeps_history.sh ${RDMAHASH_BIN} ${CMAKE_CURRENT_BINARY_DIR}/refused_run_keeps_history)
set_tests_properties(cli_refused_run_keeps_history PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 120)

