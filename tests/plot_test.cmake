# Tests of python/plot.py (the figure tool) on a small real sample of `rdmahash bench --json`
# output (tests/data/bench_sample.jsonl: local fabric, several schemes, read-size policies, load
# factors, depth-1 rows, two record sizes inline/heap and a zipf get-all sweep).
# Included from tests/CMakeLists.txt after cli_tests.cmake (it uses the rdmahash_cli target).

# A python3 that has matplotlib: `python3` on PATH may be another interpreter (pyenv, venv) than
# Debian's /usr/bin/python3 that python3-matplotlib installs into.
set(PLOT_PYTHON "")
foreach(candidate python3 /usr/bin/python3)
  execute_process(COMMAND ${candidate} -c "import sys, matplotlib; print(sys.executable)"
                  RESULT_VARIABLE plot_py_rc OUTPUT_VARIABLE plot_py_exe ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(plot_py_rc EQUAL 0 AND plot_py_exe)
    set(PLOT_PYTHON ${plot_py_exe})
    break()
  endif()
endforeach()

set(PLOT_PY ${CMAKE_SOURCE_DIR}/python/plot.py)
set(PLOT_SAMPLE ${CMAKE_SOURCE_DIR}/tests/data/bench_sample.jsonl)
set(PLOT_OUT ${CMAKE_BINARY_DIR}/plots)

# python3 -c "${PLOT_CHECK}" OUT_DIR PNG... -- COMMAND...
# Empties OUT_DIR, runs COMMAND (must exit 0), then requires every PNG in OUT_DIR to exist and be
# larger than 5 KB (not an empty canvas), index.md to list each of them, and table1.csv to have rows
# (when table1 is expected).
set(PLOT_CHECK [=[
import os, shutil, subprocess, sys
sep = sys.argv.index('--')
out, pngs, cmd = sys.argv[1], sys.argv[2:sep], sys.argv[sep + 1:]
shutil.rmtree(out, ignore_errors=True)
run = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
sys.stdout.write(run.stdout); sys.stdout.write(run.stderr)
if run.returncode != 0:
    sys.exit('FAIL: plot.py exit status %d' % run.returncode)
index = open(os.path.join(out, 'index.md')).read()
failed = 0
for png in pngs:
    path = os.path.join(out, png)
    size = os.path.getsize(path) if os.path.exists(path) else -1
    ok = size > 5 * 1024 and open(path, 'rb').read(8) == b'\x89PNG\r\n\x1a\n' and png in index
    print('%s: %s (%d bytes%s)' % ('ok' if ok else 'FAIL', png, size, '' if png in index else ', not in index.md'))
    failed += not ok
if any(p.startswith('table1') for p in pngs):
    rows = open(os.path.join(out, 'table1.csv')).read().splitlines()
    if len(rows) < 2 or not rows[0].startswith('fabric,'):
        print('FAIL: table1.csv has no rows'); failed += 1
print('%d passed, %d failed' % (len(pngs) + 1 - failed, failed))
sys.exit(1 if failed else 0)
]=])

set(PLOT_EXPECTED fig6_cuckoo_throughput_vs_load.png fig7_throughput_vs_load.png fig8_bytes_per_lookup.png
    fig9_latency_depth1.png table1_round_trips_read_size.png fig10_throughput_vs_read_size.png
    fig11_inline_vs_heap.png fig12_cluster_skew.png)

if(PLOT_PYTHON)
  add_test(NAME plot_sample_figures
    COMMAND ${PLOT_PYTHON} -c "${PLOT_CHECK}" ${PLOT_OUT} ${PLOT_EXPECTED} --
            ${PLOT_PYTHON} ${PLOT_PY} ${PLOT_SAMPLE} --out ${PLOT_OUT} --rdmahash $<TARGET_FILE:rdmahash_cli>)
  set_tests_properties(plot_sample_figures PROPERTIES TIMEOUT 300 LABELS plot)
else()
  message(WARNING "no python3 with matplotlib found: plot_sample_figures will fail "
                  "(Debian: apt-get install python3-matplotlib)")
  add_test(NAME plot_sample_figures COMMAND sh -c "echo 'no python3 with matplotlib when CMake ran (Debian: apt-get install python3-matplotlib, then re-run cmake)'; exit 1")
  set(PLOT_PYTHON python3)  # enough for the bad-input tests: plot.py checks its input before importing matplotlib
endif()

# Every kind of row gets a figure: YCSB phases (tests/data/bench_ycsb_sample.jsonl: workloads A, B, D
# with default 1000-byte records on linear and cuckoo heap storage, 2 repeats) and one point.
if(PLOT_PYTHON)
  add_test(NAME plot_ycsb_rows
    COMMAND ${PLOT_PYTHON} -c "${PLOT_CHECK}" ${PLOT_OUT}_ycsb ycsb.png --
            ${PLOT_PYTHON} ${PLOT_PY} ${CMAKE_SOURCE_DIR}/tests/data/bench_ycsb_sample.jsonl --out ${PLOT_OUT}_ycsb)
  # Seed 001's Table 1 (tests/data/bench_chunk_sample.jsonl: a --chunk 8,32,128 sweep at 3 load factors).
  add_test(NAME plot_seed001_chunks
    COMMAND ${PLOT_PYTHON} -c "${PLOT_CHECK}" ${PLOT_OUT}_chunks seed001_chunks.png --
            ${PLOT_PYTHON} ${PLOT_PY} ${CMAKE_SOURCE_DIR}/tests/data/bench_chunk_sample.jsonl --out ${PLOT_OUT}_chunks)
  # Seed 004's per-operation figure from a SMALL=1 run of scripts/fig_seed004_ops.sh (1 and 2 clients).
  add_test(NAME plot_seed004_ops
    COMMAND ${PLOT_PYTHON} -c "${PLOT_CHECK}" ${PLOT_OUT}_seed004 seed004_ops.png --
            ${PLOT_PYTHON} ${PLOT_PY} ${CMAKE_SOURCE_DIR}/tests/data/bench_seed004_ops_sample.jsonl --out ${PLOT_OUT}_seed004)
  # Seed 000 Table 2 from a SMALL=1 run of scripts/fig_seed000_table2.sh (3 actual x 3 assumed).
  add_test(NAME plot_seed000_table2
    COMMAND ${PLOT_PYTHON} -c "${PLOT_CHECK}" ${PLOT_OUT}_table2 seed000_table2.png --
            ${PLOT_PYTHON} ${PLOT_PY} ${CMAKE_SOURCE_DIR}/tests/data/bench_seed000_table2_sample.jsonl --out ${PLOT_OUT}_table2)
  # Seed 000 Fig. 13 (a model figure): the script over a short range of offsets; the PNG drawn and
  # the CSV holding both models at both load factors for every offset.
  add_test(NAME plot_seed000_fig13
    COMMAND ${PLOT_PYTHON} -c "import csv, os, subprocess, sys; out = sys.argv[1]; env = dict(os.environ, RDMAHASH_BUILD=sys.argv[2], FIG13_OUT=out, X_MIN='-4', X_MAX='11', PYTHON=sys.executable); r = subprocess.run([sys.argv[3]], env=env); rows = list(csv.DictReader(open(os.path.join(out, 'fig13.csv')))); png = os.path.join(out, 'seed000_fig13.png'); ok = r.returncode == 0 and len(rows) == 2 * 2 * 16 and os.path.getsize(png) > 5120; print('PASS' if ok else 'FAIL: exit %d, %d rows' % (r.returncode, len(rows))); sys.exit(0 if ok else 1)"
            ${PLOT_OUT}_fig13 $<TARGET_FILE_DIR:rdmahash_cli> ${CMAKE_SOURCE_DIR}/scripts/fig_seed000_fig13.sh)
  # Seed 002 Fig. 10 from the continuity load test's output (the script runs the test and draws it).
  add_test(NAME plot_seed002_fig10
    COMMAND ${PLOT_PYTHON} -c "import csv, os, subprocess, sys; out = sys.argv[1]; env = dict(os.environ, RDMAHASH_BUILD=sys.argv[2], FIG10_OUT=out, PYTHON=sys.executable); r = subprocess.run([sys.argv[3]], env=env); rows = list(csv.DictReader(open(os.path.join(out, 'fig10.csv')))); png = os.path.join(out, 'seed002_fig10.png'); ok = r.returncode == 0 and [x['added_sbuckets'] for x in rows] == ['off', '1/20', '1/10'] and os.path.getsize(png) > 5120; print('PASS' if ok else 'FAIL: exit %d, rows %s' % (r.returncode, rows)); sys.exit(0 if ok else 1)"
            ${PLOT_OUT}_fig10 ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/scripts/fig_seed002_fig10.sh)
  add_test(NAME plot_single_point
    COMMAND ${PLOT_PYTHON} -c "${PLOT_CHECK}" ${PLOT_OUT}_one points.png --
            ${PLOT_PYTHON} ${PLOT_PY} ${CMAKE_SOURCE_DIR}/tests/data/bench_single_point.jsonl --out ${PLOT_OUT}_one)
  # The README's plotting command works whatever `python3` is first on PATH: here a python3 that
  # cannot import matplotlib (as a pyenv or venv interpreter without it) shadows Debian's.
  set(PLOT_FAKE_BIN ${CMAKE_CURRENT_BINARY_DIR}/plot_fake_python)
  file(MAKE_DIRECTORY ${PLOT_FAKE_BIN})
  file(WRITE ${PLOT_FAKE_BIN}/python3 "#!/bin/sh\n# python3 without site-packages: no matplotlib\nexec ${PLOT_PYTHON} -S \"$@\"\n")
  file(CHMOD ${PLOT_FAKE_BIN}/python3 PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  add_test(NAME plot_sh_without_matplotlib_on_path
    COMMAND ${PLOT_PYTHON} -c "${PLOT_CHECK}" ${PLOT_OUT}_path points.png --
            env PATH=${PLOT_FAKE_BIN}:$ENV{PATH} ${CMAKE_SOURCE_DIR}/scripts/plot.sh
            ${CMAKE_SOURCE_DIR}/tests/data/bench_single_point.jsonl --out ${PLOT_OUT}_path)
  set_tests_properties(plot_ycsb_rows plot_single_point plot_sh_without_matplotlib_on_path plot_seed004_ops plot_seed000_table2 plot_seed000_fig13 plot_seed002_fig10 PROPERTIES
    TIMEOUT 300 LABELS plot)
endif()

# Bad input: a clear message and a non-zero exit (plot.py: status 2), never a traceback.
set(PLOT_BAD_DIR ${CMAKE_CURRENT_BINARY_DIR}/plot_bad_input)
file(MAKE_DIRECTORY ${PLOT_BAD_DIR})
file(READ ${PLOT_SAMPLE} plot_sample_text LIMIT 4096)
string(REGEX REPLACE "\n.*" "" plot_first_line "${plot_sample_text}")
file(WRITE ${PLOT_BAD_DIR}/malformed.jsonl "${plot_first_line}\n{\"scheme\": \"linear\", \"fabric\":\n")
file(WRITE ${PLOT_BAD_DIR}/not_bench.jsonl "{\"hello\": 1}\n")
file(WRITE ${PLOT_BAD_DIR}/empty.jsonl "")
set(PLOT_EXPECT_FAIL ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.sh)
add_test(NAME plot_malformed_jsonl COMMAND ${PLOT_EXPECT_FAIL} "malformed\\.jsonl:2: not JSON"
  ${PLOT_PYTHON} ${PLOT_PY} ${PLOT_BAD_DIR}/malformed.jsonl --out ${PLOT_BAD_DIR}/out)
add_test(NAME plot_not_bench_jsonl COMMAND ${PLOT_EXPECT_FAIL} "not_bench\\.jsonl:1: not an .rdmahash bench. result"
  ${PLOT_PYTHON} ${PLOT_PY} ${PLOT_BAD_DIR}/not_bench.jsonl --out ${PLOT_BAD_DIR}/out)
add_test(NAME plot_empty_jsonl COMMAND ${PLOT_EXPECT_FAIL} "no usable rows"
  ${PLOT_PYTHON} ${PLOT_PY} ${PLOT_BAD_DIR}/empty.jsonl --out ${PLOT_BAD_DIR}/out)
add_test(NAME plot_missing_file COMMAND ${PLOT_EXPECT_FAIL} "cannot read .*no_such\\.jsonl"
  ${PLOT_PYTHON} ${PLOT_PY} ${PLOT_BAD_DIR}/no_such.jsonl --out ${PLOT_BAD_DIR}/out)
set_tests_properties(plot_malformed_jsonl plot_not_bench_jsonl plot_empty_jsonl plot_missing_file PROPERTIES
  TIMEOUT 60 LABELS plot)
