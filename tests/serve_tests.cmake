# Memory nodes as services (issue 10 items 4-5, issue 16 items 1 and 3): `rdmahash serve` and
# `rdmahash bench --connect`, no MPI. Each test starts its own server on 127.0.0.1:0.
#
# Client kills: a fresh server per round, three kv-mix clients with --history, the second
# kill -9'd at a random point of its run; the survivors finish, a fourth client runs, and the four
# histories together are linearizable (tests/serve_kill_test.sh). Schemes whose clients hold
# nothing between requests (linear set and heap: single CASes; cuckoo: every write is an RPC the
# memory node applies): 20 kills for linear set (the issue's count), 8 for the others. Not here, because a client killed inside
# its lock window blocks that key for others (issue 10 item 5): race (a dead writer's
# tentative copy stalls the writers of its key: seen spinning for 10 minutes, see issue 9). Linear
# inline, whose clients hold a slot lock, is tested with clients that die holding one (below).
if(NOT RDMAHASH_GO)
  message(WARNING "Go not found: the serve tests (which check histories) are skipped")
  return()
endif()
set(SERVE_KILLS
  "linear_set|20|--slot-format set"
  "linear_heap|8|--storage heap --value-bytes 16"
  "cuckoo_inline|8|--scheme cuckoo --value-bytes 16"
  "cuckoo_heap|8|--scheme cuckoo --storage heap --value-bytes 16")
foreach(entry IN LISTS SERVE_KILLS)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 rounds)
  list(GET parts 2 flags)
  separate_arguments(flags)
  add_test(NAME serve_kill_${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> ${rounds} 20000 --records 1000 ${flags})
  set_tests_properties(serve_kill_${name} PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
    TIMEOUT 600 LABELS serve)
endforeach()
# Linear inline: the victim kills itself holding a slot lock (before its payload WRITE in even
# rounds, after it in odd ones); the server's LinearLockSweeper must roll the lock back or forward.
add_test(NAME serve_kill_linear_inline_lock_death
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 8 20000 --records 1000
          --slot-format inline --value-bytes 16)
set_tests_properties(serve_kill_linear_inline_lock_death PROPERTIES PASS_REGULAR_EXPRESSION "PASS"
  FAIL_REGULAR_EXPRESSION "FAIL" ENVIRONMENT "LOCK_DEATH=1" TIMEOUT 600 LABELS serve)
# Over TCP (UCX_TLS=tcp: every one-sided operation is served by the server's poll loop) four
# clients run and are checked, but none is killed: UCX 1.13 aborts the server when it answers a
# software-emulated READ of a client that just died ("Fatal: unexpected error: Endpoint timeout"
# in ucp_request_send, whatever the endpoints' error mode; 1 of 5 kills here). See ucx_service.h.
add_test(NAME serve_linear_set_tcp
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 3 3000 --records 1000 --slot-format set)
# The same with the server in poll mode (--serve-mode poll: a bounded spin before it sleeps).
add_test(NAME serve_linear_set_tcp_poll
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 1 2000 --records 1000 --slot-format set
          --serve-mode poll)
set_tests_properties(serve_linear_set_tcp serve_linear_set_tcp_poll PROPERTIES PASS_REGULAR_EXPRESSION "PASS"
  FAIL_REGULAR_EXPRESSION "FAIL" ENVIRONMENT "UCX_TLS=tcp;NO_KILL=1" TIMEOUT 600 LABELS serve)

# Bad handshakes (garbage, truncated, empty, wrong version, one byte per second) are dropped while
# a client runs; the server listens on the loopback only; SIGTERM stops it cleanly.
add_test(NAME serve_handshakes_and_loopback
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve_handshake_test.py $<TARGET_FILE:rdmahash_cli>)
set_tests_properties(serve_handshakes_and_loopback PROPERTIES PASS_REGULAR_EXPRESSION "PASS" TIMEOUT 600 LABELS serve)

# Bad input: a clear message, exit 2.
set(EF ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh)
add_test(NAME serve_connect_nobody COMMAND ${EF} "memory node 127.0.0.1:1 cannot be reached"
  $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1)
add_test(NAME serve_connect_bad_address COMMAND ${EF} "not host:port"
  $<TARGET_FILE:rdmahash_cli> bench --connect localhost)
add_test(NAME serve_connect_table_option COMMAND ${EF} "--records describes the table"
  $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1 --records 5)
add_test(NAME serve_connect_clients COMMAND ${EF} "one client per process"
  $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1 --clients 2)
add_test(NAME serve_connect_local_fabric COMMAND ${EF} "runs over UCX"
  $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1 --fabric local)
add_test(NAME serve_bad_listen COMMAND ${EF} "--listen: address 'nonsense' is not host:port"
  $<TARGET_FILE:rdmahash_cli> serve --listen nonsense --records 10)
add_test(NAME serve_foreign_address COMMAND ${EF} "no network interface of this machine has the address"
  $<TARGET_FILE:rdmahash_cli> serve --listen 192.0.2.1:0 --records 10)
add_test(NAME serve_bad_node COMMAND ${EF} "--node 2 does not exist"
  $<TARGET_FILE:rdmahash_cli> serve --node 2 --memory-nodes 2 --records 10)
add_test(NAME serve_two_load_factors COMMAND ${EF} "one --load-factor"
  $<TARGET_FILE:rdmahash_cli> serve --load-factor 0.5,0.8 --records 10)
add_test(NAME serve_small_capacity COMMAND ${EF} "--capacity must be at least --records"
  $<TARGET_FILE:rdmahash_cli> serve --records 100 --capacity 10)
add_test(NAME serve_bad_serve_mode COMMAND ${EF} "--serve-mode"
  $<TARGET_FILE:rdmahash_cli> serve --records 100 --serve-mode spin)
set_tests_properties(serve_connect_nobody serve_connect_bad_address serve_connect_table_option serve_connect_clients
  serve_connect_local_fabric serve_bad_listen serve_foreign_address serve_bad_node serve_two_load_factors
  serve_small_capacity serve_bad_serve_mode PROPERTIES LABELS serve TIMEOUT 60)

# A memory node killed under a running client: the client stops with exit 1 and a clear message
# (MemoryNodeLost), both for one-sided traffic (linear set: it would go on "succeeding" on the
# dead node's shared-memory segment) and for RPCs (cuckoo: nobody would ever answer).
foreach(entry "linear_set|--slot-format set" "cuckoo|--scheme cuckoo --value-bytes 16")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 flags)
  separate_arguments(flags)
  add_test(NAME serve_server_death_${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_server_death_test.sh $<TARGET_FILE:rdmahash_cli> --records 1000 ${flags})
  set_tests_properties(serve_server_death_${name} PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
    TIMEOUT 300 LABELS serve)
endforeach()
