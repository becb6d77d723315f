#!/usr/bin/env bash
# Installs what Tessera needs on Debian 12 (idempotent): C libraries and services from apt,
# Python verifiers into .venv. Root runs apt directly; others need sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  pkg-config libpcsclite-dev pcscd pcsc-tools libp11-kit-dev p11-kit softhsm2 opensc
  libnfc-dev libnfc-bin libssl-dev openssl vsmartcard-vpcd libsqlite3-dev sqlite3 socat
  python3 python3-venv python3-pip tshark strace openssh-client openssh-server git
  libfido2-dev
)
# systemd-analyze (scripts/check-systemd.sh) comes with the systemd package; containers often have it already.
command -v systemd-analyze >/dev/null || APT_PACKAGES+=(systemd)
# tessera-bench: the p11-kit remoting peer (p11-kit-client.so) and --callgrind (valgrind).
APT_PACKAGES+=(p11-kit-modules valgrind)
# Debian's pinentry-tty and pinentry-curses: the SSH agent's PIN entry is tested against them (Tests/e2e/test_pinentry.py,
# PinentryTests).
APT_PACKAGES+=(pinentry-tty pinentry-curses)
# The kiosk station's screen is tested in a real browser (Tests/e2e/test_kiosk.py): Chromium and its WebDriver.
APT_PACKAGES+=(chromium chromium-driver)
# The reference MRZ reader (matcher/tessera-mrz-read): Debian's tesseract-ocr with its English LSTM model; the
# MRZ test images are set in OCR-B (fonts-ocr-b), the one MRZ typeface (Tests/e2e/mrz_images.py).
APT_PACKAGES+=(tesseract-ocr tesseract-ocr-eng fonts-ocr-b)
# make deb / scripts/check-deb.sh: dpkg-shlibdeps (dpkg-dev), lintian, man (man-db) for the man pages' check.
APT_PACKAGES+=(dpkg-dev lintian man-db)
# cryptography >= 50: its RFC 9180 HPKE checks Tessera's 18013-7 Annex C sealing (Tests/e2e/annexc_hpke.py).
# dlib-bin, face-recognition-models (public-domain weights), Pillow (JPEG 2000), numpy: the reference face matcher (matcher/).
# selenium drives Chromium for the kiosk station's tests (Pillow also checks the fake camera's frames there).
# axe-selenium-python (axe-core, bundled) checks the kiosk's screens for WCAG A/AA violations.
PIP_PACKAGES=(fido2==2.2.1 webauthn==3.0.1 pytest==9.0.3 'cryptography>=50' cbor2 pyjwt pymdoccbor==1.4.0
  dlib-bin==20.0.1.post1 face-recognition-models==0.3.0 pillow numpy selenium axe-selenium-python==2.1.6)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer for it.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import fido2, webauthn, pytest, jwt, cbor2, dlib, face_recognition_models, PIL, numpy, selenium, axe_selenium_python; from cryptography.hazmat.primitives import hpke' 2>/dev/null; then
  echo "setup: creating .venv with ${PIP_PACKAGES[*]}"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "${PIP_PACKAGES[@]}"
fi
command -v swift >/dev/null || { echo "setup: swift (6.3) is not on PATH" >&2; exit 1; }
