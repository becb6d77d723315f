"""Independent WebAuthn verification of Tessera's output with py_webauthn and python-fido2."""
from __future__ import annotations

import hashlib

from fido2 import cbor
from fido2.attestation import PackedAttestation
from fido2.cose import CoseKey
from fido2.webauthn import AttestationObject, AuthenticatorData, CollectedClientData
from webauthn import verify_authentication_response, verify_registration_response

from tessera_harness import unb64u


def registration_credential(result: dict) -> dict:
    return {
        "id": result["credentialId"],
        "rawId": result["credentialId"],
        "type": "public-key",
        "response": {"clientDataJSON": result["clientDataJSON"], "attestationObject": result["attestationObject"]},
    }


def assertion_credential(result: dict) -> dict:
    return {
        "id": result["credentialId"],
        "rawId": result["credentialId"],
        "type": "public-key",
        "response": {
            "clientDataJSON": result["clientDataJSON"],
            "authenticatorData": result["authenticatorData"],
            "signature": result["signature"],
            "userHandle": result["userHandle"],
        },
    }


def verify_registration(result: dict, challenge: bytes, rp_id: str, origin: str, require_uv: bool = False):
    """Both libraries must accept the registration. Returns py_webauthn's verified registration."""
    verified = verify_registration_response(
        credential=registration_credential(result),
        expected_challenge=challenge,
        expected_rp_id=rp_id,
        expected_origin=origin,
        require_user_verification=require_uv,
    )
    att = AttestationObject(unb64u(result["attestationObject"]))
    client_data = CollectedClientData(unb64u(result["clientDataJSON"]))
    assert client_data.challenge == challenge
    assert client_data.type == "webauthn.create"
    if att.fmt == "packed":
        PackedAttestation().verify(att.att_stmt, att.auth_data, client_data.hash)
    assert att.auth_data.credential_data.credential_id == unb64u(result["credentialId"])
    return verified


def verify_assertion(result: dict, challenge: bytes, rp_id: str, origin: str, public_key: bytes,
                     sign_count: int, require_uv: bool = False):
    """Both libraries must accept the assertion. Returns py_webauthn's verified authentication."""
    verified = verify_authentication_response(
        credential=assertion_credential(result),
        expected_challenge=challenge,
        expected_rp_id=rp_id,
        expected_origin=origin,
        credential_public_key=public_key,
        credential_current_sign_count=sign_count,
        require_user_verification=require_uv,
    )
    auth_data = AuthenticatorData(unb64u(result["authenticatorData"]))
    client_data = unb64u(result["clientDataJSON"])
    CoseKey.parse(cbor.decode(public_key)).verify(
        bytes(auth_data) + hashlib.sha256(client_data).digest(), unb64u(result["signature"])
    )
    return verified
