#!/usr/bin/env bash
# The main job, end to end: start tesserad on a private socket (embedded SoftHSM2 token in a local state dir
# when no hardware token is found), enroll and authenticate a passkey through the CLI, and have an independent
# WebAuthn library (py_webauthn + python-fido2) verify both. Then read an e-passport: an emulated chip (a test
# document signed under a test CSCA) sits in a virtual reader of a private pcscd (vsmartcard vpcd), and the
# daemon reads it with PACE and secure messaging and verifies it (passive authentication).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BIN_DIR:-.build/debug}
DEMO=$(realpath -m "${TESSERA_DEMO_DIR:-.state/demo}")
mkdir -p "$DEMO"
SOCK="$DEMO/tesserad.sock"
RP=demo.tessera.example

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# A private pcscd (own mount namespace; a host pcscd is not touched) with one vpcd reader pair on PORT/PORT+1.
PORT=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "Tests/e2e"); from tessera_harness import free_port_pair; print(free_port_pair())')
mkdir -p "$DEMO/pcscd"
printf 'FRIENDLYNAME "Tessera VPCD"\nDEVICENAME   /dev/null:0x%X\nLIBPATH      /usr/lib/pcsc/drivers/serial/libifdvpcd.so\nCHANNELID    0x%X\n' \
  "$PORT" "$PORT" > "$DEMO/reader.conf"
UNSHARE=(unshare -m); [ "$(id -u)" -eq 0 ] || UNSHARE=(unshare -r -m)
"${UNSHARE[@]}" /bin/sh -c 'set -e
  if [ ! -d /run/pcscd ]; then mount -t tmpfs -o mode=0755 tessera-run /run; mkdir -p /run/pcscd; fi
  mount --bind "$1" /run/pcscd; exec pcscd --foreground --config "$2"' pcscd "$DEMO/pcscd" "$DEMO/reader.conf" \
  > "$DEMO/pcscd.log" 2>&1 &
PIDS+=($!)
export PCSCLITE_CSOCK_NAME="$DEMO/pcscd/pcscd.comm"
for _ in $(seq 1 100); do [ -S "$PCSCLITE_CSOCK_NAME" ] && break; sleep 0.1; done
[ -S "$PCSCLITE_CSOCK_NAME" ] || { echo "private pcscd did not start:"; cat "$DEMO/pcscd.log"; exit 1; }

# A test passport (MRZ of the ICAO Doc 9303 specimen) with PACE and BAC, signed under a fresh test CSCA.
MRZ=$'P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10'
[ -f "$DEMO/passport/profile.json" ] || "$BIN/tessera" lab make-profile "$DEMO/passport" --mrz "$MRZ" \
  --pace ecdh-gm-brainpoolp256r1-aes128 --aa > /dev/null
"$BIN/tessera" lab emulate-passport --profile "$DEMO/passport" --vpcd "127.0.0.1:$PORT" > "$DEMO/emulator.log" 2>&1 &
PIDS+=($!)

# A kiosk workflow: email, the passport's MRZ, a verified chip read matched against the expected holder, a passkey.
cat > "$DEMO/config.json" <<JSON
{"enrollment": {"workflows": {"kiosk-demo": {"remote": true,
  "expected": {"surname": "Eriksson", "givenNames": "Anna Maria", "dateOfBirth": "1974-08-12", "nationality": "UTO"},
  "steps": ["EMAIL_INFO", "NFC_MRZ", "NFC_PHASE", "ATTRIBUTE_MATCHING",
            {"key": "PASSKEY_CREATION", "rpId": "$RP", "attestation": "packed"}]}}}}
JSON
"$BIN/tesserad" --socket "$SOCK" --state-dir "$DEMO/state" --csca "$DEMO/passport/csca.pem" --config "$DEMO/config.json" \
  2> "$DEMO/tesserad.log" &
DAEMON=$!
PIDS=("$DAEMON" "${PIDS[@]}")
for _ in $(seq 1 200); do
  "$BIN/tessera" --socket "$SOCK" status >/dev/null 2>&1 && break
  kill -0 $DAEMON 2>/dev/null || { cat "$DEMO/tesserad.log"; exit 1; }
  sleep 0.1
done
tessera() { "$BIN/tessera" --socket "$SOCK" "$@"; }

echo "== tesserad is up (log: $DEMO/tesserad.log)"
tessera status

# The embedded token's PIN is in the state dir; with a hardware token, give its PIN in TESSERA_DEMO_PIN.
TOKEN=$(tessera --json tokens | .venv/bin/python -c '
import json, sys
tokens = json.load(sys.stdin)["tokens"]
emb = [t for t in tokens if t["label"] == "Tessera Embedded"]
print((emb or tokens)[0]["id"] if tokens else "")')
[ -n "$TOKEN" ] || { echo "no token available"; exit 1; }
PIN=${TESSERA_DEMO_PIN:-$(cat "$DEMO/state/softhsm/user.pin" 2>/dev/null || true)}
[ -n "$PIN" ] || { echo "set TESSERA_DEMO_PIN to the PIN of token $TOKEN"; exit 1; }

b64() { .venv/bin/python -c 'import base64,os;print(base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode())'; }
REG_CHALLENGE=$(b64); AUTH_CHALLENGE=$(b64)

echo; echo "== enroll a passkey for alice@$RP on token $TOKEN (packed self-attestation, PIN-verified)"
echo "$PIN" | tessera --json enroll --rp-id "$RP" --user-name alice --display-name "Alice Example" \
  --token "$TOKEN" --attestation packed --challenge "$REG_CHALLENGE" --pin-stdin > "$DEMO/registration.json"
CRED=$(.venv/bin/python -c 'import json,sys;print(json.load(open(sys.argv[1]))["credentialId"])' "$DEMO/registration.json")
echo "credential: $CRED"

echo; echo "== authenticate with it"
echo "$PIN" | tessera --json authenticate --rp-id "$RP" --credential "$CRED" --challenge "$AUTH_CHALLENGE" \
  --pin-stdin > "$DEMO/assertion.json"
tessera credentials list --rp-id "$RP"

echo; echo "== independent verification (py_webauthn + python-fido2)"
.venv/bin/python scripts/verify_webauthn.py --rp-id "$RP" --origin "https://$RP" \
  --registration "$DEMO/registration.json" --registration-challenge "$REG_CHALLENGE" \
  --assertion "$DEMO/assertion.json" --assertion-challenge "$AUTH_CHALLENGE"

echo; echo "== MRZ check (ICAO Doc 9303 specimen)"
tessera mrz parse 'P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<' 'L898902C36UTO7408122F1204159ZE184226B<<<<<10'
echo; echo "== e-passport in the emulated reader: PACE + secure messaging, passive and active authentication"
for _ in $(seq 1 50); do
  tessera --json passport readers 2>/dev/null | grep -q '"cardPresent":true' && break; sleep 0.2
done
tessera passport readers
tessera passport read --mrz "$MRZ" --save-photo "$DEMO/face.jpg"
echo "face image saved to $DEMO/face.jpg"

echo; echo "== kiosk enrollment (docs/ENROLLMENT.md): email, MRZ, chip read + passive authentication, attribute match, passkey"
.venv/bin/python - "$DEMO/answers.json" "$MRZ" "${TESSERA_DEMO_PIN:-}" <<'PY'
import json, sys
answers = {"EMAIL_INFO": {"email": "anna.eriksson@demo.tessera.example"}, "NFC_MRZ": {"mrz": sys.argv[2]}}
if sys.argv[3]:
    answers["PASSKEY_CREATION"] = {"pin": sys.argv[3]}
json.dump(answers, open(sys.argv[1], "w"))
PY
tessera enroll-station --workflow kiosk-demo --force --answers "$DEMO/answers.json" < /dev/null
tessera credentials list --rp-id "$RP"

echo; echo "demo finished: passkey registration and assertion verified; passport read and verified; kiosk enrollment done."
