#!/usr/bin/env python3
"""Verifies a Tessera registration and assertion with py_webauthn and python-fido2 (independent RP libraries)."""
import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "Tests" / "e2e"))
from tessera_harness import unb64u  # noqa: E402
from verify import verify_assertion, verify_registration  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rp-id", required=True)
    ap.add_argument("--origin", required=True)
    ap.add_argument("--registration", required=True)
    ap.add_argument("--registration-challenge", required=True)
    ap.add_argument("--assertion")
    ap.add_argument("--assertion-challenge")
    a = ap.parse_args()
    reg = json.load(open(a.registration))
    v = verify_registration(reg, unb64u(a.registration_challenge), a.rp_id, a.origin)
    print(f"registration: VERIFIED  fmt={getattr(v.fmt, 'value', v.fmt)} aaguid={v.aaguid} "
          f"uv={v.user_verified} credentialId={reg['credentialId']}")
    if a.assertion:
        res = json.load(open(a.assertion))
        av = verify_assertion(res, unb64u(a.assertion_challenge), a.rp_id, a.origin, v.credential_public_key, 0)
        print(f"assertion:    VERIFIED  signCount={av.new_sign_count} uv={av.user_verified}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
