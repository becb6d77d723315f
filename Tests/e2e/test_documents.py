"""Reading e-passports end to end: a private pcscd with vpcd readers, chips emulated by `tessera lab emulate-passport`
from profiles issued by `tessera lab make-profile`, the real tesserad (PC/SC, --csca) and the real CLI.
Passive authentication is re-checked here independently (pyasn1 + cryptography)."""
from __future__ import annotations

import hashlib
import json
import re
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

from tessera_harness import BIN, PCSCD, Client, Daemon, EmulatedPassport, RPCError, cli, unb64u

MRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"
WRONG_MRZ_FIELDS = {"documentNumber": "L898902C3", "dateOfBirth": "740813", "dateOfExpiry": "120415"}

PROFILES = {
    "bac": [],
    "p256": ["--pace", "ecdh-gm-p256-aes128", "--no-bac", "--can", "123456"],
    "brainpool": ["--pace", "ecdh-gm-brainpoolp256r1-aes128", "--no-bac"],
    "aes256": ["--pace", "ecdh-gm-p256-aes256", "--no-bac"],
    "aa": ["--pace", "ecdh-gm-p256-aes128", "--aa"],
    "big": ["--pace", "ecdh-gm-p256-aes128", "--photo-padding", "20000"],
    "cam": ["--pace", "ecdh-gm-p256-aes128", "--pace", "ecdh-cam-brainpoolp256r1-aes128", "--no-bac"],
}


class Lab:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.pcscd = PCSCD(root).start()
        self.profiles: dict[str, pathlib.Path] = {}
        for name, args in PROFILES.items():
            d = root / f"profile-{name}"
            out = subprocess.run([str(BIN / "tessera"), "lab", "make-profile", str(d), "--mrz", MRZ, *args],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert "csca" in out.stdout
            self.profiles[name] = d
        csca = [a for d in self.profiles.values() for a in ("--csca", str(d / "csca.pem"))]
        self.daemon = Daemon(root, self.pcscd.env, ["--no-embedded-softhsm", *csca]).start()
        self.reader = self.pcscd.readers[0]

    def client(self) -> Client:
        return self.daemon.client()

    def card_present(self, reader: str) -> bool:
        readers = self.client().call("readers.list")["readers"]
        return any(r["name"] == reader and r["cardPresent"] for r in readers)

    def chip(self, profile: str, *args: str, slot: int = 0) -> EmulatedPassport:
        """Inserts the emulated passport into vpcd reader `slot` (0 or 1) while the `with` block runs."""
        return EmulatedPassport(self.pcscd, self.profiles[profile], self.card_present, *args, slot=slot,
                                log=self.root / f"emulator-{profile}-{slot}.log")

    def stop(self) -> None:
        self.daemon.stop()
        self.pcscd.stop()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("documents"))
    yield lab
    lab.stop()


# --- independent passive authentication -------------------------------------------------------------------------

def independent_passive_authentication(sod: bytes, groups: dict[int, bytes], csca_pem: bytes) -> None:
    """Asserts SOD hashes, SOD signature and DS → CSCA chain without Tessera code."""
    assert sod[0] == 0x77
    content, _ = der_decoder.decode(sod[_tlv_header_length(sod):], asn1Spec=rfc5652.ContentInfo())
    signed, _ = der_decoder.decode(content["content"], asn1Spec=rfc5652.SignedData())
    econtent = bytes(signed["encapContentInfo"]["eContent"])
    lds, _ = der_decoder.decode(econtent)  # LDSSecurityObject: version, hashAlgorithm, dataGroupHashValues
    hash_oid = str(lds[1][0])
    assert hash_oid == "2.16.840.1.101.3.4.2.1", hash_oid  # SHA-256 (what make-profile issues)
    listed = {int(item[0]): bytes(item[1]) for item in lds[2]}
    for n, data in groups.items():
        assert listed[n] == hashlib.sha256(data).digest(), f"DG{n} hash"
    ds = x509.load_der_x509_certificate(der_encoder.encode(signed["certificates"][0]["certificate"]))
    signer = signed["signerInfos"][0]
    attrs = univ.SetOf(componentType=rfc5652.Attribute())
    for i, a in enumerate(signer["signedAttrs"]):
        attrs.setComponentByPosition(i, a)
    signed_bytes = der_encoder.encode(attrs)
    for a in signer["signedAttrs"]:
        if str(a["attrType"]) == "1.2.840.113549.1.9.4":
            digest, _ = der_decoder.decode(a["attrValues"][0])
            assert bytes(digest) == hashlib.sha256(econtent).digest()
    ds.public_key().verify(bytes(signer["signature"]), signed_bytes, ec.ECDSA(hashes.SHA256()))
    csca = x509.load_pem_x509_certificate(csca_pem)
    ds.verify_directly_issued_by(csca)


def _tlv_header_length(b: bytes) -> int:
    if b[1] < 0x80:
        return 2
    return 2 + (b[1] & 0x7F)


# --- tests -------------------------------------------------------------------------------------------------------

def check_result(result: dict, profile: pathlib.Path, protocol: str) -> None:
    assert result["accessProtocol"] == protocol
    m = result["mrz"]
    assert (m["documentCode"], m["issuingState"], m["documentNumber"]) == ("P", "UTO", "L898902C3")
    assert (m["primaryIdentifier"], m["secondaryIdentifier"], m["nationality"]) == ("ERIKSSON", "ANNA MARIA", "UTO")
    assert (m["dateOfBirth"], m["sex"], m["dateOfExpiry"], m["optionalData"]) == ("740812", "F", "120415", "ZE184226B")
    groups = {k: unb64u(v) for k, v in result["dataGroups"].items()}
    assert {"COM", "DG1", "DG2", "SOD"} <= set(groups)
    assert groups["DG1"] == (profile / "DG1.bin").read_bytes()
    assert groups["DG2"] == (profile / "DG2.bin").read_bytes()
    assert groups["SOD"] == (profile / "EF.SOD.bin").read_bytes()
    face = result["faceImages"][0]
    assert face["mimeType"] == "image/jpeg"
    photo = unb64u(face["data"])
    assert photo[:3] == b"\xff\xd8\xff" and photo in groups["DG2"]
    pa = result["passiveAuthentication"]
    assert pa["status"] == "valid", pa
    assert pa["signature"] == "valid" and pa["certificateChain"] == "valid"
    assert pa["dataGroupHashes"]["DG1"] == "valid" and pa["dataGroupHashes"]["DG2"] == "valid"
    numbered = {int(k[2:]): v for k, v in groups.items() if k.startswith("DG")}
    independent_passive_authentication(groups["SOD"], numbered, (profile / "csca.pem").read_bytes())
    stats = result["stats"]
    assert stats["apdus"] > 5 and stats["bytes"] > sum(len(v) for v in groups.values()) and stats["durationMs"] > 0


def test_bac_read_verifies(lab):
    with lab.chip("bac"):
        result = lab.client().call("documents.read", {"mrz": MRZ})
    check_result(result, lab.profiles["bac"], "BAC")
    assert "activeAuthentication" not in result


@pytest.mark.parametrize("profile", ["p256", "brainpool", "aes256"])
def test_pace_read_verifies(lab, profile):
    with lab.chip(profile):
        c = lab.client()
        result = c.call("documents.read", {"documentNumber": "l898902c3", "dateOfBirth": "740812", "dateOfExpiry": "120415"})
        check_result(result, lab.profiles[profile], "PACE")
        if profile == "p256":
            by_can = c.call("documents.read", {"can": "123456", "reader": lab.reader, "dataGroups": ["DG1"]})
            assert by_can["accessProtocol"] == "PACE"
            # Only DG1 is returned (DG14 with the security infos too), but every group EF.SOD lists was
            # read and hash-checked.
            assert set(by_can["dataGroups"]) == {"COM", "DG1", "DG14", "SOD"}
            assert by_can["faceImages"] == []
            assert by_can["passiveAuthentication"]["status"] == "valid"
            assert by_can["passiveAuthentication"]["dataGroupHashes"] == {
                f"DG{n}": "valid" for n in (1, 2, 11, 12, 14)}
            # PACE-GM without DG15: nothing proves the chip holds the issuer's keys.
            assert (by_can["verdict"], by_can["chipAuthenticity"]) == ("unverified", "notSupported")


def test_active_authentication(lab):
    with lab.chip("aa"):
        result = lab.client().call("documents.read", {"mrz": MRZ})
    check_result(result, lab.profiles["aa"], "PACE")
    assert result["activeAuthentication"]["status"] == "valid"
    assert result["passiveAuthentication"]["dataGroupHashes"]["DG15"] == "valid"
    assert (result["verdict"], result["reasons"], result["chipAuthenticity"]) == ("authentic", [], "valid")


# Chips that copied a genuine document's data but not its private keys (tessera lab emulate-passport clone
# options): profile, emulator arguments, expected reasons.
CLONES = {
    "dg15-dropped-from-com": ("aa", ["--com-omit-dg", "15", "--no-aa-key"], ["ACTIVE_AUTH_INVALID"]),
    "dg15-answers-6a82": ("aa", ["--com-omit-dg", "15", "--missing-dg", "15", "--no-aa-key"],
                          ["DATA_GROUP_MISSING", "ACTIVE_AUTH_INVALID"]),
    "wrong-aa-key": ("aa", ["--wrong-aa-key"], ["ACTIVE_AUTH_INVALID"]),
    "cardaccess-hides-cam": ("cam", ["--hide-cam"], ["CHIP_AUTH_INVALID"]),
}


@pytest.mark.parametrize("clone", CLONES)
def test_cloned_chip_is_not_authentic(lab, clone):
    profile, args, reasons = CLONES[clone]
    with lab.chip(profile, *args):
        result = lab.client().call("documents.read", {"mrz": MRZ, "dataGroups": ["DG1"]})
    pa = result["passiveAuthentication"]
    # The copied data is the issuer's: the SOD signature and chain are fine.
    assert pa["signature"] == "valid" and pa["certificateChain"] == "valid", pa
    assert result["verdict"] == "notAuthentic", result["reasons"]
    assert result["reasons"] == reasons
    assert result["chipAuthenticity"] == "invalid"
    if clone == "dg15-answers-6a82":
        assert pa["status"] == "invalid" and pa["missingDataGroups"] == [15], pa
        assert result["activeAuthentication"]["status"] == "invalid"
    elif clone == "cardaccess-hides-cam":
        # Access ran PACE-GM (all EF.CardAccess offered); DG14 announces CAM, so it was run and failed.
        assert result["paceMapping"] == "GM" and result["chipAuthentication"]["status"] == "invalid"
        assert pa["status"] == "valid"
    else:
        assert pa["status"] == "valid" and pa["dataGroupHashes"]["DG15"] == "valid"
        assert result["activeAuthentication"]["status"] == "invalid"
    # allowClonable accepts chips without anti-clone support, never a chip that fails one.
    with lab.chip(profile, *args):
        allowed = lab.client().call("documents.read", {"mrz": MRZ, "dataGroups": ["DG1"], "allowClonable": True})
    assert allowed["verdict"] == "notAuthentic"


def test_bac_only_chip_without_dg15_is_clonable(lab):
    with lab.chip("bac"):
        c = lab.client()
        plain = c.call("documents.read", {"mrz": MRZ})
        allowed = c.call("documents.read", {"mrz": MRZ, "allowClonable": True})
    assert plain["passiveAuthentication"]["status"] == "valid"
    assert (plain["verdict"], plain["reasons"], plain["chipAuthenticity"]) == (
        "unverified", ["CHIP_AUTH_NOT_SUPPORTED"], "notSupported")
    assert (allowed["verdict"], allowed["reasons"], allowed["chipAuthenticity"]) == (
        "authentic", ["CHIP_AUTH_NOT_SUPPORTED"], "notSupported")
    with lab.chip("bac"):
        with pytest.raises(RPCError) as e:
            lab.client().call("documents.read", {"mrz": MRZ, "allowClonable": "yes"})
    assert e.value.code == "INVALID_INPUT"


def test_pace_cam_authenticates_the_chip(lab):
    profile = lab.profiles["cam"]
    with lab.chip("cam"):
        result = lab.client().call("documents.read", {"mrz": MRZ})
    check_result(result, profile, "PACE")
    # A chip offering GM and CAM is read with CAM; DG14 (not requested) is read to check it.
    assert result["paceMapping"] == "CAM"
    assert result["chipAuthentication"] == {"status": "valid", "keyId": 13, "mechanism": "PACE-CAM"}, result["chipAuthentication"]
    assert result["passiveAuthentication"]["dataGroupHashes"]["DG14"] == "valid"
    dg14 = unb64u(result["dataGroups"]["DG14"])
    assert dg14 == (profile / "DG14.bin").read_bytes()
    # Independently: DG14 carries the public key of the chip's static key (ca-key-13.bin, brainpoolP256r1).
    secret = int.from_bytes((profile / "ca-key-13.bin").read_bytes(), "big")
    public = ec.derive_private_key(secret, ec.BrainpoolP256R1()).public_key().public_numbers()
    point = b"\x04" + public.x.to_bytes(32, "big") + public.y.to_bytes(32, "big")
    assert b"\x03\x42\x00" + point in dg14

    with lab.chip("cam", "--tamper-cam"):
        tampered = lab.client().call("documents.read", {"mrz": MRZ})
    assert tampered["passiveAuthentication"]["status"] == "valid"
    assert tampered["chipAuthentication"]["status"] == "invalid"
    assert tampered["chipAuthentication"]["reason"]


def test_tampered_data_group_is_invalid(lab):
    with lab.chip("p256", "--tamper-dg", "2"):
        result = lab.client().call("documents.read", {"mrz": MRZ})
    pa = result["passiveAuthentication"]
    assert pa["status"] == "invalid"
    assert pa["dataGroupHashes"] == {"DG1": "valid", "DG2": "invalid", "DG11": "valid", "DG12": "valid", "DG14": "valid"}
    assert pa["signature"] == "valid"
    assert "DG2" in pa["reason"]
    assert result["verdict"] == "notAuthentic" and "PASSIVE_AUTH_INVALID" in result["reasons"]
    with pytest.raises(AssertionError):
        groups = {int(k[2:]): unb64u(v) for k, v in result["dataGroups"].items() if k.startswith("DG")}
        independent_passive_authentication(unb64u(result["dataGroups"]["SOD"]), groups,
                                           (lab.profiles["p256"] / "csca.pem").read_bytes())


def test_without_csca_the_document_is_unverified(lab):
    plain = Daemon(lab.root, lab.pcscd.env, ["--no-embedded-softhsm"], name="no-csca").start()
    try:
        with lab.chip("bac"):
            result = plain.client().call("documents.read", {"mrz": MRZ})
    finally:
        plain.stop()
    pa = result["passiveAuthentication"]
    assert pa["status"] == "unverified"
    assert pa["certificateChain"] == "noTrustAnchor"
    assert pa["signature"] == "valid"
    assert pa["dataGroupHashes"] == {"DG1": "valid", "DG2": "valid", "DG11": "valid", "DG12": "valid"}
    assert pa["reason"]
    assert result["verdict"] == "unverified"
    assert result["reasons"] == ["NO_TRUST_ANCHOR", "CHIP_AUTH_NOT_SUPPORTED"]


@pytest.mark.parametrize("profile", ["bac", "p256"])
def test_wrong_mrz_is_access_denied(lab, profile):
    with lab.chip(profile):
        c = lab.client()
        with pytest.raises(RPCError) as e:
            c.call("documents.read", WRONG_MRZ_FIELDS)
        assert e.value.code == "ACCESS_DENIED"
        # The chip and the daemon are fine afterwards.
        assert c.call("documents.read", {"mrz": MRZ})["passiveAuthentication"]["status"] == "valid"


def test_bad_keys_and_readers(lab):
    c = lab.client()
    for params, code in [
        ({"mrz": "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C37UTO7408122F1204159ZE184226B<<<<<10"}, "MRZ_INVALID"),
        ({"can": "12"}, "INVALID_INPUT"),
        ({"mrz": MRZ, "can": "123456"}, "INVALID_INPUT"),
        ({}, "INVALID_INPUT"),
        ({"documentNumber": "L898902C3", "dateOfBirth": "741312", "dateOfExpiry": "120415"}, "INVALID_INPUT"),
        ({"mrz": MRZ, "dataGroups": ["DG17"]}, "INVALID_INPUT"),
        ({"mrz": MRZ, "reader": "No Such Reader 00 00"}, "NO_READER"),
        ({"mrz": MRZ, "reader": lab.pcscd.readers[1]}, "NO_CARD"),
        ({"mrz": MRZ}, "NO_CARD"),
    ]:
        with pytest.raises(RPCError) as e:
            c.call("documents.read", params)
        assert e.value.code == code, (params, e.value)


def test_card_removed_mid_read_then_next_read_works(lab):
    with lab.chip("big", "--remove-after-apdus", "40") as chip:
        c = lab.client()
        with pytest.raises(RPCError) as e:
            c.call("documents.read", {"mrz": MRZ})
        assert e.value.code == "CARD_REMOVED", e.value
        assert e.value.data["retryable"] is True
        # Other clients are served meanwhile, and the re-inserted card reads fine.
        assert lab.client().call("daemon.status")["version"]
        chip.wait_card(True)
        result = c.call("documents.read", {"mrz": MRZ})
        check_result(result, lab.profiles["big"], "PACE")


def test_progress_notifications_and_large_dg2(lab):
    with lab.chip("big"):
        c = lab.client()
        result = c.call("documents.read", {"mrz": MRZ})
    dg2 = len(unb64u(result["dataGroups"]["DG2"]))
    assert dg2 > 20000
    events = [n["params"] for n in c.notifications if n["method"] == "documents.progress"]
    steps = [e["step"] for e in events]
    assert steps[0] == "connect" and "access" in steps and steps[-1] == "verify"
    assert steps.index("access") < steps.index("read") < steps.index("verify")
    dg2_events = [e for e in events if e.get("file") == "DG2"]
    assert len(dg2_events) >= dg2 // 0xDF
    assert dg2_events[-1]["bytesRead"] == dg2_events[-1]["totalBytes"] == dg2
    done = [e["bytesRead"] for e in dg2_events]
    assert done == sorted(done)
    # Short APDUs of 0xDF bytes: at least ceil(size / 0xDF) READ BINARY for DG2 alone.
    assert result["stats"]["apdus"] >= dg2 // 0xDF


def test_extended_length_read(lab):
    with lab.chip("big"):
        c = lab.client()
        short = c.call("documents.read", {"mrz": MRZ})
        extended = c.call("documents.read", {"mrz": MRZ, "extendedLength": True})
    assert extended["dataGroups"] == short["dataGroups"]
    assert extended["stats"]["apdus"] < short["stats"]["apdus"] - 80


def test_readers_list_and_status(lab):
    before = {r["name"]: r for r in lab.client().call("readers.list")["readers"]}
    assert set(lab.pcscd.readers) <= set(before)
    assert all(r["stack"] == "pcsc" and r["cardPresent"] is False for r in before.values())
    with lab.chip("bac", slot=1):
        readers = {r["name"]: r for r in lab.client().call("readers.list")["readers"]}
        assert readers[lab.pcscd.readers[1]]["cardPresent"] is True
        assert unb64u(readers[lab.pcscd.readers[1]]["atr"])[0] == 0x3B
        assert readers[lab.pcscd.readers[0]]["cardPresent"] is False
        status = lab.client().call("daemon.status")
        assert {r["name"]: r["cardPresent"] for r in status["readers"]}[lab.pcscd.readers[1]] is True
        # Without a reader name the first reader holding a card is used.
        assert lab.client().call("documents.read", {"mrz": MRZ})["reader"] == lab.pcscd.readers[1]


def test_cli_passport_read(lab, tmp_path):
    photo = tmp_path / "face.jpg"
    with lab.chip("aa"):
        human = cli(lab.daemon, "passport", "read", "--mrz", MRZ, "--save-photo", str(photo))
        as_json = cli(lab.daemon, "passport", "read", "--number", "L898902C3", "--birth", "740812",
                      "--expiry", "120415", "--json")
        readers = cli(lab.daemon, "passport", "readers")
    out = human.stdout
    assert "ERIKSSON, ANNA MARIA" in out
    assert "L898902C3" in out and "740812" in out and "120415" in out
    assert "Access protocol:  PACE" in out
    assert "Passive authentication: VALID" in out
    assert "SOD signature:      valid" in out and "certificate chain:  valid" in out
    assert "DG2 hash:" in out and "Active authentication: VALID" in out
    # Issue #36: "Files read" named the returned groups only while hashes of DG11/DG12 (read to check them) were
    # listed as valid: it names every file read, the hashed groups among them.
    files_read = re.search(r"^Files read: +(.*)$", out, re.M).group(1).split()
    hashed = re.findall(r"^ +(DG\d+) hash: +valid", out, re.M)
    assert hashed and set(hashed) <= set(files_read), (files_read, hashed)
    assert {"COM", "SOD", "DG1"} <= set(files_read)
    assert "Verdict:          AUTHENTIC" in out and "Chip authenticity: valid" in out
    result = json.loads(as_json.stdout)
    check_result(result, lab.profiles["aa"], "PACE")
    assert photo.read_bytes() == unb64u(result["faceImages"][0]["data"])
    assert photo.read_bytes()[:2] == b"\xff\xd8"
    assert "card present" in readers.stdout
    with lab.chip("aa", "--wrong-aa-key"):
        clone = cli(lab.daemon, "passport", "read", "--mrz", MRZ).stdout
    assert "Verdict:          NOT AUTHENTIC (ACTIVE_AUTH_INVALID)" in clone and "Active authentication: INVALID" in clone
    with lab.chip("bac"):
        bac = cli(lab.daemon, "passport", "read", "--mrz", MRZ).stdout
        bac_allowed = cli(lab.daemon, "passport", "read", "--mrz", MRZ, "--allow-clonable").stdout
    assert "Verdict:          UNVERIFIED (CHIP_AUTH_NOT_SUPPORTED)" in bac and "Chip authenticity: notSupported" in bac
    assert "Verdict:          AUTHENTIC (CHIP_AUTH_NOT_SUPPORTED)" in bac_allowed
    wrong = cli(lab.daemon, "passport", "read", "--can", "123456", check=False)
    assert wrong.returncode == 2 and "NO_CARD" in wrong.stderr
    usage = cli(lab.daemon, "passport", "read", "--can", "123456", "--mrz", MRZ, check=False)
    assert usage.returncode != 0 and "exactly one" in usage.stderr
