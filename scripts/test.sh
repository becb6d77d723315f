#!/usr/bin/env bash
# Every test, against real components: a format check, Swift tests (SoftHSM2, pcscd + vpcd with emulated cards),
# then the real daemon end to end with independent verifiers (pytest), the systemd units, a short soak and a fuzz
# smoke. Prints a summary line per stage. Warnings are errors in every build (Package.swift), so the build stages cannot pass with one.
# The two builds the later stages need (the release build for the package, the fuzz harness) run at a lower priority
# while the end-to-end tests, the README examples and the systemd check run: those mostly wait on daemons, cards and
# browsers, and the 2-core machine would otherwise sit half idle for them. Their output is kept in .state-test/.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=${CI:-}
logs=.state-test
# Each stage's heading carries the time since the start (the test loop's budget is 20 minutes on the 2-core machine).
stage() { printf '== %s  [%dm%02ds]\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }
mkdir -p "$logs"
builds=""
cleanup() { [ -z "$builds" ] || kill -- "-$builds" 2>/dev/null || true; }
trap cleanup EXIT

stage "format (swift format lint --strict against .swift-format; make format rewrites)"
swift format lint --strict --recursive --parallel Sources Tests Benchmarks Package.swift || {
  echo "format check failed: run make format"; exit 1; }
echo "format: clean"

stage "imports (Package.swift declares exactly what each target imports)"
python3 scripts/check-imports.py

stage "swift test"
swift test 2>&1 | tee .state-swift-test.log | grep -vE '^\[[0-9]+/[0-9]+\] |^(Compiling|Building|Write|Emitting)' || {
  echo "swift test failed"; exit 1; }
grep -qE "Test run with [0-9]+ tests? .*passed|Executed [0-9]+ tests?, with 0 failures" .state-swift-test.log

stage "builds for the package and the fuzz smoke, in the background (nice 10; logs in $logs/)"
rm -f "$logs/release.rc" "$logs/fuzz-build.rc"
set -m
( trap - EXIT
  set +e
  # What `make deb` does, without its set-up step (done; it would touch the venv the tests are using).
  read -r -a release <<< "${RELEASE_FLAGS:-$(make -s --no-print-directory release-flags)}"
  { nice -n 10 swift build "${release[@]}" --product tesserad && nice -n 10 swift build "${release[@]}" --product tessera \
      && scripts/make-deb.sh; } >"$logs/release.log" 2>&1; echo $? >"$logs/release.rc"
  nice -n 10 scripts/fuzz.sh build >"$logs/fuzz-build.log" 2>&1; echo $? >"$logs/fuzz-build.rc" ) &
builds=$!
set +m

stage "end-to-end (real tesserad, SoftHSM2, py_webauthn + python-fido2)"
.venv/bin/python -m pytest -q --durations=15 Tests/e2e

stage "README examples (each shell block of README.md, in the lab where it says so; scripts/readme_examples.py)"
.venv/bin/python scripts/readme_examples.py

stage "systemd units (systemd-analyze verify + security)"
scripts/check-systemd.sh

stage "waiting for the background builds"
wait "$builds" || true
builds=""
[ "$(cat "$logs/release.rc" 2>/dev/null)" = 0 ] || {
  tail -40 "$logs/release.log"; echo "release build / make deb failed (log: $logs/release.log)"; exit 1; }
echo "release build and package: done"

stage "package (make deb: release build, lintian, file list, install/run/purge in a throwaway root)"
scripts/check-deb.sh

stage "soak smoke (8 clients × 100 requests, kill -9 + restart; the full soak is make soak)"
scripts/soak.sh --clients 8 --requests 100 --time-limit 300

stage "fuzz smoke (libFuzzer + ASan, ${FUZZ_SECONDS:-20} s per target; make fuzz for the long run)"
[ "$(cat "$logs/fuzz-build.rc" 2>/dev/null)" = 0 ] || {
  tail -40 "$logs/fuzz-build.log"; echo "fuzz build failed (log: $logs/fuzz-build.log)"; exit 1; }
FUZZ_SECONDS=${FUZZ_SECONDS:-20} scripts/fuzz.sh run
stage "all stages passed"
