"""The mdoc holder with its device key on a SoftHSM2 token (issue 12, docs/MDOC.md "Holder"), end to end over a
private pcscd + vpcd: `tessera lab make-mdoc --token … --register` (mdoc.createDeviceKey, issuance, mdoc.register),
`mdoc.present` in the vpcd reader and the same daemon's `mdoc.read` (readerAuth with --mdoc-reader-key/-cert,
verified against --iaca) reading it. Released only after `mdoc.approve` by the presenting uid, only the approved
elements, with a deviceSignature by the token key; nothing for a request without readerAuth, from a root not in
supportedAuthorityKeyIdentifiers, or declined; another uid cannot approve; an expired registration is not offered."""
from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tessera_harness import BIN, NOBODY, PCSCD, ROOT, SOFTHSM_MODULE, Daemon, RPCError, SoftHSM, calls_as
from tessera_harness import let_other_uids_reach, reached, release

DOCTYPE = "org.iso.18013.5.1.mDL"
NS = "org.iso.18013.5.1"
PIN = "1234"


def reader_pki(directory: pathlib.Path) -> tuple[pathlib.Path, str]:
    """A reader root (with a subject key identifier) and a reader certificate it issued (with the authority key
    identifier naming it); returns the directory and the root's key identifier, hex."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    root_key = ec.generate_private_key(ec.SECP256R1())
    reader_key = ec.generate_private_key(ec.SECP256R1())
    ski = x509.SubjectKeyIdentifier.from_public_key(root_key.public_key())
    name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "UT"),  # noqa: E731
                                 x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    root = (x509.CertificateBuilder().subject_name(name("reader root")).issuer_name(name("reader root"))
            .public_key(root_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(ski, critical=False)
            .sign(root_key, hashes.SHA256()))
    reader = (x509.CertificateBuilder().subject_name(name("kiosk reader")).issuer_name(root.subject)
              .public_key(reader_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
              .add_extension(x509.ExtendedKeyUsage([x509.ObjectIdentifier("1.0.18013.5.1.6")]), critical=True)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
              .sign(root_key, hashes.SHA256()))
    (directory / "root.pem").write_bytes(root.public_bytes(serialization.Encoding.PEM))
    (directory / "reader.pem").write_bytes(reader.public_bytes(serialization.Encoding.PEM))
    (directory / "reader-key.pem").write_bytes(reader_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return directory, ski.digest.hex()


def make_mdoc_reader(directory: pathlib.Path) -> tuple[pathlib.Path, str]:
    """`tessera lab make-mdoc-reader DIR` (docs/MDOC.md, "Holder in the lab"): the reader root, the reader
    certificate and key it issued; returns the directory and the root's key identifier, hex."""
    out = subprocess.run([str(BIN / "tessera"), "lab", "make-mdoc-reader", str(directory), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert made["root"] == str(directory / "root.pem") and made["readerKey"] == str(directory / "reader-key.pem")
    assert (directory / "authority-key-id").read_text().strip() == made["authorityKeyIdentifier"]
    assert oct((directory / "reader-key.pem").stat().st_mode & 0o777) == "0o600"
    reader = x509.load_pem_x509_certificate((directory / "reader.pem").read_bytes())
    eku = reader.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert eku.critical and [u.dotted_string for u in eku.value] == ["1.0.18013.5.1.6"]
    return directory, made["authorityKeyIdentifier"]


def forged_reader(directory: pathlib.Path, trusted: pathlib.Path) -> pathlib.Path:
    """A reader certificate made with the forger's own key that names the trusted root: its issuer is the root's
    subject and its authority key identifier the root's subject key identifier (copied), EKU 1.0.18013.5.1.6."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    root = x509.load_pem_x509_certificate((trusted / "root.pem").read_bytes())
    ski = root.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    forger_key = ec.generate_private_key(ec.SECP256R1())
    reader_key = ec.generate_private_key(ec.SECP256R1())
    reader = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "UT"),
                                       x509.NameAttribute(NameOID.COMMON_NAME, "kiosk reader")]))
              .issuer_name(root.subject)
              .public_key(reader_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
              .add_extension(x509.ExtendedKeyUsage([x509.ObjectIdentifier("1.0.18013.5.1.6")]), critical=True)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
              .sign(forger_key, hashes.SHA256()))
    (directory / "reader.pem").write_bytes(reader.public_bytes(serialization.Encoding.PEM))
    (directory / "reader-key.pem").write_bytes(reader_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return directory


class Presentation:
    """A long-running holder call (`mdoc.present`, `mdoc.respond`) on its own connection: the call is sent, its
    notifications and result are read here."""

    def __init__(self, daemon: Daemon, params: dict, method: str = "mdoc.present"):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(90)
        self.sock.connect(daemon.socket)
        self.buf = b""
        self.result: dict | None = None
        self.error: dict | None = None
        self.sock.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                                      "params": params}).encode() + b"\n")

    def _message(self) -> dict:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def next_event(self) -> tuple[str, dict]:
        """The next mdoc.* notification (method, params), or ("result", …) / ("error", …) when the call ended
        (broadcasts such as tokens.changed are skipped)."""
        m = self._message()
        while "id" not in m and not m["method"].startswith("mdoc."):
            m = self._message()
        if "id" in m:
            if "error" in m:
                self.error = m["error"]
                return "error", m["error"]
            self.result = m["result"]
            return "result", m["result"]
        return m["method"], m["params"]

    def wait(self, method: str) -> dict:
        while True:
            kind, params = self.next_event()
            if kind == method:
                return params
            assert kind not in ("result", "error"), f"{method} never came: {kind} {params}"

    def finish(self) -> dict:
        while self.result is None and self.error is None:
            self.next_event()
        self.sock.close()
        assert self.error is None, self.error
        return self.result


class Read(threading.Thread):
    """`mdoc.read` by a daemon, in the background (it waits for the holder's approval)."""

    def __init__(self, daemon: Daemon, reader: str, elements: list[str]):
        super().__init__(daemon=True)
        self.daemon_, self.reader, self.elements = daemon, reader, elements
        self.result: dict | None = None
        self.error: RPCError | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.daemon_.client().call("mdoc.read", {"reader": self.reader, "elements": self.elements})
        except RPCError as e:
            self.error = e

    def outcome(self):
        self.join(90)
        assert not self.is_alive(), "mdoc.read did not end"
        return self.result, self.error


class HolderLab:
    def __init__(self, root: pathlib.Path, base: list[str] | None = None, env: dict | None = None):
        self.root = root
        self.pcscd = PCSCD(root).start()
        self.softhsm = SoftHSM(root)
        self.softhsm.add_token("holder", pin=PIN)
        # The trusted reader as the docs make it (`tessera lab make-mdoc-reader`); another root made here.
        self.trusted, self.trusted_id = make_mdoc_reader(root / "trusted")
        self.other, self.other_id = reader_pki(root / "other")
        self.base = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"] if base is None else base
        self.env = {**self.softhsm.env, **self.pcscd.env, **(env or {})}
        self.daemon = Daemon(root, self.env, self.base).start()
        self.token = self.daemon.client().call("tokens.list")["tokens"][0]["id"]
        # Issued for token keys by the lab (one IACA each), registered with the daemon.
        self.mdl = self.make("mdl", "trusted-mdl", self.trusted_id)
        self.foreign = self.make("foreign", "foreign-mdl", self.other_id)
        past = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.expired = self.make("expired", "expired-mdl", self.trusted_id, "--invalidation-date", past)
        # The same daemon (same state and token) as a reader with readerAuth and the IACAs.
        self.reader_args = ["--iaca", str(self.mdl / "iaca.pem"), "--iaca", str(self.foreign / "iaca.pem"),
                            "--mdoc-reader-key", str(self.trusted / "reader-key.pem"),
                            "--mdoc-reader-cert", str(self.trusted / "reader.pem"),
                            "--mdoc-reader-root", str(self.trusted / "root.pem"),
                            "--mdoc-reader-root", str(self.other / "root.pem")]
        self.restart()
        self.reader = self.pcscd.readers[0]

    def restart(self, *args: str) -> None:
        """The same daemon (state, token) with the reader's settings and `args`."""
        self.daemon.stop()
        self.daemon = Daemon(self.root, self.env, [*self.base, *self.reader_args, *args]).start()

    def make(self, directory: str, document_id: str, authority_key_id: str, *args: str) -> pathlib.Path:
        d = self.root / directory
        out = subprocess.run([str(BIN / "tessera"), "--socket", self.daemon.socket, "lab", "make-mdoc", str(d),
                              "--token", self.token, "--pin", PIN, "--register", "--authority-key-id", authority_key_id,
                              "--document-id", document_id, *args],
                             capture_output=True, text=True, timeout=120, env={**os.environ, **self.softhsm.env})
        assert out.returncode == 0, out.stderr
        return d

    def card_present(self, daemon: Daemon) -> bool:
        readers = daemon.client().call("readers.list")["readers"]
        return any(r["name"] == self.reader and r["cardPresent"] for r in readers)

    def wait_card(self, daemon: Daemon, present: bool = True) -> None:
        deadline = time.time() + 15
        while self.card_present(daemon) != present:
            assert time.time() < deadline, f"the vpcd reader never became {'full' if present else 'empty'}"
            time.sleep(0.05)

    def present(self, document_id: str, **params) -> Presentation:
        self.wait_card(self.daemon, present=False)  # the previous presentation's card is gone
        p = Presentation(self.daemon, {"documentIdentifier": document_id, "device": f"127.0.0.1:{self.pcscd.port}",
                                       "durationSeconds": 60, "approvalTimeoutSeconds": 30, **params})
        p.wait("mdoc.presenting")
        return p

    def stop(self) -> None:
        self.daemon.stop()
        self.pcscd.stop()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = HolderLab(tmp_path_factory.mktemp("holder"))
    yield lab
    lab.stop()


def test_device_key_is_a_cose_key_on_the_token_and_never_an_ssh_key(lab):
    made = json.loads((lab.mdl / "device-key.json").read_text())
    assert made["tokenId"] == lab.token
    import base64
    import cbor2
    key = cbor2.loads(base64.urlsafe_b64decode(made["deviceKey"] + "=" * (-len(made["deviceKey"]) % 4)))
    assert key[1] == 2 and key[-1] == 1 and len(key[-2]) == 32 and len(key[-3]) == 32
    assert not (lab.mdl / "device-key.pem").exists()
    keys = lab.daemon.client().call("ssh.list")["keys"]
    assert all(k["keyId"] != made["keyId"] for k in keys)


def test_registrations_and_what_is_offered(lab):
    regs = {r["documentIdentifier"]: r for r in lab.daemon.client().call("mdoc.registrations")["registrations"]}
    assert regs["trusted-mdl"]["offered"] is True and regs["trusted-mdl"]["docType"] == DOCTYPE
    assert regs["trusted-mdl"]["supportedAuthorityKeyIdentifiers"] == [lab.trusted_id]
    assert regs["trusted-mdl"]["tokenId"] == lab.token and "validUntil" in regs["trusted-mdl"]
    assert regs["expired-mdl"]["offered"] is False and "invalidationDate" in regs["expired-mdl"]
    with pytest.raises(RPCError) as e:
        lab.daemon.client().call("mdoc.present", {"documentIdentifier": "expired-mdl",
                                                  "device": f"127.0.0.1:{lab.pcscd.port}"})
    assert e.value.code == "MDOC_NOT_OFFERED"


def test_another_uids_registration_does_not_exist_for_it(lab):
    """Registrations are their creator's (docs/API.md, "Owners"): to another uid root's registration answers exactly
    as one never made, and is neither listed nor removed."""
    open_socket_to_others(lab)
    _, out = calls_as(NOBODY, lab.daemon.socket, [
        ("mdoc.registrations", {}),
        ("mdoc.removeRegistration", {"documentIdentifier": "trusted-mdl"}),
        ("mdoc.removeRegistration", {"documentIdentifier": "never-made-mdl"}),
    ])
    assert out[0]["result"]["registrations"] == []
    assert out[1]["code"] == out[2]["code"] == "MDOC_REGISTRATION_NOT_FOUND", out
    assert out[1]["data"]["documentIdentifier"] == "trusted-mdl"
    assert {k: v for k, v in out[1]["data"].items() if k != "documentIdentifier"} == \
        {k: v for k, v in out[2]["data"].items() if k != "documentIdentifier"}
    regs = {r["documentIdentifier"] for r in lab.daemon.client().call("mdoc.registrations")["registrations"]}
    assert "trusted-mdl" in regs


def test_register_checks_the_device_key_the_doctype_and_duplicates(lab):
    c = lab.daemon.client()
    issued = (lab.mdl / "issuer-signed.cbor").read_bytes()
    import base64
    b64 = base64.urlsafe_b64encode(issued).rstrip(b"=").decode()
    other_key = c.call("mdoc.createDeviceKey", {"tokenId": lab.token, "pin": PIN})
    with pytest.raises(RPCError) as e:
        c.call("mdoc.register", {"docType": DOCTYPE, "issuerSigned": b64, "tokenId": lab.token,
                                 "keyId": other_key["keyId"], "supportedAuthorityKeyIdentifiers": [lab.trusted_id]})
    assert e.value.code == "MDOC_DEVICE_KEY_MISMATCH"
    key_id = json.loads((lab.mdl / "device-key.json").read_text())["keyId"]
    with pytest.raises(RPCError) as e:
        c.call("mdoc.register", {"docType": "org.example.other", "issuerSigned": b64, "tokenId": lab.token,
                                 "keyId": key_id})
    assert e.value.code == "MDOC_DOCTYPE_MISMATCH"
    with pytest.raises(RPCError) as e:
        c.call("mdoc.register", {"documentIdentifier": "trusted-mdl", "docType": DOCTYPE, "issuerSigned": b64,
                                 "tokenId": lab.token, "keyId": key_id})
    assert e.value.code == "MDOC_REGISTRATION_EXISTS"
    # A second registration of the same mDL, generated id; removed again (the key stays on the token).
    reg = c.call("mdoc.register", {"docType": DOCTYPE, "issuerSigned": b64, "tokenId": lab.token, "keyId": key_id})
    assert len(reg["documentIdentifier"]) == 36 and reg["supportedAuthorityKeyIdentifiers"] == []
    assert c.call("mdoc.removeRegistration", {"documentIdentifier": reg["documentIdentifier"]})["removed"] is True
    ids = [r["documentIdentifier"] for r in c.call("mdoc.registrations")["registrations"]]
    assert reg["documentIdentifier"] not in ids and "trusted-mdl" in ids
    with pytest.raises(RPCError) as e:
        c.call("mdoc.removeRegistration", {"documentIdentifier": reg["documentIdentifier"]})
    assert e.value.code == "MDOC_REGISTRATION_NOT_FOUND"


def open_socket_to_others(lab) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root to act as another uid (CI runs as root)")
    let_other_uids_reach(pathlib.Path(lab.daemon.socket).parent)
    os.chmod(lab.daemon.socket, 0o666)


def test_approved_elements_only_are_released_with_the_token_signature(lab):
    ui = lab.daemon.client()  # a station UI client of the same uid
    ui.call("enrollment.subscribe")
    p = lab.present("trusted-mdl")
    lab.wait_card(lab.daemon)
    read = Read(lab.daemon, lab.reader, ["family_name", "given_name", "birth_date", "portrait"])
    request = p.wait("mdoc.request")
    assert request["documentIdentifier"] == "trusted-mdl" and request["docType"] == DOCTYPE
    assert request["reader"]["authorityKeyIdentifier"] == lab.trusted_id
    assert "Tessera Test mdoc reader" in request["reader"]["subject"]
    assert [e["identifier"] for e in request["elements"]] == ["family_name", "given_name", "birth_date", "portrait"]
    assert ui.wait_notification("mdoc.request")["presentationId"] == request["presentationId"]
    # Another uid cannot answer it (and its try does not use it up).
    open_socket_to_others(lab)
    _, out = calls_as(NOBODY, lab.daemon.socket, [("mdoc.approve", {"presentationId": request["presentationId"],
                                                                    "approve": True})])
    assert out[0].get("code") == "UNAUTHORIZED", out
    approved = lab.daemon.client().call("mdoc.approve", {
        "presentationId": request["presentationId"], "approve": True, "pin": PIN,
        "elements": [f"{NS}/family_name", f"{NS}/birth_date", f"{NS}/age_over_18"]})
    assert approved == {"presentationId": request["presentationId"], "approved": True,
                        "released": [f"{NS}/family_name", f"{NS}/birth_date"]}
    result, error = read.outcome()
    assert error is None, error
    doc = result["documents"][0]
    assert doc["verdict"] == "authentic", doc["reasons"]
    assert doc["deviceAuthentication"] == "deviceSignature"
    assert set(doc["elements"][NS]) == {"family_name", "birth_date"}
    summary = p.finish()
    assert summary["reason"] == "sessionEnded" and summary["presentations"][0]["outcome"] == "released"
    with pytest.raises(RPCError) as e:
        lab.daemon.client().call("mdoc.approve", {"presentationId": request["presentationId"], "approve": True})
    assert e.value.code == "MDOC_PRESENTATION_NOT_PENDING"


@pytest.fixture(scope="module")
def desktop_lab(tmp_path_factory):
    """The holder lab as on a desktop (issue #36): no --pkcs11-module, so p11-kit's registry with OpenSC (a PC/SC
    client of the same pcscd) and SoftHSM2 (its token through SOFTHSM2_CONF); the pause point after a response is
    made armed for the outcome test."""
    for module in ("opensc-pkcs11.module", "softhsm2.module"):
        assert (pathlib.Path("/usr/share/p11-kit/modules") / module).exists(), \
            f"p11-kit does not register {module} (apt-get install opensc-pkcs11 softhsm2)"
    root = tmp_path_factory.mktemp("desktop-holder")
    (root / "pauses").mkdir()
    lab = HolderLab(root, base=["--no-embedded-softhsm"],
                    env={"TESSERA_FAILPOINTS": f"mdoc.responseMade=pause:{root / 'pauses'}"})
    yield lab
    lab.stop()


def test_with_p11_kits_default_modules_and_opensc_the_holder_answers_at_once(desktop_lab):
    """Issue #36: with the default module set, answering a request re-enumerated every module, and OpenSC's
    C_GetSlotList waited in SCardConnect on the reader in which the daemon itself presented its card: nothing moved
    until the presentation's duration ran out. Requests now read the token list's snapshot, and no module that
    talks to readers is enumerated while a card is presented."""
    lab = desktop_lab
    log = lab.daemon.log.read_text()
    assert "opensc-pkcs11" in log and "softhsm2" in log, log
    (lab.root / "pauses" / "mdoc.responseMade.continue").touch()  # this test does not pause
    try:
        p = lab.present("trusted-mdl", durationSeconds=40)
        lab.wait_card(lab.daemon)
        # At a person's pace: the token list (seconds old by now) is listed while the card is in the reader, and
        # the request is approved seconds after it came.
        time.sleep(1.5)
        assert lab.daemon.client().call("tokens.list")["tokens"][0]["id"] == lab.token
        started = time.monotonic()
        read = Read(lab.daemon, lab.reader, ["family_name", "birth_date"])
        request = p.wait("mdoc.request")
        time.sleep(1.5)
        approved = lab.daemon.client().call("mdoc.approve", {
            "presentationId": request["presentationId"], "approve": True, "pin": PIN})
        result, error = read.outcome()
        elapsed = time.monotonic() - started
    finally:
        for name in ("mdoc.responseMade.continue", "mdoc.responseMade.reached"):
            (lab.root / "pauses" / name).unlink(missing_ok=True)
    assert error is None, error
    assert elapsed < 15, f"the read and approval took {elapsed:.1f} s"
    assert approved["released"] == [f"{NS}/family_name", f"{NS}/birth_date"]
    assert result["documents"][0]["verdict"] == "authentic"
    summary = p.finish()
    assert summary["reason"] == "sessionEnded" and summary["presentations"][0]["outcome"] == "released"


def test_a_response_the_reader_never_took_is_not_released(desktop_lab):
    """Issue #36: `approve` said `released` while the reader got CARD_REMOVED. The response is held after it is
    made; the presentation is stopped (the card leaves the reader) before the reader can take it."""
    lab = desktop_lab
    pauses = lab.root / "pauses"
    p = lab.present("trusted-mdl", durationSeconds=40)
    lab.wait_card(lab.daemon)
    read = Read(lab.daemon, lab.reader, ["family_name"])
    request = p.wait("mdoc.request")
    answer: dict = {}

    def approve() -> None:
        try:
            answer["result"] = lab.daemon.client().call("mdoc.approve", {
                "presentationId": request["presentationId"], "approve": True, "pin": PIN})
        except RPCError as e:
            answer["error"] = e

    approving = threading.Thread(target=approve, daemon=True)
    approving.start()
    reached(pauses, "mdoc.responseMade")
    assert lab.daemon.client().call("mdoc.stop", {"documentIdentifier": "trusted-mdl"})["stopped"] == 1
    lab.wait_card(lab.daemon, present=False)
    release(pauses, "mdoc.responseMade")
    approving.join(30)
    (pauses / "mdoc.responseMade.continue").unlink()
    (pauses / "mdoc.responseMade.reached").unlink()
    assert "error" in answer, answer
    assert answer["error"].code == "CARD_REMOVED" and answer["error"].data["reason"] == "cancelled"
    result, error = read.outcome()
    assert result is None and error is not None
    summary = p.finish()
    entry = summary["presentations"][0]
    assert entry["outcome"] == "undelivered" and entry["code"] == "CARD_REMOVED", summary
    assert entry["elements"] == [f"{NS}/family_name"]


def test_declined_releases_nothing(lab):
    p = lab.present("trusted-mdl")
    lab.wait_card(lab.daemon)
    read = Read(lab.daemon, lab.reader, ["family_name"])
    request = p.wait("mdoc.request")
    assert lab.daemon.client().call("mdoc.approve", {"presentationId": request["presentationId"],
                                                      "approve": False})["released"] == []
    refused = p.wait("mdoc.refused")
    assert refused["code"] == "MDOC_NOT_APPROVED" and refused["reason"] == "declined"
    result, error = read.outcome()
    assert result is None and error.code == "CARD_ERROR"
    assert p.finish()["presentations"][0]["outcome"] == "refused"


def test_a_reader_under_a_root_not_listed_gets_nothing_and_no_request_is_shown(lab):
    p = lab.present("foreign-mdl")
    lab.wait_card(lab.daemon)
    read = Read(lab.daemon, lab.reader, ["family_name"])
    kind, params = p.next_event()
    assert kind == "mdoc.refused", (kind, params)
    assert params["code"] == "MDOC_READER_NOT_TRUSTED" and params["reason"] == "untrusted"
    result, error = read.outcome()
    assert result is None and error.code == "CARD_ERROR"
    p.finish()


def test_a_request_without_reader_auth_gets_nothing(lab):
    plain = Daemon(lab.root, lab.pcscd.env, ["--no-embedded-softhsm", "--iaca", str(lab.mdl / "iaca.pem")],
                   name="plain-reader").start()
    try:
        p = lab.present("trusted-mdl")
        lab.wait_card(plain)
        read = Read(plain, lab.reader, ["family_name"])
        kind, params = p.next_event()
        assert kind == "mdoc.refused", (kind, params)
        assert params["code"] == "MDOC_READER_NOT_TRUSTED" and params["reason"] == "missing"
        result, error = read.outcome()
        assert result is None and error.code == "CARD_ERROR"
        p.finish()
    finally:
        plain.stop()


@pytest.mark.parametrize("presence", [False, True])
def test_a_forged_reader_certificate_naming_the_trusted_root_gets_nothing(lab, presence):
    # Issue #27: trust was the root key identifier the chain claimed, so a leaf signed by the forger's own key whose
    # authority key identifier copies the trusted root's was trusted, and with a presence command answered
    # automatically. The chain is now validated by signature to a --mdoc-reader-root certificate.
    forged = forged_reader(lab.root / "forged", lab.trusted)
    asked = lab.root / "forged-presence-asked"
    extra: list[str] = []
    if presence:
        pin = lab.root / "holder.pin"
        pin.write_text(PIN)
        config = lab.root / "mdoc-forged.json"
        config.write_text(json.dumps({
            "pinFiles": {"holder": str(pin)},
            "presence": {"command": ["/bin/sh", "-c", f"cat >> {asked}; exit 0"], "timeoutSeconds": 20}}))
        extra = ["--config", str(config)]
        lab.restart(*extra)
    forger = Daemon(lab.root, lab.pcscd.env, [
        "--no-embedded-softhsm", "--iaca", str(lab.mdl / "iaca.pem"),
        "--mdoc-reader-key", str(forged / "reader-key.pem"), "--mdoc-reader-cert", str(forged / "reader.pem")],
        name="forged-reader").start()
    try:
        p = lab.present("trusted-mdl")
        lab.wait_card(forger)
        read = Read(forger, lab.reader, ["family_name"])
        kind, params = p.next_event()
        assert kind == "mdoc.refused", (kind, params)
        assert params["code"] == "MDOC_READER_NOT_TRUSTED" and params["reason"] == "untrusted", params
        result, error = read.outcome()
        assert result is None and error.code == "CARD_ERROR"
        lab.daemon.client().call("mdoc.stop", {"documentIdentifier": "trusted-mdl"})
        p.finish()
        assert not asked.exists()
    finally:
        forger.stop()
        if presence:
            lab.restart()


def test_mdoc_present_opens_only_configured_devices_for_a_caller_without_admin(lab):
    # Issue #27 §4: as documents.read reads only the daemon's readers, mdoc.present opens for a non-admin caller only
    # the devices of mdoc.presentDevices and --nfc-device (the daemon's own uid is admin, so the lab's calls pass).
    open_socket_to_others(lab)
    device = f"127.0.0.1:{lab.pcscd.port}"
    present = ("mdoc.present", {"documentIdentifier": "no-such-mdl", "device": device, "durationSeconds": 5})
    nfc = ("mdoc.present", {"documentIdentifier": "no-such-mdl", "device": "pn532_uart:/dev/ttyS0",
                            "durationSeconds": 5})
    _, out = calls_as(NOBODY, lab.daemon.socket, [present, nfc])
    assert [o.get("code") for o in out] == ["UNAUTHORIZED", "UNAUTHORIZED"], out
    assert all(o["data"]["field"] == "device" for o in out), out
    # A second daemon (not a restart of the lab's: two quick restarts after a read leave the next vpcd card unseen)
    # configured with the device.
    config = lab.root / "mdoc-devices.json"
    config.write_text(json.dumps({"mdoc": {"presentDevices": [device]}}))
    configured = Daemon(lab.root, {**lab.softhsm.env, **lab.pcscd.env}, [*lab.base, "--config", str(config)],
                        name="present-devices").start()
    try:
        os.chmod(configured.socket, 0o666)
        _, out = calls_as(NOBODY, configured.socket, [present, nfc])
        # The configured device passes the gate (and the registration is looked up); the other does not.
        assert [o.get("code") for o in out] == ["MDOC_REGISTRATION_NOT_FOUND", "UNAUTHORIZED"], out
    finally:
        configured.stop()


def test_an_unanswered_request_times_out_and_releases_nothing(lab):
    p = lab.present("trusted-mdl", approvalTimeoutSeconds=1)
    lab.wait_card(lab.daemon)
    read = Read(lab.daemon, lab.reader, ["family_name"])
    request = p.wait("mdoc.request")
    refused = p.wait("mdoc.refused")
    assert refused["presentationId"] == request["presentationId"]
    assert refused["code"] == "MDOC_NOT_APPROVED" and refused["reason"] == "timeout"
    result, error = read.outcome()
    assert result is None and error.code == "CARD_ERROR"
    p.finish()
    with pytest.raises(RPCError) as e:
        lab.daemon.client().call("mdoc.approve", {"presentationId": request["presentationId"], "approve": True})
    assert e.value.code == "MDOC_PRESENTATION_NOT_PENDING"


def test_mdoc_stop_and_a_closed_connection_end_the_presentation(lab):
    p = lab.present("trusted-mdl", durationSeconds=300)
    lab.wait_card(lab.daemon)
    assert lab.daemon.client().call("mdoc.stop", {"documentIdentifier": "other"})["stopped"] == 0
    assert lab.daemon.client().call("mdoc.stop", {"documentIdentifier": "trusted-mdl"})["stopped"] == 1
    summary = p.finish()
    assert summary["reason"] == "cancelled" and summary["requests"] == 0
    lab.wait_card(lab.daemon, present=False)
    # The caller goes away: the card leaves the reader.
    p = lab.present("trusted-mdl", durationSeconds=300)
    lab.wait_card(lab.daemon)
    p.sock.close()
    lab.wait_card(lab.daemon, present=False)


def test_the_cli_presents_and_approves(lab):
    lab.wait_card(lab.daemon, present=False)
    cli = [str(BIN / "tessera"), "--socket", lab.daemon.socket, "mdoc"]
    proc = subprocess.Popen([*cli, "present", "trusted-mdl", "--device", f"127.0.0.1:{lab.pcscd.port}",
                             "--duration", "60", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert json.loads(proc.stdout.readline())["event"] == "mdoc.presenting"
        lab.wait_card(lab.daemon)
        read = Read(lab.daemon, lab.reader, ["given_name", "portrait"])
        line = json.loads(proc.stdout.readline())
        assert line["event"] == "mdoc.request", line
        out = subprocess.run([*cli, "approve", line["params"]["presentationId"], "--pin-stdin",
                              "--element", f"{NS}/given_name"], input=PIN + "\n", capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"released {NS}/given_name"
        result, error = read.outcome()
        assert error is None and result["documents"][0]["elements"][NS] == {"given_name": "ERIKA"}
        assert result["documents"][0]["verdict"] == "authentic"
        assert json.loads(proc.stdout.readline())["event"] == "mdoc.released"
        summary = json.loads(proc.stdout.readline())
        assert summary["reason"] == "sessionEnded", summary
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_cli_presents_in_words_and_prints_json_compact(lab):
    """Issue #36: `mdoc present` printed only JSON lines on a terminal (the presentation id in words now; JSON with
    --json), `mdoc approve ""` printed a double space, and some commands pretty-printed JSON (" : ")."""
    lab.wait_card(lab.daemon, present=False)
    cli = [str(BIN / "tessera"), "--socket", lab.daemon.socket]
    proc = subprocess.Popen([*cli, "mdoc", "present", "trusted-mdl", "--device", f"127.0.0.1:{lab.pcscd.port}",
                             "--duration", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("presenting trusted-mdl on 127.0.0.1:"), first
        assert lab.card_present(lab.daemon), "mdoc.presenting came before pcscd saw the card"
        read = Read(lab.daemon, lab.reader, ["given_name"])
        request = proc.stdout.readline()
        m = re.match(r"request ([0-9a-f-]{36}) from .*Tessera Test mdoc reader.* for \S*given_name", request)
        assert m, request
        assert "tessera mdoc approve " + m[1] in proc.stdout.readline()
        out = subprocess.run([*cli, "mdoc", "approve", m[1], "--pin-stdin"], input=PIN + "\n", capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == f"released {NS}/given_name", out
        result, error = read.outcome()
        assert error is None, error
        assert proc.stdout.readline().startswith(f"released {m[1]}: {NS}/given_name")
        assert proc.stdout.readline().strip() == "ended (sessionEnded): 1 request, 1 released"
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    empty = subprocess.run([*cli, "mdoc", "approve", ""], capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2 and "INVALID_INPUT" in empty.stderr and "  " not in empty.stderr, empty.stderr
    for args in (["call", "daemon.status"], ["--json", "status"], ["credentials", "list", "--json"]):
        out = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (args, out.stderr)
        assert len(out.stdout.strip().splitlines()) == 1 and '": ' not in out.stdout, (args, out.stdout[:300])
        json.loads(out.stdout)


def test_libnfc_target_mode_full_session_releases_only_approved_elements(lab):
    # The software PN532's field holds a full mdoc reader (`tessera lab pn532 --reader-mdoc`: engagement, session,
    # DeviceRequest with readerAuth, short APDUs only as libnfc allows, response verified against the IACA); the
    # daemon presents the token-held mDL in libnfc target mode.
    from test_nfc import ReaderPN532
    reader = ReaderPN532(lab.root, "--reader-mdoc", "--reader-auth-key", str(lab.trusted / "reader-key.pem"),
                         "--reader-auth-cert", str(lab.trusted / "reader.pem"), "--iaca", str(lab.mdl / "iaca.pem"),
                         name="pn532-mdoc-reader")
    try:
        p = Presentation(lab.daemon, {"documentIdentifier": "trusted-mdl", "device": reader.connstring,
                                      "durationSeconds": 60, "approvalTimeoutSeconds": 30})
        request = p.wait("mdoc.request")
        assert request["reader"]["authorityKeyIdentifier"] == lab.trusted_id
        approved = lab.daemon.client().call("mdoc.approve", {
            "presentationId": request["presentationId"], "approve": True, "pin": PIN,
            "elements": [f"{NS}/family_name", f"{NS}/document_number"]})
        assert approved["released"] == [f"{NS}/family_name", f"{NS}/document_number"]
        seen = reader.wait_for("reader: done")
        lab.daemon.client().call("mdoc.stop", {"documentIdentifier": "trusted-mdl"})
        summary = p.finish()
    finally:
        reader.stop()
    line = next((x for x in seen if x.startswith("reader: mdoc ")), None)
    assert line == f"reader: mdoc status 0 verdict authentic elements {NS}/family_name,{NS}/document_number", seen
    assert summary["presentations"][0]["outcome"] == "released", summary


def test_mdoc_read_through_a_libnfc_reader(tmp_path):
    # The other direction over libnfc: the daemon's mdoc.read through the real pn532_uart driver, an mdoc (`tessera
    # lab pn532 --mdoc`) in the software PN532's field; 263-byte frames, so chained ENVELOPEs and GET RESPONSE.
    from test_nfc import PN532
    mdl = tmp_path / "mdl"
    out = subprocess.run([str(BIN / "tessera"), "lab", "make-mdoc", str(mdl), "--photo-padding", "3000"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pn532 = PN532(tmp_path, mdl, name="pn532-mdoc", card="--mdoc")
    daemon = None
    try:
        daemon = Daemon(tmp_path, {}, ["--no-embedded-softhsm", "--iaca", str(mdl / "iaca.pem"),
                                       "--nfc-device", pn532.connstring]).start()
        result = daemon.client().call("mdoc.read", {"reader": pn532.connstring})
    finally:
        if daemon:
            daemon.stop()
        pn532.stop()
    doc = result["documents"][0]
    assert doc["verdict"] == "authentic", doc["reasons"]
    assert doc["deviceAuthentication"] == "deviceSignature"
    assert len(doc["elements"][NS]["portrait"]) >= 3000 * 4 // 3  # base64url of the ~3000-byte portrait
    assert result["statistics"]["apdus"] > 20, result["statistics"]  # short APDUs only over libnfc


def test_the_presence_command_approves_or_declines_for_the_user(lab):
    # presence.command (a kiosk's own confirmation; the one presence broker, door "mdoc") answers instead of
    # mdoc.approve: it gets the request on stdin; exit 0 releases every requested element, another status declines.
    # The token's PIN comes from a PIN file.
    status, asked = lab.root / "presence-status", lab.root / "presence-requests"
    pin = lab.root / "holder.pin"
    pin.write_text(PIN)
    config = lab.root / "mdoc-presence.json"
    config.write_text(json.dumps({
        "pinFiles": {"holder": str(pin)},
        "presence": {"command": ["/bin/sh", "-c", f"cat >> {asked}; echo >> {asked}; s=$(cat {status}); "
                                 '[ "$s" = wait ] && exec sleep 30; exit "$s"'],
                     "timeoutSeconds": 20, "confirmOnSocket": True}}))
    lab.restart("--config", str(config))
    try:
        status.write_text("0")
        p = lab.present("trusted-mdl")
        lab.wait_card(lab.daemon)
        read = Read(lab.daemon, lab.reader, ["family_name", "given_name"])
        request = p.wait("mdoc.request")  # still announced to the UI
        result, error = read.outcome()
        assert error is None, error
        doc = result["documents"][0]
        assert doc["verdict"] == "authentic", doc["reasons"]
        assert set(doc["elements"][NS]) == {"family_name", "given_name"}
        lab.daemon.client().call("mdoc.stop", {"documentIdentifier": "trusted-mdl"})
        summary = p.finish()
        assert summary["presentations"][0]["outcome"] == "released", summary
        seen = json.loads(asked.read_text().splitlines()[0])
        assert seen["presentationId"] == request["presentationId"] and seen["uid"] == os.getuid()
        assert seen["door"] == "mdoc"
        assert [e["identifier"] for e in seen["elements"]] == ["family_name", "given_name"]

        status.write_text("1")
        p = lab.present("trusted-mdl")
        lab.wait_card(lab.daemon)
        read = Read(lab.daemon, lab.reader, ["family_name"])
        refused = p.wait("mdoc.refused")
        assert refused["code"] == "MDOC_NOT_APPROVED" and refused["reason"] == "declined", refused
        result, error = read.outcome()
        assert result is None and error is not None  # nothing released: the session ended with status 20
        lab.daemon.client().call("mdoc.stop", {"documentIdentifier": "trusted-mdl"})
        p.finish()

        # The command does not answer; with presence.confirmOnSocket the same question (door "mdoc", keyed by the
        # presentationId) is in presence.list, and presence.confirm releases every requested element.
        status.write_text("wait")
        p = lab.present("trusted-mdl")
        lab.wait_card(lab.daemon)
        read = Read(lab.daemon, lab.reader, ["family_name"])
        request = p.wait("mdoc.request")
        c = lab.daemon.client()
        waiting = c.call("presence.list")["requests"]
        assert [(r["door"], r["presentationId"]) for r in waiting] == [("mdoc", request["presentationId"])], waiting
        c.call("presence.confirm", {"requestId": waiting[0]["requestId"]})
        result, error = read.outcome()
        assert error is None, error
        assert set(result["documents"][0]["elements"][NS]) == {"family_name"}
        c.call("mdoc.stop", {"documentIdentifier": "trusted-mdl"})
        assert p.finish()["presentations"][0]["outcome"] == "released"
    finally:
        lab.restart()


@pytest.mark.parametrize("section, message", [
    ({"mdoc": {"presenceComand": ["/bin/true"]}}, "unknown key 'presenceComand' in mdoc"),
    ({"presence": {"command": ["/bin/true"], "timeoutSeconds": 0}}, "presence.timeoutSeconds 0 is out of range"),
    ({"presence": {"command": []}}, "presence.command must name a program"),
    ({"presence": {"comand": ["/bin/true"]}}, "unknown key 'comand' in presence"),
    ({"mdoc": {"presentDevices": [""]}}, "mdoc.presentDevices must not hold an empty device"),
    ({"mdoc": {"presentDevice": ["127.0.0.1:1"]}}, "unknown key 'presentDevice' in mdoc"),
])
def test_a_wrong_mdoc_or_presence_section_stops_start_up(tmp_path, section, message):
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps(section))
    out = subprocess.run([str(BIN / "tesserad"), "--socket", str(tmp_path / "s.sock"), "--state-dir",
                          str(tmp_path / "state"), "--no-embedded-softhsm", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_an_unreadable_or_bad_reader_root_stops_start_up(tmp_path):
    bad = tmp_path / "not-a-certificate.pem"
    bad.write_text("not a certificate")
    for path, message in [(tmp_path / "missing.pem", "cannot read --mdoc-reader-root"), (bad, "")]:
        out = subprocess.run([str(BIN / "tesserad"), "--socket", str(tmp_path / "s.sock"), "--state-dir",
                              str(tmp_path / "state"), "--no-embedded-softhsm", "--mdoc-reader-root", str(path)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and message in out.stderr, out.stderr


def test_the_cli_lists_and_removes_registrations(lab):
    def tessera(*args):
        return subprocess.run([str(BIN / "tessera"), "--socket", lab.daemon.socket, *args],
                              capture_output=True, text=True, timeout=60)
    out = tessera("mdoc", "registrations")
    assert out.returncode == 0 and "trusted-mdl" in out.stdout and "no (expired)" in out.stdout, out
    assert tessera("mdoc", "remove", "expired-mdl").stdout.strip() == "removed expired-mdl"
    assert "expired-mdl" not in tessera("mdoc", "registrations").stdout


def test_the_holder_in_the_lab_runs_as_mdoc_md_writes_it(tmp_path):
    """docs/MDOC.md "Holder in the lab" (issue #36: the holder path needed a reader root, key and certificate whose
    only recipe was this file's Python): its block, run as written from the repository's root with the build on
    PATH as README.md says, with the lab's default module set (OpenSC included)."""
    text = (ROOT / "docs" / "MDOC.md").read_text()
    block = text.split("<!-- example: holder-lab -->\n```sh\n", 1)[1].split("\n```", 1)[0]
    lab = tmp_path / "lab"
    env = {k: v for k, v in os.environ.items() if k not in ("TESSERA_SOCKET", "PCSCLITE_CSOCK_NAME", "SSH_AUTH_SOCK")}
    env.update(PATH=f"{BIN}:{os.environ['PATH']}", LAB=str(lab))
    try:
        out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
    finally:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "lab.py"), "stop", str(lab)], timeout=120,
                       capture_output=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^released [0-9a-f-]{36}: .*org\.iso\.18013\.5\.1/family_name", out.stdout, re.M), out.stdout
    assert "org.iso.18013.5.1.mDL: authentic" in out.stdout, out.stdout
    assert "ended (sessionEnded): 1 request, 1 released" in out.stdout, out.stdout
    # Issue #36: `scripts/lab.py stop` left tesserad.sock and ssh-agent.sock behind.
    assert sorted(p.name for p in lab.glob("*.sock")) == [], sorted(p.name for p in lab.glob("*.sock"))
