#!/usr/bin/env bash
# Runs one of the harness's Python unit test modules: run_unittest.sh perf/harness/<name>_test.py
# (Bazel 4.2.3's py_test wants a `python` on PATH, which Debian does not have; python3 it is.)
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$1")/.."
exec /usr/bin/python3 -m unittest -v "harness.$(basename "$1" .py)"
