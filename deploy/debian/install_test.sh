#!/usr/bin/env bash
# Runs install_test.py (see there) on the package built by //deploy/debian:deb.
set -euo pipefail
deb="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 "$(dirname "$0")/install_test.py" "$deb"
