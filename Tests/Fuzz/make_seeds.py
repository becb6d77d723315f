#!/usr/bin/env python3
"""Writes the seed corpora under Tests/Fuzz/corpus/<target>/ from the vectors the unit tests quote.

Usage: Tests/Fuzz/make_seeds.py PROFILE_DIR
PROFILE_DIR is a test passport made by `tessera lab make-profile PROFILE_DIR --mrz ... --pace ... --aa` (its LDS
files, EF.SOD and CSCA seed the lds and sod targets; the CSCA DER and DG1 go into Harness/FixedTrust.swift).
Each seed starts with the selector byte the target reads first (see Harness/Targets.swift), except mrz/workflow.
"""
import base64
import hashlib
import json
import os
import re
import struct
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(ROOT, "corpus")
TESTS = os.path.join(ROOT, "..")


def write(target, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def b64u(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def cbor_vectors():
    text = open(os.path.join(TESTS, "CBORTests", "RFC8949VectorTests.swift")).read()
    return [bytes.fromhex(h) for h in re.findall(r'v\("[^"]*", "([0-9a-f]+)"', text)]


def mrz_specimens():
    out = set()
    for name in os.listdir(os.path.join(TESTS, "MRZTests")):
        text = open(os.path.join(TESTS, "MRZTests", name)).read()
        out.update(re.findall(r'"([PIVAC]<[A-Z0-9<]+(?:\\n[A-Z0-9<]+)+)"', text))
    return [s.replace("\\n", "\n") for s in sorted(out)]


def tlv(tag, value):
    n = len(value)
    length = bytes([n]) if n < 0x80 else (bytes([0x81, n]) if n < 0x100 else bytes([0x82]) + struct.pack(">H", n))
    return tag + length + value


def main(profile):
    # JSON-RPC frames (docs/API.md methods), several per input, CRLF and an unterminated last frame.
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "daemon.status"},
        {"jsonrpc": "2.0", "id": "a", "method": "tokens.list", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "passkey.enroll",
         "params": {"rpId": "example.com", "userName": "anna", "userId": b64u(b"user-1"), "challenge": b64u(b"c" * 32)}},
        {"jsonrpc": "2.0", "id": 3, "method": "passkey.authenticate",
         "params": {"rpId": "example.com", "challenge": b64u(b"x" * 32), "pin": "123456", "allowCredentials": []}},
        {"jsonrpc": "2.0", "id": None, "method": "mrz.parse", "params": {"text": "P<UTO..."}},
        {"jsonrpc": "2.0", "id": 4.5, "method": "documents.read", "params": {"reader": "vpcd 0", "can": "123456"}},
        {"jsonrpc": "2.0", "id": 5, "method": "credentials.delete", "params": [1, 2]},
        {"jsonrpc": "2.0", "method": "tokens.pinStatus", "params": {"token": {"serial": "x"}, "nested": [[{}]]}},
        {"jsonrpc": "1.0", "id": 6, "method": 7},
    ]
    for i, r in enumerate(requests):
        line = json.dumps(r).encode()
        write("jsonrpc", bytes([i]) + line + b"\n")
        write("jsonrpc", bytes([0x80 | i]) + line)
    write("jsonrpc", b"\x05" + b"\n".join(json.dumps(r).encode() for r in requests[:3]) + b"\r\n" + b'{"jsonrpc":"2.0"')
    write("jsonrpc", b"\x00" + b'["\\u00e9\\ud83d\\ude00", 1e308, -0.0, 123456789012345678901234567890, true, null]\n')

    for i, v in enumerate(cbor_vectors()):
        write("cbor", bytes([i & 1]) + v)
    # A WebAuthn-like attestation object map.
    write("cbor", b"\x00" + bytes.fromhex("a363666d74646e6f6e656761747453746d74a068617574684461746158250000"))

    tlvs = [
        tlv(b"\x6f", tlv(b"\x84", b"\xa0\x00\x00\x03\x08") + tlv(b"\xa5", tlv(b"\x5f\x2f", b"\x01"))),
        b"\x04\x83\x00\x00\x02\xaa\xbb",
        b"\x5f\x1f\x82\x01\x2c" + b"\x00" * 300,
        b"\x30\x80" + tlv(b"\x02", b"\x01") + b"\x00\x00",
        b"\x00\xff" + tlv(b"\x53", b"\x01\x02") + b"\xff\x00",
        b"\x7f\x61\x80\x02\x01\x01\x7f\x60\x80\xa1\x80\x80\x02\x01\x01\x00\x00\x00\x00\x00\x00",
    ]
    for i, t in enumerate(tlvs):
        for sel in (0, 1, 2, 3, 6):
            write("tlv", bytes([sel]) + t)

    # APDUs: plain and protected responses/commands (Doc 9303 Part 11 Appendix D shapes), all cipher selectors.
    resp = tlv(b"\x87", b"\x01" + b"\x11" * 16) + tlv(b"\x99", b"\x90\x00") + tlv(b"\x8e", b"\x22" * 8) + b"\x90\x00"
    cmd = b"\x0c\xb0\x00\x00\x0d" + tlv(b"\x97", b"\x04") + tlv(b"\x8e", b"\x33" * 8)[:8] + b"\x00"
    cmd_ext = b"\x0c\xa4\x02\x0c\x00\x00\x15" + tlv(b"\x87", b"\x01" + b"\x44" * 16)[:21] + b"\x00\x00"
    for c in range(4):  # selector: cipher << 2 | mode
        write("apdu-sm", bytes([c << 2 | 0]) + resp)
        write("apdu-sm", bytes([c << 2 | 0]) + b"\x6a\x82")
        write("apdu-sm", bytes([c << 2 | 1]) + cmd)
        write("apdu-sm", bytes([c << 2 | 3]) + cmd_ext)
        # Mode 2: SW then data objects (the harness appends a correct MAC).
        write("apdu-sm", bytes([c << 2 | 2]) + b"\x90\x00" + tlv(b"\x87", b"\x01" + b"\x55" * 16)
              + tlv(b"\x99", b"\x90\x00"))

    for s in mrz_specimens():
        write("mrz", s.encode())

    # Activation tokens (claims as in Tests/EnrollmentTests/ActivationTokenTests.swift).
    claims = {"iss": "https://backend.example", "jti": "token-1", "workflow": "employee-badge", "sub": "user-42",
              "exp": 1790000300, "iat": 1789999990, "aud": ["kiosk-1"], "userName": "anna",
              "expected": {"surname": "ERIKSSON", "dateOfBirth": "1974-08-12"}}
    header = {"alg": "ES256", "typ": "tessera-activation+jwt", "kid": "k1"}
    for h, c in [(header, claims), ({"alg": "ES256"}, {"iss": "https://backend.example", "jti": "x", "workflow": "w",
                                                      "exp": 1790000300, "nbf": 1789999000})]:
        hj, cj = json.dumps(h).encode(), json.dumps(c).encode()
        write("jws", b"\x01" + hj + b"\x00" + cj)
        write("jws", b"\x00" + (b64u(hj) + "." + b64u(cj) + "." + b64u(bytes(64))).encode())
    write("jws", b"\x00" + b"eyJhbGciOiJub25lIn0.e30.")

    enrollment = json.loads(re.search(r"```json\n(.*?)```", open(os.path.join(TESTS, "..", "docs", "ENROLLMENT.md")).read(),
                                      re.S).group(1))["enrollment"]
    enrollment["issuers"] = [{"issuer": "https://backend.example", "keyId": "2026-1",
                              "publicKey": "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"}]
    write("workflow", json.dumps(enrollment).encode())
    write("workflow", json.dumps({"workflows": {"w": ["EMAIL_INFO", "EMAIL_OTP", "NFC_MRZ", "NFC_PHASE"]},
                                  "notifier": {"directory": "otp"}}).encode())
    write("workflow", json.dumps({"workflows": {"w": {"steps": [{"key": "CUSTOM", "client": True, "input": {}}]}}}).encode())
    write("workflow", json.dumps({"workflows": {"m": {"expected": {"issuingState": "UTO"}, "steps": [
        {"key": "MDOC_PHASE", "reader": "r", "elements": ["portrait", "ns/x"], "cardWaitSeconds": 5},
        "ATTRIBUTE_MATCHING"]}}}).encode())

    # PN532 frames (NXP UM0701-02 §6.2): wake-up, information frames, extended frame, ACK, NACK.
    def frame(payload):
        n = len(payload)
        if n > 255:
            head = b"\x00\x00\xff\xff\xff" + struct.pack(">H", n) + bytes([(-((n >> 8) + (n & 0xFF))) & 0xFF])
        else:
            head = b"\x00\x00\xff" + bytes([n, (-n) & 0xFF])
        return head + payload + bytes([(-sum(payload)) & 0xFF, 0x00])
    pn = [frame(b"\xd4\x02"), b"\x55\x55\x00\x00\x00" + frame(b"\xd4\x14\x01\x14\x01"),
          frame(b"\xd4\x8c\x05\x04\x00\x08\x54\x53\x20" + b"\x00" * 30),
          frame(b"\xd4\x86" + b"\x00\xa4\x04\x0c\x07\xa0\x00\x00\x02\x47\x10\x01"), frame(b"\xd4\x8e" + b"\x90\x00" * 150),
          b"\x00\x00\xff\x00\xff\x00", b"\x00\x00\xff\xff\x00\x00", b"\x00\x00\xff\x03\xfc\xd4\x02"]
    for i, p in enumerate(pn):
        write("pn532", bytes([i * 3]) + p)

    # vpcd link: 2-byte length + payload; control bytes 00/01/02/04 and APDUs.
    def vf(p):
        return struct.pack(">H", len(p)) + p
    write("vpcd", b"\x00" + vf(b"\x01") + vf(b"\x04") + vf(bytes.fromhex("00a4040c07a0000002471001")))
    write("vpcd", b"\x03" + vf(bytes.fromhex("00b0000000")) + vf(bytes.fromhex("00b00000000100")) + vf(b"\x02"))
    write("vpcd", b"\x01" + vf(bytes.fromhex("0cb0000000000d970100" "8e08" + "11" * 8 + "0000")) + vf(b"\x00"))
    write("vpcd", b"\x02" + vf(bytes.fromhex("00ca7f6100")) + b"\x00")

    # LDS files and EF.SOD of the seed passport.
    files = {"EF.COM.bin": 0, "EF.SOD.bin": 17, "EF.CardAccess.bin": 18}
    files.update({f"DG{n}.bin": n for n in range(1, 17)})
    for name, sel in files.items():
        path = os.path.join(profile, name)
        if os.path.exists(path):
            data = open(path, "rb").read()
            write("lds", bytes([sel]) + data)
    sod = open(os.path.join(profile, "EF.SOD.bin"), "rb").read()
    write("sod", b"\x00" + sod)
    write("sod", b"\x01" + open(os.path.join(profile, "ds.der"), "rb").read())
    write("sod", b"\x01" + open(os.path.join(profile, "csca.pem"), "rb").read())
    csca = open(os.path.join(profile, "csca.der"), "rb").read()
    dg1 = open(os.path.join(profile, "DG1.bin"), "rb").read()

    def swift_bytes(b):
        rows = [", ".join(f"0x{x:02X}" for x in b[i:i + 16]) for i in range(0, len(b), 16)]
        return "[\n" + "".join(f"        {r},\n" for r in rows) + "    ]"
    with open(os.path.join(ROOT, "Harness", "FixedTrust.swift"), "w") as f:
        f.write("/// The trust anchor and DG1 of the seed passport in Tests/Fuzz/corpus/sod (written by\n"
                "/// Tests/Fuzz/make_seeds.py from a `tessera lab make-profile` directory).\n"
                "enum FixedTrust {\n"
                f"    static let cscaDER: [UInt8] = {swift_bytes(csca)}\n"
                f"    static let dg1: [UInt8] = {swift_bytes(dg1)}\n"
                "}\n")
    ssh_agent_seeds()
    ecdsa_seeds()


def ssh_agent_seeds():
    """SSH agent frame bodies (selector 0), key blobs (1) and signature blobs (2): a fixed P-256 point, no key."""
    def s(b):
        return struct.pack(">I", len(b)) + b
    # The P-256 generator as a stand-in public point (uncompressed): any valid point shapes the blob the same way.
    point = bytes.fromhex("04" "6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296"
                          "4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5")
    blob = s(b"ecdsa-sha2-nistp256") + s(b"nistp256") + s(point)
    sig = s(b"ecdsa-sha2-nistp256") + s(s(b"\x01" * 32) + s(b"\x00\xff" + b"\x02" * 31))
    write("sshagent", b"\x00" + bytes([11]))                                                   # REQUEST_IDENTITIES
    write("sshagent", b"\x00" + bytes([13]) + s(blob) + s(b"data to sign") + struct.pack(">I", 0))  # SIGN_REQUEST
    write("sshagent", b"\x00" + bytes([20]) + s(b"tessera-test") + s(b"1234"))                   # ADD_SMARTCARD_KEY
    write("sshagent", b"\x00" + bytes([26]) + s(b"tok") + s(b"1234") + b"\x01" + struct.pack(">I", 60) + b"\x02")
    write("sshagent", b"\x00" + bytes([22]) + s(b"passphrase"))                                   # LOCK
    write("sshagent", b"\x00" + bytes([27]) + s(b"query"))                                        # EXTENSION query
    write("sshagent", b"\x00" + bytes([27]) + s(b"session-bind@openssh.com") + s(blob) + s(b"\x07" * 32)
          + s(sig) + b"\x00")
    write("sshagent", b"\x01" + blob)
    write("sshagent", b"\x02" + sig)
    # session-bind contents, through the host key signature check (ECDSA, and Ed25519 with RFC 8032's test 1 key).
    write("sshagent", b"\x03" + s(blob) + s(b"\x07" * 32) + s(sig) + b"\x00")
    ed_key = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    write("sshagent", b"\x03" + s(s(b"ssh-ed25519") + s(ed_key)) + s(b"") + s(s(b"ssh-ed25519") + s(b"\x00" * 64))
          + b"\x01")


def ecdsa_seeds():
    """DER ECDSA signatures (selector: group << 1 | lenient) with r, s of every length class: minimal DER for
    P-256/384/521 (P-521 needs the long-form length), and the card quirks lenient mode takes (fixed-width
    INTEGERs, a high bit without its 0x00 pad, non-minimal length octets)."""
    def integer(v, width=None):
        b = v.to_bytes(width, "big") if width else v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big")
        return b"\x02" + bytes([len(b)]) + b

    def seq(body, long_form=False):
        if long_form or len(body) >= 0x80:
            return b"\x30\x81" + bytes([len(body)]) + body if len(body) < 0x100 else b"\x30\x82" + struct.pack(">H", len(body)) + body
        return b"\x30" + bytes([len(body)]) + body
    r, s = int("8f" * 32, 16), int("1234" * 15, 16)
    for selector, size in [(0, 32), (2, 48), (4, 66)]:
        top = (1 << (8 * size - (7 if size == 66 else 1))) - 12345
        write("ecdsa", bytes([selector]) + seq(integer(r) + integer(s)))
        write("ecdsa", bytes([selector]) + seq(integer(top) + integer(1)))
        write("ecdsa", bytes([selector | 1]) + seq(integer(r, size) + integer(s, size), long_form=True))
    write("ecdsa", b"\x01" + b"\x30\x44\x02\x20" + b"\x8f" * 32 + b"\x02\x20" + b"\x00\x00" + b"\x12" * 30)
    write("ecdsa", b"\x06" + seq(integer(1) + integer(1)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
