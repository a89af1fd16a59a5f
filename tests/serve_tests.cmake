# Memory nodes as services (issue 10 items 4-5, issue 16 items 1 and 3): `rdmahash serve` and
# `rdmahash bench --connect`, no MPI. Each test starts its own server on 127.0.0.1:0.
#
# Client kills: a fresh server per round, three kv-mix clients with --history, the second
# kill -9'd at a random point of its run; the survivors finish, a fourth client runs, and the four
# histories together are linearizable (tests/serve_kill_test.sh). Schemes whose clients hold
# nothing between requests (linear set and heap: single CASes; cuckoo and level: every write is an RPC the
# memory node applies): 20 kills for linear set (the issue's count), 8 for the others. Linear
# inline, whose clients hold a slot lock, is tested with clients that die holding one, and race,
# whose clients leave installed splits and tentative copies, with clients that die mid-split (below).
# kill -9 of a persistent memory node (continuity --pm-path) during an insert load, 5 rounds at
# random points: the restarted server recovers the file and every acknowledged write of the
# client's history is in it (tests/serve_pm_kill_test.sh, tests/pm_history_verify.py; no Go needed).
add_test(NAME serve_pm_kill_continuity
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_pm_kill_test.sh $<TARGET_FILE:rdmahash_cli> 5 100000)
set_tests_properties(serve_pm_kill_continuity PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 300 LABELS serve)
# The same for level hashing (--scheme level --pm-path), 3 rounds: the table starts at load factor
# 0.8 with room for 3 resizes (serve's --capacity), so the client's inserts resize its top level
# during the load; two rounds kill at a random point, the last one while the image says RESIZING
# (recovery must finish the interrupted resize, and every acknowledged write is still there).
add_test(NAME serve_pm_kill_level
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_pm_kill_test.sh $<TARGET_FILE:rdmahash_cli> 3 100000)
set_tests_properties(serve_pm_kill_level PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  ENVIRONMENT "SCHEME=level;LOAD_FACTOR=0.8;RESIZE_KILLS=1" TIMEOUT 300 LABELS serve)

# The same while the table grows online (--max-resizes 5: it starts 32 times smaller; the bulk load
# grows it to level 4 and the client's inserts to level 5). --resize-pace 0: the last resize
# advances only by the pairs the client writes, so it is in progress for most of the run and the
# kill lands mid-migration (the verifier prints "resizing").
# The same for P-FaRM-KV (--scheme hopscotch --pm-path), 3 rounds at load factor 0.5: the client's
# inserts displace (logged moves) and fill chains while the server is killed.
add_test(NAME serve_pm_kill_hopscotch
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_pm_kill_test.sh $<TARGET_FILE:rdmahash_cli> 3 100000)
set_tests_properties(serve_pm_kill_hopscotch PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  ENVIRONMENT "SCHEME=hopscotch;LOAD_FACTOR=0.5" TIMEOUT 300 LABELS serve)
add_test(NAME serve_pm_kill_continuity_resize
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_pm_kill_test.sh $<TARGET_FILE:rdmahash_cli> 3 100000 --max-resizes 5
          --resize-pace 0)
set_tests_properties(serve_pm_kill_continuity_resize PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 300 LABELS serve)

# With added SBuckets for 1/10 of the pairs: 10 000 records load a 50 000-slot table to 0.2 and the
# client's inserts fill it past its first full segment, so items (and updates) land in added slots
# before and across the kill (pm_history_verify.py reports how many items the image holds there).
add_test(NAME serve_pm_kill_continuity_added
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_pm_kill_test.sh $<TARGET_FILE:rdmahash_cli> 3 100000 --added-sbuckets 1/10)
set_tests_properties(serve_pm_kill_continuity_added PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  ENVIRONMENT "RECORDS=10000" TIMEOUT 300 LABELS serve)

if(NOT RDMAHASH_GO)
  message(WARNING "Go not found: the serve tests (which check histories) are skipped")
  return()
endif()
set(SERVE_KILLS
  "linear_set|20|--slot-format set"
  "linear_heap|8|--storage heap --value-bytes 16"
  "cuckoo_inline|8|--scheme cuckoo --value-bytes 16"
  "cuckoo_heap|8|--scheme cuckoo --storage heap --value-bytes 16"
  "level|6|--scheme level --value-bytes 16"
  "hopscotch|8|--scheme hopscotch --neighborhood 16 --value-bytes 16"
  "cluster|8|--scheme cluster --value-bytes 16")
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
# Cluster clients with DrTM's location cache (a client-side option): killed mid-run as above.
add_test(NAME serve_kill_cluster_location_cache
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 4 20000 --records 1000 --scheme cluster --value-bytes 16)
set_tests_properties(serve_kill_cluster_location_cache PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  ENVIRONMENT "CLIENT_FLAGS=--location-cache 4096" TIMEOUT 600 LABELS serve)
# A client that dies in the middle of sending an RPC (deterministically: its payload is an
# unreadable page) must not stall the others (tests/serve_dead_sender_test.sh; issue 26 item 1).
foreach(entry IN ITEMS "level|--scheme level --value-bytes 16" "cuckoo_heap|--scheme cuckoo --storage heap --value-bytes 16"
                       "race|--scheme race" "linear_inline|--slot-format inline --value-bytes 16")
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 flags)
  separate_arguments(flags)
  add_test(NAME serve_dead_sender_${name}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_dead_sender_test.sh $<TARGET_FILE:rdmahash_cli>
            $<TARGET_FILE:serve_dead_sender_probe> --records 1000 ${flags})
  set_tests_properties(serve_dead_sender_${name} PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
    TIMEOUT 300 LABELS serve)
endforeach()
# Linear inline: the victim kills itself holding a slot lock (before its payload WRITE in even
# rounds, after it in odd ones); the server's LinearLockSweeper must roll the lock back or forward.
add_test(NAME serve_kill_linear_inline_lock_death
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 8 20000 --records 1000
          --slot-format inline --value-bytes 16)
set_tests_properties(serve_kill_linear_inline_lock_death PROPERTIES PASS_REGULAR_EXPRESSION "PASS"
  FAIL_REGULAR_EXPRESSION "FAIL" ENVIRONMENT "LOCK_DEATH=1" TIMEOUT 600 LABELS serve)
# RACE (issue 9/10): 1000 contended keys, half of them new, in subtables of 21 slots, so tables
# split throughout the run. A victim kill -9'd at a random point, and one that kills itself at a
# random step of its first split (RACE_SPLIT_DEATH: leaving its split installed, partly frozen,
# copied or published as that step does); survivors that meet the split finish it (no death board
# needed: include/rdmahash/race.h, Split); the server still marks the client dead after its grace.
add_test(NAME serve_kill_race
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 6 20000 --records 1000
          --scheme race --race-groups 1 --value-bytes 16)
add_test(NAME serve_kill_race_split_death
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 8 20000 --records 1000
          --scheme race --race-groups 1 --value-bytes 16)
set_tests_properties(serve_kill_race PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  ENVIRONMENT "KEYS=1000" TIMEOUT 600 LABELS serve)
set_tests_properties(serve_kill_race_split_death PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  ENVIRONMENT "KEYS=1000;RACE_SPLIT_DEATH=1" TIMEOUT 600 LABELS serve)
# Over TCP (UCX_TLS=tcp: every one-sided operation is served by the server's poll loop) four
# clients run and are checked, but none is killed: UCX 1.13 aborts the server when it answers a
# software-emulated READ of a client that just died ("Fatal: unexpected error: Endpoint timeout"
# in ucp_request_send, whatever the endpoints' error mode; 1 of 5 kills here). See ucx_service.h.
add_test(NAME serve_linear_set_tcp
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 3 3000 --records 1000 --slot-format set)
# The same with the server in the other wait modes (--serve-mode: event sleeps whenever idle, poll
# never sleeps, hybrid spins --serve-spin-us before it sleeps; the default over TCP is hybrid).
add_test(NAME serve_linear_set_tcp_poll
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 1 2000 --records 1000 --slot-format set
          --serve-mode poll)
add_test(NAME serve_linear_set_tcp_event
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 1 2000 --records 1000 --slot-format set
          --serve-mode event)
add_test(NAME serve_linear_set_tcp_hybrid
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 1 2000 --records 1000 --slot-format set
          --serve-mode hybrid --serve-spin-us 5)
set_tests_properties(serve_linear_set_tcp serve_linear_set_tcp_poll serve_linear_set_tcp_event serve_linear_set_tcp_hybrid
  PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL" ENVIRONMENT "UCX_TLS=tcp;NO_KILL=1"
  TIMEOUT 600 LABELS serve)
# How the clients wait (--client-wait, rdmahash::ClientWait) over TCP, 1 round of 3 clients + 1 on
# 2 cores with histories checked: poll (busy progress), hybrid (spin, then sleep on the worker's
# event fd; the default over TCP), event (sleep whenever nothing is ready). A client that sleeps
# through a reply or misses one would hang or fail its history.
foreach(wait poll hybrid event)
  add_test(NAME serve_linear_set_tcp_client_${wait}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 1 2000 --records 1000 --slot-format set)
  set_tests_properties(serve_linear_set_tcp_client_${wait} PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
    ENVIRONMENT "UCX_TLS=tcp;NO_KILL=1;CLIENT_FLAGS=--client-wait ${wait} --client-spin-us 5" TIMEOUT 600 LABELS serve)
endforeach()
# Served linear set table over TCP with READ coalescing forced on and off (auto is on over TCP, so
# the tests above run with it too): the histories must stay linearizable either way.
foreach(rc on off)
  add_test(NAME serve_linear_set_tcp_read_coalescing_${rc}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 1 2000 --records 1000 --slot-format set)
  set_tests_properties(serve_linear_set_tcp_read_coalescing_${rc} PROPERTIES PASS_REGULAR_EXPRESSION "PASS"
    FAIL_REGULAR_EXPRESSION "FAIL" ENVIRONMENT "UCX_TLS=tcp;NO_KILL=1;CLIENT_FLAGS=--read-coalescing ${rc}" TIMEOUT 600 LABELS serve)
endforeach()
# Kills with the server in hybrid mode over shared memory (clients' one-sided traffic needs no
# server CPU; loss handling, RPCs and the sockets still go through the spin-then-sleep loop).
add_test(NAME serve_kill_linear_inline_lock_death_hybrid
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 2 20000 --records 1000
          --slot-format inline --value-bytes 16 --serve-mode hybrid)
add_test(NAME serve_kill_cuckoo_hybrid
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_kill_test.sh $<TARGET_FILE:rdmahash_cli> 3 20000 --records 1000
          --scheme cuckoo --value-bytes 16 --serve-mode hybrid)
set_tests_properties(serve_kill_linear_inline_lock_death_hybrid PROPERTIES PASS_REGULAR_EXPRESSION "PASS"
  FAIL_REGULAR_EXPRESSION "FAIL" ENVIRONMENT "LOCK_DEATH=1" TIMEOUT 600 LABELS serve)
set_tests_properties(serve_kill_cuckoo_hybrid PROPERTIES PASS_REGULAR_EXPRESSION "PASS"
  FAIL_REGULAR_EXPRESSION "FAIL" TIMEOUT 600 LABELS serve)

# Bad handshakes (garbage, truncated, empty, wrong version, one byte per second) are dropped while
# a client runs; the server listens on the loopback only; SIGTERM stops it cleanly.
add_test(NAME serve_handshakes_and_loopback
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve_handshake_test.py $<TARGET_FILE:rdmahash_cli>)
set_tests_properties(serve_handshakes_and_loopback PROPERTIES PASS_REGULAR_EXPRESSION "PASS" TIMEOUT 600 LABELS serve)

# A served quadratic table (--chunk-order quadratic, linear.h ChunkOrder): its order and chunk size
# reach --connect clients; a client's other --chunk or its own --chunk-order is refused.
add_test(NAME serve_quadratic_table_spec
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve_quadratic_test.py $<TARGET_FILE:rdmahash_cli>)
set_tests_properties(serve_quadratic_table_spec PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 300 LABELS serve)

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
# --serve-mode's values are checked in one place (rdmahash::parse_serve_mode, through
# BenchOptions::error()): serve and bench say the same.
add_test(NAME serve_bad_serve_mode COMMAND ${EF} "--serve-mode must be auto, event, hybrid or poll, got 'spin'"
  $<TARGET_FILE:rdmahash_cli> serve --records 100 --serve-mode spin)
add_test(NAME bench_bad_serve_mode COMMAND ${EF} "--serve-mode must be auto, event, hybrid or poll, got 'Poll'"
  $<TARGET_FILE:rdmahash_cli> bench --fabric ucx --records 100 --serve-mode Poll)
# --client-wait: checked before anything connects; not for the local fabric nor for serve.
# --read-coalescing: checked before anything connects; not for the local fabric.
add_test(NAME serve_connect_bad_read_coalescing COMMAND ${EF} "--read-coalescing must be auto, on or off, got 'maybe'"
  $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1 --read-coalescing maybe)
add_test(NAME bench_local_read_coalescing COMMAND ${EF} "--read-coalescing applies to --fabric ucx and --connect"
  $<TARGET_FILE:rdmahash_cli> bench --fabric local --records 100 --read-coalescing on)
set_tests_properties(serve_connect_bad_read_coalescing bench_local_read_coalescing PROPERTIES LABELS serve TIMEOUT 60)
add_test(NAME serve_connect_bad_client_wait COMMAND ${EF} "--client-wait must be auto, poll, hybrid or event, got 'spin'"
  $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1 --client-wait spin)
add_test(NAME bench_local_client_wait COMMAND ${EF} "--client-wait and --client-spin-us apply to --fabric ucx and --connect"
  $<TARGET_FILE:rdmahash_cli> bench --fabric local --records 100 --client-wait poll)
add_test(NAME serve_client_wait COMMAND ${EF} "client-wait"
  $<TARGET_FILE:rdmahash_cli> serve --records 100 --client-wait poll)
add_test(NAME serve_bad_spin_zero COMMAND ${EF} "--serve-spin-us: Value 0 not in range 1 to 999"
  $<TARGET_FILE:rdmahash_cli> serve --records 100 --serve-mode hybrid --serve-spin-us 0)
add_test(NAME serve_bad_spin_text COMMAND ${EF} "--serve-spin-us"
  $<TARGET_FILE:rdmahash_cli> serve --records 100 --serve-spin-us 20us)
add_test(NAME bench_bad_spin_large COMMAND ${EF} "--serve-spin-us: Value 1000 not in range 1 to 999"
  $<TARGET_FILE:rdmahash_cli> bench --fabric ucx --records 100 --serve-spin-us 1000)
add_test(NAME serve_connect_serve_mode COMMAND ${EF} "--serve-mode and --serve-spin-us tell memory nodes how to wait"
  $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1 --serve-mode hybrid)
add_test(NAME bench_local_serve_mode COMMAND ${EF} "apply to --fabric ucx"
  $<TARGET_FILE:rdmahash_cli> bench --fabric local --records 100 --serve-spin-us 10)
set_tests_properties(serve_connect_nobody serve_connect_bad_address serve_connect_table_option serve_connect_clients
  serve_connect_local_fabric serve_bad_listen serve_foreign_address serve_bad_node serve_two_load_factors
  serve_small_capacity serve_bad_serve_mode serve_bad_spin_zero serve_bad_spin_text bench_bad_spin_large
  serve_connect_serve_mode bench_local_serve_mode bench_bad_serve_mode serve_connect_bad_client_wait
  bench_local_client_wait serve_client_wait PROPERTIES LABELS serve TIMEOUT 60)

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
# The same for RPCs with a client that sleeps while it waits (--client-wait event, over shared
# memory): a dead node's RPC never raises an event, so only the bounded sleep (kClientSleepBound)
# lets the client look at its memory node's liveness.
add_test(NAME serve_server_death_cuckoo_client_event
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_server_death_test.sh $<TARGET_FILE:rdmahash_cli> --records 1000 --scheme cuckoo
          --value-bytes 16)
set_tests_properties(serve_server_death_cuckoo_client_event PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  ENVIRONMENT "CLIENT_FLAGS=--client-wait event" TIMEOUT 300 LABELS serve)

# The same for a multi-get client over shared memory: it copies its windows from the mapped
# segment without a request (direct reads), so only the liveness look of each round can stop it.
add_test(NAME serve_server_death_linear_multiget
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_server_death_test.sh $<TARGET_FILE:rdmahash_cli> --records 1000)
set_tests_properties(serve_server_death_linear_multiget PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  ENVIRONMENT "WORKLOAD=get;CLIENT_FLAGS=--multi-get on" TIMEOUT 300 LABELS serve)

# The same over TCP with READ coalescing on: a coalesced READ whose memory node died (its reply
# never comes, or its send fails on the peer-failure endpoint) must end in MemoryNodeLost too.
add_test(NAME serve_server_death_linear_set_tcp_read_coalescing
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve_server_death_test.sh $<TARGET_FILE:rdmahash_cli> --records 1000 --slot-format set)
set_tests_properties(serve_server_death_linear_set_tcp_read_coalescing PROPERTIES PASS_REGULAR_EXPRESSION "PASS"
  FAIL_REGULAR_EXPRESSION "FAIL" ENVIRONMENT "UCX_TLS=tcp;CLIENT_FLAGS=--read-coalescing on" TIMEOUT 300 LABELS serve)

# The token handshake (issue 16): no token, a wrong token, a replayed handshake, random, truncated
# and slow proofs are refused with their messages while a client with the token runs; then a good
# client runs and the histories are linearizable.
add_test(NAME serve_token_handshake
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve_token_test.py $<TARGET_FILE:rdmahash_cli>)
set_tests_properties(serve_token_handshake PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 300 LABELS serve)
# Bad token files and a public address without one: exit 2 before listening. `timeout` bounds a
# server that (wrongly) starts serving. TOKEN_CASE writes the file FILE in the given way first.
set(TOKDIR ${CMAKE_CURRENT_BINARY_DIR}/token_files)
set(TOKSH "mkdir -p ${TOKDIR} && f=${TOKDIR}/$0 && rm -rf $f && case $0 in open) printf 0123456789abcdef0123 > $f && chmod 644 $f;; empty) : > $f && chmod 600 $f;; short) printf 'abc\\n' > $f && chmod 600 $f;; dir) mkdir $f;; link) printf 0123456789abcdef0123 > $f.target && chmod 600 $f.target && ln -s $f.target $f;; esac && exec \"$@\"")
add_test(NAME serve_token_file_too_open COMMAND ${EF} "'${TOKDIR}/open' has mode 0644: group or others may read it"
  sh -c "${TOKSH}" open timeout 30 $<TARGET_FILE:rdmahash_cli> serve --records 10 --token-file ${TOKDIR}/open)
add_test(NAME serve_token_file_empty COMMAND ${EF} "'${TOKDIR}/empty' is empty"
  sh -c "${TOKSH}" empty timeout 30 $<TARGET_FILE:rdmahash_cli> serve --records 10 --token-file ${TOKDIR}/empty)
add_test(NAME serve_token_file_short COMMAND ${EF} "holds 3 bytes: a token needs at least 16"
  sh -c "${TOKSH}" short timeout 30 $<TARGET_FILE:rdmahash_cli> serve --records 10 --token-file ${TOKDIR}/short)
add_test(NAME serve_token_file_dir COMMAND ${EF} "is not a regular file"
  sh -c "${TOKSH}" dir timeout 30 $<TARGET_FILE:rdmahash_cli> serve --records 10 --token-file ${TOKDIR}/dir)
# A symlink (O_NOFOLLOW said only "Too many levels of symbolic links").
add_test(NAME serve_token_file_symlink COMMAND ${EF} "--token-file: '${TOKDIR}/link' is a symbolic link: the token file must not be a symlink"
  sh -c "${TOKSH}" link timeout 30 $<TARGET_FILE:rdmahash_cli> serve --records 10 --token-file ${TOKDIR}/link)
add_test(NAME serve_token_file_uncreatable COMMAND ${EF} "--token-file: cannot create '/nonexistent/token'"
  timeout 30 $<TARGET_FILE:rdmahash_cli> serve --records 10 --token-file /nonexistent/token)
add_test(NAME serve_connect_token_missing COMMAND ${EF} "--token-file: cannot read '/nonexistent/token': No such file"
  $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1 --token-file /nonexistent/token)
add_test(NAME serve_connect_token_too_open COMMAND ${EF} "group or others may read it"
  sh -c "${TOKSH}" open $<TARGET_FILE:rdmahash_cli> bench --connect 127.0.0.1:1 --token-file ${TOKDIR}/open)
add_test(NAME serve_token_without_connect COMMAND ${EF} "--token-file goes with --connect"
  $<TARGET_FILE:rdmahash_cli> bench --fabric local --records 10 --token-file /nonexistent/token)
add_test(NAME serve_public_needs_token COMMAND ${EF} "0.0.0.0:0 is not a loopback address: .*give --token-file"
  timeout 30 $<TARGET_FILE:rdmahash_cli> serve --records 10 --listen 0.0.0.0:0)
set_tests_properties(serve_token_file_too_open serve_token_file_empty serve_token_file_short serve_token_file_dir
  serve_token_file_symlink serve_token_file_uncreatable serve_connect_token_missing serve_connect_token_too_open serve_token_without_connect
  serve_public_needs_token PROPERTIES LABELS serve TIMEOUT 60 RUN_SERIAL ON)

# 10^5 random and mutated handshake messages against a server with --token-file while token-holding
# kv-mix clients run; every fuzz connection dropped, every good handshake welcomed, histories
# linearizable (tests/serve_fuzz_test.py).
add_test(NAME serve_handshake_fuzz
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve_fuzz_test.py $<TARGET_FILE:rdmahash_cli> 100000)
set_tests_properties(serve_handshake_fuzz PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 300 LABELS serve)

# Churn: kv-mix clients (4 at a time, every fourth killed -9 mid-run) against one server for 60 s
# and at least 64 clients: the server's descriptors return exactly to their baseline, its resident
# memory to within 4 MiB, every client not killed exits 0, and the histories are linearizable.
add_test(NAME serve_churn_no_leaks
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve_churn_test.py $<TARGET_FILE:rdmahash_cli> 60 64)
set_tests_properties(serve_churn_no_leaks PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 400 LABELS serve)

# Out of descriptors: accept() backs off and logs a bounded number of times; connected clients go
# on (tests/serve_emfile_test.py; issue 26 item 5).
add_test(NAME serve_emfile_backoff
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/serve_emfile_test.py $<TARGET_FILE:rdmahash_cli>)
set_tests_properties(serve_emfile_backoff PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 600 LABELS serve)

# Beyond one host (issue 29): three hosts made of network + UTS namespaces (scripts/hosts.sh), ranks
# launched into them by Open MPI's own mpirun (its rsh agent enters the namespaces): every scheme's
# kv-mix across hosts checked linearizable, TCP alone across hosts, and `serve` with a token in one
# host, clients in two others, one client host's processes killed mid-run (tests/multihost_test.sh).
# Needs root.
add_test(NAME multihost_namespaces COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/multihost_test.sh $<TARGET_FILE:rdmahash_cli>)
set_tests_properties(multihost_namespaces PROPERTIES PASS_REGULAR_EXPRESSION "PASS" FAIL_REGULAR_EXPRESSION "FAIL"
  TIMEOUT 900 LABELS serve RUN_SERIAL ON)
