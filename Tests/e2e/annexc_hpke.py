"""ISO/IEC 18013-7 Annex C on the other side of Tessera, for `Tests/MDocTests/AnnexCTests.swift`: built here from
python `cryptography` (its RFC 9180 HPKE, OpenSSL's) and `cbor2` only, no Tessera code.

  annexc_hpke.py reader                  -> {"privateKey": hex scalar, "encryptionInfo": b64url}
  annexc_hpke.py open KEY INFO ORIGIN R  -> {"deviceResponse": hex}   (R: b64url EncryptedResponse)
  annexc_hpke.py seal INFO ORIGIN HEX    -> {"response": b64url}      (HEX: the DeviceResponse bytes)

EncryptionInfo = ["dcapi", {"nonce", "recipientPublicKey": COSE_Key}]; SessionTranscript =
[null, null, ["dcapi", SHA-256(CBOR([encryptionInfo b64url, origin]))]]; HPKE base DHKEM(P-256, HKDF-SHA256),
HKDF-SHA256, AES-128-GCM, info = CBOR(SessionTranscript), aad empty; EncryptedResponse = ["dcapi", {enc,
cipherText}]."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import sys

import cbor2
from cryptography.hazmat.primitives import hpke, serialization
from cryptography.hazmat.primitives.asymmetric import ec

SUITE = hpke.Suite(hpke.KEM.P256, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_128_GCM)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def session_transcript(encryption_info: str, origin: str) -> bytes:
    dcapi_info = cbor2.dumps([encryption_info, origin])
    return cbor2.dumps([None, None, ["dcapi", hashlib.sha256(dcapi_info).digest()]])


def recipient_key(encryption_info: str) -> ec.EllipticCurvePublicKey:
    tag, params = cbor2.loads(unb64url(encryption_info))
    assert tag == "dcapi" and len(params["nonce"]) >= 16, "EncryptionInfo"
    cose = params["recipientPublicKey"]
    assert cose[1] == 2 and cose[-1] == 1, "recipientPublicKey is not EC2 P-256"
    return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + cose[-2] + cose[-3])


def main(argv: list[str]) -> dict:
    if argv[0] == "reader":
        key = ec.generate_private_key(ec.SECP256R1())
        point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        info = cbor2.dumps(["dcapi", {"nonce": os.urandom(16),
                                      "recipientPublicKey": {1: 2, -1: 1, -2: point[1:33], -3: point[33:]}}])
        return {"privateKey": key.private_numbers().private_value.to_bytes(32, "big").hex(),
                "encryptionInfo": b64url(info)}
    if argv[0] == "open":
        key_hex, info, origin, response = argv[1:5]
        key = ec.derive_private_key(int(key_hex, 16), ec.SECP256R1())
        tag, body = cbor2.loads(unb64url(response))
        assert tag == "dcapi" and len(body["enc"]) == 65, "EncryptedResponse"
        plain = SUITE.decrypt(body["enc"] + body["cipherText"], key, info=session_transcript(info, origin))
        return {"deviceResponse": plain.hex()}
    if argv[0] == "seal":
        info, origin, plain_hex = argv[1:4]
        sealed = SUITE.encrypt(bytes.fromhex(plain_hex), recipient_key(info), info=session_transcript(info, origin))
        enc, cipher_text = sealed[:65], sealed[65:]
        return {"response": b64url(cbor2.dumps(["dcapi", {"enc": enc, "cipherText": cipher_text}]))}
    raise SystemExit(f"unknown command {argv[0]}")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
