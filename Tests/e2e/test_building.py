"""A building (issue 37): one badge office tesserad (the badge CA's and the publisher's keys on SoftHSM2) and three
door tesserads, each with its own state directory and its own pcscd + vpcd reader. The office's directory is
served by a real web server on loopback (python's http.server) and fetched into each door's registry directory by
the shipped tessera-registry-sync.service's own ExecStart command. openssl reads the CRL and verifies the signed
list (`openssl cms -verify`) as the independent verifier, and signs the foreign and the expired lists the doors
must refuse."""
import contextlib
import datetime
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import threading
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tessera_harness import BIN, PCSCD, SOFTHSM_MODULE, Daemon, RPCError, SoftHSM, cli, free_port_pair, stop_process
from test_access import Badge, _try, check
from test_piv import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYNC_UNIT = ROOT / "systemd" / "tessera-registry-sync.service"
DOORS = {"lobby": "Lobby", "lab": "Lab", "vault": "Vault"}
MAX_AGE = 15
VALIDITY = 20


def until(predicate, timeout: float = 15.0):
    """predicate()'s first true value within `timeout` seconds; fails the test otherwise."""
    value = wait_for(predicate, timeout=timeout)
    assert value, f"not within {timeout} s"
    return value


def sync_command() -> list[str]:
    """The shipped unit's ExecStart, as systemd would run it: continuation lines joined, `$$` → `$`."""
    text = SYNC_UNIT.read_text().replace("\\\n", " ")
    line = next(l for l in text.splitlines() if l.startswith("ExecStart="))
    return [a.replace("$$", "$") for a in shlex.split(line[len("ExecStart="):])]


def make_key(path: pathlib.Path):
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return key


def make_cert(path: pathlib.Path, name: str, key, issuer_name=None, issuer_key=None, ca=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Badge Office"),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name or subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca,
                                            content_commitment=False, key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False),
                              critical=True))
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


def import_key(hsm: SoftHSM, pem: pathlib.Path, label: str, key_id: str) -> None:
    subprocess.run(["softhsm2-util", "--import", str(pem), "--token", "badges", "--label", label, "--id", key_id,
                    "--pin", "1234"], check=True, capture_output=True, env={**os.environ, **hsm.env})


def openssl_cms_sign(content: dict, cert: pathlib.Path, key: pathlib.Path, out: pathlib.Path) -> None:
    """A door list signed by openssl (not by Tessera): `openssl cms -sign` over the JSON, DER, content attached."""
    src = out.with_suffix(".json")
    src.write_text(json.dumps(content))
    subprocess.run(["openssl", "cms", "-sign", "-binary", "-nodetach", "-md", "sha256", "-signer", str(cert),
                    "-inkey", str(key), "-in", str(src), "-outform", "DER", "-out", str(out)], check=True)


def openssl_cms_verify(list_file: pathlib.Path, ca: pathlib.Path) -> dict:
    out = subprocess.run(["openssl", "cms", "-verify", "-inform", "DER", "-in", str(list_file), "-binary",
                          "-CAfile", str(ca), "-purpose", "any"], capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


def rfc3339(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class WebServer:
    """python3 -m http.server on loopback, serving the office's directory."""

    def __init__(self, directory: pathlib.Path, log: pathlib.Path):
        self.directory, self.log = directory, log
        self.port = free_port_pair()
        self.proc = None

    def start(self) -> "WebServer":
        self.proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.port),
                                      "--directory", str(self.directory)],
                                     stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        until(lambda: PCSCD._listening(self.port), timeout=30)
        return self

    def stop(self) -> None:
        if self.proc:
            stop_process(self.proc)
            self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Door:
    """A door: its own pcscd (reader "<Name> 00 00"), SoftHSM without tokens, tesserad following the office."""

    def __init__(self, root: pathlib.Path, name: str, reader: str, publisher: pathlib.Path, ca: pathlib.Path):
        self.name = name
        self.root = root / name
        self.root.mkdir()
        self.pcscd = PCSCD(self.root)
        self.pcscd.conf.write_text(self.pcscd.conf.read_text().replace('"Tessera VPCD"', f'"{reader}"'))
        self.reader = f"{reader} 00 00"
        self.registry = self.root / "registry"
        self.registry.mkdir()
        self.config = self.root / "tesserad.json"
        self.config.write_text(json.dumps({"accessControl": {"anchors": [str(ca)], "registry": {
            "directory": str(self.registry), "publisher": str(publisher), "maxAgeSeconds": MAX_AGE,
            "pollSeconds": 1}}}))
        self.hsm = SoftHSM(self.root)
        self.daemon = None
        self.syncing = True

    def start(self) -> "Door":
        if self.pcscd.proc is None:
            self.pcscd.start()
        self.daemon = Daemon(self.root, {**self.hsm.env, **self.pcscd.env},
                             ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config",
                              str(self.config)], name="door").start()
        self.client = self.daemon.client()
        return self

    def stop(self) -> None:
        if self.daemon:
            self.daemon.stop()
        self.pcscd.stop()

    def status(self) -> dict:
        return self.client.call("access.status")

    def log(self) -> str:
        return self.daemon.log.read_text()


class Syncer(threading.Thread):
    """The timer: every second, the unit's command for each door whose syncing is on."""

    def __init__(self, doors: list[Door], url: str, log: pathlib.Path):
        super().__init__(daemon=True)
        self.doors, self.url, self.log = doors, url, log
        self.command = sync_command()
        self.stopping = threading.Event()

    def sync(self, door: Door) -> int:
        env = {**os.environ, "REGISTRY_URL": self.url, "REGISTRY_DIRECTORY": str(door.registry),
               "REGISTRY_PROTOCOLS": "=http"}
        with open(self.log, "ab") as log:
            return subprocess.run(self.command, env=env, stdout=log, stderr=log, timeout=60).returncode

    def run(self) -> None:
        while not self.stopping.is_set():
            for door in self.doors:
                if door.syncing:
                    self.sync(door)
            self.stopping.wait(1)


def present(door: Door, state: pathlib.Path, serial: int) -> dict:
    with Badge(door.pcscd, state, serial, door.client):
        return check(door.client)


def test_a_building_one_office_three_doors(tmp_path):
    hsm = SoftHSM(tmp_path)
    hsm.add_token("badges")
    ca_key = make_key(tmp_path / "ca.key")
    ca_cert = make_cert(tmp_path / "ca.pem", "Badge Office CA", ca_key, ca=True)
    pub_key = make_key(tmp_path / "publisher.key")
    make_cert(tmp_path / "publisher.pem", "Badge Office door lists", pub_key, ca_cert.subject, ca_key)
    import_key(hsm, tmp_path / "ca.key", "badge-ca", "0b0b")
    import_key(hsm, tmp_path / "publisher.key", "publisher", "0c0c")
    # A key that is not the publisher's, with a certificate from the same CA: its lists must be refused too.
    other_key = make_key(tmp_path / "other.key")
    make_cert(tmp_path / "other.pem", "Badge Office door lists", other_key, ca_cert.subject, ca_key)
    (tmp_path / "badges.pin").write_text("1234\n")
    published = tmp_path / "published"
    published.mkdir()
    office_doors = {"lobby": {"readers": ["Lobby 00 00"], "allow": ["alice", "bob"]},
                    "lab": {"readers": ["Lab 00 00"], "allow": ["alice", "bob"]},
                    "vault": {"readers": ["Vault 00 00"], "allow": ["alice"]}}
    config = tmp_path / "office.json"

    def write_office_config(token: str) -> None:
        config.write_text(json.dumps({"pinFiles": {"badges": str(tmp_path / "badges.pin")}, "accessControl": {
            "anchors": [str(tmp_path / "ca.pem")], "doors": office_doors,
            "issuer": {"tokenId": token, "keyLabel": "badge-ca", "certificate": str(tmp_path / "ca.pem")},
            "publisher": {"tokenId": token, "keyLabel": "publisher", "certificate": str(tmp_path / "publisher.pem"),
                          "directory": str(published), "validitySeconds": VALIDITY}}}))

    (tmp_path / "office-pcscd").mkdir()
    office_pcscd = PCSCD(tmp_path / "office-pcscd").start()
    args = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--allow-default-piv-management-key",
            "--config", str(config)]
    env = {**hsm.env, **office_pcscd.env}
    write_office_config("TOKEN")
    office = Daemon(tmp_path, env, args, name="office").start()
    token = next(t["id"] for t in office.client().call("tokens.list")["tokens"] if t.get("label") == "badges")
    office.stop()
    write_office_config(token)
    office = Daemon(tmp_path, env, args, name="office").start()
    web = WebServer(published, tmp_path / "web.log").start()
    doors = [Door(tmp_path, n, r, tmp_path / "publisher.pem", tmp_path / "ca.pem") for n, r in DOORS.items()]
    syncer = Syncer(doors, web.url, tmp_path / "sync.log")
    try:
        oc = office.client()
        for door in doors:
            door.start()
        syncer.start()
        # Every door gets the office's first list; the empty building denies and names the list it used.
        first = until(lambda: oc.call("access.status").get("number"), timeout=30)
        for door in doors:
            until(lambda: (door.status().get("number") or 0) >= first, timeout=30)
        first_list = (published / f"doorlist-{first}.p7s").read_bytes()

        # The office issues two badges onto blank emulated cards in its own reader.
        alice, bob = tmp_path / "alice.json", tmp_path / "bob.json"
        issued = {}
        for holder, state, serial in (("alice", alice, 7001), ("bob", bob, 7002)):
            with Badge(office_pcscd, state, serial, oc):
                issued[holder] = until(lambda: _try(lambda: oc.call("access.issue", {"holder": holder})))
                assert issued[holder]["decision"] == "granted", issued[holder]
        after_issue = until(lambda: oc.call("access.status")["badges"] == 2 and oc.call("access.status"))
        assert after_issue["role"] == "office" and after_issue["revoked"] == 0
        # A forced publication (the CLI's access publish) takes the next number.
        forced = cli(office, "access", "publish").stdout
        number = re.search(r"^number +(\d+)$", forced, re.M)
        assert number and int(number.group(1)) > after_issue["number"], forced
        after_issue = oc.call("access.status")

        # Granted at each door after a sync; the door rule of the reader's door in the list applies.
        for door in doors:
            until(lambda: door.status()["number"] >= after_issue["number"], timeout=30)
            d = present(door, alice, 7001)
            assert d["decision"] == "granted", (door.name, d)
            assert d["holder"] == "alice" and d["door"] == door.name
            assert d["registry"]["number"] >= after_issue["number"] and d["registry"]["age"] < MAX_AGE
        vault = doors[2]
        d = present(vault, bob, 7002)
        assert d["decision"] == "denied" and d["reasons"] == ["DOOR_NOT_ALLOWED"], d
        assert present(doors[0], bob, 7002)["decision"] == "granted"

        # Suspended at the office: denied at each door within the sync interval plus the publication.
        oc.call("credentials.suspend", {"credentialId": issued["alice"]["badgeId"]})
        suspended_at = time.time()
        for door in doors:
            def denied():
                d = present(door, alice, 7001)
                return d if d["decision"] == "denied" else None
            d = until(denied, timeout=30)
            assert "BADGE_SUSPENDED" in d["reasons"] and "CERT_REVOKED" in d["reasons"], d
            # The decision names the file of the office's CRL that answered (the one the sync put in the directory).
            assert d["crl"]["file"] == str(door.registry / "badges.crl"), d
        reached = time.time() - suspended_at
        print(f"suspension reached all three doors in {reached:.1f} s")
        assert reached < 30

        # openssl reads the office's CRL (alice's certificate on hold) and verifies the list (publisher → CA).
        crl = subprocess.run(["openssl", "crl", "-inform", "DER", "-in", str(published / "badges.crl"), "-noout",
                              "-text"], check=True, capture_output=True, text=True).stdout
        assert "Certificate Hold" in crl and "CRL Number" in crl, crl
        latest = (published / "latest").read_text().strip()
        content = openssl_cms_verify(published / latest, tmp_path / "ca.pem")
        states = {b["holder"]: b["state"] for b in content["badges"]}
        assert states == {"alice": "suspended", "bob": "active"}, content
        assert content["doors"]["vault"]["allow"] == ["alice"]

        # Resumed → granted again; the hold leaves the CRL.
        oc.call("credentials.resume", {"credentialId": issued["alice"]["badgeId"]})
        for door in doors:
            def granted():
                d = present(door, alice, 7001)
                return d if d["decision"] == "granted" else None
            until(granted, timeout=30)
        crl = subprocess.run(["openssl", "crl", "-inform", "DER", "-in", str(published / "badges.crl"), "-noout",
                              "-text"], check=True, capture_output=True, text=True).stdout
        assert "Certificate Hold" not in crl

        # A door changes no badge: the office does.
        lobby = doors[0]
        for method, params in (("access.register", {"holder": "mallory"}),
                               ("credentials.suspend", {"credentialId": issued["alice"]["badgeId"]})):
            try:
                lobby.client.call(method, params)
                raise AssertionError(f"{method} changed a badge at a door")
            except RPCError as e:
                assert e.code == "REGISTRY_READ_ONLY", e

        # Refused lists: tampered, signed by another key, older, expired. The door keeps its list each time.
        lobby.syncing = False
        time.sleep(2)
        kept = lobby.status()["number"]
        current = (lobby.registry / (lobby.registry / "latest").read_text().strip()).read_bytes()
        good = openssl_cms_verify(lobby.registry / (lobby.registry / "latest").read_text().strip(),
                                  tmp_path / "ca.pem")
        now = datetime.datetime.now(datetime.timezone.utc)
        newer = {**good, "number": kept + 100}
        i = current.index(b'"alice"')
        tampered = current[:i + 1] + b"A" + current[i + 2:]
        offers = {"tampered": tampered, "older": first_list}
        openssl_cms_sign(newer, tmp_path / "other.pem", tmp_path / "other.key", tmp_path / "foreign.p7s")
        offers["foreign"] = (tmp_path / "foreign.p7s").read_bytes()
        expired = {**newer, "issuedAt": rfc3339(now - datetime.timedelta(seconds=120)),
                   "expiresAt": rfc3339(now - datetime.timedelta(seconds=60))}
        openssl_cms_sign(expired, tmp_path / "publisher.pem", tmp_path / "publisher.key", tmp_path / "expired.p7s")
        offers["expired"] = (tmp_path / "expired.p7s").read_bytes()
        expected = {"tampered": "signature", "foreign": "signature", "older": "notNewer", "expired": "expired"}
        for n, (label, data) in enumerate(offers.items()):
            name = f"doorlist-{kept + 200 + n}.p7s"
            (lobby.registry / name).write_bytes(data)
            (lobby.registry / "latest").write_text(name + "\n")
            refused = rf"file=\S*/{name} reason={expected[label]} .*door list refused"
            until(lambda: re.search(refused, lobby.log()), timeout=15)
            assert lobby.status()["number"] == kept, label
            assert present(lobby, alice, 7001)["decision"] == "granted", label
        lobby.syncing = True

        # A door restarted offline (its registry directory emptied, no sync) decides from its saved list.
        lab = doors[1]
        lab.syncing = False
        lab.daemon.stop()
        for f in lab.registry.iterdir():
            f.unlink()
        lab.start()
        assert lab.status()["number"] is not None
        assert present(lab, alice, 7001)["decision"] == "granted"
        lab.syncing = True

        # The office is cut off: the doors keep deciding with their last list until maxAgeSeconds, then deny every
        # badge with REGISTRY_STALE; when the office is back, they recover.
        web.stop()
        cut = time.time()
        assert present(lobby, alice, 7001)["decision"] == "granted"
        def stale():
            d = present(lobby, alice, 7001)
            return d if "REGISTRY_STALE" in d["reasons"] else None
        d = until(stale, timeout=MAX_AGE + 20)
        assert d["decision"] == "denied" and d["registry"]["age"] > MAX_AGE - 1, d
        assert time.time() - cut <= MAX_AGE + 15
        assert lobby.status()["stale"] is True
        assert re.search(r"^stale +true$", cli(lobby.daemon, "access", "status").stdout, re.M)
        web.start()
        def back():
            d = present(lobby, alice, 7001)
            return d if d["decision"] == "granted" else None
        until(back, timeout=30)
    finally:
        syncer.stopping.set()
        if syncer.is_alive():
            syncer.join(30)
        web.stop()
        for door in doors:
            door.stop()
        office.stop()
        office_pcscd.stop()


def test_a_wrong_publisher_or_registry_setting_stops_start_up(tmp_path):
    pub = {"tokenId": "t", "keyLabel": "k", "certificate": "c", "directory": str(tmp_path)}
    reg = {"directory": str(tmp_path), "publisher": "p.pem", "maxAgeSeconds": 60}
    for section, message in [({"publisher": {**pub, "validity": 60}},
                              "unknown key 'validity' in accessControl.publisher"),
                             ({"publisher": {**pub, "validitySeconds": 5}}, "validitySeconds 5 is out of range"),
                             ({"registry": {**reg, "maxAge": 1}}, "unknown key 'maxAge' in accessControl.registry"),
                             ({"registry": {**reg, "maxAgeSeconds": 0}}, "maxAgeSeconds 0 is out of range"),
                             ({"registry": reg, "publisher": pub}, "a door that follows an office's registry does not "
                                                                   "publish one")]:
        config = tmp_path / "tesserad.json"
        config.write_text(json.dumps({"accessControl": {"anchors": ["ca.pem"], **section}}))
        run = subprocess.run([str(BIN / "tesserad"), "--config", str(config), "--socket", str(tmp_path / "s.sock"),
                              "--state-dir", str(tmp_path / "state"), "--no-embedded-softhsm"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and message in run.stderr, (message, run.stderr)
