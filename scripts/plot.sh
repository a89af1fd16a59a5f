#!/usr/bin/env bash
# usage: scripts/plot.sh RESULTS.jsonl... --out DIR [--rdmahash BIN]   (python/plot.py's arguments)
# Runs python/plot.py with the first interpreter that has matplotlib: $PYTHON, then Debian's
# /usr/bin/python3 (python3-matplotlib installs there), then `python3` on PATH — which may be a
# pyenv or venv interpreter without matplotlib, so it is tried last.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for py in ${PYTHON:-} /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import matplotlib' 2>/dev/null; then
    exec "$py" "$here/python/plot.py" "$@"
  fi
done
echo "plot.sh: error: no python3 with matplotlib (tried ${PYTHON:-} /usr/bin/python3 python3; Debian: apt-get install python3-matplotlib)" >&2
exit 2
