# Tessera — the two entry points are `make demo` and `make test`; both install what they need.
SWIFT ?= swift
BUILD_FLAGS ?=
## Release builds carry the Swift runtime and Foundation inside each binary: nothing from the toolchain is needed
## where they are installed, and tesserad maps less at start. They link with the toolchain's lld, pack the
## relative relocations (DT_RELR, glibc 2.36+: 23 KB instead of 2.7 MB of relocations read at every start and left
## resident) and export no symbols (the runtime's link arguments ask for --export-dynamic: 36,000 symbols that no
## library looks up, 3 MB of tables). Exclusivity is checked at compile time only (-enforce-exclusivity=unchecked:
## debug builds and the tests keep the run-time checks; 5k of 128k instructions per assertion, docs/PERFORMANCE.md).
## Every release build uses the same flags (a change rebuilds everything). Cross-module optimisation is left out:
## 1.8k of 116k instructions per assertion for 1.13 MB more stripped tesserad (docs/PERFORMANCE.md).
## Every function (Swift and C) gets a section of its own: --gc-sections drops the unused ones, and lld places those
## packaging/tesserad.order names (the code a running daemon executes, `make order-file`) first, together, so the
## kernel maps fewer pages of the binary (idle RSS, docs/PERFORMANCE.md). Names a build no longer has are skipped.
## The compiler's private functions, which have no name to order by, are gathered just before them
## (packaging/tesserad-private-code.ld).
RELEASE_FLAGS ?= -c release --static-swift-stdlib -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs \
	-Xlinker --no-export-dynamic -Xswiftc -enforce-exclusivity=unchecked \
	-Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections \
	-Xlinker --symbol-ordering-file=$(CURDIR)/packaging/tesserad.order -Xlinker --no-warn-symbol-ordering \
	-Xlinker -T -Xlinker $(CURDIR)/packaging/tesserad-private-code.ld
export RELEASE_FLAGS

.PHONY: all setup build release release-flags demo test unit-test e2e-test bench soak systemd-check format format-check fuzz fuzz-smoke sanitize clean \
	install uninstall generated deb deb-check

all: build

setup:
	@scripts/setup.sh

build: setup
	$(SWIFT) build $(BUILD_FLAGS)

## The programs to install (tesserad, tessera) in .build/release, self-contained but for the C libraries.
release: setup
	$(SWIFT) build $(RELEASE_FLAGS) --product tesserad
	$(SWIFT) build $(RELEASE_FLAGS) --product tessera

## Install tree (docs/INSTALL.md): `make release && sudo make install`, or `make deb`. The usual GNU/systemd
## variables; DESTDIR stages. Paths inside the units and the man pages follow SBINDIR and SYSCONFDIR.
PREFIX ?= /usr/local
EXEC_PREFIX ?= $(PREFIX)
BINDIR ?= $(EXEC_PREFIX)/bin
SBINDIR ?= $(EXEC_PREFIX)/sbin
LIBDIR ?= $(PREFIX)/lib
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/tessera
SYSCONFDIR ?= /etc
SYSTEMDSYSTEMUNITDIR ?= $(LIBDIR)/systemd/system
SYSTEMDUSERUNITDIR ?= $(LIBDIR)/systemd/user
SYSUSERSDIR ?= $(LIBDIR)/sysusers.d
TMPFILESDIR ?= $(LIBDIR)/tmpfiles.d
UDEVRULESDIR ?= $(LIBDIR)/udev/rules.d
MODPROBEDIR ?= $(LIBDIR)/modprobe.d
BASHCOMPLETIONDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPLETIONDIR ?= $(DATADIR)/zsh/vendor-completions
FISHCOMPLETIONDIR ?= $(DATADIR)/fish/vendor_completions.d
INSTALL ?= install
RELEASE_BIN ?= .build/release
GENERATED = .build/generated
VERSION = $(shell sed -n 's/.*static let version = "\(.*\)".*/\1/p' Sources/TesseraDaemon/Daemon.swift)

## Man pages tesserad(8), tessera(1) and the bash/zsh/fish completions, generated from the release programs'
## argument parsers (--experimental-dump-help, --generate-completion-script): they cannot drift from --help.
generated:
	@test -x $(RELEASE_BIN)/tesserad -a -x $(RELEASE_BIN)/tessera || { echo "no release build: run make release"; exit 1; }
	@rm -rf $(GENERATED) && mkdir -p $(GENERATED)
	python3 scripts/gen-man.py $(RELEASE_BIN)/tesserad 8 $(VERSION) > $(GENERATED)/tesserad.8
	python3 scripts/gen-man.py $(RELEASE_BIN)/tessera 1 $(VERSION) > $(GENERATED)/tessera.1
	for p in tesserad tessera; do \
	  $(RELEASE_BIN)/$$p --generate-completion-script bash | sed '1{/^#!/d}' > $(GENERATED)/$$p.bash && \
	  $(RELEASE_BIN)/$$p --generate-completion-script zsh > $(GENERATED)/_$$p && \
	  $(RELEASE_BIN)/$$p --generate-completion-script fish > $(GENERATED)/$$p.fish || exit 1; done
	sed -i -e 's|/usr/sbin/tesserad|$(SBINDIR)/tesserad|g' -e 's|/etc/tessera|$(SYSCONFDIR)/tessera|g' \
	  -e 's|/usr/share/doc/tessera|$(DOCDIR)|g' $(GENERATED)/tesserad.8 $(GENERATED)/tessera.1

## Units, the configuration and the environment.d snippet: the binaries', the configuration's, the docs' and the
## data's paths follow SBINDIR, SYSCONFDIR, DOCDIR and DATADIR.
UNIT_SED = sed -e 's|/usr/sbin/tesserad|$(SBINDIR)/tesserad|g' -e 's|/etc/tessera|$(SYSCONFDIR)/tessera|g' \
	-e 's|/usr/share/doc/tessera|$(DOCDIR)|g' -e 's|/usr/share/tessera|$(DATADIR)/tessera|g'

install: generated
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(SYSTEMDSYSTEMUNITDIR) \
	  $(DESTDIR)$(SYSTEMDUSERUNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(UDEVRULESDIR) \
	  $(DESTDIR)$(MODPROBEDIR) $(DESTDIR)$(SYSCONFDIR)/tessera $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
	  $(DESTDIR)$(BASHCOMPLETIONDIR) $(DESTDIR)$(ZSHCOMPLETIONDIR) $(DESTDIR)$(FISHCOMPLETIONDIR) \
	  $(DESTDIR)$(DOCDIR) $(DESTDIR)$(DATADIR)/tessera/environment.d $(DESTDIR)$(DATADIR)/tessera/systemd
	$(INSTALL) -m 0755 $(RELEASE_BIN)/tesserad $(DESTDIR)$(SBINDIR)/tesserad
	$(INSTALL) -m 0755 $(RELEASE_BIN)/tessera $(DESTDIR)$(BINDIR)/tessera
	for u in tesserad.socket tesserad.service tesserad-ssh-agent.socket; do \
	  $(UNIT_SED) systemd/$$u > $(DESTDIR)$(SYSTEMDSYSTEMUNITDIR)/$$u && \
	  $(UNIT_SED) systemd/user/$$u > $(DESTDIR)$(SYSTEMDUSERUNITDIR)/$$u && \
	  chmod 0644 $(DESTDIR)$(SYSTEMDSYSTEMUNITDIR)/$$u $(DESTDIR)$(SYSTEMDUSERUNITDIR)/$$u || exit 1; done
	@# A door's sync of the badge office's list (system units only).
	for u in tessera-registry-sync.service tessera-registry-sync.timer; do \
	  $(UNIT_SED) systemd/$$u > $(DESTDIR)$(SYSTEMDSYSTEMUNITDIR)/$$u && \
	  chmod 0644 $(DESTDIR)$(SYSTEMDSYSTEMUNITDIR)/$$u || exit 1; done
	$(UNIT_SED) systemd/dropins/ctap-uhid.conf > $(DESTDIR)$(DATADIR)/tessera/systemd/ctap-uhid.conf
	chmod 0644 $(DESTDIR)$(DATADIR)/tessera/systemd/ctap-uhid.conf
	$(INSTALL) -m 0644 packaging/sysusers.conf $(DESTDIR)$(SYSUSERSDIR)/tessera.conf
	$(INSTALL) -m 0644 packaging/tmpfiles.conf $(DESTDIR)$(TMPFILESDIR)/tessera.conf
	$(INSTALL) -m 0644 udev/70-tessera-ctap.rules udev/70-tessera-nfc.rules $(DESTDIR)$(UDEVRULESDIR)/
	$(INSTALL) -m 0644 udev/tessera-blacklist-pn533.conf $(DESTDIR)$(MODPROBEDIR)/
	@# An existing configuration is the administrator's: it stays as it is.
	@# The configuration and the environment.d snippet name paths (docs, the snippet itself): they follow PREFIX too.
	test -e $(DESTDIR)$(SYSCONFDIR)/tessera/tesserad.json || \
	  { $(UNIT_SED) packaging/tesserad.json > $(DESTDIR)$(SYSCONFDIR)/tessera/tesserad.json && \
	    chmod 0644 $(DESTDIR)$(SYSCONFDIR)/tessera/tesserad.json; }
	$(UNIT_SED) packaging/environment.d/60-tessera-ssh-agent.conf \
	  > $(DESTDIR)$(DATADIR)/tessera/environment.d/60-tessera-ssh-agent.conf
	chmod 0644 $(DESTDIR)$(DATADIR)/tessera/environment.d/60-tessera-ssh-agent.conf
	test -e $(DESTDIR)$(SYSCONFDIR)/tessera/registry-sync.env || \
	  $(INSTALL) -m 0644 packaging/registry-sync.env $(DESTDIR)$(SYSCONFDIR)/tessera/registry-sync.env
	$(INSTALL) -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 0644 $(GENERATED)/tessera.1 $(DESTDIR)$(MANDIR)/man1/tessera.1
	$(INSTALL) -m 0644 $(GENERATED)/tesserad.8 $(DESTDIR)$(MANDIR)/man8/tesserad.8
	for p in tesserad tessera; do \
	  $(INSTALL) -m 0644 $(GENERATED)/$$p.bash $(DESTDIR)$(BASHCOMPLETIONDIR)/$$p && \
	  $(INSTALL) -m 0644 $(GENERATED)/_$$p $(DESTDIR)$(ZSHCOMPLETIONDIR)/_$$p && \
	  $(INSTALL) -m 0644 $(GENERATED)/$$p.fish $(DESTDIR)$(FISHCOMPLETIONDIR)/$$p.fish || exit 1; done

## Removes what install put there; the state (/var/lib/tesserad) and the configuration stay.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/tesserad $(DESTDIR)$(BINDIR)/tessera $(DESTDIR)$(SYSUSERSDIR)/tessera.conf \
	  $(DESTDIR)$(TMPFILESDIR)/tessera.conf $(DESTDIR)$(UDEVRULESDIR)/70-tessera-ctap.rules \
	  $(DESTDIR)$(UDEVRULESDIR)/70-tessera-nfc.rules $(DESTDIR)$(MODPROBEDIR)/tessera-blacklist-pn533.conf \
	  $(DESTDIR)$(MANDIR)/man1/tessera.1 $(DESTDIR)$(MANDIR)/man8/tesserad.8
	for u in tesserad.socket tesserad.service tesserad-ssh-agent.socket; do \
	  rm -f $(DESTDIR)$(SYSTEMDSYSTEMUNITDIR)/$$u $(DESTDIR)$(SYSTEMDUSERUNITDIR)/$$u; done
	rm -f $(DESTDIR)$(SYSTEMDSYSTEMUNITDIR)/tessera-registry-sync.service \
	  $(DESTDIR)$(SYSTEMDSYSTEMUNITDIR)/tessera-registry-sync.timer
	for p in tesserad tessera; do rm -f $(DESTDIR)$(BASHCOMPLETIONDIR)/$$p $(DESTDIR)$(ZSHCOMPLETIONDIR)/_$$p \
	  $(DESTDIR)$(FISHCOMPLETIONDIR)/$$p.fish; done
	rm -rf $(DESTDIR)$(DOCDIR) $(DESTDIR)$(DATADIR)/tessera

## A Debian package of the release build for this machine's architecture (scripts/make-deb.sh): .build/deb/*.deb.
deb: release
	@scripts/make-deb.sh

## Builds the package, then lintian, its file list against packaging/install-manifest.txt, and an install, a run
## as the tesserad user and a purge in a throwaway root (scripts/check-deb.sh; a stage of make test).
deb-check: deb
	@scripts/check-deb.sh

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

## Rewrites packaging/tesserad.order, the link order of tesserad's hot code, from one run of the release tesserad
## under callgrind (tessera-bench --order-profile: start-up, an enrolment, 1 and 16 clients, 70 s idle, shutdown).
## Run it after changing the request path; the next release build links in the new order.
.PHONY: order-file
order-file: setup
	@swift build $(RELEASE_FLAGS) --product tesserad && swift build $(RELEASE_FLAGS) --product tessera-bench
	@d=$$(mktemp -d) && VALGRIND_OPTS=--demangle=no .build/release/tessera-bench --order-profile $$d/profile \
		--idle-seconds 70 && scripts/order-file.py $$d/profile packaging/tesserad.order; s=$$?; rm -rf $$d; exit $$s

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
