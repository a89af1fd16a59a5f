#!/usr/bin/env bash
# universalmutator sweep over the scheme and model sources (docs/testing.md), never run in CI: a full
# sweep is thousands of mutants. Installs universalmutator into build/mutants/venv on first use.
#   scripts/mutants.sh --sweep [--sample N] [--seed S] [SOURCE...]   (default: src/schemes, src/model)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/mutants/venv
if [ ! -x "$venv/bin/mutate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet universalmutator
fi
opts=() srcs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sample|--seed|--jobs|--workers|--workdir|--sweep-tests) opts+=("$1" "$2"); shift 2 ;;
    -*) opts+=("$1"); shift ;;
    *) srcs+=("$1"); shift ;;
  esac
done
if [ ${#srcs[@]} -eq 0 ]; then
  mapfile -t srcs < <(ls src/schemes/*/*.cpp src/model/*.cpp)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec python3 scripts/mutants.py --mutate "$venv/bin/mutate" "${opts[@]}" --sweep "${srcs[@]}"
