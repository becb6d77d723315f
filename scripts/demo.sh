#!/usr/bin/env bash
# The main job, end to end: start tesserad on a private socket (embedded SoftHSM2 token in a local state dir
# when no hardware token is found), enroll and authenticate a passkey through the CLI, and have an independent
# WebAuthn library (py_webauthn + python-fido2) verify both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BIN_DIR:-.build/debug}
DEMO=${TESSERA_DEMO_DIR:-.state/demo}
mkdir -p "$DEMO"
SOCK="$DEMO/tesserad.sock"
RP=demo.tessera.example

"$BIN/tesserad" --socket "$SOCK" --state-dir "$DEMO/state" 2> "$DEMO/tesserad.log" &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null || true' EXIT
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
echo; echo "demo finished: registration and assertion verified."
