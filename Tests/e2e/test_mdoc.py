"""ISO/IEC 18013-5 mdoc against independent implementations, through the `tessera` CLI (no daemon needed):
- Tessera as issuer: `tessera lab make-mdoc` output verified by pymdoccbor (issuerAuth signature, x5chain to the
  IACA, MSO digests of every element).
- Tessera as reader: an mDL built here with python cryptography + cbor2 only (IACA, document signer, MSO,
  COSE_Sign1 issuerAuth, deviceSignature over DeviceAuthentication) checked by `tessera mdoc verify`; tampered
  element, expired MSO, wrong device key and wrong IACA each come out notAuthentic with their reason.
- Reader ↔ holder over pcscd + vpcd: the daemon's `mdoc.read` against `tessera lab emulate-mdoc` (NFC static
  handover, session, ENVELOPE extended and chained with GET RESPONSE)."""
from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import subprocess
import time

import cbor2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID
from pymdoccbor.mdoc.verifier import MdocCbor

from tessera_harness import BIN, PCSCD, Daemon, RPCError, stop_process

DOCTYPE = "org.iso.18013.5.1.mDL"
NS = "org.iso.18013.5.1"


def tessera(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "tessera"), *args], capture_output=True, text=True, timeout=120)


def make_mdoc(directory: pathlib.Path, *args: str) -> pathlib.Path:
    out = tessera("lab", "make-mdoc", str(directory), *args)
    assert out.returncode == 0, out.stderr
    return directory


def verify(response: pathlib.Path, iaca: pathlib.Path, transcript: pathlib.Path | None) -> tuple[int, dict]:
    args = ["mdoc", "verify", str(response), "--iaca", str(iaca)]
    if transcript is not None:
        args += ["--session-transcript", str(transcript)]
    out = tessera(*args)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)["documents"][0]


# --- Tessera issues, pymdoccbor verifies ------------------------------------------------------------------------

def test_pymdoccbor_verifies_the_mdoc_tessera_issues(tmp_path):
    d = make_mdoc(tmp_path / "mdl")
    iaca = x509.load_pem_x509_certificate((d / "iaca.pem").read_bytes())
    mdoc = MdocCbor()
    mdoc.loads((d / "device-response.cbor").read_bytes())
    assert mdoc.verify(trusted_root_certs=[iaca]) is True
    assert mdoc.documents_invalid == []
    doc = mdoc.documents[0]
    assert doc.hash_verification["valid"] is True
    assert mdoc.disclosure_map[NS]["family_name"] == "MUSTERMANN"
    assert len(mdoc.disclosure_map[NS]) == 15


def test_pymdoccbor_rejects_the_mdoc_under_another_iaca(tmp_path):
    d = make_mdoc(tmp_path / "mdl")
    other = make_mdoc(tmp_path / "other")
    mdoc = MdocCbor()
    mdoc.loads((d / "device-response.cbor").read_bytes())
    assert mdoc.verify(trusted_root_certs=[x509.load_pem_x509_certificate((other / "iaca.pem").read_bytes())]) is False


def test_tessera_verifies_its_own_lab_mdoc_with_a_profile_portrait(tmp_path):
    profile = tmp_path / "passport"
    out = tessera("lab", "make-profile", str(profile), "--mrz",
                  "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10")
    assert out.returncode == 0, out.stderr
    d = make_mdoc(tmp_path / "mdl", "--profile", str(profile), "--photo-padding", "20000")
    rc, doc = verify(d / "device-response.cbor", d / "iaca.pem", d / "session-transcript.cbor")
    assert rc == 0, doc
    assert doc["verdict"] == "authentic" and doc["reasons"] == []
    assert doc["deviceAuthentication"] == "deviceSignature"
    assert doc["elements"][NS]["family_name"] == "ERIKSSON"
    assert doc["elements"][NS]["birth_date"] == "1974-08-12"
    # Without the SessionTranscript the device is not checked: unverified, not authentic.
    rc, doc = verify(d / "device-response.cbor", d / "iaca.pem", None)
    assert rc == 1 and doc["verdict"] == "unverified" and doc["reasons"] == ["DEVICE_AUTH_NOT_CHECKED"]


# --- The harness issues with cryptography + cbor2, Tessera verifies ---------------------------------------------

def name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "UT"), x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_pki(now: dt.datetime):
    iaca_key = ec.generate_private_key(ec.SECP256R1())
    ds_key = ec.generate_private_key(ec.SECP256R1())
    ski = x509.SubjectKeyIdentifier.from_public_key(iaca_key.public_key())
    iaca = (x509.CertificateBuilder().subject_name(name("harness IACA")).issuer_name(name("harness IACA"))
            .public_key(iaca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=3)).not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(ski, critical=False)
            .sign(iaca_key, hashes.SHA256()))
    ds = (x509.CertificateBuilder().subject_name(name("harness DS")).issuer_name(iaca.subject)
          .public_key(ds_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(days=3)).not_valid_after(now + dt.timedelta(days=365))
          .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
          .sign(iaca_key, hashes.SHA256()))
    return iaca, ds, ds_key


def raw_signature(key: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def cose_key(public: ec.EllipticCurvePublicKey) -> dict:
    n = public.public_numbers()
    return {1: 2, -1: 1, -2: n.x.to_bytes(32, "big"), -3: n.y.to_bytes(32, "big")}


def tdate(t: dt.datetime) -> cbor2.CBORTag:
    return cbor2.CBORTag(0, t.strftime("%Y-%m-%dT%H:%M:%SZ"))


def harness_mdoc(tmp: pathlib.Path, *, valid_until_days: float = 30, tamper: bool = False,
                 wrong_device_key: bool = False,
                 replayed: bool = False) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """Writes response.cbor, iaca.pem and transcript.cbor; returns their paths. `replayed`: the deviceSignature is
    one the device made in an earlier session, with that session's DeviceAuthenticationBytes attached."""
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    iaca, ds, ds_key = make_pki(now)
    device_key = ec.generate_private_key(ec.SECP256R1())
    elements = [("family_name", "HARNESS"), ("given_name", "PY"), ("document_number", "H1234567"),
                ("birth_date", cbor2.CBORTag(1004, "1990-01-02")), ("portrait", os.urandom(2048))]
    items, digests = [], {}
    for digest_id, (ident, value) in enumerate(elements):
        item = cbor2.dumps({"digestID": digest_id, "random": os.urandom(16), "elementIdentifier": ident,
                            "elementValue": value})
        tagged = cbor2.CBORTag(24, item)
        digests[digest_id] = hashes.Hash(hashes.SHA256())
        digests[digest_id].update(cbor2.dumps(tagged))
        digests[digest_id] = digests[digest_id].finalize()
        items.append(tagged)
    mso = {"version": "1.0", "digestAlgorithm": "SHA-256", "valueDigests": {NS: digests},
           "deviceKeyInfo": {"deviceKey": cose_key(device_key.public_key())}, "docType": DOCTYPE,
           "validityInfo": {"signed": tdate(now - dt.timedelta(days=2)), "validFrom": tdate(now - dt.timedelta(days=2)),
                            "validUntil": tdate(now + dt.timedelta(days=valid_until_days))}}
    payload = cbor2.dumps(cbor2.CBORTag(24, cbor2.dumps(mso)))
    protected = cbor2.dumps({1: -7})
    issuer_auth = [protected, {33: ds.public_bytes(serialization.Encoding.DER)}, payload,
                   raw_signature(ds_key, cbor2.dumps(["Signature1", protected, b"", payload]))]
    if tamper:
        changed = cbor2.loads(items[0].value)
        changed["elementValue"] = "FORGED"
        items[0] = cbor2.CBORTag(24, cbor2.dumps(changed))
    # A SessionTranscript of a static NFC handover shape: [DeviceEngagementBytes, EReaderKeyBytes, [Hs, null]].
    def session() -> list:
        e_device = ec.generate_private_key(ec.SECP256R1()).public_key()
        e_reader = ec.generate_private_key(ec.SECP256R1()).public_key()
        engagement = cbor2.dumps({0: "1.0", 1: [1, cbor2.CBORTag(24, cbor2.dumps(cose_key(e_device)))]})
        return [cbor2.CBORTag(24, engagement), cbor2.CBORTag(24, cbor2.dumps(cose_key(e_reader))),
                [b"\xd1\x02\x00", None]]
    transcript = session()
    device_ns = cbor2.dumps({})
    device_auth = cbor2.dumps(cbor2.CBORTag(24, cbor2.dumps(
        ["DeviceAuthentication", session() if replayed else transcript, DOCTYPE, cbor2.CBORTag(24, device_ns)])))
    signing_key = ec.generate_private_key(ec.SECP256R1()) if wrong_device_key else device_key
    device_signature = [protected, {}, device_auth if replayed else None,
                        raw_signature(signing_key, cbor2.dumps(["Signature1", protected, b"", device_auth]))]
    response = {"version": "1.0", "documents": [{
        "docType": DOCTYPE,
        "issuerSigned": {"nameSpaces": {NS: items}, "issuerAuth": issuer_auth},
        "deviceSigned": {"nameSpaces": cbor2.CBORTag(24, device_ns), "deviceAuth": {"deviceSignature": device_signature}},
    }], "status": 0}
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "response.cbor").write_bytes(cbor2.dumps(response))
    (tmp / "iaca.pem").write_bytes(iaca.public_bytes(serialization.Encoding.PEM))
    (tmp / "transcript.cbor").write_bytes(cbor2.dumps(cbor2.CBORTag(24, cbor2.dumps(transcript))))
    return tmp / "response.cbor", tmp / "iaca.pem", tmp / "transcript.cbor"


def test_tessera_verifies_an_mdoc_made_by_cryptography_and_cbor2(tmp_path):
    response, iaca, transcript = harness_mdoc(tmp_path)
    rc, doc = verify(response, iaca, transcript)
    assert rc == 0, doc
    assert doc["verdict"] == "authentic"
    assert doc["checks"] == {"issuerSignature": "valid", "certificateChain": "valid", "digests": "valid",
                             "validity": "valid", "deviceAuthentication": "valid"}
    assert doc["elements"][NS]["family_name"] == "HARNESS"
    assert doc["elements"][NS]["birth_date"] == "1990-01-02"


def test_a_tampered_element_is_a_digest_mismatch(tmp_path):
    rc, doc = verify(*harness_mdoc(tmp_path, tamper=True))
    assert rc == 1
    assert doc["verdict"] == "notAuthentic" and doc["reasons"] == ["DIGEST_MISMATCH"]
    assert doc["digestFailures"] == [f"{NS}/family_name"]


def test_an_expired_mso_is_not_authentic(tmp_path):
    rc, doc = verify(*harness_mdoc(tmp_path, valid_until_days=-1 / 24))
    assert rc == 1
    assert doc["verdict"] == "notAuthentic" and doc["reasons"] == ["MSO_EXPIRED"]


def test_a_signature_by_another_device_key_is_not_authentic(tmp_path):
    rc, doc = verify(*harness_mdoc(tmp_path, wrong_device_key=True))
    assert rc == 1
    assert doc["verdict"] == "notAuthentic" and doc["reasons"] == ["DEVICE_AUTH_INVALID"]


def test_a_replayed_device_signature_with_its_payload_attached_is_not_authentic(tmp_path):
    # Issue #27: a cloned mdoc replays a deviceSignature from an earlier session with that session's
    # DeviceAuthenticationBytes attached; the verifier used the attached payload and said authentic. ISO/IEC 18013-5
    # §9.1.3.6 detaches it: a deviceSignature that carries a payload is invalid.
    rc, doc = verify(*harness_mdoc(tmp_path, replayed=True))
    assert rc == 1
    assert doc["verdict"] == "notAuthentic" and doc["reasons"] == ["DEVICE_AUTH_INVALID"]
    assert doc["checks"]["deviceAuthentication"] == "invalid"


def test_another_iaca_is_not_authentic(tmp_path):
    response, _, transcript = harness_mdoc(tmp_path / "a")
    _, other_iaca, _ = harness_mdoc(tmp_path / "b")
    rc, doc = verify(response, other_iaca, transcript)
    assert rc == 1
    assert doc["verdict"] == "notAuthentic" and doc["reasons"] == ["UNTRUSTED_ISSUER"]


# --- The daemon reads an emulated mdoc over pcscd + vpcd ---------------------------------------------------------

class EmulatedMDoc:
    """`tessera lab emulate-mdoc MDL` in the vpcd reader at `port` for the duration of a `with` block; `wait_card(present)`
    waits until the daemon sees the card come and go."""

    def __init__(self, root: pathlib.Path, port: int, mdl: pathlib.Path, wait_card, *args: str):
        self.root, self.port, self.mdl, self.wait_card, self.args = root, port, mdl, wait_card, args

    def __enter__(self) -> "EmulatedMDoc":
        self.log = open(self.root / "emulate-mdoc.log", "ab")
        self.proc = subprocess.Popen([str(BIN / "tessera"), "lab", "emulate-mdoc", str(self.mdl),
                                      "--vpcd", f"127.0.0.1:{self.port}", *self.args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("inserted"), f"emulate-mdoc did not start: {line!r}"
        self.wait_card(True)
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)
        self.log.close()
        self.wait_card(False)


class MDocLab:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.pcscd = PCSCD(root).start()
        self.mdl = make_mdoc(root / "mdl", "--photo-padding", "20000")
        self.daemon = Daemon(root, self.pcscd.env, ["--no-embedded-softhsm", "--iaca", str(self.mdl / "iaca.pem")]).start()
        self.reader = self.pcscd.readers[0]

    def card_present(self) -> bool:
        readers = self.daemon.client().call("readers.list")["readers"]
        return any(r["name"] == self.reader and r["cardPresent"] for r in readers)

    def wait_card(self, present: bool) -> None:
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.card_present() == present:
                return
            time.sleep(0.05)
        raise TimeoutError(f"card never became {'present' if present else 'absent'}")

    def holder(self, *args: str) -> "EmulatedMDoc":
        return EmulatedMDoc(self.root, self.pcscd.port, self.mdl, self.wait_card, *args)

    def stop(self) -> None:
        self.daemon.stop()
        self.pcscd.stop()


@pytest.fixture(scope="module")
def mdoc_lab(tmp_path_factory):
    lab = MDocLab(tmp_path_factory.mktemp("mdoc"))
    yield lab
    lab.stop()


@pytest.mark.parametrize("extended", [True, False])
def test_daemon_reads_an_mdoc_over_nfc(mdoc_lab, extended):
    with mdoc_lab.holder():
        c = mdoc_lab.daemon.client()
        result = c.call("mdoc.read", {"reader": mdoc_lab.reader, "extendedLength": extended})
    # mdoc.progress: each phase once, in order, before the result; APDUs and bytes grow to the statistics.
    events = [n["params"] for n in c.notifications if n["method"] == "mdoc.progress"]
    assert [e["phase"] for e in events] == ["engagement", "session", "request", "response", "verify"]
    assert events[0]["apdus"] == 0 and events[1]["apdus"] >= 6
    assert [e["apdus"] for e in events] == sorted(e["apdus"] for e in events)
    assert [e["bytes"] for e in events] == sorted(e["bytes"] for e in events)
    assert events[-1]["apdus"] == result["statistics"]["apdus"] and events[-1]["bytes"] == result["statistics"]["bytes"]
    assert events[3]["bytes"] > 20000
    doc = result["documents"][0]
    assert doc["verdict"] == "authentic", doc["reasons"]
    assert doc["deviceAuthentication"] == "deviceSignature"
    assert set(doc["elements"][NS]) == {"portrait", "family_name", "given_name", "birth_date", "document_number",
                                        "expiry_date", "issuing_country"}
    assert len(base64_decode(doc["elements"][NS]["portrait"])) >= 19000
    stats = result["statistics"]
    assert stats["responseBytes"] > 20000
    if extended:
        # SELECT NDEF, SELECT CC, READ CC, SELECT NDEF file, READ NLEN, READ (≥ 1), SELECT mdoc, 2 ENVELOPEs.
        assert stats["apdus"] <= 11
    else:
        assert stats["apdus"] >= stats["responseBytes"] // 256


def test_daemon_reads_chosen_elements_and_the_cli_saves_the_portrait(mdoc_lab, tmp_path):
    with mdoc_lab.holder():
        result = mdoc_lab.daemon.client().call("mdoc.read", {"elements": ["family_name", f"{NS}/age_over_18"]})
        photo = tmp_path / "face.jpg"
        out = subprocess.run([str(BIN / "tessera"), "--socket", mdoc_lab.daemon.socket, "mdoc", "read",
                              "--reader", mdoc_lab.reader, "--save-photo", str(photo)],
                             capture_output=True, text=True, timeout=60)
    assert result["documents"][0]["elements"][NS] == {"family_name": "MUSTERMANN", "age_over_18": True}
    assert out.returncode == 0, out.stderr
    assert "authentic" in out.stdout and "family_name" in out.stdout
    assert photo.stat().st_size >= 19000 and photo.read_bytes()[:2] == b"\xff\xd8"


def test_a_holder_requiring_reader_auth_releases_nothing(mdoc_lab):
    # The daemon sends no readerAuth yet: a holder that requires one ends the session with status 20.
    with mdoc_lab.holder("--reader-root", str(mdoc_lab.mdl / "iaca.pem")):
        with pytest.raises(RPCError) as failure:
            mdoc_lab.daemon.client().call("mdoc.read", {"reader": mdoc_lab.reader})
    assert failure.value.code == "CARD_ERROR"


def base64_decode(text: str) -> bytes:
    import base64
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def make_reader_pki(directory: pathlib.Path, eku: bool = True) -> pathlib.Path:
    """A reader root and a reader authentication certificate (EKU 1.0.18013.5.1.6 unless `eku` is false) made with
    cryptography."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    root_key = ec.generate_private_key(ec.SECP256R1())
    reader_key = ec.generate_private_key(ec.SECP256R1())
    root = (x509.CertificateBuilder().subject_name(name("reader root")).issuer_name(name("reader root"))
            .public_key(root_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(root_key, hashes.SHA256()))
    reader = (x509.CertificateBuilder().subject_name(name("kiosk reader")).issuer_name(root.subject)
              .public_key(reader_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
              .add_extension(x509.ExtendedKeyUsage([x509.ObjectIdentifier("1.0.18013.5.1.6" if eku else "1.3.6.1.5.5.7.3.2")]),
                             critical=True)
              .sign(root_key, hashes.SHA256()))
    (directory / "root.pem").write_bytes(root.public_bytes(serialization.Encoding.PEM))
    (directory / "reader.pem").write_bytes(reader.public_bytes(serialization.Encoding.PEM))
    (directory / "reader-key.pem").write_bytes(reader_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return directory


def test_a_request_with_trusted_reader_auth_is_served_and_an_untrusted_one_is_not(mdoc_lab, tmp_path):
    trusted = make_reader_pki(tmp_path / "trusted")
    other = make_reader_pki(tmp_path / "other")
    daemon = Daemon(mdoc_lab.root, mdoc_lab.pcscd.env, [
        "--no-embedded-softhsm", "--iaca", str(mdoc_lab.mdl / "iaca.pem"),
        "--mdoc-reader-key", str(trusted / "reader-key.pem"), "--mdoc-reader-cert", str(trusted / "reader.pem")],
        name="reader-auth").start()
    try:
        with mdoc_lab.holder("--reader-root", str(trusted / "root.pem")):
            result = daemon.client().call("mdoc.read", {"reader": mdoc_lab.reader, "elements": ["family_name"]})
        assert result["documents"][0]["verdict"] == "authentic"
        assert result["documents"][0]["elements"][NS] == {"family_name": "MUSTERMANN"}
        with mdoc_lab.holder("--reader-root", str(other / "root.pem")):
            with pytest.raises(RPCError) as failure:
                daemon.client().call("mdoc.read", {"reader": mdoc_lab.reader})
        assert failure.value.code == "CARD_ERROR"
    finally:
        daemon.stop()


def test_the_lab_holder_refuses_a_reader_certificate_without_the_reader_eku(mdoc_lab, tmp_path):
    # Issue #27: the lab holder (--reader-root) took any certificate the root issued. ISO/IEC 18013-5 Annex B.1.7: the
    # mdoc reader authentication certificate carries EKU 1.0.18013.5.1.6; this one is a TLS client certificate.
    plain = make_reader_pki(tmp_path / "no-eku", eku=False)
    daemon = Daemon(mdoc_lab.root, mdoc_lab.pcscd.env, [
        "--no-embedded-softhsm", "--iaca", str(mdoc_lab.mdl / "iaca.pem"),
        "--mdoc-reader-key", str(plain / "reader-key.pem"), "--mdoc-reader-cert", str(plain / "reader.pem")],
        name="reader-no-eku").start()
    try:
        with mdoc_lab.holder("--reader-root", str(plain / "root.pem")):
            with pytest.raises(RPCError) as failure:
                daemon.client().call("mdoc.read", {"reader": mdoc_lab.reader})
        assert failure.value.code == "CARD_ERROR"
    finally:
        daemon.stop()
