#!/usr/bin/env bash
# libFuzzer runs of every untrusted parser (Tests/Fuzz/Harness, one binary, TESSERA_FUZZ_TARGET picks the target).
#   scripts/fuzz.sh build            build .build-fuzz/debug/tessera-fuzz with -sanitize=fuzzer,address
#   scripts/fuzz.sh run [TARGET…]    run each target (all by default) for FUZZ_RUNS executions (default 1000000),
#                                    capped at FUZZ_SECONDS per target when set; FUZZ_JOBS targets at a time
#                                    (default: the number of CPUs)
#   scripts/fuzz.sh list             print the target names
# A crash, an ASan report, a leak (LeakSanitizer) or an input slower than FUZZ_TIMEOUT seconds fails the run; the
# input is kept under .build-fuzz/artifacts/<target>/ and the script prints how to replay it. New corpus entries go
# to .build-fuzz/corpus/<target>/ (the committed seeds in Tests/Fuzz/corpus/<target>/ are only read).
# Prints one line per target: "fuzz NAME: N execs, C crashes".
set -uo pipefail
cd "$(dirname "$0")/.."

SCRATCH=.build-fuzz
BIN=$SCRATCH/debug/tessera-fuzz
TARGETS=(jsonrpc cbor tlv apdu-sm lds sod mrz jws workflow pn532 vpcd sshagent ecdsa mdoc ctaphid ctap2 facematch badge)
FUZZ_RUNS=${FUZZ_RUNS:-1000000}
FUZZ_SECONDS=${FUZZ_SECONDS:-}
FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-10}

build() {
  # TESSERA_FUZZ=1 adds the tessera-fuzz target to Package.swift; the main scratch path never sees it.
  # gold warns once per ASan-internal local symbol that SwiftPM's --export-dynamic cannot export: not shown.
  TESSERA_FUZZ=1 swift build --scratch-path "$SCRATCH" --product tessera-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library 2>&1 \
    | grep -vE "^\[[0-9]+/[0-9]+\] |^(Compiling|Building|Write|Emitting)|ld.gold: warning: Cannot export local symbol '__asan"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz build failed"; exit 1; }
}

# One target: its summary line (and, on a failure, what to look at) on stdout; returns 1 on a failure.
run_one() {
  local t=$1 rc execs crashes=0 artifact
  [ -d "Tests/Fuzz/corpus/$t" ] || { echo "fuzz $t: no seed corpus Tests/Fuzz/corpus/$t"; return 1; }
  local work=$SCRATCH/corpus/$t artifacts=$SCRATCH/artifacts/$t log=$SCRATCH/logs/$t.log
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  TESSERA_FUZZ_TARGET=$t ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$BIN" "${budget[@]}" \
    -timeout="$FUZZ_TIMEOUT" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" "Tests/Fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    crashes=1
    grep -E 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|Fatal error|SUMMARY' "$log" | head -5
    [ -n "$artifact" ] && echo "  replay: TESSERA_FUZZ_TARGET=$t $BIN $artifact"
    echo "  log: $log"
  fi
  echo "fuzz $t: ${execs:-0} execs, $crashes crashes"
  return $crashes
}

# Runs the targets FUZZ_JOBS at a time; prints each target's lines in the targets' order once it has finished.
run() {
  local targets=("$@") failed=0 t i jobs=${FUZZ_JOBS:-$(nproc)}
  [ ${#targets[@]} -gt 0 ] || targets=("${TARGETS[@]}")
  [ -x "$BIN" ] || { echo "$BIN missing: run scripts/fuzz.sh build"; exit 1; }
  budget=(-runs="$FUZZ_RUNS")
  [ -n "$FUZZ_SECONDS" ] && budget+=(-max_total_time="$FUZZ_SECONDS")
  local out
  out=$(mktemp -d)
  for i in "${!targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    t=${targets[$i]}
    { run_one "$t" >"$out/$i.txt"; echo $? >"$out/$i.rc"; } &
  done
  wait
  for i in "${!targets[@]}"; do
    cat "$out/$i.txt"
    [ "$(cat "$out/$i.rc")" = 0 ] || failed=1
  done
  rm -rf "$out"
  return $failed
}

case "${1:-run}" in
  build) build ;;
  run) shift; run "$@" ;;
  list) printf '%s\n' "${TARGETS[@]}" ;;
  *) echo "usage: scripts/fuzz.sh build | run [TARGET…] | list"; exit 2 ;;
esac
