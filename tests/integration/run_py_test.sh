#!/usr/bin/env bash
# Runs a Python integration test against the ringd binary with one io backend.
#   run_py_test.sh <ringd binary> <backend> <test.py> [wrapper binary]
set -euo pipefail
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
export RINGD_BINARY="$(abs "$1")"
export RINGD_IO="$2"
if [[ $# -ge 4 ]]; then
  case "$4" in
    *.so) export RINGD_WRAP_LIB="$(abs "$4")" ;;   # a library to preload, not a command
    *) export RINGD_WRAP="$(abs "$4")" ;;
  esac
fi
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$3")"
exec /usr/bin/python3 -m unittest -v "$(basename "$3" .py)"
