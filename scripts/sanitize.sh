#!/usr/bin/env bash
# The Swift test suite under AddressSanitizer and, separately, ThreadSanitizer (own scratch paths .build-asan and
# .build-tsan, so the normal build is untouched).
#   scripts/sanitize.sh [address|thread …]     both by default; extra args after -- go to `swift test`
# Logs: .build-asan/sanitize.log, .build-tsan/sanitize.log. Prints per sanitizer the test result and the number of
# distinct sanitizer reports; exits non-zero when a test fails or a sanitizer reports anything.
set -uo pipefail
cd "$(dirname "$0")/.."

sanitizers=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sanitizers+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#sanitizers[@]} -gt 0 ] || sanitizers=(address thread)

failed=0
for s in "${sanitizers[@]}"; do
  case "$s" in
    address) scratch=.build-asan; pattern='ERROR: AddressSanitizer' ;;
    thread) scratch=.build-tsan; pattern='WARNING: ThreadSanitizer' ;;
    *) echo "unknown sanitizer $s (address|thread)"; exit 2 ;;
  esac
  mkdir -p "$scratch"
  log=$scratch/sanitize.log
  echo "== swift test --sanitize=$s (log: $log)"
  # Leak checking at exit would report the test runner's and the libraries' process-lifetime caches; leaks
  # are what the fuzz targets check (scripts/fuzz.sh). Reports go on after the first one so that one run
  # lists them all.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:halt_on_error=0} \
  TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0} \
    swift test --sanitize="$s" --scratch-path "$scratch" "$@" >"$log" 2>&1
  rc=$?
  reports=$(grep -c "$pattern" "$log")
  result=$(grep -E "Test run with [0-9]+ tests?.*(passed|failed)|error: fatalError|error: Exited with" "$log" | tail -1)
  echo "sanitize $s: exit $rc, $reports report(s); ${result:-no test summary (see log)}"
  if [ "$reports" -gt 0 ]; then
    grep -A3 "$pattern" "$log" | grep -E "^    #[0-3] |$pattern" | head -40
    failed=1
  fi
  [ $rc -eq 0 ] || failed=1
done
exit $failed
