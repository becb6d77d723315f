"""PACE Integrated Mapping, EF.CardSecurity and real-chip quirks end to end: chips emulated by
`tessera lab emulate-passport` (with `--quirk`) in a private pcscd's vpcd readers, read by the real tesserad.
EF.CardSecurity is re-checked independently here (pyasn1 + cryptography)."""
from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from pyasn1.codec.der import decoder as der_decoder
from pyasn1.codec.der import encoder as der_encoder
from pyasn1.type import univ
from pyasn1_modules import rfc5652

from tessera_harness import BIN, PCSCD, Daemon, EmulatedPassport, RPCError, b64u, cli, make_passport_profile, unb64u

MRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"

PROFILES = {
    "im": ["--pace", "ecdh-im-brainpoolp256r1-aes128", "--no-bac"],
    "im-dh": ["--pace", "dh-im-1024-aes256", "--no-bac"],
    "both": ["--pace", "ecdh-gm-p256-aes128"],
    "pace-only": ["--pace", "ecdh-gm-p256-aes128", "--no-bac"],
    "cam": ["--pace", "ecdh-cam-brainpoolp256r1-aes128", "--no-bac"],
}


class Lab:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.pcscd = PCSCD(root).start()
        self.profiles: dict[str, pathlib.Path] = {}
        for name, args in PROFILES.items():
            self.profiles[name] = make_passport_profile(root / f"profile-{name}", MRZ, *args)
        csca = [a for d in self.profiles.values() for a in ("--csca", str(d / "csca.pem"))]
        self.daemon = Daemon(root, self.pcscd.env, ["--no-embedded-softhsm", *csca]).start()

    def card_present(self, reader: str) -> bool:
        readers = self.daemon.client().call("readers.list")["readers"]
        return any(r["name"] == reader and r["cardPresent"] for r in readers)

    def chip(self, profile: str, *args: str) -> EmulatedPassport:
        return EmulatedPassport(self.pcscd, self.profiles[profile], self.card_present, *args,
                                log=self.root / f"emulator-{profile}.log")

    def read(self, profile: str, *args: str, **params) -> dict:
        with self.chip(profile, *args):
            return self.daemon.client().call("documents.read", {"mrz": MRZ, **params})

    def read_traced(self, profile: str, *args: str, **params) -> tuple[dict, list[tuple[str, str]]]:
        """A read with the emulator's APDU log: the result and the (command, response) hex pairs on the wire."""
        self.traces = getattr(self, "traces", 0) + 1
        log = self.root / f"trace-{self.traces}.log"
        with EmulatedPassport(self.pcscd, self.profiles[profile], self.card_present, *args, "--log-apdus", log=log):
            result = self.daemon.client().call("documents.read", {"mrz": MRZ, **params})
        lines = [line.split(" ", 2) for line in log.read_text().splitlines() if line[:1].isdigit()]
        commands = [l[2] for l in lines if l[1] == ">"]
        responses = [l[2] for l in lines if l[1] == "<"]
        return result, list(zip(commands, responses))

    def stop(self) -> None:
        self.daemon.stop()
        self.pcscd.stop()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("pace-quirks"))
    yield lab
    lab.stop()


def assert_good_read(result: dict, profile: pathlib.Path, protocol: str = "PACE") -> None:
    assert result["accessProtocol"] == protocol, result
    assert result["passiveAuthentication"]["status"] == "valid", result["passiveAuthentication"]
    groups = {k: unb64u(v) for k, v in result["dataGroups"].items()}
    assert groups["DG1"] == (profile / "DG1.bin").read_bytes()
    assert groups["DG2"] == (profile / "DG2.bin").read_bytes()
    assert groups["SOD"] == (profile / "EF.SOD.bin").read_bytes()
    assert result["mrz"]["documentNumber"] == "L898902C3"


# --- PACE Integrated Mapping ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile,oid_mapping", [("im", b"\x04"), ("im-dh", b"\x03")])
def test_integrated_mapping_only_chip(lab, profile, oid_mapping):
    # The chip offers nothing but PACE-IM (no BAC): before IM support this read failed.
    card_access = (lab.profiles[profile] / "EF.CardAccess.bin").read_bytes()
    assert b"\x04\x00\x7f\x00\x07\x02\x02\x04" + oid_mapping in card_access
    result = lab.read(profile)
    assert_good_read(result, lab.profiles[profile])
    assert result["paceMapping"] == "IM"
    assert "paceFallback" not in result and "workarounds" not in result


# --- quirks -----------------------------------------------------------------------------------------------------------

def test_select_and_mse_without_le(lab):
    result, wire = lab.read_traced("both", "--quirk", "no-le")
    assert_good_read(result, lab.profiles["both"])
    assert result["paceMapping"] == "GM"
    # Plain SELECT and MSE of the read went out as case 3 APDUs (the chip refuses Le with 6700). The daemon's
    # probe for a PIV application (SELECT A000000308 with Le) is not part of the document read.
    read = [(c, r) for c, r in wire if "A000000308" not in c]
    assert any(c.startswith("0022C1A4") for c, _ in read) and all(r[-4:] != "6700" for _, r in read), wire


def test_short_and_eof_quirks_reach_the_wire(lab):
    _, short = lab.read_traced("both", "--quirk", "short-responses")
    _, eof = lab.read_traced("both", "--quirk", "eof-6282")
    # Protected READ BINARY answers: under the short quirk none carries more than 64 bytes of content.
    assert sum(1 for _, r in eof if r.endswith("6282")) >= 5, eof  # COM, DG1, DG2, …, SOD each end with 6282
    assert sum(1 for c, r in short if c[2:4] == "B0" and r.endswith("9000")) > 20


def test_mse_set_at_with_and_without_key_reference(lab):
    plain = lab.read("both")
    assert_good_read(plain, lab.profiles["both"])
    assert "workarounds" not in plain  # DO'84' sent and accepted
    refusing, wire = lab.read_traced("both", "--quirk", "no-key-reference")
    assert [r for c, r in wire if c.startswith("0022C1A4")] == ["6A80", "9000"], wire
    assert_good_read(refusing, lab.profiles["both"])
    assert refusing["paceMapping"] == "GM"
    assert any("domain parameter reference" in w for w in refusing["workarounds"]), refusing.get("workarounds")


@pytest.mark.parametrize("quirk", ["mf-6a82", "mf-6a87"])
def test_master_file_select_errors(lab, quirk):
    result = lab.read("both", "--quirk", quirk)
    assert_good_read(result, lab.profiles["both"])
    # PACE-CAM chips re-select the master file for a CAM run; the DG14-announced CAM path is not involved here.
    assert result["paceMapping"] == "GM"


def test_pace_failure_falls_back_to_bac(lab):
    result, wire = lab.read_traced("both", "--quirk", "pace-fails")
    assert any(r == "6985" for c, r in wire if c[2:4] == "86"), wire  # GENERAL AUTHENTICATE (mapping) refused
    assert any(c[2:4] == "82" for c, _ in wire)  # then EXTERNAL AUTHENTICATE: BAC
    assert_good_read(result, lab.profiles["both"], protocol="BAC")
    assert result["paceFallback"] is True
    assert "6985" in result["paceFailure"]
    assert any("fell back to BAC" in w for w in result["workarounds"])
    assert "paceMapping" not in result
    # A chip without BAC cannot fall back: the PACE error is what the caller sees.
    with pytest.raises(RPCError) as e:
        lab.read("pace-only", "--quirk", "pace-fails")
    assert e.value.code == "CARD_ERROR", e.value
    # A wrong MRZ stays ACCESS_DENIED although BAC is tried after PACE refuses it.
    with lab.chip("both"):
        with pytest.raises(RPCError) as e:
            lab.daemon.client().call("documents.read", {"documentNumber": "L898902C3", "dateOfBirth": "740813",
                                                        "dateOfExpiry": "120415"})
    assert e.value.code == "ACCESS_DENIED", e.value


def test_responses_shorter_than_le(lab):
    result = lab.read("both", "--quirk", "short-responses", dataGroups=["DG1", "DG2", "DG11"])
    assert_good_read(result, lab.profiles["both"])
    # 64-byte answers to 223-byte requests: many more READ BINARY commands than a normal read.
    normal = lab.read("both", dataGroups=["DG1", "DG2", "DG11"])
    assert result["stats"]["apdus"] > normal["stats"]["apdus"] + 10


def test_end_of_file_warning_on_last_read(lab):
    result = lab.read("both", "--quirk", "eof-6282", dataGroups=["DG1", "DG2", "DG11", "DG12"])
    assert_good_read(result, lab.profiles["both"])
    assert result["passiveAuthentication"]["dataGroupHashes"]["DG12"] == "valid"


def test_quirks_combined_with_integrated_mapping(lab):
    result = lab.read("im", "--quirk", "no-le", "--quirk", "no-key-reference", "--quirk", "mf-6a82",
                      "--quirk", "short-responses", "--quirk", "eof-6282")
    assert_good_read(result, lab.profiles["im"])
    assert result["paceMapping"] == "IM"


def test_unknown_quirk_is_refused(lab):
    out = subprocess.run([str(BIN / "tessera"), "lab", "emulate-passport", "--profile", str(lab.profiles["both"]),
                          "--vpcd", "127.0.0.1:1", "--quirk", "nonsense"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "unknown quirk" in out.stderr


# --- EF.CardSecurity ---------------------------------------------------------------------------------------------------

def independent_card_security_check(card_security: bytes, ds_pem: bytes, csca_pem: bytes) -> bytes:
    """Checks EF.CardSecurity without Tessera code and returns its SecurityInfos."""
    content, _ = der_decoder.decode(card_security, asn1Spec=rfc5652.ContentInfo())
    assert str(content["contentType"]) == "1.2.840.113549.1.7.2"
    signed, _ = der_decoder.decode(content["content"], asn1Spec=rfc5652.SignedData())
    assert str(signed["encapContentInfo"]["eContentType"]) == "0.4.0.127.0.7.3.2.1"  # id-SecurityObject
    econtent = bytes(signed["encapContentInfo"]["eContent"])
    signer = signed["signerInfos"][0]
    attrs = univ.SetOf(componentType=rfc5652.Attribute())
    for i, a in enumerate(signer["signedAttrs"]):
        attrs.setComponentByPosition(i, a)
    digest_ok = False
    for a in signer["signedAttrs"]:
        if str(a["attrType"]) == "1.2.840.113549.1.9.4":
            digest, _ = der_decoder.decode(a["attrValues"][0])
            h = hashes.Hash(hashes.SHA256())
            h.update(econtent)
            digest_ok = bytes(digest) == h.finalize()
    assert digest_ok
    ds = x509.load_pem_x509_certificate(ds_pem)
    ds.public_key().verify(bytes(signer["signature"]), der_encoder.encode(attrs), ec.ECDSA(hashes.SHA256()))
    ds.verify_directly_issued_by(x509.load_pem_x509_certificate(csca_pem))
    return econtent


def test_card_security_verified_and_used_for_pace_cam(lab, tmp_path):
    profile = lab.profiles["cam"]
    card_security = (profile / "EF.CardSecurity.bin").read_bytes()
    infos = independent_card_security_check(card_security, (profile / "ds.pem").read_bytes(),
                                            (profile / "csca.pem").read_bytes())
    # It holds the chip authentication public key that DG14 holds (id-PK-ECDH, keyId 13).
    secret = int.from_bytes((profile / "ca-key-13.bin").read_bytes(), "big")
    public = ec.derive_private_key(secret, ec.BrainpoolP256R1()).public_key().public_numbers()
    point = b"\x04" + public.x.to_bytes(32, "big") + public.y.to_bytes(32, "big")
    assert point in infos

    result = lab.read("cam", evidence=True)
    assert_good_read(result, profile)
    cs = result["cardSecurity"]
    assert (cs["status"], cs["signature"], cs["certificateChain"]) == ("valid", "valid", "valid"), cs
    assert result["chipAuthentication"]["status"] == "valid"
    assert (result["verdict"], result["reasons"]) == ("authentic", [])
    assert unb64u(result["evidence"]["cardSecurity"]) == card_security

    def verify(evidence: dict) -> tuple[int, dict]:
        path = tmp_path / "evidence.json"
        path.write_text(json.dumps(evidence))
        out = subprocess.run([str(BIN / "tessera"), "documents", "verify", str(path), "--csca", str(profile / "csca.pem")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode in (0, 1), out.stderr
        return out.returncode, json.loads(out.stdout)

    code, checked = verify(result["evidence"])
    assert (code, checked["verdict"], checked["cardSecurity"]["status"]) == (0, "authentic", "valid"), checked
    # PACE-CAM's recorded values are the reader's observation, not an offline proof (issue #27).
    assert result["evidence"]["chipAuthentication"]["proof"] == "online"
    assert checked["chipAuthentication"]["offline"] == "readerObserved", checked
    assert checked["offline"] == {"reverified": ["passiveAuthentication", "cardSecurity"],
                                  "readerObserved": ["chipAuthentication"]}, checked
    forged = bytearray(card_security)
    forged[-1] ^= 0x01
    evidence = dict(result["evidence"], cardSecurity=b64u(bytes(forged)))
    code, checked = verify(evidence)
    assert (code, checked["verdict"], checked["cardSecurity"]["status"]) == (1, "notAuthentic", "invalid"), checked
    assert "CARD_SECURITY_INVALID" in checked["reasons"]


def test_tampered_card_security_is_not_authentic(lab):
    result = lab.read("cam", "--tamper-card-security")
    assert result["passiveAuthentication"]["status"] == "valid"
    cs = result["cardSecurity"]
    assert (cs["status"], cs["signature"]) == ("invalid", "invalid"), cs
    assert "EF.CardSecurity signature" in cs["reason"]
    assert result["verdict"] == "notAuthentic"
    assert "CARD_SECURITY_INVALID" in result["reasons"]
    # The chip authentication key comes from EF.CardSecurity, which cannot be trusted now.
    assert result["chipAuthentication"]["status"] == "invalid"


def test_chip_without_card_security(lab):
    result = lab.read("both")
    assert result["cardSecurity"] == {"status": "notPresent"}
    bac = lab.read("both", "--quirk", "pace-fails")
    assert "cardSecurity" not in bac  # BAC: nothing to read


def test_cli_passport_read_shows_card_security_and_fallback(lab):
    with lab.chip("cam"):
        cam = cli(lab.daemon, "passport", "read", "--mrz", MRZ).stdout
    assert "Access protocol:  PACE-CAM" in cam and "EF.CardSecurity:  VALID" in cam, cam
    with lab.chip("im"):
        im = cli(lab.daemon, "passport", "read", "--mrz", MRZ).stdout
    assert "Access protocol:  PACE-IM" in im and "EF.CardSecurity" not in im, im
    with lab.chip("both", "--quirk", "pace-fails"):
        fallback = cli(lab.daemon, "passport", "read", "--mrz", MRZ).stdout
    assert "Access protocol:  BAC" in fallback and "PACE fallback:    BAC was used" in fallback, fallback
    assert "workaround: PACE failed" in fallback
