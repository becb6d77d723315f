"""`mdoc.respond`: ISO/IEC 18013-7 Annex C over the socket (the browser Digital Credentials API path of vendor document
001; docs/MDOC.md "Annex C", docs/API.md). The verifier side is built here from python `cryptography` and `cbor2`
only: an HPKE recipient key and EncryptionInfo (`annexc_hpke.py`), the dcapi SessionTranscript computed here, a
DeviceRequest whose readerAuth is signed by a reader key under a root whose key identifier the registration lists.
The holder is a SoftHSM2-held mDL (`tessera lab make-mdoc --token --register`); approval comes from a second
connection of the same uid. The response is opened with python HPKE and checked by `tessera mdoc verify` with the
SessionTranscript, by pymdoccbor (issuer side), and by python `cryptography` (the deviceSignature over
DeviceAuthentication built here)."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time

import cbor2
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from pymdoccbor.mdoc.verifier import MdocCbor

from annexc_hpke import SUITE, b64url, session_transcript, unb64url
from annexc_hpke import main as annexc
from tessera_harness import BIN, SOFTHSM_MODULE, Daemon, RPCError, SoftHSM
from test_mdoc_holder import DOCTYPE, NS, PIN, Presentation, forged_reader, reader_pki

ORIGIN = "https://verifier.example"


class Verifier:
    """A web verifier: its HPKE key and EncryptionInfo, and a reader key and certificate under a root."""

    def __init__(self, pki: pathlib.Path):
        made = annexc(["reader"])
        self.hpke_key = ec.derive_private_key(int(made["privateKey"], 16), ec.SECP256R1())
        self.encryption_info = made["encryptionInfo"]
        self.reader_key = serialization.load_pem_private_key((pki / "reader-key.pem").read_bytes(), None)
        self.reader_cert = x509.load_pem_x509_certificate((pki / "reader.pem").read_bytes())

    def transcript(self, origin: str = ORIGIN) -> bytes:
        return session_transcript(self.encryption_info, origin)

    def request(self, elements: list[str], *, origin: str = ORIGIN, signed: bool = True, doc_type: str = DOCTYPE,
                signed_for: str | None = None, attached: bool = False) -> dict:
        """The request data {deviceRequest, encryptionInfo}; readerAuth signed over ReaderAuthentication with the
        SessionTranscript of `signed_for` (default: `origin`), that payload carried in the COSE_Sign1 when
        `attached`."""
        items = cbor2.dumps({"docType": doc_type, "nameSpaces": {NS: {e: False for e in elements}}})
        doc = {"itemsRequest": cbor2.CBORTag(24, items)}
        if signed:
            transcript = cbor2.loads(self.transcript(signed_for or origin))
            reader_auth_bytes = cbor2.dumps(cbor2.CBORTag(24, cbor2.dumps(
                ["ReaderAuthentication", transcript, cbor2.CBORTag(24, items)])))
            protected = cbor2.dumps({1: -7})
            der = self.reader_key.sign(cbor2.dumps(["Signature1", protected, b"", reader_auth_bytes]),
                                       ec.ECDSA(hashes.SHA256()))
            r, s = decode_dss_signature(der)
            doc["readerAuth"] = [protected, {33: self.reader_cert.public_bytes(serialization.Encoding.DER)},
                                 reader_auth_bytes if attached else None, r.to_bytes(32, "big") + s.to_bytes(32, "big")]
        device_request = cbor2.dumps({"version": "1.0", "docRequests": [doc]})
        return {"deviceRequest": b64url(device_request), "encryptionInfo": self.encryption_info}

    def open(self, response: str, origin: str = ORIGIN) -> bytes:
        """The DeviceResponse inside a base64url EncryptedResponse (python HPKE)."""
        tag, body = cbor2.loads(unb64url(response))
        assert tag == "dcapi" and set(body) == {"enc", "cipherText"} and len(body["enc"]) == 65, body.keys()
        return SUITE.decrypt(body["enc"] + body["cipherText"], self.hpke_key, info=self.transcript(origin))


class RespondLab:
    """One daemon with a SoftHSM2 token holding two mDLs of the same docType: `foreign-mdl` (registered first,
    listing the other root) and `trusted-mdl` (listing the trusted root)."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.softhsm = SoftHSM(root)
        self.softhsm.add_token("holder", pin=PIN)
        trusted_dir, self.trusted_id = reader_pki(root / "trusted")
        other_dir, self.other_id = reader_pki(root / "other")
        self.daemon = Daemon(root, self.softhsm.env,
                             ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                              "--mdoc-reader-root", str(trusted_dir / "root.pem"),
                              "--mdoc-reader-root", str(other_dir / "root.pem")]).start()
        self.token = self.daemon.client().call("tokens.list")["tokens"][0]["id"]
        self.foreign = self.make("foreign", "foreign-mdl", self.other_id)
        self.mdl = self.make("mdl", "trusted-mdl", self.trusted_id)
        self.verifier = Verifier(trusted_dir)
        self.stranger = Verifier(other_dir)
        self.forger = Verifier(forged_reader(root / "forged", trusted_dir))

    def make(self, directory: str, document_id: str, authority_key_id: str) -> pathlib.Path:
        d = self.root / directory
        out = subprocess.run([str(BIN / "tessera"), "--socket", self.daemon.socket, "lab", "make-mdoc", str(d),
                              "--token", self.token, "--pin", PIN, "--register", "--authority-key-id", authority_key_id,
                              "--document-id", document_id],
                             capture_output=True, text=True, timeout=120, env={**os.environ, **self.softhsm.env})
        assert out.returncode == 0, out.stderr
        return d

    def respond(self, request: dict, **params) -> Presentation:
        return Presentation(self.daemon, {"request": request, "origin": ORIGIN, "approvalTimeoutSeconds": 30,
                                          **params}, method="mdoc.respond")

    def refused(self, request, **params) -> dict:
        """The error of an mdoc.respond that must end without asking the user."""
        call = self.respond(request, **params)
        kind, error = call.next_event()
        call.sock.close()
        assert kind == "error", (kind, error)
        return error["data"]

    def approve(self, presentation_id: str, approve: bool = True, **params) -> dict:
        return self.daemon.client().call("mdoc.approve", {"presentationId": presentation_id, "approve": approve,
                                                          **params})


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = RespondLab(tmp_path_factory.mktemp("respond"))
    yield lab
    lab.daemon.stop()


def device_public_key(lab) -> ec.EllipticCurvePublicKey:
    made = json.loads((lab.mdl / "device-key.json").read_text())
    cose = cbor2.loads(unb64url(made["deviceKey"]))
    return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + cose[-2] + cose[-3])


def check_device_signature(device_response: bytes, transcript: bytes, key: ec.EllipticCurvePublicKey) -> None:
    """deviceSignature (COSE_Sign1 ES256, detached) over DeviceAuthenticationBytes built here; raises
    InvalidSignature when it does not verify."""
    document = cbor2.loads(device_response)["documents"][0]
    signed = document["deviceSigned"]
    protected, _, payload, signature = signed["deviceAuth"]["deviceSignature"]
    assert payload is None and cbor2.loads(protected) == {1: -7}
    device_auth = cbor2.dumps(cbor2.CBORTag(24, cbor2.dumps(
        ["DeviceAuthentication", cbor2.loads(transcript), document["docType"], signed["nameSpaces"]])))
    assert isinstance(signed["nameSpaces"], cbor2.CBORTag) and signed["nameSpaces"].tag == 24
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    key.verify(der, cbor2.dumps(["Signature1", protected, b"", device_auth]), ec.ECDSA(hashes.SHA256()))


def tessera_verify(lab, tmp_path: pathlib.Path, device_response: bytes, transcript: bytes) -> dict:
    (tmp_path / "response.cbor").write_bytes(device_response)
    (tmp_path / "transcript.cbor").write_bytes(cbor2.dumps(cbor2.CBORTag(24, transcript)))
    out = subprocess.run([str(BIN / "tessera"), "mdoc", "verify", str(tmp_path / "response.cbor"),
                          "--iaca", str(lab.mdl / "iaca.pem"), "--session-transcript", str(tmp_path / "transcript.cbor")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)["documents"][0]


def test_approved_elements_are_released_encrypted_to_the_verifier(lab, tmp_path):
    ui = lab.daemon.client()  # a station UI client of the same uid
    ui.call("enrollment.subscribe")
    requested = ["family_name", "given_name", "birth_date", "portrait"]
    call = lab.respond(lab.verifier.request(requested))
    ask = call.wait("mdoc.request")
    # Registered first, but under another root: the trusted registration of that docType is chosen.
    assert ask["documentIdentifier"] == "trusted-mdl" and ask["docType"] == DOCTYPE
    assert ask["origin"] == ORIGIN and ask["reader"]["authorityKeyIdentifier"] == lab.trusted_id
    assert "kiosk reader" in ask["reader"]["subject"]
    assert [e["identifier"] for e in ask["elements"]] == requested
    assert ui.wait_notification("mdoc.request") == ask
    approved = lab.approve(ask["presentationId"], pin=PIN,
                           elements=[f"{NS}/family_name", f"{NS}/birth_date", f"{NS}/age_over_18"])
    assert approved["released"] == [f"{NS}/family_name", f"{NS}/birth_date"]
    result = call.finish()
    assert result["documentIdentifier"] == "trusted-mdl"
    assert result["released"] == [f"{NS}/family_name", f"{NS}/birth_date"]
    device_response = lab.verifier.open(result["response"])
    transcript = lab.verifier.transcript()
    # Independently: python checks the deviceSignature, Tessera's offline verifier the whole document.
    check_device_signature(device_response, transcript, device_public_key(lab))
    with pytest.raises(InvalidSignature):
        check_device_signature(device_response, lab.verifier.transcript("https://other.example"),
                               device_public_key(lab))
    doc = tessera_verify(lab, tmp_path, device_response, transcript)
    assert doc["verdict"] == "authentic", doc["reasons"]
    assert doc["deviceAuthentication"] == "deviceSignature"
    assert set(doc["elements"][NS]) == {"family_name", "birth_date"}
    # pymdoccbor: issuerAuth to the IACA and the digests of what was released (it does not check DeviceAuth).
    mdoc = MdocCbor()
    mdoc.loads(device_response)
    assert mdoc.verify(trusted_root_certs=[x509.load_pem_x509_certificate((lab.mdl / "iaca.pem").read_bytes())])
    assert mdoc.documents_invalid == [] and mdoc.documents[0].hash_verification["valid"] is True
    assert set(mdoc.disclosure_map[NS]) == {"family_name", "birth_date"}
    names = cbor2.loads(device_response)["documents"][0]["issuerSigned"]["nameSpaces"][NS]
    assert sorted(cbor2.loads(item.value)["elementIdentifier"] for item in names) == ["birth_date", "family_name"]
    # Only the origin it was made for opens it.
    with pytest.raises(Exception):
        lab.verifier.open(result["response"], "https://other.example")
    with pytest.raises(RPCError) as e:
        lab.approve(ask["presentationId"])
    assert e.value.code == "MDOC_PRESENTATION_NOT_PENDING"


def test_a_request_without_reader_auth_gets_nothing_and_is_not_shown(lab):
    error = lab.refused(lab.verifier.request(["family_name"], signed=False))
    assert error["code"] == "MDOC_READER_NOT_TRUSTED" and error["reason"] == "missing"


def test_reader_auth_over_another_origins_transcript_is_refused(lab):
    request = lab.verifier.request(["family_name"], signed_for="https://evil.example")
    error = lab.refused(request)
    assert error["code"] == "MDOC_READER_NOT_TRUSTED" and error["reason"] == "invalid"
    # The same request presented as coming from the origin it was signed for is offered.
    call = lab.respond(request, origin="https://evil.example")
    ask = call.wait("mdoc.request")
    assert ask["origin"] == "https://evil.example"
    lab.approve(ask["presentationId"], approve=False)
    call.next_event()
    call.sock.close()


def test_a_real_verifiers_reader_auth_with_its_payload_attached_is_refused(lab):
    # Issue #27: a hostile origin reuses a real verifier's readerAuth (with the ReaderAuthenticationBytes it signed
    # attached) beside its own EncryptionInfo. The attached payload was verified instead of this request's, so the
    # user was asked on the real verifier's name. ISO/IEC 18013-5 §9.1.4 detaches readerAuth's payload.
    real = lab.verifier.request(["family_name", "portrait"], attached=True)
    hostile = {**real, "encryptionInfo": lab.stranger.encryption_info}
    error = lab.refused(hostile, origin="https://evil.example")
    assert error["code"] == "MDOC_READER_NOT_TRUSTED" and error["reason"] == "invalid", error
    # Attached is invalid even where the signature is right.
    error = lab.refused(real)
    assert error["code"] == "MDOC_READER_NOT_TRUSTED" and error["reason"] == "invalid", error


def test_a_forged_reader_leaf_naming_the_trusted_root_is_refused(lab):
    # Issue #27: a leaf signed by the forger's own key, its authority key identifier copied from the trusted root.
    error = lab.refused(lab.forger.request(["family_name"]))
    assert error["code"] == "MDOC_READER_NOT_TRUSTED" and error["reason"] == "untrusted", error
    error = lab.refused(lab.forger.request(["family_name"]), documentIdentifier="trusted-mdl")
    assert error["code"] == "MDOC_READER_NOT_TRUSTED" and error["reason"] == "untrusted", error


def test_a_reader_under_a_root_not_listed_gets_nothing(lab):
    # Automatic choice: the registration listing the stranger's root answers it.
    call = lab.respond(lab.stranger.request(["family_name"]))
    ask = call.wait("mdoc.request")
    assert ask["documentIdentifier"] == "foreign-mdl" and ask["reader"]["authorityKeyIdentifier"] == lab.other_id
    lab.approve(ask["presentationId"], approve=False)
    call.next_event()
    call.sock.close()
    # Named: trusted-mdl does not list that root.
    error = lab.refused(lab.stranger.request(["family_name"]), documentIdentifier="trusted-mdl")
    assert error["code"] == "MDOC_READER_NOT_TRUSTED" and error["reason"] == "untrusted"
    assert error["authorityKeyIdentifier"] == lab.other_id


def test_another_doctype_is_not_offered(lab):
    error = lab.refused(lab.verifier.request(["family_name"], doc_type="org.example.other"))
    assert error["code"] == "MDOC_NOT_OFFERED" and error["reason"] == "docType"
    error = lab.refused(lab.verifier.request(["family_name"]), documentIdentifier="nope")
    assert error["code"] == "MDOC_REGISTRATION_NOT_FOUND"


def test_declined_releases_nothing(lab):
    call = lab.respond(lab.verifier.request(["family_name"]))
    ask = call.wait("mdoc.request")
    assert lab.approve(ask["presentationId"], approve=False) == {
        "presentationId": ask["presentationId"], "approved": False, "released": []}
    kind, error = call.next_event()
    call.sock.close()
    assert kind == "error" and error["data"]["code"] == "MDOC_NOT_APPROVED" and error["data"]["reason"] == "declined"


def test_timeout_and_mdoc_stop_end_a_pending_request(lab):
    call = lab.respond(lab.verifier.request(["family_name"]), approvalTimeoutSeconds=1)
    call.wait("mdoc.request")
    kind, error = call.next_event()
    assert kind == "error" and error["data"]["code"] == "MDOC_NOT_APPROVED" and error["data"]["reason"] == "timeout"
    call.sock.close()
    call = lab.respond(lab.verifier.request(["family_name"]))
    ask = call.wait("mdoc.request")
    assert lab.daemon.client().call("mdoc.stop", {"documentIdentifier": "trusted-mdl"})["stopped"] == 1
    kind, error = call.next_event()
    assert kind == "error" and error["data"]["code"] == "MDOC_NOT_APPROVED" and error["data"]["reason"] == "ended"
    call.sock.close()
    # A caller that goes away (closes with the mdoc.request unread: the daemon's read fails, ECONNRESET) ends its
    # request too; the UI client sees the request.
    ui = lab.daemon.client()
    ui.call("enrollment.subscribe")
    call = lab.respond(lab.verifier.request(["family_name"]))
    ask = ui.wait_notification("mdoc.request")
    time.sleep(0.3)  # the notification reaches the caller's socket too
    call.sock.close()
    time.sleep(1)  # the daemon sees the reset
    with pytest.raises(RPCError) as e:
        lab.approve(ask["presentationId"], approve=False)
    assert e.value.code == "MDOC_PRESENTATION_NOT_PENDING"


@pytest.mark.parametrize("mutate, field", [
    (lambda r: {**r, "deviceRequest": "not base64url!"}, "deviceRequest"),
    (lambda r: {**r, "deviceRequest": b64url(cbor2.dumps({"version": "1.0", "docRequests": []}))}, "deviceRequest"),
    (lambda r: {**r, "encryptionInfo": b64url(cbor2.dumps(["dcapi", {"nonce": b"short"}]))}, "encryptionInfo"),
    (lambda r: {"deviceRequest": r["deviceRequest"]}, "encryptionInfo"),
    (lambda r: "a string", "request"),
])
def test_a_malformed_request_is_refused(lab, mutate, field):
    error = lab.refused(mutate(lab.verifier.request(["family_name"])))
    assert error["code"] == "MDOC_REQUEST_MALFORMED" and error["field"] == field, error


def test_a_malformed_origin_is_refused(lab):
    for origin in ["https://verifier.example/path", "verifier.example", ""]:
        error = lab.refused(lab.verifier.request(["family_name"]), origin=origin)
        assert error["code"] == "MDOC_REQUEST_MALFORMED" and error["field"] == "origin", (origin, error)


def test_the_cli_responds(lab, tmp_path):
    (tmp_path / "request.json").write_text(json.dumps(lab.verifier.request(["given_name", "portrait"])))
    cli = [str(BIN / "tessera"), "--socket", lab.daemon.socket, "mdoc"]
    proc = subprocess.Popen([*cli, "respond", "--request", str(tmp_path / "request.json"), "--origin", ORIGIN,
                             "--document-id", "trusted-mdl", "--out", str(tmp_path / "response.cbor")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = json.loads(proc.stdout.readline())
        assert line["event"] == "mdoc.request" and line["params"]["origin"] == ORIGIN, line
        out = subprocess.run([*cli, "approve", line["params"]["presentationId"], "--pin-stdin",
                              "--element", f"{NS}/given_name"], input=PIN + "\n", capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == f"released {NS}/given_name", out
        result = json.loads(proc.stdout.readline())
        assert proc.wait(30) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert result["released"] == [f"{NS}/given_name"]
    assert (tmp_path / "response.cbor").read_bytes() == unb64url(result["response"])
    device_response = lab.verifier.open(result["response"])
    check_device_signature(device_response, lab.verifier.transcript(), device_public_key(lab))
    doc = tessera_verify(lab, tmp_path, device_response, lab.verifier.transcript())
    assert doc["verdict"] == "authentic" and doc["elements"][NS] == {"given_name": "ERIKA"}
    # A request that does not parse: exit status 2, the code on stderr, nothing on stdout.
    (tmp_path / "bad.json").write_text(json.dumps({"deviceRequest": "x", "encryptionInfo": "y"}))
    bad = subprocess.run([*cli, "respond", "--request", str(tmp_path / "bad.json"), "--origin", ORIGIN],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "MDOC_REQUEST_MALFORMED" in bad.stderr and bad.stdout == "", bad


def test_one_connection_runs_a_bounded_number_of_waiting_requests(lab):
    """A connection may hold 8 mdoc sessions waiting for the user; a ninth is refused BUSY at once."""
    request = lab.verifier.request(["family_name"])
    call = lab.respond(request)
    for i in range(2, 10):
        call.sock.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": "mdoc.respond", "params": {
            "request": request, "origin": ORIGIN, "approvalTimeoutSeconds": 30}}).encode() + b"\n")
    asked, errors = [], []
    while len(asked) + len(errors) < 9:
        kind, params = call.next_event()
        if kind == "mdoc.request":
            asked.append(params["presentationId"])
        elif kind == "error":
            errors.append(params["data"]["code"])
    assert len(asked) == 8 and errors == ["BUSY"]
    call.sock.close()
    # Closing the connection ends its sessions; another connection is asked as before.
    time.sleep(1)
    again = lab.respond(request)
    ask = again.wait("mdoc.request")
    lab.approve(ask["presentationId"], approve=False)
    assert again.next_event()[0] == "error"
    again.sock.close()
