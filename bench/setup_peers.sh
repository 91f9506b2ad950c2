#!/usr/bin/env bash
# Creates the peer-tool virtual environments used by the comparison benchmarks.
# They live outside the project's own environment so their pins (pandas<3,
# numpy, ...) never touch ctda-sql's dependencies. Both paths are gitignored.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"

quiet_pip_warnings() {  # pip warns once per package about configured index folders that do not exist
  grep -v "is ignored: it is neither a file nor a directory" || true
}

make_venv() {  # make_venv DIR PACKAGE...
  local dir="$1"; shift
  if [[ -x "$dir/bin/python" ]] && "$dir/bin/python" -c "import sys" 2>/dev/null; then
    echo "reusing $dir"
  else
    "$PYTHON" -m venv "$dir"
  fi
  "$dir/bin/python" -m pip install --quiet --upgrade pip 2> >(quiet_pip_warnings >&2)
  "$dir/bin/python" -m pip install --quiet "$@" 2> >(quiet_pip_warnings >&2)
  echo "ready: $dir ($*)"
}

which="${1:-all}"
if [[ "$which" == all || "$which" == hta ]]; then
  make_venv .venv-hta "HolisticTraceAnalysis==0.5.0" "pandas<3"
fi
if [[ "$which" == all || "$which" == traceinsight ]]; then
  make_venv .venv-traceinsight "traceinsight==0.6.1"
fi
