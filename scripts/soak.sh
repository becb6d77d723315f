#!/usr/bin/env bash
# Soak and load test of the real tesserad (scripts/soak.py): 64 clients × 1000 mixed requests with SoftHSM2 and a
# kill -9 + restart in the middle; asserts error codes, signCounts, fds and RSS, prints the figures.
# Options are passed on (e.g. scripts/soak.sh --clients 8 --requests 100 for the smoke that scripts/test.sh runs).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python scripts/soak.py "$@"
