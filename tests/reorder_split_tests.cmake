# The review transport of issue 10 item 6 kept as a test (reorder_split_history.cpp): client A's
# batches reordered and READs split into 8-byte words in random order, client B's whole operations
# run between them, 4 keys; the history of both (>= 10^4 operations) must be linearizable
# (Porcupine). Not `inprocess`: it calls the Go checker.
add_executable(reorder_split_history reorder_split_history.cpp)
target_compile_options(reorder_split_history PRIVATE ${RDMAHASH_WARNINGS})
target_link_libraries(reorder_split_history PRIVATE rdmahash::bench)
if(NOT RDMAHASH_GO)
  return()
endif()
foreach(scheme linear_set linear_inline linear_heap cuckoo_inline cuckoo_heap race continuity)
  set(file ${CMAKE_CURRENT_BINARY_DIR}/histories/reorder_split_${scheme}.bin)
  add_test(NAME reorder_split_${scheme}
    COMMAND sh -c "\"$1\" \"$2\" \"$3\" 4000 && \"$4\" check-history --timeout-per-key 120 \"$3\""
            sh $<TARGET_FILE:reorder_split_history> ${scheme} ${file} $<TARGET_FILE:rdmahash_cli>)
  set_tests_properties(reorder_split_${scheme} PROPERTIES
    PASS_REGULAR_EXPRESSION "linearizable: [0-9][0-9][0-9][0-9][0-9]+ events" TIMEOUT 300 LABELS history)
endforeach()
