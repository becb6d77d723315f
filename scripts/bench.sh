#!/usr/bin/env bash
# Benchmarks (release build): daemon assertion throughput/latency vs raw PKCS#11 signing and vs the same signing
# through p11-kit remoting (p11-kit server + p11-kit-client.so), on the same token, ratios to raw per row.
set -euo pipefail
cd "$(dirname "$0")/.."
# The same flags as `make release` (the Makefile holds them), so the daemon measured is the one installed.
read -r -a RELEASE <<< "${RELEASE_FLAGS:-$(make -s --no-print-directory release-flags)}"
swift build "${RELEASE[@]}" --product tesserad
swift build "${RELEASE[@]}" --product tessera-bench
.build/release/tessera-bench --seconds "${BENCH_SECONDS:-5}"
# BENCH_PINNED=1: again with the load generator on CPU 0 and tesserad on CPU 1 (needs 2+ cores).
if [ "${BENCH_PINNED:-0}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
    taskset -c 0 .build/release/tessera-bench --seconds "${BENCH_SECONDS:-5}" --daemon-cpus 1
fi
# (make bench-callgrind: instructions per assertion, the figure load cannot move.)
# SSH agent: SIGN_REQUEST/s and median at 1/4/16 connections vs OpenSSH ssh-agent (PKCS#11 provider) vs raw C_Sign.
.build/release/tessera-bench --ssh-agent --seconds "${BENCH_SECONDS:-5}"
# Document reading: APDUs/bytes/time for DG1+DG2(~20 KB)+SOD, short vs extended length, in process and via pcscd+vpcd;
# then one mDL read (15 elements, 20 KB portrait) the same ways, against the minimum APDU count (--mdoc-only: just that);
# then one PIV badge check (PKI-CAK) in process, via pcscd+vpcd and via libnfc + the software PN532 (--badge-only).
swift build "${RELEASE[@]}" --product document-bench
.build/release/document-bench --runs "${BENCH_RUNS:-5}"
# A building (docs/ACCESS.md, "A building"): an office with 100,000 badges and 1,000 doors publishes its signed door
# list; a door applies it (time, RSS); access.check at 10 vs 100,000 badges.
swift build "${RELEASE[@]}" --product tessera
TESSERA_BIN_DIR=.build/release .venv/bin/python scripts/bench-building.py
# The reference face matcher: one comparison of two 640x480 JPEGs, one-shot vs resident (the daemon's default).
.venv/bin/python scripts/face-bench.py --runs "${BENCH_RUNS:-5}"
