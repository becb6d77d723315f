"""Badges at the door end to end (issue 31): the real tesserad, a private pcscd with vpcd readers, emulated PIV
badges written by `tessera lab make-badge` (`tessera lab emulate-piv`), the CLI, and openssl as the independent
verifier of the badge's certificate and CHUID signature."""
import datetime
import json
import os
import pathlib
import signal
import shutil
import subprocess
import sys
import tempfile
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tessera_harness import BIN, NOBODY, SOFTHSM_MODULE, Daemon, RPCError, SoftHSM, calls_as, cli
from tessera_harness import let_other_uids_reach
from test_nfc import PN532
from test_piv import EmulatedPIV, pcscd, start_daemon, wait_for  # noqa: F401 (pcscd is a fixture)

CHUID = "5fc102"
CARD_AUTH_CERT = "5fc101"


def make_badge(ca: pathlib.Path, state: pathlib.Path, holder: str, serial: int, *args: str) -> str:
    out = subprocess.run([str(BIN / "tessera"), "lab", "make-badge", str(ca), "--state", str(state),
                          "--holder", holder, "--serial", str(serial), *args],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def tlv_items(data: bytes) -> dict[int, bytes]:
    """One level of BER-TLV with one- or two-byte tags (what a PIV object's content holds)."""
    items, i = {}, 0
    while i < len(data):
        tag = data[i]; i += 1
        if tag & 0x1F == 0x1F:
            tag = tag << 8 | data[i]; i += 1
        length = data[i]; i += 1
        if length & 0x80:
            n = length & 0x7F
            length = int.from_bytes(data[i:i + n], "big"); i += n
        items[tag] = data[i:i + length]
        i += length
    return items


def card_object(state: pathlib.Path, tag: str) -> bytes:
    return bytes.fromhex(json.loads(state.read_text())["objects"][tag])


class Badge:
    """An emulated badge card in reader `slot` (0: "Tessera VPCD 00 00", 1: "… 00 01") while the `with` block runs."""

    def __init__(self, pcscd, state: pathlib.Path, serial: int, client=None, slot: int = 0):
        self.client = client
        self.card = EmulatedPIV(pcscd, state.parent, serial=serial, slot=slot)
        self.card.cmd[self.card.cmd.index("--state") + 1] = str(state)

    def __enter__(self):
        return self.card.insert()

    def __exit__(self, *exc):
        self.card.remove()
        if self.client is not None:  # the next card goes into a reader pcscd saw empty
            wait_for(lambda: not any(r["cardPresent"] for r in self.client.call("readers.list")["readers"]))


def check(client, **params) -> dict:
    # The card was just inserted: give pcscd the moment it needs to see it.
    return wait_for(lambda: _try(lambda: client.call("access.check", params)), timeout=15)


def _try(call):
    """`call()`, or None while the reader has no card (yet)."""
    try:
        return call()
    except RPCError as e:
        if e.code in ("NO_CARD", "CARD_REMOVED"):
            return None
        raise


def openssl_verify(der: bytes, ca: pathlib.Path, work: pathlib.Path) -> str:
    """openssl's verdict on a DER certificate against the CA; returns its -text dump."""
    (work / "leaf.der").write_bytes(der)
    subprocess.run(["openssl", "x509", "-inform", "DER", "-in", work / "leaf.der", "-out", work / "leaf.pem"],
                   check=True)
    verified = subprocess.run(["openssl", "verify", "-CAfile", ca, work / "leaf.pem"], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
    return subprocess.run(["openssl", "x509", "-in", work / "leaf.pem", "-noout", "-text"],
                          check=True, capture_output=True, text=True).stdout


def test_badges_at_the_door(tmp_path, pcscd):
    ca = tmp_path / "badge-ca"
    alice = tmp_path / "alice.json"
    badge_id = make_badge(ca, alice, "Alice Example", 7, "--auth")

    # Independent verifiers: openssl validates the 9E certificate to the CA and the CHUID's detached CMS signature.
    text = openssl_verify(tlv_items(card_object(alice, CARD_AUTH_CERT))[0x70], ca / "badge-ca.pem", tmp_path)
    assert "2.16.840.1.101.3.6.8" in text and "urn:uuid:" in text and "Alice Example" in text
    chuid = card_object(alice, CHUID)
    items = tlv_items(chuid)
    signed = b"".join(bytes([t]) + bytes([len(items[t])]) + items[t] for t in (0x30, 0x34, 0x35))
    (tmp_path / "chuid-content").write_bytes(signed)
    (tmp_path / "chuid.p7").write_bytes(items[0x3E])
    cms = subprocess.run(["openssl", "cms", "-verify", "-inform", "DER", "-in", tmp_path / "chuid.p7", "-binary",
                          "-content", tmp_path / "chuid-content", "-CAfile", ca / "badge-ca.pem",
                          "-purpose", "any", "-out", "/dev/null"], capture_output=True, text=True)
    assert cms.returncode == 0, cms.stderr

    expired = tmp_path / "old.json"
    make_badge(ca, expired, "Old Badge", 8, "--valid-days=-1")
    clone = tmp_path / "clone.json"
    state = json.loads(alice.read_text())
    other = json.loads(expired.read_text())
    state["keys"]["9e"] = other["keys"]["9e"]  # the genuine certificate and CHUID, another card's key
    clone.write_text(json.dumps(state))

    grants = tmp_path / "grants"
    grants.mkdir()
    config = {"accessControl": {
        "anchors": [str(ca / "badge-ca.pem")],
        "grantCommand": ["/bin/sh", "-c", f'cat > "{grants}/$$.json"'],
    }, "pinBackoff": {"initialSeconds": 0}}
    daemon = start_daemon(tmp_path, pcscd, config=config)
    try:
        c = daemon.client()
        with Badge(pcscd, alice, 7, c):
            first = check(c)
            assert first["decision"] == "denied" and first["reasons"] == ["BADGE_UNKNOWN"], first
            assert first["badgeId"] == badge_id and first["cardholder"] == "Alice Example"
            registered = c.call("access.register", {"holder": "alice"})
            assert registered["holder"] == "alice" and registered["badgeId"] == badge_id
            # Issue #36: the registration's check said elapsedMs 0; it took what the card read took.
            assert registered["elapsedMs"] > 0 and registered["apdus"] >= 4, registered
            granted = check(c)
            assert granted["decision"] == "granted" and granted["reasons"] == [], granted
            assert granted["holder"] == "alice" and granted["apdus"] >= 4
            # grantCommand got the decision on stdin.
            decisions = wait_for(lambda: (got := [read_json(f) for f in grants.glob("*.json")]) and all(got) and got)
            assert decisions[0]["badgeId"] == badge_id
            # The lifecycle is the passkeys': suspend, then resume, the badge id as credential id.
            c.call("credentials.suspend", {"credentialId": badge_id, "reason": "lost"})
            assert check(c)["reasons"] == ["BADGE_SUSPENDED"]
            c.call("credentials.resume", {"credentialId": badge_id})
            # The CLI: exit status 0 on a grant, the reasons printed on a denial.
            out = cli(daemon, "access", "check")
            assert "granted" in out.stdout
            # auth mode: the PIV Authentication key after the PIN.
            assert check(c, mode="auth", pin="123456")["decision"] == "granted"
            assert check(c, mode="auth", pin="000000")["reasons"] == ["PIN_INVALID"]
            history = c.call("credentials.history", {"credentialId": badge_id})["events"]
            assert [e["to"] for e in history] == ["active", "suspended", "active"]
            c.call("credentials.deactivate", {"credentialId": badge_id})
            denied = cli(daemon, "access", "check", check=False)
            assert denied.returncode == 1 and "BADGE_DEACTIVATED" in denied.stdout
        with Badge(pcscd, clone, 7, c):
            assert check(c)["reasons"] == ["CAK_SIGNATURE_INVALID"]
        with Badge(pcscd, expired, 8, c):
            assert check(c)["reasons"][0] == "CERT_EXPIRED"
        # access.watch: one decision per card presented, streamed as notifications.
        watcher = daemon.client()
        watcher.send_raw((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "access.watch",
                                      "params": {"count": 1}}) + "\n").encode())
        time.sleep(0.5)
        with Badge(pcscd, expired, 8):
            note = watcher.wait_notification("access.decision", timeout=30)
            assert note["reasons"][0] == "CERT_EXPIRED"
    finally:
        daemon.stop()


def test_badge_over_libnfc(tmp_path):
    """Contactless, as doors read badges: the software PN532 with the badge in its field, libnfc's pn532_uart driver
    in tesserad (no pcscd at all)."""
    ca = tmp_path / "badge-ca"
    alice = tmp_path / "alice.json"
    badge_id = make_badge(ca, alice, "Alice Example", 21)
    reader = PN532(tmp_path, alice, name="pn532-badge", card="--piv-state")
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"accessControl": {"anchors": [str(ca / "badge-ca.pem")]}}))
    env = {"PCSCLITE_CSOCK_NAME": str(tmp_path / "no-pcscd.comm")}
    daemon = Daemon(tmp_path, env, ["--no-embedded-softhsm", "--nfc-device", reader.connstring,
                                    "--config", str(config)]).start()
    try:
        c = daemon.client()
        c.call("access.register", {"holder": "alice", "reader": reader.connstring})
        decision = c.call("access.check", {"reader": reader.connstring})
        assert decision["decision"] == "granted", decision
        assert decision["badgeId"] == badge_id and decision["holder"] == "alice"
        # libnfc carries short APDUs: the certificate and CHUID come back with GET RESPONSE after the 4 commands.
        assert decision["apdus"] > 4
    finally:
        daemon.stop()
        reader.stop()


def make_token_ca(tmp_path: pathlib.Path, hsm: SoftHSM) -> pathlib.Path:
    """A badge CA whose P-256 key is imported into the SoftHSM token "badges" (label badge-ca); its self-signed
    certificate is made here with python cryptography from the same key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Badge Office"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "Badge Office CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    pem = tmp_path / "office-ca.pem"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pkcs8 = tmp_path / "office-ca-key.p8"
    pkcs8.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
    hsm.add_token("badges")
    subprocess.run(["softhsm2-util", "--import", str(pkcs8), "--token", "badges", "--label", "badge-ca",
                    "--id", "0b0b", "--pin", "1234"], check=True, capture_output=True, env={**os.environ, **hsm.env})
    pkcs8.unlink()
    return pem


def test_issue_a_badge_onto_an_emulated_card_then_check_it(tmp_path, pcscd):
    hsm = SoftHSM(tmp_path)
    ca = make_token_ca(tmp_path, hsm)
    (tmp_path / "badges.pin").write_text("1234\n")
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"pinFiles": {"badges": str(tmp_path / "badges.pin")}, "accessControl": {
        "anchors": [str(ca)], "issuer": {"tokenId": "TOKEN", "keyLabel": "badge-ca", "certificate": str(ca)}}}))
    env = {**hsm.env, **pcscd.env}
    args = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--allow-default-piv-management-key"]
    daemon = Daemon(tmp_path, env, [*args, "--config", str(config)]).start()
    token_id = next(t["id"] for t in daemon.client().call("tokens.list")["tokens"] if t.get("label") == "badges")
    daemon.stop()
    config.write_text(config.read_text().replace("TOKEN", token_id))
    daemon = Daemon(tmp_path, env, [*args, "--config", str(config)]).start()
    state = tmp_path / "blank.json"
    try:
        c = daemon.client()
        with Badge(pcscd, state, 5150, c):
            issued = wait_for(lambda: _try(lambda: c.call("access.issue", {"holder": "carol", "authKey": True})))
            assert issued["decision"] == "granted", issued
            assert issued["holder"] == "carol"
            assert check(c)["decision"] == "granted"
            assert check(c, mode="auth", pin="123456")["decision"] == "granted"
            # The same card again: already a badge.
            try:
                c.call("access.issue", {"holder": "carol"})
                raise AssertionError("a registered card was issued again without replace")
            except RPCError as e:
                assert e.code == "CREDENTIAL_EXISTS", e
        # openssl: the certificate written onto the card chains to the badge office's CA (signed on the token).
        text = openssl_verify(tlv_items(card_object(state, CARD_AUTH_CERT))[0x70], ca, tmp_path)
        assert "carol" in text and "2.16.840.1.101.3.6.8" in text
        # A holder whose badge is suspended gets no second card without replace.
        c.call("credentials.suspend", {"credentialId": issued["badgeId"]})
        with Badge(pcscd, tmp_path / "second.json", 5151, c):
            wait_for(lambda: any(r["cardPresent"] for r in c.call("readers.list")["readers"]))
            try:
                c.call("access.issue", {"holder": "carol"})
                raise AssertionError("a suspended holder got a second badge")
            except RPCError as e:
                assert e.code == "CREDENTIAL_EXISTS" and e.data["decision"] == "suspended", e
    finally:
        daemon.stop()


def test_slow_or_failing_grant_command_never_holds_the_next_tap(tmp_path, pcscd):
    ca = tmp_path / "badge-ca"
    alice = tmp_path / "alice.json"
    make_badge(ca, alice, "Alice Example", 31)
    done = tmp_path / "relay-done"
    config = {"accessControl": {"anchors": [str(ca / "badge-ca.pem")], "grantTimeoutSeconds": 3,
                                "grantCommand": ["/bin/sh", "-c", f'sleep 2; cat > "{done}"; exit 7']}}
    daemon = start_daemon(tmp_path, pcscd, config=config)
    try:
        c = daemon.client()
        with Badge(pcscd, alice, 31, c):
            c.call("access.register", {"holder": "alice"}) if check(c) else None
            started = time.monotonic()
            taps = [c.call("access.check")["decision"] for _ in range(3)]
            elapsed = time.monotonic() - started
        assert taps == ["granted"] * 3
        assert elapsed < 1.5, f"three taps took {elapsed:.2f} s behind a 2 s grant command"
        # The command did run (and its failing exit status was only logged).
        assert wait_for(lambda: (read_json(done) or {}).get("decision") == "granted")
        assert wait_for(lambda: "grantCommand exited with status 7" in (tmp_path / "tesserad.log").read_text())
    finally:
        daemon.stop()


def test_a_misspelled_access_setting_stops_start_up(tmp_path):
    for section, message in [({"anchor": ["ca.pem"]}, "unknown key 'anchor' in accessControl"),
                             ({"anchors": ["ca.pem"], "issuer": {"tokenId": "t", "keyLabel": "k", "certificate": "c",
                                                                 "pin": "1234"}},
                              "unknown key 'pin' in accessControl.issuer"),
                             ({"anchors": ["ca.pem"], "doors": {"vault": ["bob"]}},
                              'a door now names its readers, {"vault": {"readers": [READER...]'),
                             ({"anchors": ["ca.pem"], "doors": {"a": {"readers": ["R1"], "allow": ["x"]},
                                                                "b": {"readers": ["R2", "R1"], "allow": ["y"]}}},
                              "reader 'R1' is named by doors 'a' and 'b': a reader belongs to at most one door"),
                             ({"anchors": ["ca.pem"], "doors": {"a": {"readers": ["R1"], "allow": [], "door": "b"}}},
                              "unknown key 'door' in accessControl.doors.a"),
                             ({"anchors": ["ca.pem"], "doors": {"a": {"readers": ["R1"]}}},
                              "accessControl.doors.a needs allow: [HOLDER|BADGE-ID...]"),
                             ({"anchors": [str(tmp_path / "missing.pem")]}, "cannot read")]:
        config = tmp_path / "tesserad.json"
        config.write_text(json.dumps({"accessControl": section}))
        run = subprocess.run([str(BIN / "tesserad"), "--config", str(config), "--socket", str(tmp_path / "s.sock"),
                              "--state-dir", str(tmp_path / "state"), "--no-embedded-softhsm"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and message in run.stderr, run.stderr


def read_json(path: pathlib.Path):
    """The JSON in `path`, or None while it is missing or still being written (a grant command's `cat`)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def test_a_door_opens_only_for_its_own_readers(tmp_path, pcscd):
    """accessControl.doors ties readers to doors (issue 35 §1): the server room's reader applies the server room's
    rule without the caller naming it, no request can pick another door for it, a reader of no door opens nothing,
    and only a uid with the `door` permission checks on a door's reader."""
    if os.geteuid() != 0:
        raise AssertionError("this test needs root to act as another uid (CI runs as root)")
    # The daemon's directory outside pytest's: a concurrent pytest session sets /tmp/pytest-of-root back to 0700.
    reachable = pathlib.Path(tempfile.mkdtemp(prefix="tessera-doors-"))
    let_other_uids_reach(reachable)
    try:
        _doors(tmp_path, reachable, pcscd)
    finally:
        shutil.rmtree(reachable, ignore_errors=True)


def _doors(tmp_path, reachable, pcscd):
    ca = tmp_path / "badge-ca"
    alice, bob = tmp_path / "alice.json", tmp_path / "bob.json"
    make_badge(ca, alice, "Alice Example", 41)
    make_badge(ca, bob, "Bob Example", 42)
    desk, server_room = pcscd.readers
    grants = tmp_path / "grants"
    grants.mkdir()

    def relay(door):
        return ["/bin/sh", "-c", f'cat > "{grants}/{door}-$$.json"']
    config = {"socketMode": "0666", "accessControl": {
        "anchors": [str(ca / "badge-ca.pem")],
        "grantCommand": relay("default"),
        "doors": {"server-room": {"readers": [server_room], "allow": ["bob"], "grantCommand": relay("server-room")},
                  "lobby": {"readers": ["Lobby Reader"], "allow": ["alice", "bob"]}},
    }}
    daemon = start_daemon(reachable, pcscd, config=config)
    try:
        c = daemon.client()
        for state, serial, holder in [(alice, 41, "alice"), (bob, 42, "bob")]:
            with Badge(pcscd, state, serial, c):
                check(c, reader=desk)
                c.call("access.register", {"holder": holder, "reader": desk})
        # A reader of no door gives decisions and opens nothing.
        with Badge(pcscd, alice, 41, c):
            at_desk = check(c, reader=desk)
            assert at_desk["decision"] == "granted" and "door" not in at_desk, at_desk
            # Another uid may check there (enroll, as before doors).
            _, answers = calls_as(NOBODY, daemon.socket, [("access.check", {"reader": desk})])
            assert answers[0].get("result", {}).get("decision") == "granted", answers
        with Badge(pcscd, alice, 41, c, slot=1):
            # Without --door, the server room's reader applies the server room's rule.
            denied = check(c, reader=server_room)
            assert denied["decision"] == "denied" and denied["reasons"] == ["DOOR_NOT_ALLOWED"], denied
            assert denied["door"] == "server-room" and denied["holder"] == "alice"
            assert check(c)["door"] == "server-room"  # the first reader with a card is the server room's
            assert check(c, door="server-room")["reasons"] == ["DOOR_NOT_ALLOWED"]
            # Naming the lobby, which admits alice, does not help: the reader is not the lobby's.
            for params in ({"reader": server_room, "door": "lobby"}, {"reader": desk, "door": "server-room"},
                           {"reader": server_room, "mode": "auth", "pin": "123456"}):
                try:
                    c.call("access.check", params)
                    raise AssertionError(f"{params} was checked")
                except RPCError as e:
                    assert e.code == "INVALID_INPUT", e
            # The door controller's permission: closed to another uid without a policy rule, on check and watch.
            _, answers = calls_as(NOBODY, daemon.socket, [
                ("access.check", {"reader": server_room}), ("access.check", {}),
                ("access.watch", {"door": "server-room", "count": 1}), ("access.watch", {"count": 1})])
            assert [a.get("code") for a in answers] == ["UNAUTHORIZED"] * 4, answers
        with Badge(pcscd, bob, 42, c, slot=1):
            opened = check(c, reader=server_room)
            assert opened["decision"] == "granted" and opened["door"] == "server-room", opened
            # The server room's own grantCommand ran, once, with its decision.
            files = wait_for(lambda: (got := [read_json(f) for f in grants.glob("server-room-*.json")]) and all(got)
                             and got)
            assert [(f or {}).get("door") for f in files] == ["server-room"], files
        # No other grant ran any command: not alice's at the desk, nothing through the default command.
        time.sleep(1)
        assert sorted(f.name.split("-")[0] for f in grants.glob("*.json")) == ["server"], list(grants.iterdir())
        # access.watch watches the doors' readers: a card at the desk is not a decision, the server room's is.
        watcher = daemon.client()
        watcher.send_raw((json.dumps({"jsonrpc": "2.0", "id": 1, "method": "access.watch",
                                      "params": {"count": 1}}) + "\n").encode())
        time.sleep(0.5)
        with Badge(pcscd, alice, 41, c):
            time.sleep(1.5)
            with Badge(pcscd, bob, 42, slot=1):
                note = watcher.wait_notification("access.decision", timeout=30)
                assert note["door"] == "server-room" and note["reader"] == server_room, note
                assert note["decision"] == "granted"
    finally:
        daemon.stop()
    # A policy rule gives the door permission to the door controller's uid.
    config["policy"] = {"door": {"users": [str(NOBODY)]}}
    daemon = start_daemon(reachable, pcscd, config=config)
    try:
        c = daemon.client()
        with Badge(pcscd, bob, 42, c, slot=1):
            check(c, reader=server_room)
            _, answers = calls_as(NOBODY, daemon.socket, [("access.check", {"reader": server_room})])
            assert isinstance(answers, list) and answers[0].get("result", {}).get("door") == "server-room", answers
    finally:
        daemon.stop()


def der_tlv(tag: int, value: bytes) -> bytes:
    n = len(value)
    length = bytes([n]) if n < 0x80 else bytes([0x81, n]) if n < 0x100 else bytes([0x82, n >> 8, n & 0xFF])
    return bytes([tag]) + length + value


def twin_on_another_key(ca: pathlib.Path, genuine: pathlib.Path, twin: pathlib.Path, scalar: int) -> None:
    """A second card for the same badge: a new 9E key (the fixed `scalar`) and a second certificate from the same CA
    with the genuine certificate's subject, UUID and FASC-N; the genuine card's CHUID. What a CA that was tricked or
    compromised, or an anchor shared with another office, can make."""
    ca_key = serialization.load_pem_private_key((ca / "badge-ca-key.pem").read_bytes(), None)
    original = x509.load_der_x509_certificate(tlv_items(card_object(genuine, CARD_AUTH_CERT))[0x70])
    key = ec.derive_private_key(scalar, ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(original.subject).issuer_name(original.issuer)
               .public_key(key.public_key()).serial_number(0x7E55_0051)
               .not_valid_before(original.not_valid_before_utc).not_valid_after(original.not_valid_after_utc))
    for ext in original.extensions:
        value = ext.value
        if isinstance(value, x509.SubjectKeyIdentifier):
            value = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        builder = builder.add_extension(value, ext.critical)
    der = builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)
    state = json.loads(genuine.read_text())
    state["keys"]["9e"] = {"algorithm": 0x11, "privateKey": f"{scalar:064x}"}
    state["objects"][CARD_AUTH_CERT] = (der_tlv(0x70, der) + der_tlv(0x71, b"\x00") + der_tlv(0xFE, b"")).hex()
    twin.write_text(json.dumps(state))


def test_a_badge_pins_its_card_key(tmp_path, pcscd):
    """A registered badge keeps its card's public key: a second card with the same UUID and FASC-N and a valid
    certificate from the same CA on another key is denied BADGE_KEY_MISMATCH (issue 35 §1)."""
    ca = tmp_path / "badge-ca"
    alice = tmp_path / "alice.json"
    badge_id = make_badge(ca, alice, "Alice Example", 51)
    twin = tmp_path / "twin.json"
    twin_on_another_key(ca, alice, twin, 0x51_51_51)
    # openssl: the twin's certificate is as valid as the genuine one.
    text = openssl_verify(tlv_items(card_object(twin, CARD_AUTH_CERT))[0x70], ca / "badge-ca.pem", tmp_path)
    assert "urn:uuid:" in text
    daemon = start_daemon(tmp_path, pcscd, config={"accessControl": {"anchors": [str(ca / "badge-ca.pem")]}})
    try:
        c = daemon.client()
        with Badge(pcscd, alice, 51, c):
            check(c)
            c.call("access.register", {"holder": "alice"})
            assert check(c)["decision"] == "granted"
        with Badge(pcscd, twin, 51, c):
            forged = check(c)
            assert forged["badgeId"] == badge_id, forged
            assert forged["decision"] == "denied" and forged["reasons"] == ["BADGE_KEY_MISMATCH"], forged
        with Badge(pcscd, alice, 51, c):
            assert check(c)["decision"] == "granted"
    finally:
        daemon.stop()


def write_crl(ca: pathlib.Path, path: pathlib.Path, revoked: list[int], *, stale: bool = False, minute: int = 0) -> None:
    """A CRL of the lab badge CA listing `revoked` serials; `stale`: its nextUpdate has passed."""
    ca_key = serialization.load_pem_private_key((ca / "badge-ca-key.pem").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((ca / "badge-ca.pem").read_bytes())
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    this = now - datetime.timedelta(days=2 if stale else 0, minutes=minute)
    builder = (x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject).last_update(this)
               .next_update(this + datetime.timedelta(days=1)))
    for serial in revoked:
        # The lab CA's serials are 20 random bytes: the constructor takes one of 160 bits, the setter refuses it.
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder(serial_number=serial, revocation_date=this).build())
    path.write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))


def badge_serial(state: pathlib.Path) -> int:
    return x509.load_der_x509_certificate(tlv_items(card_object(state, CARD_AUTH_CERT))[0x70]).serial_number


def test_badge_crls_load_again_on_sighup_trust_reload_and_their_timer(tmp_path, pcscd):
    """Badge CRLs are read again from their files on SIGHUP and trust.reload (issue 35 §1); the decision names the CRL
    that answered; a CRL past its nextUpdate keeps failing closed; a bad file keeps the CRL in force."""
    ca = tmp_path / "badge-ca"
    alice = tmp_path / "alice.json"
    make_badge(ca, alice, "Alice Example", 61)
    serial = badge_serial(alice)
    crl = tmp_path / "badge-ca.crl"
    write_crl(ca, crl, [], minute=30)
    config = {"accessControl": {"anchors": [str(ca / "badge-ca.pem")], "crls": [str(crl)]}}
    daemon = start_daemon(tmp_path, pcscd, config=config)
    try:
        c = daemon.client()
        with Badge(pcscd, alice, 61, c):
            check(c)
            c.call("access.register", {"holder": "alice"})
            first = check(c)
            assert first["decision"] == "granted", first
            assert first["crl"]["file"] == str(crl) and "Badge" in first["crl"]["issuer"], first
            # Revoked in the file: nothing changes until the daemon reads it again.
            write_crl(ca, crl, [serial], minute=20)
            assert check(c)["decision"] == "granted"
            daemon.proc.send_signal(signal.SIGHUP)
            revoked = wait_for(lambda: (d := check(c))["reasons"] == ["CERT_REVOKED"] and d)
            assert revoked and revoked["crl"]["thisUpdate"] > first["crl"]["thisUpdate"], revoked
            # trust.reload: badges only (no --csca), the new CRL in force at once.
            write_crl(ca, crl, [], minute=10)
            status = c.call("trust.reload")
            assert [x["file"] for x in status["badges"]["crls"]] == [str(crl)], status
            assert check(c)["decision"] == "granted"
            # A CRL past its nextUpdate fails closed, reloaded or not.
            write_crl(ca, crl, [], stale=True)
            c.call("trust.reload")
            assert check(c)["reasons"] == ["CERT_REVOCATION_UNKNOWN"]
            # A bad file: the error names it, the CRL in force stays.
            crl.write_text("not a CRL")
            try:
                c.call("trust.reload")
                raise AssertionError("a bad CRL file was loaded")
            except RPCError as e:
                assert e.code == "INVALID_INPUT" and str(crl) in e.error["message"], e
            assert check(c)["reasons"] == ["CERT_REVOCATION_UNKNOWN"]
    finally:
        daemon.stop()
    # crlRefreshSeconds: the file is read again on its own.
    write_crl(ca, crl, [serial])
    config["accessControl"]["crlRefreshSeconds"] = 1
    daemon = start_daemon(tmp_path, pcscd, config=config)
    try:
        c = daemon.client()
        with Badge(pcscd, alice, 61, c):
            assert check(c)["reasons"] == ["CERT_REVOKED"]
            write_crl(ca, crl, [], minute=-1)
            assert wait_for(lambda: check(c)["decision"] == "granted", timeout=10)
    finally:
        daemon.stop()


def test_access_md_example_runs_as_written():
    """docs/ACCESS.md's example (issue 36 §4), run by the README examples' runner in the lab: the badge's reader is
    named, the door daemon has its anchors before it starts, and the badge is denied, registered, granted."""
    root = pathlib.Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "scripts" / "readme_examples.py"), "--readme",
                          str(root / "docs" / "ACCESS.md")], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TESSERA_BIN_DIR": str(BIN)})  # sockets under /tmp: short paths
    assert out.returncode == 0, out.stdout + out.stderr
    assert "README examples: 1 passed, 0 failed, 0 not run" in out.stdout, out.stdout
