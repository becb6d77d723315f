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
RP=demo.tessera.example

# The lab (scripts/lab.py; `make lab`): a private pcscd (own mount namespace; a host pcscd is not touched) with a vpcd
# reader pair, a test passport (MRZ of the ICAO Doc 9303 specimen, PACE + BAC + active authentication, signed under a
# fresh test CSCA) in its first reader, and tesserad with its embedded SoftHSM2 token (when no hardware token is found)
# and the CSCA as trust anchor, here with a kiosk workflow: email, the passport's MRZ, a verified chip read matched
# against the expected holder, a passkey.
mkdir -p "$DEMO/lab"
cat > "$DEMO/config.json" <<JSON
{"enrollment": {"workflows": {"kiosk-demo": {"remote": true,
  "expected": {"surname": "Eriksson", "givenNames": "Anna Maria", "dateOfBirth": "1974-08-12", "nationality": "UTO"},
  "steps": ["EMAIL_INFO", "NFC_MRZ", "NFC_PHASE", "ATTRIBUTE_MATCHING",
            {"key": "PASSKEY_CREATION", "rpId": "$RP", "attestation": "packed"}]}}}}
JSON
trap 'python3 scripts/lab.py stop "$DEMO/lab"' EXIT
python3 scripts/lab.py stop "$DEMO/lab"   # a lab left by an interrupted demo
eval "$(TESSERA_BIN_DIR="$(realpath "$BIN")" python3 scripts/lab.py start "$DEMO/lab" --config "$DEMO/config.json")"
SOCK=$TESSERA_SOCKET
tessera() { "$BIN/tessera" --socket "$SOCK" "$@"; }

echo "== tesserad is up (log: $LAB/tesserad.log)"
tessera status

# The lab prints the embedded token's PIN as PIN; with a hardware token, give its PIN in TESSERA_DEMO_PIN.
TOKEN=$(tessera --json tokens | .venv/bin/python -c '
import json, sys
tokens = json.load(sys.stdin)["tokens"]
emb = [t for t in tokens if t["label"] == "Tessera Embedded"]
print((emb or tokens)[0]["id"] if tokens else "")')
[ -n "$TOKEN" ] || { echo "no token available"; exit 1; }
PIN=${TESSERA_DEMO_PIN:-$PIN}
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
