# Tessera — the two entry points are `make demo` and `make test`; both install what they need.
SWIFT ?= swift
BUILD_FLAGS ?=

.PHONY: all setup build demo test unit-test e2e-test bench soak systemd-check format format-check clean

all: build

setup:
	@scripts/setup.sh

build: setup
	$(SWIFT) build $(BUILD_FLAGS)

## Runs tesserad on a private socket with the embedded SoftHSM2 token, then enrolls and authenticates a
## passkey through the CLI and verifies both with an independent WebAuthn library.
demo: build
	@scripts/demo.sh

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

## Rewrites the sources to .swift-format's style.
format:
	$(SWIFT) format format --in-place --recursive --parallel $(FORMAT_PATHS)

bench: setup
	@scripts/bench.sh

clean:
	rm -rf .build .venv
