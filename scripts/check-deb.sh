#!/usr/bin/env bash
# The package test (make deb-check, a stage of make test), on the .deb that scripts/make-deb.sh built:
#  1. lintian reports no error, and the package is at most 15 MB (issue #39);
#  2. its files are exactly packaging/install-manifest.txt (what `make install PREFIX=/usr` installs; the package
#     adds only Debian's copyright and changelog and compresses the man pages), and so is a fresh make install;
#  3. it is installed into a throwaway root: an overlay of this machine's / whose writes go to a tmpfs, in a mount
#     namespace of its own, so nothing reaches this machine. There the real dpkg runs the maintainer scripts;
#     the tesserad user and tessera group, the state directory, the enabled socket and the conffile must exist;
#     the installed tesserad runs as tesserad with the unit's own ExecStart line on the socket unit's own
#     ListenStream (systemd-socket-activate), and the installed tessera, a tessera group member without --socket,
#     gets its status; `dpkg -r` keeps the state and the configuration, `dpkg --purge` removes them, and nothing
#     of the package is left (the tesserad user and tessera group stay, as Debian keeps system users).
# Needs root (mount namespace, overlayfs, chroot, setpriv).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || exec sudo -n "$0" "$@" || { echo "check-deb: needs root (or sudo -n)"; exit 1; }
arch=$(dpkg --print-architecture)
deb=${1:-$(ls -t .build/deb/tessera_*_"$arch".deb | head -1)}
[ -f "$deb" ] || { echo "check-deb: no package: run make deb"; exit 1; }
fail() { echo "check-deb: FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== lintian $deb"
command -v lintian >/dev/null || fail "lintian missing: run scripts/setup.sh"
lintian --fail-on error "$deb" | tee "$work/lintian.txt" || fail "lintian reports errors"
echo "lintian: no errors ($(grep -c '^W:' "$work/lintian.txt" || true) warnings)"
size=$(stat -c %s "$deb")
[ "$size" -le 15000000 ] || fail "the package is $size bytes, over 15 MB"
echo "size: $size bytes ($(dpkg-deb -f "$deb" Installed-Size) KiB installed)"

echo "== file list against packaging/install-manifest.txt"
{ grep -v '^#' packaging/install-manifest.txt | sed '/^$/d'
  for f in README.md docs/*.md; do echo "/usr/share/doc/tessera/${f##*/}"; done; } | sort >"$work/manifest"
dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | sed 's|^\./|/|' | sort >"$work/deb-files"
sed -e 's|^\(/usr/share/man/.*\)$|\1.gz|' "$work/manifest" |
  cat - <(printf '/usr/share/doc/tessera/copyright\n/usr/share/doc/tessera/changelog.gz\n') | sort >"$work/expected"
diff -u "$work/expected" "$work/deb-files" || fail "the package's files differ from the install manifest"
make --no-print-directory install DESTDIR="$work/install" PREFIX=/usr SYSCONFDIR=/etc >/dev/null
(cd "$work/install" && find . ! -type d | sed 's|^\.||' | sort) >"$work/install-files"
diff -u "$work/manifest" "$work/install-files" || fail "make install differs from the install manifest"
rm -rf "$work/install"
echo "files: $(wc -l <"$work/deb-files") in the package, as the manifest and make install say"

echo "== dependencies and generated pages"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
grep -qiE 'swift|toolchain' <<<"$depends" && fail "the package depends on a toolchain"
dpkg-deb -x "$deb" "$work/x"
# Every command of each program's parser has its subsection in the man page, and its completions know it.
for p in tessera:man1/tessera.1 tesserad:man8/tesserad.8; do
  prog=${p%%:*}
  bin=$(find "$work/x/usr" -name "$prog" -type f -perm -u+x | head -1)
  "$bin" --experimental-dump-help | python3 -c '
import json, sys
def walk(c, path):
    for s in c.get("subcommands", []):
        if s["commandName"] != "help":
            yield " ".join(path + [s["commandName"]]); yield from walk(s, path + [s["commandName"]])
print("\n".join(walk(json.load(sys.stdin)["command"], [])))' >"$work/commands"
  zcat "$work/x/usr/share/man/${p#*:}.gz" >"$work/page"
  # ... and every long option of every command.
  "$bin" --experimental-dump-help | python3 -c '
import json, sys
def walk(c):
    for a in c.get("arguments", []):
        for n in a.get("names", []):
            if n["kind"] == "long": yield n["name"]
    for s in c.get("subcommands", []): yield from walk(s)
for n in sorted(set(walk(json.load(sys.stdin)["command"]))): print(n)' | while read -r o; do
    grep -qF -- "\\-\\-${o//-/\\-}" "$work/page" || fail "${p#*:} does not name --$o"
  done
  while read -r c; do
    [ -n "$c" ] || continue
    grep -qxF ".SS $c" "$work/page" || fail "${p#*:} has no section for '$c'"
    grep -qw -- "${c##* }" "$work/x/usr/share/bash-completion/completions/$prog" || fail "bash completion lacks '$c'"
  done <"$work/commands"
  echo "$prog: $(grep -c . "$work/commands" || true) commands in the man page and the completions"
done
rm -rf "$work/x"

echo "== install, run, remove and purge in a throwaway root"
cp "$deb" "$work/tessera.deb"
cat >"$work/inside.sh" <<'INSIDE'
#!/bin/sh
# Runs chrooted in the throwaway root.
set -eu
fail() { echo "check-deb: FAIL: $*"; exit 1; }
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8
unset XDG_RUNTIME_DIR TESSERA_SOCKET STATE_DIRECTORY
dpkg -i /tmp/pkg/tessera.deb >/tmp/pkg/dpkg.log 2>&1 || { cat /tmp/pkg/dpkg.log; fail "dpkg -i"; }
getent passwd tesserad >/dev/null || fail "no tesserad user"
getent group tessera >/dev/null || fail "no tessera group"
id -nG tesserad | tr ' ' '\n' | grep -qx tessera || fail "tesserad is not in the tessera group"
[ "$(stat -c '%a %U %G' /var/lib/tesserad)" = "700 tesserad tesserad" ] || fail "/var/lib/tesserad: $(stat -c '%a %U %G' /var/lib/tesserad)"
[ -d /run/tesserad ] || fail "no /run/tesserad"
[ -L /etc/systemd/system/sockets.target.wants/tesserad.socket ] || fail "tesserad.socket is not enabled"
dpkg-query -W -f='${Conffiles}\n' tessera | grep -q '/etc/tessera/tesserad.json' || fail "tesserad.json is not a conffile"
man -w tesserad >/dev/null 2>&1 && man -w tessera >/dev/null 2>&1 || fail "man pages not found by man"

unitdir=$(dirname "$(dpkg -L tessera | grep '/systemd/system/tesserad.service$')")
exec_start=$(sed -n 's/^ExecStart=//p' "$unitdir/tesserad.service")
state_dir=$(sed -n 's/^StateDirectory=//p' "$unitdir/tesserad.service")
user=$(sed -n 's/^User=//p' "$unitdir/tesserad.service")
group=$(sed -n 's/^Group=//p' "$unitdir/tesserad.service")
listen=$(sed -n 's/^ListenStream=//p' "$unitdir/tesserad.socket")
fdname=$(sed -n 's/^FileDescriptorName=//p' "$unitdir/tesserad.socket")
[ "$user" = tesserad ] || fail "the unit runs as $user"
cmd=$(echo "$exec_start" | sed "s|\${STATE_DIRECTORY}|/var/lib/$state_dir|")
echo "ExecStart as $user:$group: $cmd (socket $listen)"
# shellcheck disable=SC2086
systemd-socket-activate -l "$listen" --fdname="$fdname" -E STATE_DIRECTORY="/var/lib/$state_dir" \
  setpriv --reuid="$user" --regid="$group" --init-groups --inh-caps=-all -- $cmd >/tmp/pkg/tesserad.log 2>&1 &
activator=$!
i=0
while [ ! -S "$listen" ]; do i=$((i + 1)); [ $i -lt 400 ] || fail "no socket $listen"; sleep 0.05; done
chgrp "$(sed -n 's/^SocketGroup=//p' "$unitdir/tesserad.socket")" "$listen"
chmod "$(sed -n 's/^SocketMode=//p' "$unitdir/tesserad.socket")" "$listen"
# A member of the tessera group, as a user would be: the installed tessera, no --socket.
setpriv --reuid=nobody --regid=nogroup --groups="$(getent group tessera | cut -d: -f3)" \
  /usr/bin/tessera --json status >/tmp/pkg/status.json 2>/tmp/pkg/status.err ||
  { cat /tmp/pkg/status.err /tmp/pkg/tesserad.log; fail "tessera status"; }
grep -q '"version"' /tmp/pkg/status.json || fail "no version in the status"
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$activator/status")
[ "$uid" = "$(id -u tesserad)" ] || fail "tesserad runs as uid $uid"
[ -f /var/lib/tesserad/tessera.sqlite ] || fail "no database in /var/lib/tesserad"
kill -TERM "$activator"
wait "$activator" || fail "tesserad did not stop cleanly: $(cat /tmp/pkg/tesserad.log)"
echo "tesserad ran as tesserad (uid $uid) and served the installed tessera"

dpkg -r tessera >>/tmp/pkg/dpkg.log 2>&1 || { cat /tmp/pkg/dpkg.log; fail "dpkg -r"; }
[ ! -e /usr/sbin/tesserad ] || fail "dpkg -r left /usr/sbin/tesserad"
[ -f /var/lib/tesserad/tessera.sqlite ] || fail "dpkg -r removed the state"
[ -f /etc/tessera/tesserad.json ] || fail "dpkg -r removed the configuration"
dpkg --purge tessera >>/tmp/pkg/dpkg.log 2>&1 || { cat /tmp/pkg/dpkg.log; fail "dpkg --purge"; }
[ ! -e /var/lib/tesserad ] || fail "purge left /var/lib/tesserad"
[ ! -e /etc/tessera ] || fail "purge left /etc/tessera"
echo "dpkg -r kept the state and the configuration; dpkg --purge removed them"
INSIDE
chmod 0755 "$work/inside.sh"

# The namespace: an overlay of / with its writes in a tmpfs; /proc, /sys, /dev, /run and /tmp of its own.
cat >"$work/namespace.sh" <<NAMESPACE
set -eu
mount -t tmpfs -o size=2g tmpfs "$work/rw" 
mkdir -p "$work/rw/upper" "$work/rw/work" "$work/root"
mount -t overlay overlay -o lowerdir=/,upperdir="$work/rw/upper",workdir="$work/rw/work" "$work/root"
mount -t proc proc "$work/root/proc"
mount --rbind /sys "$work/root/sys"
mount --rbind /dev "$work/root/dev"
mount -t tmpfs tmpfs "$work/root/run"
mount -t tmpfs tmpfs "$work/root/tmp"
mkdir -p "$work/root/tmp/pkg"
cp "$work/tessera.deb" "$work/inside.sh" "$work/root/tmp/pkg/"
chroot "$work/root" /tmp/pkg/inside.sh
# What the package left in the root: every path the overlay wrote that this machine's / does not have, except
# dpkg's and the accounts' own records.
cd "$work/rw/upper"
find . -mindepth 1 ! -type c | sed 's|^\./|/|' | while read -r p; do
  [ -e "\$p" ] || [ -L "\$p" ] && continue
  case "\$p" in
    /var/lib/dpkg/*|/var/log/*|/var/cache/*|/etc/passwd*|/etc/group*|/etc/shadow*|/etc/gshadow*|/etc/.pwd.lock|/etc/subuid*|/etc/subgid*) ;;
    *) echo "left behind: \$p" ;;
  esac
done >"$work/left.txt"
NAMESPACE
mkdir -p "$work/rw"
unshare --mount --propagation private sh "$work/namespace.sh" || fail "in the throwaway root"
if [ -s "$work/left.txt" ]; then cat "$work/left.txt"; fail "purge left files behind"; fi
echo "purge left nothing behind (the tesserad user and the tessera group stay)"
echo "check-deb: OK"
