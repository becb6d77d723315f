# Tessera — the two entry points are `make demo` and `make test`; both install what they need.
SWIFT ?= swift
BUILD_FLAGS ?=
## Release builds carry the Swift runtime and Foundation inside each binary: nothing from the toolchain is needed
## where they are installed, and tesserad maps less at start. They link with the toolchain's lld, pack the
## relative relocations (DT_RELR, glibc 2.36+: 23 KB instead of 2.7 MB of relocations read at every start and left
## resident) and export no symbols (the runtime's link arguments ask for --export-dynamic: 36,000 symbols that no
## library looks up, 3 MB of tables). Every release build uses the same flags (a change rebuilds everything).
RELEASE_FLAGS ?= -c release --static-swift-stdlib -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs \
	-Xlinker --no-export-dynamic
export RELEASE_FLAGS

.PHONY: all setup build release release-flags demo test unit-test e2e-test bench soak systemd-check format format-check fuzz fuzz-smoke sanitize clean

all: build

setup:
	@scripts/setup.sh

build: setup
	$(SWIFT) build $(BUILD_FLAGS)

## The programs to install (tesserad, tessera) in .build/release, self-contained but for the C libraries.
release: setup
	$(SWIFT) build $(RELEASE_FLAGS) --product tesserad
	$(SWIFT) build $(RELEASE_FLAGS) --product tessera

## Prints RELEASE_FLAGS (for scripts run without make).
release-flags:
	@echo $(RELEASE_FLAGS)

## Runs tesserad on a private socket with the embedded SoftHSM2 token, then enrolls and authenticates a
## passkey through the CLI and verifies both with an independent WebAuthn library.
demo: build
	@scripts/demo.sh

## The lab in one command: a private pcscd + vpcd reader pair, an emulated e-passport and tesserad under .state/lab;
## prints the shell variables (eval "$$(scripts/lab.py env .state/lab)"); scripts/lab.py stop .state/lab stops it.
.PHONY: lab readme-examples
lab: build
	@scripts/lab.py start .state/lab
	@echo '# in your shell: eval "$$(scripts/lab.py env .state/lab)"; stop: scripts/lab.py stop .state/lab'

## Runs README.md's shell examples (the lab started as the README says); also a stage of `make test`.
readme-examples: build
	@.venv/bin/python scripts/readme_examples.py

## Every test: Swift unit/integration tests, then end-to-end tests of the real daemon (pytest).
test: build
	@scripts/test.sh

unit-test: build
	$(SWIFT) test $(BUILD_FLAGS)

e2e-test: build
	.venv/bin/python -m pytest -q Tests/e2e

## 64 clients × 1000 mixed requests against the real daemon (SoftHSM2), kill -9 + restart in the middle; checks
## error codes, signCounts, fds and RSS growth and prints the figures. Not part of `make test` (a smoke of it is).
soak: build
	@scripts/soak.sh

## systemd-analyze verify and security (exposure <= 2.0) of the units in systemd/.
systemd-check: setup
	@scripts/check-systemd.sh

FORMAT_PATHS = Sources Tests Benchmarks Package.swift

## swift-format (ships with the toolchain) with .swift-format: fails on any finding.
format-check:
	$(SWIFT) format lint --strict --recursive --parallel $(FORMAT_PATHS)

## Fails when Package.swift and the targets' import lines disagree (a module imported but not declared, or declared
## and never imported); also a stage of `make test`.
.PHONY: check-imports
check-imports:
	@python3 scripts/check-imports.py

## Rewrites the sources to .swift-format's style.
format:
	$(SWIFT) format format --in-place --recursive --parallel $(FORMAT_PATHS)

bench: setup
	@scripts/bench.sh

## Instructions per passkey.authenticate in tesserad without the token's signing (C_SignInit + C_Sign; valgrind
## callgrind, release build), with the top functions (inclusive and own) and own cost by object;
## CALLGRIND_ASSERTIONS (default 2000) after a warm-up. valgrind runs a copy of tesserad without its DWARF 5 debug
## information, which Debian 12's valgrind 3.19 cannot read.
.PHONY: bench-callgrind
bench-callgrind: setup
	@swift build $(RELEASE_FLAGS) --product tesserad && swift build $(RELEASE_FLAGS) --product tessera-bench
	@.build/release/tessera-bench --callgrind $${CALLGRIND_ASSERTIONS:-2000}

## libFuzzer (+ ASan/LSan) on every untrusted parser, FUZZ_RUNS executions each (default 1000000), capped at
## FUZZ_SECONDS per target; fails on a crash, a leak or a timeout. FUZZ_TARGETS="cbor tlv" runs some.
fuzz: setup
	@scripts/fuzz.sh build
	@scripts/fuzz.sh run $(FUZZ_TARGETS)

## Each fuzz target for about 20 s (what `make test` runs after the suites).
fuzz-smoke: setup
	@scripts/fuzz.sh build
	@FUZZ_SECONDS=$${FUZZ_SECONDS:-20} scripts/fuzz.sh run $(FUZZ_TARGETS)

## The Swift test suite under AddressSanitizer, then ThreadSanitizer (.build-asan, .build-tsan).
sanitize: setup
	@scripts/sanitize.sh

clean:
	rm -rf .build .build-fuzz .build-asan .build-tsan .venv
