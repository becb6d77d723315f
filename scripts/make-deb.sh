#!/usr/bin/env bash
# make deb: a Debian package of the release build (make release) for this machine's architecture, from the tree
# `make install` stages (PREFIX=/usr), so the package and `make install` install the same files. Debian's
# conventions on top: stripped programs, compressed man pages, copyright and changelog, maintainer scripts from
# packaging/debian, conffiles (everything under /etc), md5sums. Depends comes from the programs' NEEDED libraries
# through dpkg-shlibdeps (the Swift runtime is linked in: no toolchain package is needed).
# Prints the package's path. DEB_OUT (default .build/deb) is where it goes.
set -euo pipefail
cd "$(dirname "$0")/.."
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

out=${DEB_OUT:-.build/deb}
version=$(sed -n 's/.*static let version = "\(.*\)".*/\1/p' Sources/TesseraDaemon/Daemon.swift)
arch=$(dpkg --print-architecture)
stage=$(realpath -m "$out/root")
rm -rf "$stage" && mkdir -p "$stage"
make --no-print-directory install DESTDIR="$stage" PREFIX=/usr SYSCONFDIR=/etc >"$out/install.log"

strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage/usr/sbin/tesserad" \
  "$stage/usr/bin/tessera"
find "$stage/usr/share/man" -type f -exec gzip -9n {} +
doc=$stage/usr/share/doc/tessera
install -m 0644 packaging/debian/copyright "$doc/copyright"
printf 'tessera (%s) unstable; urgency=medium\n\n  * Built from the Tessera source tree (make deb).\n\n -- Tessera developers <tessera-maintainers@example.org>  %s\n' \
  "$version" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")" | gzip -9n >"$doc/changelog.gz"

# Depends: the Debian packages of the programs' shared libraries.
shlibs=$(mktemp -d)
trap 'rm -rf "$shlibs"' EXIT
mkdir -p "$shlibs/debian"
printf 'Source: tessera\n\nPackage: tessera\nArchitecture: any\n' >"$shlibs/debian/control"
depends=$(cd "$shlibs" && dpkg-shlibdeps -O -e"$stage/usr/sbin/tesserad" -e"$stage/usr/bin/tessera" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "dpkg-shlibdeps found no dependencies"; exit 1; }
# Packed relative relocations (RELEASE_FLAGS) need glibc 2.36 (the GLIBC_ABI_DT_RELR version), which libc6's
# symbols file does not map to a version.
if readelf -V "$stage/usr/sbin/tesserad" | grep -q GLIBC_ABI_DT_RELR; then
  depends=$(sed -E 's/libc6 \(>= 2\.(3[0-5]|[12][0-9])[^)]*\)/libc6 (>= 2.36)/' <<<"$depends")
fi

mkdir -p "$stage/DEBIAN"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$stage/DEBIAN/"
(cd "$stage" && find etc -type f | sed 's|^|/|' | sort) >"$stage/DEBIAN/conffiles"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: tessera
Version: $version
Architecture: $arch
Maintainer: Tessera developers <tessera-maintainers@example.org>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends, systemd | systemd-standalone-sysusers, systemd | systemd-standalone-tmpfiles
Recommends: pcscd, p11-kit, libsofthsm2
Suggests: opensc-pkcs11, vsmartcard-vpcd, libnfc-bin, pinentry-curses | pinentry, curl
Section: admin
Priority: optional
Description: passkeys, SSH keys and travel documents on hardware tokens
 tesserad keeps keys on PKCS#11 tokens and PIV cards and serves them as
 WebAuthn passkeys, an SSH agent and a CTAP 2.1 authenticator; it reads
 ICAO 9303 travel documents and ISO 18013-5 mobile documents over NFC and
 runs kiosk enrollments. tessera is its command-line client.
 .
 The system daemon is socket-activated (tesserad.socket, group tessera);
 the per-user mode is systemctl --user enable --now tesserad.socket.
CONTROL
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
  >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/conffiles" "$stage/DEBIAN/md5sums"
find "$stage" -type d -exec chmod 0755 {} +

deb="$out/tessera_${version}_${arch}.deb"
# xz -9: its 64 MiB window spans both programs, which share most of their code (the Swift runtime, NIO,
# swift-crypto), so the second compresses to little; the default -6 (8 MiB) sees none of it (11.4 MB against 16.8).
dpkg-deb --root-owner-group -Zxz -z9 --build "$stage" "$deb" >/dev/null
echo "$deb"
