#!/usr/bin/env bash
# Checks the units in systemd/ (system) and systemd/user/ (per-user mode): `systemd-analyze verify` must be clean
# and `systemd-analyze security` must rate the system tesserad.service at an exposure of at most 2.0 ("OK").
# Neither verb needs systemd as PID 1. The system units are verified against a scratch root holding the
# distribution's units (sysinit.target, ...) and an executable stand-in for /usr/sbin/tesserad; the user units
# (verify --user takes no --root) as copies whose ExecStart names the stand-in. So it checks the unit files
# themselves, not whether Tessera is installed here; man: references are checked by the package test.
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_EXPOSURE=${MAX_EXPOSURE:-2.0}

command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing: run scripts/setup.sh"; exit 1; }
units=/lib/systemd/system
[ -d "$units" ] || units=/usr/lib/systemd/system

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root/usr/sbin" "$root/user" "$root/run"
cp -r "$units" "$root/usr/lib/systemd/system"
printf '#!/bin/sh\nexit 0\n' > "$root/usr/sbin/tesserad"
chmod 0755 "$root/usr/sbin/tesserad"
# The registry sync's ExecStart is /bin/sh: an executable stand-in, as for tesserad.
mkdir -p "$root/bin" "$root/etc/tessera"
cp "$root/usr/sbin/tesserad" "$root/bin/sh"
cp packaging/registry-sync.env "$root/etc/tessera/registry-sync.env"
cp systemd/*.service systemd/*.socket systemd/*.timer "$root/etc/systemd/system/"

names=$(cd systemd && echo *.service *.socket *.timer)
# verify prints problems and may still exit 0 for some of them: any output is a failure.
out=$(systemd-analyze verify --man=no --root="$root" $names 2>&1) || { echo "$out"; echo "systemd-analyze verify failed"; exit 1; }
if [ -n "$out" ]; then echo "$out"; echo "systemd-analyze verify reported problems"; exit 1; fi
echo "systemd-analyze verify: clean ($names)"

# The --ctap-uhid drop-in (installed to /usr/share/tessera/systemd/): the unit stays clean with it, its ExecStart is
# the unit's plus --ctap-uhid, it allows /dev/uhid, and the udev rule gives /dev/uhid to the daemon's user alone.
mkdir -p "$root/etc/systemd/system/tesserad.service.d"
cp systemd/dropins/ctap-uhid.conf "$root/etc/systemd/system/tesserad.service.d/"
out=$(systemd-analyze verify --man=no --root="$root" tesserad.service 2>&1) || { echo "$out"; echo "verify with the ctap-uhid drop-in failed"; exit 1; }
if [ -n "$out" ]; then echo "$out"; echo "verify with the ctap-uhid drop-in reported problems"; exit 1; fi
unit_exec=$(sed -n 's/^ExecStart=\(..*\)$/\1/p' systemd/tesserad.service)
drop_exec=$(sed -n 's/^ExecStart=\(..*\)$/\1/p' systemd/dropins/ctap-uhid.conf)
[ "$drop_exec" = "$unit_exec --ctap-uhid" ] || { echo "ctap-uhid.conf's ExecStart is not the unit's plus --ctap-uhid"; exit 1; }
grep -qx 'DeviceAllow=/dev/uhid rw' systemd/dropins/ctap-uhid.conf || { echo "ctap-uhid.conf does not allow /dev/uhid"; exit 1; }
grep -q '^KERNEL=="uhid", SUBSYSTEM=="misc", OWNER="tesserad", MODE="0600"$' udev/70-tessera-ctap.rules || {
  echo "udev/70-tessera-ctap.rules must give /dev/uhid to tesserad alone (OWNER=\"tesserad\", MODE=\"0600\")"; exit 1; }
if grep -q '^KERNEL=="uhid".*GROUP=' udev/70-tessera-ctap.rules; then echo "/dev/uhid must not go to a group"; exit 1; fi
echo "ctap-uhid drop-in: clean; /dev/uhid is tesserad's alone"
rm -r "$root/etc/systemd/system/tesserad.service.d"

user_names=$(cd systemd/user && echo *.service *.socket)
for u in $user_names; do sed "s|/usr/sbin/tesserad|$root/usr/sbin/tesserad|g" "systemd/user/$u" > "$root/user/$u"; done
chmod 0700 "$root/run"
out=$(cd "$root/user" && XDG_RUNTIME_DIR="$root/run" systemd-analyze --user verify --man=no $user_names 2>&1) || {
  echo "$out"; echo "systemd-analyze --user verify failed"; exit 1; }
if [ -n "$out" ]; then echo "$out"; echo "systemd-analyze --user verify reported problems"; exit 1; fi
echo "systemd-analyze --user verify: clean (user units: $user_names)"

report=$(systemd-analyze security --offline=yes systemd/tesserad.service 2>&1)
level=$(sed -n 's/.*Overall exposure level for tesserad.service: \([0-9.]*\).*/\1/p' <<<"$report")
[ -n "$level" ] || { echo "$report"; echo "no exposure level in systemd-analyze security output"; exit 1; }
echo "systemd-analyze security: tesserad.service exposure $level (limit $MAX_EXPOSURE)"
awk -v l="$level" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(l <= m) }' || {
  grep '✗' <<<"$report"; echo "exposure $level is above $MAX_EXPOSURE"; exit 1; }
