#!/usr/bin/env bash
# Every test, against real components: a format check, Swift tests (SoftHSM2, pcscd + vpcd with emulated cards),
# then the real daemon end to end with independent verifiers (pytest), the systemd units, a short soak and a fuzz
# smoke. Prints a summary line per stage. Warnings are errors in every build (Package.swift), so the build stages cannot pass with one.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=${CI:-}

echo "== format (swift format lint --strict against .swift-format; make format rewrites)"
swift format lint --strict --recursive --parallel Sources Tests Benchmarks Package.swift || {
  echo "format check failed: run make format"; exit 1; }
echo "format: clean"

echo "== imports (Package.swift declares exactly what each target imports)"
python3 scripts/check-imports.py

echo "== swift test"
swift test 2>&1 | tee .state-swift-test.log | grep -vE '^\[[0-9]+/[0-9]+\] |^(Compiling|Building|Write|Emitting)' || {
  echo "swift test failed"; exit 1; }
grep -qE "Test run with [0-9]+ tests? .*passed|Executed [0-9]+ tests?, with 0 failures" .state-swift-test.log

echo "== end-to-end (real tesserad, SoftHSM2, py_webauthn + python-fido2)"
.venv/bin/python -m pytest -q Tests/e2e

echo "== README examples (each shell block of README.md, in the lab where it says so; scripts/readme_examples.py)"
.venv/bin/python scripts/readme_examples.py

echo "== systemd units (systemd-analyze verify + security)"
scripts/check-systemd.sh

echo "== package (make deb: release build, lintian, file list, install/run/purge in a throwaway root)"
make --no-print-directory deb-check

echo "== soak smoke (8 clients × 100 requests, kill -9 + restart; the full soak is make soak)"
scripts/soak.sh --clients 8 --requests 100 --time-limit 300

echo "== fuzz smoke (libFuzzer + ASan, ${FUZZ_SECONDS:-20} s per target; make fuzz for the long run)"
scripts/fuzz.sh build
FUZZ_SECONDS=${FUZZ_SECONDS:-20} scripts/fuzz.sh run
