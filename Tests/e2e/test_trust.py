"""CSCA master lists as trust anchors (`tesserad --csca LIST --master-list-trust CERT`) and CSCA CRLs (`--crl`).
The master lists are built here independently of Tessera: the CscaMasterList DER by hand, signed by `openssl cms
-sign` with a Master List Signer certificate that `openssl x509 -req` issues under the emulated passport's CSCA;
the CRLs by python cryptography with the CSCA key of the emulated passport's profile."""
from __future__ import annotations

import base64
import datetime
import json
import pathlib
import signal
import subprocess
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tessera_harness import BIN, PCSCD, Daemon, EmulatedPassport, RPCError, cli, make_passport_profile, unb64u

MRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"


def b64u(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def der(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 0x80:
        length = bytes([n])
    else:
        b = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(b)]) + b
    return bytes([tag]) + length + body


def csca_master_list_content(certs: list[bytes]) -> bytes:
    """CscaMasterList ::= SEQUENCE { version INTEGER (0), certList SET OF Certificate } (Doc 9303 Part 12 §9).
    DER SET OF is sorted by encoding."""
    return der(0x30, der(0x02, b"\x00") + der(0x31, b"".join(sorted(certs))))


def openssl(*args: str, cwd: pathlib.Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def issue_ml_signer(dir: pathlib.Path, csca_cert: pathlib.Path, csca_key: pathlib.Path, name: str,
                    eku: bool = True) -> None:
    """DIR/NAME.pem + NAME.key: a Master List Signer certificate issued by the CSCA (with the master list signing
    extended key usage unless `eku` is false)."""
    (dir / "mls.cnf").write_text("[mls]\nkeyUsage = critical, digitalSignature\nsubjectKeyIdentifier = hash\n"
                                 "authorityKeyIdentifier = keyid:always\n"
                                 + ("extendedKeyUsage = 2.23.136.1.1.3\n" if eku else ""))
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key", cwd=dir)
    openssl("req", "-new", "-key", f"{name}.key", "-subj", "/C=UT/O=Utopia/CN=Master List Signer", "-out", f"{name}.csr",
            cwd=dir)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(csca_cert), "-CAkey", str(csca_key), "-set_serial", "77",
            "-days", "365", "-sha256", "-extfile", "mls.cnf", "-extensions", "mls", "-out", f"{name}.pem", cwd=dir)


def sign_master_list(dir: pathlib.Path, certs: list[bytes], signer: str, out: str) -> pathlib.Path:
    (dir / f"{out}.content").write_bytes(csca_master_list_content(certs))
    openssl("cms", "-sign", "-binary", "-in", f"{out}.content", "-signer", f"{signer}.pem", "-inkey", f"{signer}.key",
            "-nodetach", "-econtent_type", "2.23.136.1.1.2", "-md", "sha256", "-nosmimecap", "-outform", "DER",
            "-out", out, cwd=dir)
    return dir / out


def self_signed_csca(country: str, i: int) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, country),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"CSCA {country} {i}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(i + 1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.DER)


def pem_to_der(path: pathlib.Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(serialization.Encoding.DER)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust")
    profile = make_passport_profile(root / "profile", MRZ, "--pace", "ecdh-gm-p256-aes128")
    other = make_passport_profile(root / "other", MRZ)
    issue_ml_signer(root, profile / "csca.pem", profile / "csca-key.pem", "mls")
    return root, profile, other


def start_fails(root: pathlib.Path, args: list[str]) -> str:
    """Runs tesserad with `args`; asserts it exits 1 at start-up and returns its stderr."""
    out = subprocess.run([str(BIN / "tesserad"), "--socket", str(root / "fail.sock"), "--state-dir",
                          str(root / "fail-state"), "--no-embedded-softhsm", *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    return out.stderr


@pytest.fixture(scope="module")
def pcscd(pki):
    p = PCSCD(pki[0]).start()
    yield p
    p.stop()


def read_with(root: pathlib.Path, pcscd: PCSCD, profile: pathlib.Path, args: list[str], name: str) -> dict:
    """Starts tesserad with `args`, reads the profile's emulated passport, stops the daemon; the read's result."""
    daemon = Daemon(root, pcscd.env, ["--no-embedded-softhsm", *args], name=name).start()
    try:
        def present(reader: str) -> bool:
            readers = daemon.client().call("readers.list")["readers"]
            return any(r["name"] == reader and r["cardPresent"] for r in readers)

        with EmulatedPassport(pcscd, profile, present, log=root / f"emulator-{name}.log"):
            return daemon.client().call("documents.read", {"mrz": MRZ})
    finally:
        daemon.stop()


def test_master_list_anchors_a_document_read(pki, pcscd):
    root, profile, other = pki
    # The passport's CSCA among 200 others (a German-style list with many anchors).
    many = [self_signed_csca("DE", i) for i in range(200)]
    ml = sign_master_list(root, [pem_to_der(profile / "csca.pem"), *many], "mls", "big.ml")
    result = read_with(root, pcscd, profile, ["--csca", str(ml), "--master-list-trust", str(profile / "csca.pem")], "ml")
    assert result["passiveAuthentication"]["status"] == "valid", result["passiveAuthentication"]
    assert result["passiveAuthentication"]["certificateChain"] == "valid"
    assert result["passiveAuthentication"]["revocation"] == "notChecked"


def make_crl(profile: pathlib.Path, key_profile: pathlib.Path, revoked: list[int], path: pathlib.Path,
             stale: bool = False) -> pathlib.Path:
    """A PEM CRL with the issuer name of `profile`'s CSCA, signed with `key_profile`'s CSCA key."""
    csca = x509.load_pem_x509_certificate((profile / "csca.pem").read_bytes())
    key = serialization.load_pem_private_key((key_profile / "csca-key.pem").read_bytes(), password=None)
    now = datetime.datetime.now(datetime.timezone.utc)
    this = now - datetime.timedelta(days=40 if stale else 1)
    b = (x509.CertificateRevocationListBuilder().issuer_name(csca.subject).last_update(this)
         .next_update(this + datetime.timedelta(days=30)))
    for serial in revoked:
        b = b.add_revoked_certificate(x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(this).build())
    path.write_bytes(b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return path


def test_crl_revoking_the_document_signer_makes_it_not_authentic(pki, pcscd):
    root, profile, _ = pki
    ds = x509.load_pem_x509_certificate((profile / "ds.pem").read_bytes())
    crl = make_crl(profile, profile, [12345, ds.serial_number], root / "revoked.crl")
    result = read_with(root, pcscd, profile, ["--csca", str(profile / "csca.pem"), "--crl", str(crl)], "revoked")
    assert result["verdict"] == "notAuthentic", result
    assert "DS_REVOKED" in result["reasons"]
    pa = result["passiveAuthentication"]
    assert (pa["status"], pa["revocation"]) == ("invalid", "revoked"), pa


def test_crl_without_the_document_signer_is_checked_and_stale_reported(pki, pcscd):
    root, profile, _ = pki
    crls = root / "crls"
    crls.mkdir()
    make_crl(profile, profile, [12345], crls / "stale.crl", stale=True)
    (crls / "README").write_text("not a CRL\n")
    result = read_with(root, pcscd, profile, ["--csca", str(profile / "csca.pem"), "--crl", str(crls)], "checked")
    pa = result["passiveAuthentication"]
    assert (pa["status"], pa["revocation"], pa.get("crlStale")) == ("valid", "checked", True), pa
    assert "DS_REVOKED" not in result["reasons"]


def test_crl_not_signed_by_a_trusted_csca_stops_start_up(pki):
    root, profile, other = pki
    crl = make_crl(profile, other, [1], root / "forged.crl")
    err = start_fails(root, ["--csca", str(profile / "csca.pem"), "--crl", str(crl)])
    assert "forged.crl" in err and "no trusted CSCA" in err, err


def test_tampered_master_list_stops_start_up(pki):
    root, profile, _ = pki
    ml = sign_master_list(root, [pem_to_der(profile / "csca.pem")], "mls", "good.ml")
    data = bytearray(ml.read_bytes())
    data[-5] ^= 0x01  # inside the signature, the last field of the SignerInfo
    bad = root / "tampered.ml"
    bad.write_bytes(bytes(data))
    err = start_fails(root, ["--csca", str(bad), "--master-list-trust", str(profile / "csca.pem")])
    assert "tampered.ml" in err and "signature invalid" in err, err


def test_master_list_signer_not_chaining_stops_start_up(pki):
    root, profile, other = pki
    ml = sign_master_list(root, [pem_to_der(profile / "csca.pem")], "mls", "unchained.ml")
    err = start_fails(root, ["--csca", str(ml), "--master-list-trust", str(other / "csca.pem")])
    assert "unchained.ml" in err and "does not chain" in err, err
    err = start_fails(root, ["--csca", str(ml)])
    assert "unchained.ml" in err and "--master-list-trust" in err, err


def test_master_list_signer_without_the_eku_stops_start_up(pki):
    """A Master List Signer must carry id-icao-mrtd-security-cscaMasterListSigningKey (issue #27)."""
    root, profile, _ = pki
    issue_ml_signer(root, profile / "csca.pem", profile / "csca-key.pem", "mls-plain", eku=False)
    ml = sign_master_list(root, [pem_to_der(profile / "csca.pem")], "mls-plain", "plain.ml")
    err = start_fails(root, ["--csca", str(ml), "--master-list-trust", str(profile / "csca.pem")])
    assert "plain.ml" in err and "2.23.136.1.1.3" in err, err


MRZ_ZZZ = MRZ.replace("UTO", "ZZZ")


def read_in(daemon: Daemon, pcscd: PCSCD, profile: pathlib.Path, mrz: str, log: pathlib.Path) -> dict:
    def present(reader: str) -> bool:
        readers = daemon.client().call("readers.list")["readers"]
        return any(r["name"] == reader and r["cardPresent"] for r in readers)

    with EmulatedPassport(pcscd, profile, present, log=log):
        return daemon.client().call("documents.read", {"mrz": mrz})


def wait_for(condition, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "condition never became true"
        time.sleep(0.05)


def test_trust_status_reload_and_sighup(pki, pcscd):
    root, profile, _ = pki
    stranger = make_passport_profile(root / "stranger", MRZ_ZZZ)
    anchors = root / "reload-anchors"
    anchors.mkdir()
    (anchors / "csca.pem").write_bytes((profile / "csca.pem").read_bytes())
    many = [self_signed_csca("DE", i) for i in range(3)]
    ml = sign_master_list(root, many, "mls", "de.ml")
    crl = make_crl(profile, profile, [4242], root / "reload.crl")
    daemon = Daemon(root, pcscd.env, ["--no-embedded-softhsm", "--csca", str(anchors), "--csca", str(ml),
                                      "--master-list-trust", str(profile / "csca.pem"), "--crl", str(crl)],
                    name="reload").start()
    try:
        c = daemon.client()
        status = c.call("trust.status")
        by_country = {a["country"]: a for a in status["anchors"]}
        assert status["anchorCount"] == 4 and by_country["DE"]["count"] == 3, status
        assert {x["source"] for x in by_country["DE"]["certificates"]} == {str(ml)}
        assert by_country["UT"]["certificates"][0]["source"] == str(anchors / "csca.pem")
        assert by_country["UT"]["certificates"][0]["validity"] == "valid"
        [listed_ml] = status["masterLists"]
        assert (listed_ml["source"], listed_ml["stale"], listed_ml["count"]) == (str(ml), False, 3), listed_ml
        assert "Master List Signer" in listed_ml["signer"] and listed_ml["signedAt"], listed_ml
        [listed_crl] = status["crls"]
        assert (listed_crl["source"], listed_crl["stale"], listed_crl["revoked"]) == (str(crl), False, 1)
        assert status["unanchoredIssuingStates"] == []

        # A document of a state without an anchor is remembered.
        result = read_in(daemon, pcscd, stranger, MRZ_ZZZ, root / "emulator-stranger.log")
        assert result["verdict"] == "unverified" and "NO_TRUST_ANCHOR" in result["reasons"], result
        assert c.call("trust.status")["unanchoredIssuingStates"] == ["ZZ"]
        listing = cli(daemon, "trust", "list")
        assert "DE  3 anchor(s)" in listing.stdout and "ZZ" in listing.stdout, listing.stdout
        assert "Master lists:" in listing.stdout and "3 certificate(s)" in listing.stdout, listing.stdout

        # A bad new set (the master list's signature broken) is refused and the old one stays.
        good = ml.read_bytes()
        ml.write_bytes(good[:-5] + bytes([good[-5] ^ 1]) + good[-4:])
        (anchors / "stranger.pem").write_bytes((stranger / "csca.pem").read_bytes())
        with pytest.raises(RPCError) as bad:
            c.call("trust.reload")
        assert "de.ml" in bad.value.error["message"] and "signature invalid" in bad.value.error["message"]
        assert c.call("trust.status")["anchorCount"] == 4
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "trust anchor reload failed" in daemon.log.read_text())
        assert "de.ml" in daemon.log.read_text()
        assert daemon.proc.poll() is None and c.call("trust.status")["anchorCount"] == 4

        # Fixed: trust.reload swaps in the new set, with the stranger's CSCA.
        ml.write_bytes(good)
        reloaded = c.call("trust.reload")
        assert reloaded["anchorCount"] == 5 and reloaded["unanchoredIssuingStates"] == []
        result = read_in(daemon, pcscd, stranger, MRZ_ZZZ, root / "emulator-stranger.log")
        assert result["passiveAuthentication"]["status"] == "valid", result

        # SIGHUP does the same: the stranger's CSCA gone again after the signal, once the reload ran.
        (anchors / "stranger.pem").unlink()
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "trust anchors reloaded" in daemon.log.read_text())
        assert c.call("trust.status")["anchorCount"] == 4
    finally:
        daemon.stop()


def test_evidence_round_trip_and_tampering(pki, pcscd):
    """documents.read with evidence and a caller's AA nonce → file → `tessera passport verify` offline."""
    root, _, _ = pki
    aa = make_passport_profile(root / "aa-profile", MRZ, "--pace", "ecdh-gm-p256-aes128", "--aa")
    nonce = bytes(range(8))
    daemon = Daemon(root, pcscd.env, ["--no-embedded-softhsm", "--csca", str(aa / "csca.pem")], name="evidence").start()
    try:
        def present(reader: str) -> bool:
            readers = daemon.client().call("readers.list")["readers"]
            return any(r["name"] == reader and r["cardPresent"] for r in readers)

        with EmulatedPassport(pcscd, aa, present, log=root / "emulator-evidence.log"):
            result = daemon.client().call("documents.read", {"mrz": MRZ, "evidence": True,
                                                             "aaChallenge": b64u(nonce)})
            saved = root / "cli-evidence.json"
            cli(daemon, "passport", "read", "--mrz", MRZ, "--save-evidence", str(saved), "--aa-challenge", b64u(nonce[::-1]))
    finally:
        daemon.stop()
    assert result["verdict"] == "authentic", result
    evidence = result["evidence"]
    assert unb64u(evidence["activeAuthentication"]["challenge"]) == nonce
    assert {"DG1", "DG2", "DG15"} <= set(evidence["dataGroups"]) and evidence["accessProtocol"] == "PACE"

    def verify(ev: dict, *extra: str) -> tuple[int, dict]:
        path = root / "evidence.json"
        path.write_text(json.dumps(ev))
        out = subprocess.run([str(BIN / "tessera"), "documents", "verify", str(path), "--csca", str(aa / "csca.pem"), *extra],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode in (0, 1), out.stderr
        return out.returncode, json.loads(out.stdout)

    code, checked = verify(evidence)
    assert (code, checked["verdict"], checked["reasons"]) == (0, "authentic", []), checked
    # What re-checks offline (issue #27): the AA signature only over the verifier's own nonce.
    assert checked["activeAuthentication"]["offline"] == "readerObserved", checked
    assert checked["offline"] == {"reverified": ["passiveAuthentication"], "readerObserved": ["activeAuthentication"]}
    code, checked = verify(evidence, "--aa-challenge", b64u(nonce))
    assert (code, checked["verdict"], checked["activeAuthentication"]["offline"]) == (0, "authentic", "reverified")
    assert checked["offline"]["reverified"] == ["passiveAuthentication", "activeAuthentication"], checked
    code, checked = verify(evidence, "--aa-challenge", b64u(nonce[::-1]))
    assert (code, checked["verdict"], checked["reasons"]) == (1, "notAuthentic", ["ACTIVE_AUTH_INVALID"]), checked
    assert "nonce" in checked["activeAuthentication"]["reason"]
    from_cli = json.loads(saved.read_text())
    assert unb64u(from_cli["activeAuthentication"]["challenge"]) == nonce[::-1]
    code, checked = verify(from_cli)
    assert (code, checked["verdict"]) == (0, "authentic"), checked
    assert checked["activeAuthentication"]["status"] == "valid"

    # A flipped byte in DG1 (the name) or in the chip's signature: notAuthentic.
    dg1 = bytearray(unb64u(evidence["dataGroups"]["DG1"]))
    dg1[20] ^= 0x01
    code, checked = verify({**evidence, "dataGroups": {**evidence["dataGroups"], "DG1": b64u(bytes(dg1))}})
    assert (code, checked["verdict"], checked["reasons"]) == (1, "notAuthentic", ["PASSIVE_AUTH_INVALID"]), checked
    sig = bytearray(unb64u(evidence["activeAuthentication"]["signature"]))
    sig[5] ^= 0x01
    code, checked = verify({**evidence, "activeAuthentication": {**evidence["activeAuthentication"], "signature": b64u(bytes(sig))}})
    assert (code, checked["verdict"], checked["reasons"]) == (1, "notAuthentic", ["ACTIVE_AUTH_INVALID"]), checked

    # The same evidence with a CRL revoking its document signer.
    ds = x509.load_pem_x509_certificate((aa / "ds.pem").read_bytes())
    crl = make_crl(aa, aa, [ds.serial_number], root / "evidence.crl")
    code, checked = verify(evidence, "--crl", str(crl))
    assert code == 1 and "DS_REVOKED" in checked["reasons"], checked


def test_cam_evidence_is_rechecked_offline(pki, pcscd):
    root, _, _ = pki
    cam = make_passport_profile(root / "cam-profile", MRZ, "--pace", "ecdh-cam-brainpoolp256r1-aes128", "--no-bac")
    saved = root / "cam-evidence.json"
    daemon = Daemon(root, pcscd.env, ["--no-embedded-softhsm", "--csca", str(cam / "csca.pem")], name="cam").start()
    try:
        def present(reader: str) -> bool:
            readers = daemon.client().call("readers.list")["readers"]
            return any(r["name"] == reader and r["cardPresent"] for r in readers)

        with EmulatedPassport(pcscd, cam, present, log=root / "emulator-cam.log"):
            cli(daemon, "passport", "read", "--mrz", MRZ, "--save-evidence", str(saved))
    finally:
        daemon.stop()
    evidence = json.loads(saved.read_text())
    assert evidence["paceMapping"] == "CAM" and evidence["chipAuthentication"]["curve"] == "brainpoolP256r1", evidence

    def verify(ev: dict) -> tuple[int, dict]:
        path = root / "cam-check.json"
        path.write_text(json.dumps(ev))
        out = subprocess.run([str(BIN / "tessera"), "documents", "verify", str(path), "--csca", str(cam / "csca.pem")],
                             capture_output=True, text=True, timeout=60)
        return out.returncode, json.loads(out.stdout)

    code, checked = verify(evidence)
    assert (code, checked["verdict"], checked["chipAuthentication"]["status"]) == (0, "authentic", "valid"), checked
    ca = bytearray(unb64u(evidence["chipAuthentication"]["chipAuthenticationData"]))
    ca[-1] ^= 0x01
    forged = {**evidence, "chipAuthentication": {**evidence["chipAuthentication"], "chipAuthenticationData": b64u(bytes(ca))}}
    code, checked = verify(forged)
    assert (code, checked["verdict"], checked["reasons"]) == (1, "notAuthentic", ["CHIP_AUTH_INVALID"]), checked
