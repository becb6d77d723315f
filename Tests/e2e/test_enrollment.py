"""Kiosk enrollment end to end (docs/ENROLLMENT.md): the real tesserad with an `enrollment` configuration, a real
SoftHSM2 token, a private pcscd whose vpcd reader holds the emulated passport (`tessera lab emulate-passport`), a
file-drop OTP notifier read back here, activation tokens minted with PyJWT (independent of Tessera's JWS code) and
passkeys checked with py_webauthn and python-fido2 (verify.py). The CLI `tessera enroll-station` is driven too."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import pathlib
import queue
import signal
import stat
import subprocess
import threading
import time
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tessera_harness import (BIN, MRZ_ANNA, PCSCD, SOFTHSM_MODULE, Daemon, EmulatedPassport, RPCError, SoftHSM,
                             b64u, make_passport_profile, unb64u)
from verify import verify_assertion, verify_registration

MRZ = MRZ_ANNA
WRONG_MRZ_FIELDS = {"documentNumber": "L898902C3", "dateOfBirth": "740813", "dateOfExpiry": "120415"}
RP = "badge.example.com"
ORIGIN = f"https://{RP}"
STATION = "kiosk-test-1"
ISSUER = "https://backend.example"
KID = "2026-1"
PIN = "1234"
SUBJECT = "employee-4711"
EMAIL = "anna.eriksson@example.com"
PHONE = "+49 (151) 2345-6789"
PHONE_E164 = "+4915123456789"

EXPECTED = {"surname": "Eriksson", "givenNames": "anna maria", "documentNumber": "L898902C3", "nationality": "UTO",
            "issuingState": "UTO", "dateOfBirth": "1974-08-12", "dateOfExpiry": "2012-04-15", "sex": "F",
            "documentType": "P"}
TERMS = {"key": "TERMS_ACCEPTANCE", "client": True, "prompt": "Accept the terms of use",
         "input": {"type": "object", "required": ["accepted"], "properties": {"accepted": {"const": True}}}}
CONFIRM = {"key": "CONFIRM", "client": True, "prompt": "Confirm",
           "input": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}}
PASSKEY = {"key": "PASSKEY_CREATION", "rpId": RP, "attestation": "packed"}
NFC = {"key": "NFC_PHASE", "requirePassiveAuthentication": True, "cardWaitSeconds": 20}
FULL_STEPS = ["EMAIL_INFO", "PHONE_INFO", "PHONE_OTP", "NFC_MRZ", NFC, "ATTRIBUTE_MATCHING", TERMS, PASSKEY]
FULL_KEYS = ["EMAIL_INFO", "PHONE_INFO", "PHONE_OTP", "NFC_MRZ", "NFC_PHASE", "ATTRIBUTE_MATCHING",
             "TERMS_ACCEPTANCE", "PASSKEY_CREATION"]

WORKFLOWS = {
    # Remote: the expected attributes come from the configuration.
    "full": {"remote": True, "expected": {"surname": "ERIKSSON", "givenNames": "ANNA MARIA"}, "steps": FULL_STEPS},
    # Only with an activation token (remote is off): the token brings the expected attributes.
    "badge": {"remote": False, "steps": FULL_STEPS},
    "otp": {"remote": True, "steps": ["PHONE_INFO", "PHONE_OTP", CONFIRM]},
    "contact": {"remote": True, "steps": ["EMAIL_INFO", CONFIRM]},
    "chip": {"remote": True, "steps": ["NFC_MRZ", NFC, CONFIRM]},
    "match": {"remote": False, "steps": ["NFC_MRZ", NFC, "ATTRIBUTE_MATCHING", CONFIRM]},
    # The short form: just the steps (remote by default).
    "short-form": ["EMAIL_INFO", CONFIRM],
    # A step this station cannot perform (document capture): listed, unavailable (test_face.py runs face steps).
    "doc-auth": {"remote": True, "steps": ["EMAIL_INFO", "DOC_AUTH", PASSKEY]},
    "needs-token": {"remote": True, "steps": ["NFC_MRZ", NFC, "ATTRIBUTE_MATCHING"]},
    "email-otp": {"remote": True, "steps": ["EMAIL_INFO", "EMAIL_OTP", CONFIRM]},
    "quick-chip": {"remote": True, "steps": ["NFC_MRZ", {"key": "NFC_PHASE", "cardWaitSeconds": 1}, CONFIRM]},
    "quick-passkey": {"remote": True, "steps": ["EMAIL_INFO", PASSKEY]},
    # A chip without anti-clone support (no DG15, no PACE-CAM) passes only when the step says so.
    "chip-clonable": {"remote": True, "steps": ["NFC_MRZ", dict(NFC, allowClonable=True), CONFIRM]},
    "chip-unverified": {"remote": True, "steps": ["NFC_MRZ", {"key": "NFC_PHASE", "allowUnverified": True,
                                                               "cardWaitSeconds": 20}, CONFIRM]},
}


# --- fixtures ----------------------------------------------------------------------------------------------------

class Lab:
    """Shared by the module: one pcscd with vpcd readers, two passport profiles, the issuer's key pair."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.pcscd = PCSCD(root).start()
        # Active authentication (DG15): the chip proves its key, so NFC_PHASE finds it authentic.
        self.profile = make_passport_profile(root / "passport", MRZ, "--pace", "ecdh-gm-p256-aes128", "--aa")
        self.big = make_passport_profile(root / "passport-big", MRZ, "--pace", "ecdh-gm-p256-aes128", "--aa",
                                         "--photo-padding", "20000")
        # PACE with chip authentication mapping: the chip proves the key in its DG14.
        self.cam = make_passport_profile(root / "passport-cam", MRZ, "--pace", "ecdh-cam-p256-aes128")
        # PACE-GM without DG15: no anti-clone mechanism at all.
        self.clonable = make_passport_profile(root / "passport-clonable", MRZ, "--pace", "ecdh-gm-p256-aes128")
        self.csca_args = [a for p in (self.profile, self.big, self.cam, self.clonable)
                          for a in ("--csca", str(p / "csca.pem"))]
        self.issuer_key = ec.generate_private_key(ec.SECP256R1())
        self.forger_key = ec.generate_private_key(ec.SECP256R1())
        self.issuer_pem = root / "issuer.pem"
        self.issuer_pem.write_bytes(self.issuer_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def mint(self, workflow: str, key=None, kid: str | None = KID, **claims) -> str:
        """An activation token signed (ES256) by PyJWT. A claim given as None is left out."""
        now = int(time.time())
        payload = {"iss": ISSUER, "jti": uuid.uuid4().hex, "iat": now, "exp": now + 600, "aud": [STATION, "kiosk-other"],
                   "workflow": workflow, "sub": SUBJECT,
                   "user": {"name": "anna.eriksson", "displayName": "Anna Maria Eriksson"}, "expected": EXPECTED}
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        headers = {"typ": "tessera-activation+jwt"}
        if kid is not None:
            headers["kid"] = kid
        return jwt.encode(payload, key or self.issuer_key, algorithm="ES256", headers=headers)

    def stop(self) -> None:
        self.pcscd.stop()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("enrollment"))
    yield lab
    lab.stop()


def enrollment_config(lab: Lab, root: pathlib.Path, notifier: bool = True, otp: dict | None = None,
                      workflows: dict | None = None, idle: int = 1800) -> dict:
    config = {
        "idleTimeoutSeconds": idle,
        "otp": {"attempts": 3, "ttlSeconds": 600, "maxResends": 2, **(otp or {})},
        "issuers": [{"issuer": ISSUER, "keyId": KID, "publicKeyFile": str(lab.issuer_pem)}],
        "stationId": STATION,
        "workflows": workflows or WORKFLOWS,
    }
    if notifier:
        config["notifier"] = {"directory": str(root / "otp")}
    return config


class Station:
    """One kiosk: its own SoftHSM2 token, config, state dir and tesserad (on the module's pcscd)."""

    def __init__(self, lab: Lab, root: pathlib.Path, **config):
        self.lab, self.root = lab, root
        self.otp_dir = root / "otp"
        self.hsm = SoftHSM(root)
        self.hsm.add_token("kiosk", pin=PIN)
        self.config = root / "tesserad.json"
        self.config.write_text(json.dumps({"enrollment": enrollment_config(lab, root, **config)}))
        self.daemon = Daemon(root, {**self.hsm.env, **lab.pcscd.env},
                             ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config", str(self.config),
                              *lab.csca_args])

    def start(self) -> "Station":
        self.daemon.start()
        return self

    def client(self):
        return self.daemon.client()

    def session(self) -> "Session":
        return Session(self)

    def card_present(self, reader: str) -> bool:
        return any(r["name"] == reader and r["cardPresent"] for r in self.client().call("readers.list")["readers"])

    def chip(self, big: bool = False, *args: str, profile: pathlib.Path | None = None) -> EmulatedPassport:
        chosen = profile or (self.lab.big if big else self.lab.profile)
        return EmulatedPassport(self.lab.pcscd, chosen, self.card_present, *args)

    def otp_files(self, enrollment_id: str, step: str = "PHONE_OTP") -> list[pathlib.Path]:
        files = self.otp_dir.glob(f"{enrollment_id}-{step}-*.json")
        return sorted(files, key=lambda p: int(p.stem.rsplit("-", 1)[1]))

    def otp(self, enrollment_id: str, step: str = "PHONE_OTP", count: int = 1, timeout: float = 10) -> dict:
        """The newest code message once `count` were dropped."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            files = self.otp_files(enrollment_id, step)
            if len(files) >= count:
                return json.loads(files[-1].read_text())
            time.sleep(0.02)
        raise TimeoutError(f"no code #{count} for {enrollment_id} {step} in {self.otp_dir}")

    def key_objects(self) -> tuple[int, int]:
        """(private, public) key objects on the token, as OpenSC's pkcs11-tool (an independent client) lists them."""
        out = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "kiosk", "--login",
                              "--pin", PIN, "--list-objects"], capture_output=True, text=True, check=True,
                             env={**os.environ, **self.hsm.env}).stdout
        return (sum(line.startswith("Private Key Object") for line in out.splitlines()),
                sum(line.startswith("Public Key Object") for line in out.splitlines()))

    def stop(self) -> None:
        self.daemon.stop()


@pytest.fixture
def stations(lab, tmp_path):
    """Starts stations; stops them after the test."""
    made: list[Station] = []

    def make(name: str = "kiosk", start: bool = True, **config) -> Station:
        s = Station(lab, tmp_path / name, **config)
        made.append(s)
        return s.start() if start else s
    yield make
    for s in made:
        s.stop()


@pytest.fixture
def station(stations) -> Station:
    return stations()


class Session:
    """A subscribed connection, as a kiosk UI holds it."""

    def __init__(self, station: Station):
        self.station = station
        self.c = station.client()
        self.c.call("enrollment.subscribe")
        self.log: list[dict] = []
        self.eid: str | None = None

    def call(self, method: str, params: dict | None = None) -> dict:
        return self.c.call(method, params)

    def submit(self, key: str, payload: dict) -> dict:
        return self.call("enrollment.submit", {"stepKey": key, "payload": payload})

    def start(self, workflow: str | None = None, token: str | None = None, **extra) -> dict:
        type_ = {"remote": {"candidate": workflow}} if workflow else {"activationToken": token}
        started = self.call("enrollment.start", {"type": type_, **extra})
        self.eid = started["enrollmentId"]
        return started

    def next(self, timeout: float = 30) -> dict:
        """The next enrollment notification (others, e.g. tokens.changed, are skipped)."""
        while True:
            try:
                n = self.c.next_notification(timeout)
            except TimeoutError:
                tail = [(x["method"], x["params"].get("key") or x["params"].get("step")) for x in self.log[-8:]]
                raise AssertionError(f"no notification in {timeout} s; the last ones: {tail}; status: "
                                     f"{self.station.client().call('enrollment.status')}") from None
            if n["method"].startswith("enrollment."):
                self.log.append(n)
                return n

    def expect(self, method: str, timeout: float = 30, **match) -> dict:
        """Reads notifications up to the first `method` whose params contain `match`; returns its params."""
        while True:
            n = self.next(timeout)
            p = n["params"]
            if n["method"] == method and all(p.get(k) == v for k, v in match.items()):
                return p
            if n["method"] == "enrollment.finished" and self.eid in (p["enrollmentId"], None):
                raise AssertionError(f"enrollment finished while waiting for {method} {match}: {p}")

    def required(self, key: str, timeout: float = 30) -> dict:
        return self.expect("enrollment.stepRequired", timeout, key=key)

    def drive(self, answers: dict, timeout: float = 60) -> dict:
        """Answers each stepRequired from `answers` (a payload, or a function of the stepRequired params giving one)
        until enrollment.finished; returns its params."""
        while True:
            n = self.next(timeout)
            if n["method"] == "enrollment.stepRequired":
                key = n["params"]["key"]
                assert key in answers, f"unexpected step {key}: {n['params']}"
                a = answers[key]
                self.submit(key, a(n["params"]) if callable(a) else a)
            elif n["method"] == "enrollment.finished" and self.eid in (n["params"]["enrollmentId"], None):
                return n["params"]

    def seen(self, method: str) -> list[dict]:
        return [n["params"] for n in self.log if n["method"] == method]


def answers_for(station: Station) -> dict:
    return {
        "EMAIL_INFO": {"email": EMAIL},
        "PHONE_INFO": {"phone": PHONE},
        "PHONE_OTP": lambda p: {"otp": station.otp(p["enrollmentId"])["code"]},
        "NFC_MRZ": {"mrz": MRZ},
        "TERMS_ACCEPTANCE": {"accepted": True},
        "CONFIRM": {"ok": True},
        "PASSKEY_CREATION": {"pin": PIN},
    }


def rpc_error(fn, *args, **kwargs) -> RPCError:
    with pytest.raises(RPCError) as e:
        fn(*args, **kwargs)
    return e.value


def finished_error(params: dict) -> dict:
    assert params.get("error"), params
    return params["error"]


def mismatches_of(error: dict) -> list:
    return error.get("mismatches") or error.get("data", {}).get("mismatches") or []


def check_credential(session: Session, credential: dict, user_handle: bytes | None) -> None:
    """The success outcome's registration and an assertion with it, both verified independently."""
    client_data = json.loads(unb64u(credential["clientDataJSON"]))
    challenge = unb64u(client_data["challenge"])
    assert len(challenge) >= 16
    assert credential["rpId"] == RP
    verified = verify_registration(credential, challenge, RP, ORIGIN, require_uv=True)
    assert getattr(verified.fmt, "value", verified.fmt) == "packed"
    assert verified.credential_public_key == unb64u(credential["publicKey"])
    if user_handle is not None:
        assert unb64u(credential["userId"]) == user_handle
    fresh = os.urandom(32)
    assertion = session.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(fresh), "pin": PIN,
                                                      "allowCredentials": [credential["credentialId"]]})
    verify_assertion(assertion, fresh, RP, ORIGIN, verified.credential_public_key, 0, require_uv=True)
    assert unb64u(assertion["userHandle"]) == unb64u(credential["userId"])


# --- configuration and candidates ---------------------------------------------------------------------------------

def test_candidates(station):
    c = station.session()
    cands = {x["workflow"]: x for x in c.call("enrollment.candidates")["candidates"]}
    assert set(cands) == set(WORKFLOWS)
    full = cands["full"]
    assert full["available"] is True and full["remoteEnrollmentAvailable"] is True and full["unavailableReasons"] == []
    assert [s["key"] for s in full["steps"]] == FULL_KEYS
    by = {s["key"]: s["performedBy"] for s in full["steps"]}
    assert by["EMAIL_INFO"] == by["NFC_MRZ"] == by["TERMS_ACCEPTANCE"] == "client"
    assert by["NFC_PHASE"] == by["ATTRIBUTE_MATCHING"] == by["PASSKEY_CREATION"] == "daemon"
    assert {"email", "phone", "otpNotifier", "document"} <= set(full["needs"])
    assert "activationToken" not in full["needs"]
    # Not remote: available with a token only.
    assert cands["badge"]["available"] is True and cands["badge"]["remoteEnrollmentAvailable"] is False
    # DOC_AUTH: listed, unavailable, and the reason names it.
    face = cands["doc-auth"]
    assert face["available"] is False and face["remoteEnrollmentAvailable"] is False
    assert any("DOC_AUTH" in r for r in face["unavailableReasons"]), face
    # Matching without expected attributes: remote, but only a token can start it.
    nt = cands["needs-token"]
    assert nt["available"] is True and nt["remoteEnrollmentAvailable"] is False
    assert "activationToken" in nt["needs"]

    for workflow in ["doc-auth", "no-such-workflow", "badge", "needs-token"]:
        e = rpc_error(c.start, workflow)
        assert e.code == "CANDIDATE_UNAVAILABLE", (workflow, e)
    assert rpc_error(c.start, "doc-auth").data["reasons"]
    assert c.call("enrollment.status")["active"] is False


def test_short_form_workflow_started_with_the_candidate_object(station):
    c = station.session()
    (cand,) = [x for x in c.call("enrollment.candidates")["candidates"] if x["workflow"] == "short-form"]
    assert cand["remoteEnrollmentAvailable"] is True and [s["key"] for s in cand["steps"]] == ["EMAIL_INFO", "CONFIRM"]
    started = c.call("enrollment.start", {"type": {"remote": {"candidate": cand}}})
    assert started["workflow"] == "short-form" and started["steps"] == ["EMAIL_INFO", "CONFIRM"]
    c.call("enrollment.cancel")
    # The token may also come as {token}; PyJWT's default header (typ JWT) is accepted.
    token = jwt.encode(jwt.decode(station.lab.mint("short-form"), options={"verify_signature": False}),
                       station.lab.issuer_key, algorithm="ES256", headers={"kid": KID})
    assert c.call("enrollment.start", {"type": {"activationToken": {"token": token}}})["workflow"] == "short-form"
    c.call("enrollment.cancel")


def test_candidates_without_notifier(stations):
    s = stations(notifier=False)
    c = s.session()
    cands = {x["workflow"]: x for x in c.call("enrollment.candidates")["candidates"]}
    for name in ["full", "otp", "badge"]:
        assert cands[name]["available"] is False and cands[name]["remoteEnrollmentAvailable"] is False
        assert any("PHONE_OTP" in r for r in cands[name]["unavailableReasons"]), cands[name]
    assert cands["contact"]["available"] is True and cands["contact"]["remoteEnrollmentAvailable"] is True
    e = rpc_error(c.start, "otp")
    assert e.code == "CANDIDATE_UNAVAILABLE"
    e = rpc_error(c.start, token=s.lab.mint("badge"))
    assert e.code == "CANDIDATE_UNAVAILABLE"


@pytest.mark.parametrize("workflow, needle", [
    ({"steps": ["EMAIL_INFO", "BOGUS_STEP"]}, "BOGUS_STEP"),
    ({"steps": ["EMAIL_INFO", {"key": "PASSKEY_CREATION"}]}, "rpId"),
    ({"steps": ["PHONE_OTP"]}, "PHONE_OTP"),
])
def test_bad_workflow_fails_startup(stations, workflow, needle):
    s = stations(start=False, workflows={"broken-flow": workflow})
    proc = subprocess.run([str(BIN / "tesserad"), "--socket", s.daemon.socket, "--state-dir", str(s.daemon.state),
                           *s.daemon.args], env=s.daemon.env, capture_output=True, text=True, timeout=60)
    # docs/ENROLLMENT.md: start-up fails (exit status 1) naming the workflow and the step.
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert needle in proc.stderr and "broken-flow" in proc.stderr, proc.stderr
    assert not os.path.exists(s.daemon.socket)


# --- the full workflow --------------------------------------------------------------------------------------------

def test_full_workflow_with_activation_token(station):
    s = station
    c = s.session()
    token = s.lab.mint("badge")
    with s.chip():
        started = c.start(token=token)
        eid = started["enrollmentId"]
        assert started["workflow"] == "badge" and started["steps"] == FULL_KEYS
        n = c.expect("enrollment.started")
        assert n["enrollmentId"] == eid and n["resumed"] is False and n["steps"] == FULL_KEYS

        req = c.required("EMAIL_INFO")
        assert req["input"]["type"] == "object" and req["prompt"]
        status = c.call("enrollment.status")
        assert (status["active"], status["state"], status["required"]["key"]) == (True, "waitingForInput", "EMAIL_INFO")
        # A wrong step, then invalid input: the step keeps waiting.
        e = rpc_error(c.submit, "PHONE_INFO", {"phone": PHONE})
        assert e.code == "STEP_NOT_EXPECTED" and e.data["expected"] == "EMAIL_INFO"
        for bad in ["anna", "anna@", "a b@example.com", "x" * 250 + "@example.com"]:
            e = rpc_error(c.submit, "EMAIL_INFO", {"email": bad})
            assert e.code == "INVALID_INPUT" and e.data["field"] == "email", bad
        c.submit("EMAIL_INFO", {"email": EMAIL})
        assert c.expect("enrollment.stepCompleted") == {"key": "EMAIL_INFO", "index": 0, "enrollmentId": eid}

        c.required("PHONE_INFO")
        for bad in ["0151 2345678", "+0151234", "+49 151 abc", "+1234567890123456"]:
            e = rpc_error(c.submit, "PHONE_INFO", {"phone": bad})
            assert e.code == "INVALID_INPUT" and e.data["field"] == "phone", bad
        c.submit("PHONE_INFO", {"phone": PHONE})
        c.expect("enrollment.stepCompleted", key="PHONE_INFO")

        req = c.required("PHONE_OTP")
        message = s.otp(eid)
        (drop,) = s.otp_files(eid)
        assert drop.name == f"{eid}-PHONE_OTP-1.json"
        assert stat.S_IMODE(drop.stat().st_mode) == 0o600
        assert message["type"] == "otp" and message["channel"] == "sms" and message["to"] == PHONE_E164
        assert message["enrollmentId"] == eid and message["workflow"] == "badge" and message["stepKey"] == "PHONE_OTP"
        assert len(message["code"]) == 6 and message["code"].isdigit()
        assert req["attemptsLeft"] == 3 and req["expiresAt"] == message["expiresAt"]
        assert PHONE_E164 not in req["to"] and req["to"].endswith("89")
        data = c.call("enrollment.transactionData")
        assert data["enrollmentId"] == eid
        assert data["data"]["email"] == EMAIL and data["data"]["phone"] == PHONE_E164
        assert not data["data"].get("phoneVerified")
        assert message["code"] not in json.dumps(data)
        c.submit("PHONE_OTP", {"otp": message["code"]})
        c.expect("enrollment.stepCompleted", key="PHONE_OTP")
        assert c.call("enrollment.transactionData")["data"]["phoneVerified"] is True

        c.required("NFC_MRZ")
        e = rpc_error(c.submit, "NFC_MRZ", {"mrz": MRZ.replace("L898902C36", "L898902C37")})
        assert e.code in ("INVALID_INPUT", "MRZ_INVALID"), e
        e = rpc_error(c.submit, "NFC_MRZ", {"mrz": MRZ, "can": "123456"})
        assert e.code == "INVALID_INPUT", e
        c.submit("NFC_MRZ", {"mrz": MRZ})
        c.expect("enrollment.stepCompleted", key="NFC_MRZ")
        busy = c.expect("enrollment.busy", step="NFC_PHASE")
        assert busy["expectedInterval"] == "long"
        c.expect("enrollment.stepCompleted", key="NFC_PHASE")
        progress = [p for p in c.seen("enrollment.progress")]
        assert progress and all(p["step"] == "NFC_PHASE" and p["enrollmentId"] == eid for p in progress)
        phases = [p["progress"]["step"] for p in progress]
        assert phases[0] == "connect" and "access" in phases and phases[-1] == "verify", phases
        c.expect("enrollment.stepCompleted", key="ATTRIBUTE_MATCHING")
        summary = c.call("enrollment.transactionData")["data"]["document"]
        assert summary["documentNumber"] == "L898902C3" and summary["passiveAuthentication"] == "valid"

        c.required("TERMS_ACCEPTANCE")
        e = rpc_error(c.submit, "TERMS_ACCEPTANCE", {})
        assert e.code == "INVALID_INPUT" and e.data["field"] == "accepted"
        c.submit("TERMS_ACCEPTANCE", {"accepted": True})

        req = c.required("PASSKEY_CREATION")
        assert req["tokenId"] and req["input"]["required"] == ["pin"]
        e = rpc_error(c.submit, "PASSKEY_CREATION", {"pin": "9999"})
        assert e.code == "PIN_INVALID"
        assert s.key_objects() == (0, 0)
        assert c.call("enrollment.status")["required"]["key"] == "PASSKEY_CREATION"
        # The step's PIN goes through the PIN rules as the submitter's: right after a wrong PIN, back-off.
        e = rpc_error(c.submit, "PASSKEY_CREATION", {"pin": PIN})
        assert e.code == "PIN_BACKOFF" and e.data["retryable"] is True
        assert c.call("enrollment.status")["required"]["key"] == "PASSKEY_CREATION"
        time.sleep(e.data["retryAfterSeconds"] + 0.1)  # let the back-off pass (not a timing assertion)
        c.submit("PASSKEY_CREATION", {"pin": PIN})
        done = c.expect("enrollment.finished")

    assert done["outcome"] == "success" and done["enrollmentId"] == eid, done
    assert [n["key"] for n in c.seen("enrollment.stepCompleted")] == FULL_KEYS
    assert [n["index"] for n in c.seen("enrollment.stepCompleted")] == list(range(8))
    doc = done["document"]
    assert (doc["documentType"], doc["issuingState"], doc["nationality"], doc["documentNumber"]) == ("P", "UTO", "UTO", "L898902C3")
    assert (doc["surname"], doc["givenNames"]) == ("ERIKSSON", "ANNA MARIA")
    assert (doc["dateOfBirth"], doc["dateOfExpiry"]) == ("1974-08-12", "2012-04-15")
    assert doc["accessProtocol"] == "PACE" and doc["passiveAuthentication"] == "valid"
    assert doc["verdict"] == "authentic" and doc["chipAuthenticity"] == "valid"
    check_credential(c, done["credential"], SUBJECT.encode())

    creds = c.call("credentials.list")["credentials"]
    assert [x["credentialId"] for x in creds] == [done["credential"]["credentialId"]]
    assert creds[0]["rpId"] == RP and creds[0]["user"]["name"] == "anna.eriksson"
    assert creds[0]["user"]["displayName"] == "Anna Maria Eriksson"
    assert s.key_objects()[0] == 1

    status = c.call("enrollment.status")
    assert status["active"] is False and status["lastOutcome"]["outcome"] == "success"
    assert rpc_error(c.call, "enrollment.transactionData").code == "NO_ACTIVE_ENROLLMENT"
    assert c.call("enrollment.canResume")["status"] == "nothingToResume"
    assert rpc_error(c.call, "enrollment.resume").code == "NOTHING_TO_RESUME"
    assert rpc_error(c.call, "enrollment.retry").code in ("NO_ACTIVE_ENROLLMENT", "NOT_RETRYABLE")

    (record,) = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert record["outcome"] == "success" and record["workflow"] == "badge" and record["type"] == "activationToken"
    assert record["tokenId"] == jwt.decode(token, options={"verify_signature": False})["jti"]
    assert record["subject"] == SUBJECT and record["credentialId"] == done["credential"]["credentialId"]
    assert record["completedSteps"] == FULL_KEYS and record["passiveAuthentication"] == "valid"
    text = json.dumps(record)
    for personal in [EMAIL, PHONE_E164, "ERIKSSON", "L898902C3", "1974"]:
        assert personal not in text, personal


def test_token_without_user_names_the_passkey_after_sub(station):
    """docs/ENROLLMENT.md, claim `user`: the name defaults to `sub`, the display name to the name on the document."""
    s = station
    c = s.session()
    with s.chip():
        c.start(token=s.lab.mint("badge", user=None))
        done = c.drive(answers_for(s))
    assert done["outcome"] == "success", done
    (cred,) = c.call("credentials.list")["credentials"]
    assert cred["user"]["name"] == SUBJECT, cred["user"]
    assert cred["user"]["displayName"] == "ANNA MARIA ERIKSSON", cred["user"]
    assert unb64u(cred["user"]["id"]) == SUBJECT.encode()


def test_remote_workflow_user_verification_required(station):
    """A remote start (expected attributes from the config); userVerification required asks for the PIN."""
    s = station
    c = s.session()
    with s.chip():
        eid = c.start("full", userVerification="required")["enrollmentId"]
        done = c.drive(answers_for(s))
    assert done["outcome"] == "success", done
    assert "PASSKEY_CREATION" in [p["key"] for p in c.seen("enrollment.stepRequired")]
    check_credential(c, done["credential"], None)
    assert len(s.otp_files(eid)) == 1
    (record,) = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert record["type"] == "remote" and "tokenId" not in record


# --- one-time codes -----------------------------------------------------------------------------------------------

def start_otp(s: Station, c: Session) -> tuple[str, dict]:
    eid = c.start("otp")["enrollmentId"]
    c.required("PHONE_INFO")
    c.submit("PHONE_INFO", {"phone": PHONE})
    req = c.required("PHONE_OTP")
    return eid, req


def wrong(code: str) -> str:
    return code[:-1] + str((int(code[-1]) + 1) % 10)


def test_otp_wrong_code_then_resend_then_right(station):
    s = station
    c = s.session()
    eid, req = start_otp(s, c)
    code = s.otp(eid)["code"]
    assert req["attemptsLeft"] == 3
    for bad in ["12345", "abcdef", ""]:
        assert rpc_error(c.submit, "PHONE_OTP", {"otp": bad}).code in ("INVALID_INPUT", "OTP_INVALID")
    e = rpc_error(c.submit, "PHONE_OTP", {"otp": wrong(code)})
    assert e.code == "OTP_INVALID" and e.data["attemptsLeft"] <= 2
    left = e.data["attemptsLeft"]
    assert c.call("enrollment.status")["state"] == "waitingForInput"
    # A new code: the first one no longer works, the new one does.
    c.submit("PHONE_OTP", {"resend": True})
    req = c.required("PHONE_OTP")
    second = s.otp(eid, count=2)
    assert [p.name for p in s.otp_files(eid)] == [f"{eid}-PHONE_OTP-1.json", f"{eid}-PHONE_OTP-2.json"]
    if second["code"] != code:
        e = rpc_error(c.submit, "PHONE_OTP", {"otp": code})
        assert e.code == "OTP_INVALID"
    c.submit("PHONE_OTP", {"otp": second["code"]})
    c.expect("enrollment.stepCompleted", key="PHONE_OTP")
    assert c.call("enrollment.transactionData")["data"]["phoneVerified"] is True
    c.required("CONFIRM")
    c.submit("CONFIRM", {"ok": True})
    assert c.expect("enrollment.finished")["outcome"] == "success"
    assert left <= 2


def test_otp_too_many_attempts_then_retry(station):
    s = station
    c = s.session()
    eid, _ = start_otp(s, c)
    code = s.otp(eid)["code"]
    codes = []
    for i in range(3):
        e = rpc_error(c.submit, "PHONE_OTP", {"otp": wrong(code)})
        codes.append(e.code)
        if e.code == "OTP_INVALID":
            assert e.data["attemptsLeft"] == 2 - i
        if e.code == "OTP_ATTEMPTS_EXCEEDED":
            break
    # Three attempts: the third wrong code (or a fourth try) ends it.
    if codes[-1] == "OTP_INVALID":
        e = rpc_error(c.submit, "PHONE_OTP", {"otp": code})
        codes.append(e.code)
    assert codes[-1] in ("OTP_ATTEMPTS_EXCEEDED", "NO_ACTIVE_ENROLLMENT", "STEP_NOT_EXPECTED"), codes
    done = c.expect("enrollment.finished")
    assert done["outcome"] == "failedWithRetryPossibility" and finished_error(done)["code"] == "OTP_ATTEMPTS_EXCEEDED"
    assert c.call("enrollment.status")["state"] == "failedRetryable"
    # The right code is refused now too.
    assert rpc_error(c.submit, "PHONE_OTP", {"otp": code}).code in ("STEP_NOT_EXPECTED", "NO_ACTIVE_ENROLLMENT")
    retry = c.call("enrollment.retry")
    assert retry == {"enrollmentId": eid, "step": "PHONE_OTP"}
    c.required("PHONE_OTP")
    assert len(s.otp_files(eid)) == 2
    c.submit("PHONE_OTP", {"otp": s.otp(eid, count=2)["code"]})
    c.required("CONFIRM")
    c.submit("CONFIRM", {"ok": True})
    assert c.expect("enrollment.finished")["outcome"] == "success"
    assert rpc_error(c.call, "enrollment.retry").code in ("NO_ACTIVE_ENROLLMENT", "NOT_RETRYABLE")


def test_otp_expired_then_retry(stations):
    s = stations(otp={"ttlSeconds": 1})
    c = s.session()
    eid, _ = start_otp(s, c)
    code = s.otp(eid)["code"]
    time.sleep(2.2)
    e = rpc_error(c.submit, "PHONE_OTP", {"otp": code})
    assert e.code == "OTP_EXPIRED"
    done = c.expect("enrollment.finished")
    assert done["outcome"] == "failedWithRetryPossibility" and finished_error(done)["code"] == "OTP_EXPIRED"
    assert c.call("enrollment.canResume")["status"] == "canResume"
    c.call("enrollment.retry")
    c.required("PHONE_OTP")
    c.submit("PHONE_OTP", {"otp": s.otp(eid, count=2)["code"]})
    c.required("CONFIRM")


def test_deep_links(station):
    s = station
    c = s.session()
    assert c.call("enrollment.handleDeepLink", {"url": "tessera://phone-binding?otp=123456"})["consumed"] is False
    assert c.call("enrollment.handleDeepLink", {"url": "https://example.com/?otp=1"})["consumed"] is False
    eid, _ = start_otp(s, c)
    code = s.otp(eid)["code"]
    assert c.call("enrollment.handleDeepLink", {"url": f"tessera://email-binding?otp={code}"})["consumed"] is False
    e = rpc_error(c.call, "enrollment.handleDeepLink", {"url": f"tessera://phone-binding?otp={wrong(code)}"})
    assert e.code == "OTP_INVALID" and e.data["attemptsLeft"] == 2
    # Through the CLI, as a phone's link handler would run it.
    out = subprocess.run([str(BIN / "tessera"), "--socket", s.daemon.socket, "enroll-station", "--deep-link",
                          f"tessera://phone-binding?otp={code}"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    assert "accepted" in out.stdout
    c.expect("enrollment.stepCompleted", key="PHONE_OTP")
    assert c.call("enrollment.transactionData")["data"]["phoneVerified"] is True
    c.required("CONFIRM")
    # A start link with an activation token (force: the active one is interrupted).
    r = c.call("enrollment.handleDeepLink", {"url": f"tessera://enroll?token={s.lab.mint('match')}&force=true"})
    assert r["consumed"] is True and r["action"] == "start" and r["enrollmentId"] != eid
    assert c.expect("enrollment.finished", enrollmentId=eid)["outcome"] == "interrupted"
    assert c.call("enrollment.status")["enrollmentId"] == r["enrollmentId"]
    c.call("enrollment.cancel")


def test_email_otp_and_its_deep_link(station):
    s = station
    c = s.session()
    eid = c.start("email-otp")["enrollmentId"]
    c.required("EMAIL_INFO")
    c.submit("EMAIL_INFO", {"email": EMAIL})
    req = c.required("EMAIL_OTP")
    message = s.otp(eid, "EMAIL_OTP")
    assert message["channel"] == "email" and message["to"] == EMAIL and message["stepKey"] == "EMAIL_OTP"
    assert EMAIL not in req["to"]
    assert c.call("enrollment.handleDeepLink", {"url": f"tessera://phone-binding?otp={message['code']}"})["consumed"] is False
    r = c.call("enrollment.handleDeepLink", {"url": f"tessera://email-binding?otp={message['code']}"})
    assert r == {"consumed": True, "action": "otp", "enrollmentId": eid}
    c.expect("enrollment.stepCompleted", key="EMAIL_OTP")
    assert c.call("enrollment.transactionData")["data"]["emailVerified"] is True
    # A start link while one is active, without force, is refused.
    e = rpc_error(c.call, "enrollment.handleDeepLink", {"url": f"tessera://enroll?token={s.lab.mint('match')}"})
    assert e.code == "ENROLLMENT_ACTIVE" and e.data["enrollmentId"] == eid


def test_custom_steps(station):
    s = station
    c = s.session()
    badge = {"key": "BADGE_PHOTO_CONSENT", "prompt": "May we print your photo on the badge?",
             "input": {"type": "object", "required": ["consent"], "properties": {"consent": {"type": "boolean"}}}}
    for bad in [{"key": "EMAIL_INFO"}, {"key": "badge-photo"}, {"key": "FACE_MATCHING"}, {"prompt": "no key"},
                {"key": "CONFIRM"}]:
        e = rpc_error(c.start, "contact", customSteps=[bad])
        assert e.code == "INVALID_INPUT", bad
    assert c.call("enrollment.status")["active"] is False
    # Added before PASSKEY_CREATION, or at the end.
    started = c.start("quick-passkey", customSteps=[badge])
    assert started["steps"] == ["EMAIL_INFO", "BADGE_PHOTO_CONSENT", "PASSKEY_CREATION"]
    c.call("enrollment.cancel")
    started = c.start("contact", customSteps=[badge, {"key": "NOTE"}])
    assert started["steps"] == ["EMAIL_INFO", "CONFIRM", "BADGE_PHOTO_CONSENT", "NOTE"]
    c.required("EMAIL_INFO")
    c.submit("EMAIL_INFO", {"email": EMAIL})
    c.required("CONFIRM")
    c.submit("CONFIRM", {"ok": True})
    req = c.required("BADGE_PHOTO_CONSENT")
    assert req["prompt"] == badge["prompt"] and req["input"] == badge["input"]
    assert rpc_error(c.submit, "BADGE_PHOTO_CONSENT", {}).code == "INVALID_INPUT"
    c.submit("BADGE_PHOTO_CONSENT", {"consent": False, "extra": [1, 2]})
    c.required("NOTE")
    assert "consent" in json.dumps(c.call("enrollment.transactionData")["data"])
    c.submit("NOTE", {"text": "hello"})
    assert c.expect("enrollment.finished")["outcome"] == "success"


# --- ending an enrollment -----------------------------------------------------------------------------------------

def test_force_interrupt(station):
    s = station
    first, second = s.session(), s.session()
    a = first.start("contact")["enrollmentId"]
    first.required("EMAIL_INFO")
    first.submit("EMAIL_INFO", {"email": EMAIL})
    first.required("CONFIRM")
    e = rpc_error(second.start, "otp")
    assert e.code == "ENROLLMENT_ACTIVE" and e.data["enrollmentId"] == a
    e = rpc_error(second.start, token=s.lab.mint("match"))
    assert e.code == "ENROLLMENT_ACTIVE"
    b = second.start("otp", force=True)["enrollmentId"]
    assert b != a
    done = first.expect("enrollment.finished", enrollmentId=a)
    assert done["outcome"] == "interrupted"
    second.required("PHONE_INFO")
    status = second.call("enrollment.status")
    assert status["enrollmentId"] == b and status["workflow"] == "otp"
    assert second.call("enrollment.transactionData")["enrollmentId"] == b
    # The interrupted one's submission no longer lands.
    assert rpc_error(first.submit, "CONFIRM", {"ok": True}).code == "STEP_NOT_EXPECTED"
    (record,) = [r for r in second.call("enrollment.audit")["records"] if r["enrollmentId"] == a]
    assert record["outcome"] == "interrupted" and record["completedSteps"] == ["EMAIL_INFO"]


def test_cancel(station):
    s = station
    c = s.session()
    eid = c.start("contact")["enrollmentId"]
    c.required("EMAIL_INFO")
    c.submit("EMAIL_INFO", {"email": EMAIL})
    c.required("CONFIRM")
    assert c.call("enrollment.transactionData")["data"]["email"] == EMAIL
    assert c.call("enrollment.cancel") == {"cancelled": True, "enrollmentId": eid}
    done = c.expect("enrollment.finished")
    assert done["outcome"] == "cancelled" and done["enrollmentId"] == eid
    assert rpc_error(c.call, "enrollment.transactionData").code == "NO_ACTIVE_ENROLLMENT"
    assert rpc_error(c.call, "enrollment.cancel").code == "NO_ACTIVE_ENROLLMENT"
    assert rpc_error(c.submit, "CONFIRM", {"ok": True}).code == "NO_ACTIVE_ENROLLMENT"
    assert c.call("enrollment.canResume")["status"] == "nothingToResume"
    status = c.call("enrollment.status")
    assert status["active"] is False and status["lastOutcome"]["outcome"] == "cancelled"
    # A new enrollment can start right away.
    c.start("contact")
    c.required("EMAIL_INFO")


# --- crashes ------------------------------------------------------------------------------------------------------

INPUT_STEPS = {"EMAIL_INFO", "PHONE_INFO", "PHONE_OTP", "NFC_MRZ", "TERMS_ACCEPTANCE", "PASSKEY_CREATION"}


def next_input_step(k: int) -> int:
    """Index of the first step at or after k that waits for input (len(FULL_KEYS) when none does)."""
    return next((i for i in range(k, len(FULL_KEYS)) if FULL_KEYS[i] in INPUT_STEPS), len(FULL_KEYS))


def test_kill9_at_every_step_boundary_then_resume(stations):
    """For each boundary (after enrollment.started, after each stepCompleted): kill -9 right after the notification,
    restart on the same state dir, canResume, resume, finish. No step runs twice."""
    boundaries = len(FULL_KEYS) + 1
    for k in range(boundaries):
        print(f"boundary {k}: after {'enrollment.started' if k == 0 else FULL_KEYS[k - 1]}")
        s = stations(f"kiosk-{k}")
        c = s.session()
        answers = answers_for(s)
        with s.chip():
            eid = c.start(token=s.lab.mint("badge"))["enrollmentId"]
            completed_before: list[str] = []
            # Run to boundary k.
            while True:
                n = c.next()
                m, p = n["method"], n["params"]
                if m == "enrollment.started" and k == 0:
                    break
                if m == "enrollment.stepCompleted":
                    completed_before.append(p["key"])
                    if len(completed_before) == k:
                        break
                if m == "enrollment.stepRequired":
                    a = answers[p["key"]]
                    c.submit(p["key"], a(p) if callable(a) else a)
                assert m != "enrollment.finished", p
            s.daemon.kill9()
            assert completed_before == FULL_KEYS[:k]
            s.daemon.start()

            c2 = s.session()
            can = c2.call("enrollment.canResume")
            status = c2.call("enrollment.status")
            if can["status"] == "nothingToResume":
                # Killed after the last stepCompleted, but the outcome was recorded before the kill.
                assert k == len(FULL_KEYS) and status["active"] is False, (k, can, status)
                (record,) = [r for r in c2.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
                assert record["outcome"] == "success" and record["completedSteps"] == FULL_KEYS
                done = None
            else:
                # Between the notification and the kill the daemon may have gone on through steps that need no
                # input (NFC_PHASE, ATTRIBUTE_MATCHING); it cannot pass the next step that needs input.
                j = len(status["completedSteps"])
                assert k <= j <= next_input_step(k), (k, status)
                assert status["completedSteps"] == FULL_KEYS[:j] and status["state"] == "suspended", (k, status)
                assert can["status"] == "canResume" and can["enrollmentId"] == eid, (k, can)
                assert can.get("step") == (FULL_KEYS[j] if j < len(FULL_KEYS) else None), (k, can)
                resumed = c2.call("enrollment.resume")
                assert resumed["enrollmentId"] == eid and resumed["completedSteps"] == FULL_KEYS[:j], (k, resumed)
                done = c2.drive(answers)
                assert done["outcome"] == "success", (k, done)
                after = [x["key"] for x in c2.seen("enrollment.stepCompleted")]
                assert after == FULL_KEYS[j:], (k, after)
                asked_again = [x["key"] for x in c2.seen("enrollment.stepRequired")]
                assert not set(asked_again) & set(FULL_KEYS[:j]), (k, asked_again)
                # The chip is read after the restart only when NFC_PHASE had not completed before it.
                reads = sum(1 for x in c2.seen("enrollment.progress") if x["progress"]["step"] == "connect")
                assert reads == (1 if j <= FULL_KEYS.index("NFC_PHASE") else 0), (k, reads)
        files = s.otp_files(eid)
        # Killed right after PHONE_INFO, the code may not have been handed to the notifier yet: then one more.
        assert len(files) == 1 or (k == 2 and len(files) == 2), (k, [f.name for f in files])
        creds = c2.call("credentials.list")["credentials"]
        assert len(creds) == 1, (k, creds)
        assert s.key_objects()[0] == 1, k
        if done is not None:
            assert creds[0]["credentialId"] == done["credential"]["credentialId"]
            if k == len(FULL_KEYS) - 1:
                check_credential(c2, done["credential"], SUBJECT.encode())
        s.stop()


def test_suspended_enrollment_status_and_resume_of_waiting_step(station):
    s = station
    c = s.session()
    eid = c.start("contact")["enrollmentId"]
    c.required("EMAIL_INFO")
    c.submit("EMAIL_INFO", {"email": EMAIL})
    c.required("CONFIRM")
    # Resume on a running enrollment re-sends the step required (a UI that reconnected).
    ui = s.session()
    r = ui.call("enrollment.resume")
    assert r["enrollmentId"] == eid and r["step"] == "CONFIRM" and r["completedSteps"] == ["EMAIL_INFO"]
    ui.required("CONFIRM")
    s.daemon.kill9()
    s.daemon.start()
    c = s.session()
    status = c.call("enrollment.status")
    assert status["active"] is True and status["state"] == "suspended" and status["enrollmentId"] == eid
    assert status["completedSteps"] == ["EMAIL_INFO"]
    assert rpc_error(c.submit, "CONFIRM", {"ok": True}).code == "STEP_NOT_EXPECTED"
    assert c.call("enrollment.transactionData")["data"]["email"] == EMAIL
    c.call("enrollment.resume")
    started = c.expect("enrollment.started")
    assert started["resumed"] is True
    c.required("CONFIRM")
    c.submit("CONFIRM", {"ok": True})
    assert c.expect("enrollment.finished")["outcome"] == "success"


def test_idle_enrollment_expires(stations):
    s = stations(idle=1)
    c = s.session()
    eid = c.start("contact")["enrollmentId"]
    c.required("EMAIL_INFO")
    c.submit("EMAIL_INFO", {"email": EMAIL})
    c.required("CONFIRM")
    time.sleep(2.2)
    can = c.call("enrollment.canResume")
    assert can["status"] == "expired" and can["enrollmentId"] == eid, can
    done = c.expect("enrollment.finished")
    assert done["outcome"] == "expired" and done["enrollmentId"] == eid
    e = rpc_error(c.call, "enrollment.resume")
    assert e.code == "ENROLLMENT_EXPIRED" and e.data["enrollmentId"] == eid
    assert rpc_error(c.call, "enrollment.transactionData").code == "NO_ACTIVE_ENROLLMENT"
    assert rpc_error(c.submit, "CONFIRM", {"ok": True}).code == "NO_ACTIVE_ENROLLMENT"
    (record,) = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert record["outcome"] == "expired" and record["completedSteps"] == ["EMAIL_INFO"]


# --- documents ----------------------------------------------------------------------------------------------------

def test_attribute_mismatch(station):
    s = station
    c = s.session()
    token = s.lab.mint("match", expected={"surname": "MUSTERMANN", "dateOfBirth": "1974-08-12", "nationality": "UTO"})
    with s.chip():
        eid = c.start(token=token)["enrollmentId"]
        done = c.drive(answers_for(s))
    assert done["outcome"] == "failed", done
    error = finished_error(done)
    assert error["code"] == "ATTRIBUTE_MISMATCH" and error["retryable"] is False
    mismatches = mismatches_of(error)
    assert [m["attribute"] for m in mismatches] == ["surname"], mismatches
    assert mismatches[0]["expected"] == "MUSTERMANN" and "ERIKSSON" in mismatches[0]["actual"]
    assert [x["key"] for x in c.seen("enrollment.stepCompleted")] == ["NFC_MRZ", "NFC_PHASE"]
    assert rpc_error(c.call, "enrollment.retry").code in ("NOT_RETRYABLE", "NO_ACTIVE_ENROLLMENT")
    assert rpc_error(c.call, "enrollment.transactionData").code == "NO_ACTIVE_ENROLLMENT"
    assert c.call("credentials.list")["credentials"] == []
    (record,) = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert record["outcome"] == "failed" and record["errorCode"] == "ATTRIBUTE_MISMATCH"


def test_card_pulled_during_nfc_phase_then_retry(station):
    s = station
    c = s.session()
    with s.chip(True, "--remove-after-apdus", "40") as chip:
        eid = c.start("chip")["enrollmentId"]
        c.required("NFC_MRZ")
        c.submit("NFC_MRZ", {"mrz": MRZ})
        done = c.expect("enrollment.finished")
        assert done["outcome"] == "failedWithRetryPossibility", done
        error = finished_error(done)
        assert error["code"] == "CARD_REMOVED" and error["retryable"] is True
        status = c.call("enrollment.status")
        assert status["active"] is True and status["state"] == "failedRetryable"
        assert status["completedSteps"] == ["NFC_MRZ"]
        assert c.call("enrollment.canResume")["step"] == "NFC_PHASE"
        e = rpc_error(c.start, "contact")
        assert e.code == "ENROLLMENT_ACTIVE"
        chip.wait_card(True)
        assert c.call("enrollment.retry") == {"enrollmentId": eid, "step": "NFC_PHASE"}
        c.expect("enrollment.stepCompleted", key="NFC_PHASE")
        c.required("CONFIRM")
        c.submit("CONFIRM", {"ok": True})
        done = c.expect("enrollment.finished")
    assert done["outcome"] == "success" and done["document"]["documentNumber"] == "L898902C3"
    assert "NFC_MRZ" not in [p["key"] for p in c.seen("enrollment.stepRequired")][1:]


def test_wrong_mrz_access_denied_then_retry_asks_for_mrz(station):
    s = station
    c = s.session()
    with s.chip():
        eid = c.start("chip")["enrollmentId"]
        c.required("NFC_MRZ")
        c.submit("NFC_MRZ", WRONG_MRZ_FIELDS)
        done = c.expect("enrollment.finished")
        assert done["outcome"] == "failedWithRetryPossibility", done
        assert finished_error(done)["code"] == "ACCESS_DENIED"
        assert c.call("enrollment.retry") == {"enrollmentId": eid, "step": "NFC_MRZ"}
        c.required("NFC_MRZ")
        c.submit("NFC_MRZ", {"documentNumber": "L898902C3", "dateOfBirth": "740812", "dateOfExpiry": "120415"})
        c.expect("enrollment.stepCompleted", key="NFC_PHASE")
        c.required("CONFIRM")
        c.submit("CONFIRM", {"ok": True})
        assert c.expect("enrollment.finished")["outcome"] == "success"


def test_document_not_authentic_fails(station):
    s = station
    c = s.session()
    with s.chip(False, "--tamper-dg", "2"):
        eid = c.start("chip")["enrollmentId"]
        done = c.drive(answers_for(s))
    assert done["outcome"] == "failed", done
    error = finished_error(done)
    assert error["code"] == "DOCUMENT_NOT_AUTHENTIC" and error["retryable"] is False
    pa = error.get("passiveAuthentication") or error.get("data", {}).get("passiveAuthentication")
    assert pa["status"] == "invalid" and pa["dataGroupHashes"]["DG2"] == "invalid", error
    assert rpc_error(c.call, "enrollment.retry").code in ("NOT_RETRYABLE", "NO_ACTIVE_ENROLLMENT")
    (record,) = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert record["errorCode"] == "DOCUMENT_NOT_AUTHENTIC"


def test_pace_cam_chip_authenticated_and_a_clone_refused(station):
    s = station
    c = s.session()
    with s.chip(profile=s.lab.cam):
        c.start("chip")
        done = c.drive(answers_for(s))
    assert done["outcome"] == "success", done
    assert done["document"]["paceMapping"] == "CAM" and done["document"]["chipAuthentication"] == "valid", done
    # The same document, but the chip cannot prove the key in its DG14: passive authentication alone is not enough.
    with s.chip(False, "--tamper-cam", profile=s.lab.cam):
        c.start("chip")
        done = c.drive(answers_for(s))
    assert done["outcome"] == "failed", done
    error = finished_error(done)
    assert error["code"] == "DOCUMENT_NOT_AUTHENTIC" and "chip authentication" in error["message"], error


# Clones of the station's passports: the data copied, the private keys not (tessera lab emulate-passport).
CLONES = {
    "dg15-dropped-from-com": (False, ["--com-omit-dg", "15", "--no-aa-key"], ["ACTIVE_AUTH_INVALID"]),
    "dg15-answers-6a82": (False, ["--com-omit-dg", "15", "--missing-dg", "15", "--no-aa-key"],
                          ["DATA_GROUP_MISSING", "ACTIVE_AUTH_INVALID"]),
    "wrong-aa-key": (False, ["--wrong-aa-key"], ["ACTIVE_AUTH_INVALID"]),
    "cardaccess-hides-cam": (True, ["--hide-cam"], ["CHIP_AUTH_INVALID"]),
}


@pytest.mark.parametrize("clone", CLONES)
def test_cloned_chip_is_refused_by_nfc_phase(station, clone):
    s = station
    c = s.session()
    cam, args, reasons = CLONES[clone]
    # Even a step that accepts unverified and clonable documents refuses a chip that fails a check.
    for workflow in ("chip", "chip-unverified", "chip-clonable"):
        with s.chip(False, *args, profile=s.lab.cam if cam else None):
            c.start(workflow)
            done = c.drive(answers_for(s))
        assert done["outcome"] == "failed", (workflow, done)
        error = finished_error(done)
        data = error.get("data", error)
        assert error["code"] == "DOCUMENT_NOT_AUTHENTIC", error
        assert data["verdict"] == "notAuthentic" and data["reasons"] == reasons, error
        assert data["chipAuthenticity"] == "invalid"


def test_chip_without_anti_clone_support_needs_allow_clonable(station):
    s = station
    c = s.session()
    with s.chip(profile=s.lab.clonable):
        c.start("chip")
        done = c.drive(answers_for(s))
    assert done["outcome"] == "failed", done
    error = finished_error(done)
    data = error.get("data", error)
    assert error["code"] == "DOCUMENT_NOT_AUTHENTIC"
    assert (data["verdict"], data["reasons"], data["chipAuthenticity"]) == (
        "unverified", ["CHIP_AUTH_NOT_SUPPORTED"], "notSupported"), error
    for workflow, verdict in (("chip-clonable", "authentic"), ("chip-unverified", "unverified")):
        with s.chip(profile=s.lab.clonable):
            c.start(workflow)
            done = c.drive(answers_for(s))
        assert done["outcome"] == "success", (workflow, done)
        assert done["document"]["verdict"] == verdict and done["document"]["chipAuthenticity"] == "notSupported"


def test_no_card_in_time_then_retry(station):
    s = station
    c = s.session()
    eid = c.start("quick-chip")["enrollmentId"]
    c.required("NFC_MRZ")
    c.submit("NFC_MRZ", {"mrz": MRZ})
    done = c.expect("enrollment.finished", timeout=20)
    assert done["outcome"] == "failedWithRetryPossibility" and finished_error(done)["code"] == "NO_CARD", done
    with s.chip():
        assert c.call("enrollment.retry") == {"enrollmentId": eid, "step": "NFC_PHASE"}
        c.required("CONFIRM")
    c.submit("CONFIRM", {"ok": True})
    assert c.expect("enrollment.finished")["outcome"] == "success"


# --- activation tokens --------------------------------------------------------------------------------------------

def segments(token: str) -> list[str]:
    return token.split(".")


def encode_segment(obj: dict) -> str:
    return b64u(json.dumps(obj, separators=(",", ":")).encode())


def test_activation_tokens_expired_replayed_forged(station):
    s = station
    lab = s.lab
    c = s.session()
    now = int(time.time())

    def refused(token: str) -> str:
        e = rpc_error(c.start, token=token)
        assert c.call("enrollment.status")["active"] is False
        return e.code

    # Expired, beyond the 60 s leeway; not yet valid.
    assert refused(lab.mint("match", exp=now - 120)) == "ACTIVATION_TOKEN_EXPIRED"
    assert refused(lab.mint("match", nbf=now + 600)) == "ACTIVATION_TOKEN_EXPIRED"
    # Forged: another key under the issuer's kid; tampered claims; HS256 keyed with the public key; alg none;
    # an unknown kid or issuer; a DER signature instead of raw r||s.
    assert refused(lab.mint("match", key=lab.forger_key)) == "ACTIVATION_TOKEN_SIGNATURE_INVALID"
    h, p, sig = segments(lab.mint("match"))
    claims = json.loads(unb64u(p))
    assert refused(".".join([h, encode_segment({**claims, "sub": "someone-else"}), sig])) == "ACTIVATION_TOKEN_SIGNATURE_INVALID"
    hs_header = encode_segment({"alg": "HS256", "typ": "tessera-activation+jwt", "kid": KID})
    mac = hmac.new(lab.issuer_pem.read_bytes(), f"{hs_header}.{p}".encode(), hashlib.sha256).digest()
    assert refused(f"{hs_header}.{p}.{b64u(mac)}") == "ACTIVATION_TOKEN_SIGNATURE_INVALID"
    none_header = encode_segment({"alg": "none", "typ": "tessera-activation+jwt"})
    assert refused(f"{none_header}.{p}.") in ("ACTIVATION_TOKEN_SIGNATURE_INVALID", "ACTIVATION_TOKEN_MALFORMED")
    assert refused(lab.mint("match", kid="2025-9")) == "ACTIVATION_TOKEN_SIGNATURE_INVALID"
    assert refused(lab.mint("match", iss="https://evil.example")) == "ACTIVATION_TOKEN_SIGNATURE_INVALID"
    der = lab.issuer_key.sign(f"{h}.{p}".encode(), ec.ECDSA(hashes.SHA256()))
    assert refused(f"{h}.{p}.{b64u(der)}") == "ACTIVATION_TOKEN_SIGNATURE_INVALID"
    # Malformed.
    assert refused("not-a-jws") == "ACTIVATION_TOKEN_MALFORMED"
    assert refused(f"{h}.{p}") == "ACTIVATION_TOKEN_MALFORMED"
    assert refused(lab.mint("match", sub=None)) == "ACTIVATION_TOKEN_MALFORMED"
    assert refused(lab.mint("match", jti=None)) == "ACTIVATION_TOKEN_MALFORMED"
    assert refused(lab.mint("match", exp="tomorrow")) == "ACTIVATION_TOKEN_MALFORMED"
    assert refused(lab.mint("match", sub="x" * 65)) == "ACTIVATION_TOKEN_MALFORMED"
    # Audience and workflow.
    assert refused(lab.mint("match", aud="kiosk-other")) == "ACTIVATION_TOKEN_AUDIENCE"
    # This station has a stationId: a token meant for no station in particular is not taken for it.
    assert refused(lab.mint("match", aud=None)) == "ACTIVATION_TOKEN_AUDIENCE"
    assert refused(lab.mint("no-such-workflow")) == "CANDIDATE_UNAVAILABLE"
    assert refused(lab.mint("doc-auth")) == "CANDIDATE_UNAVAILABLE"

    # Accepted: within the leeway, with this station among several audiences, without kid; each only once.
    for token in [lab.mint("match", exp=now - 20), lab.mint("match", aud=["kiosk-other", STATION]),
                  lab.mint("match", kid=None)]:
        eid = c.start(token=token)["enrollmentId"]
        c.call("enrollment.cancel")
        c.expect("enrollment.finished", enrollmentId=eid)
        assert refused(token) == "ACTIVATION_TOKEN_REPLAYED"
    # Refused tokens were not consumed: a token refused as ENROLLMENT_ACTIVE works later.
    blocker = c.start("contact")["enrollmentId"]
    later = lab.mint("match")
    assert rpc_error(c.start, token=later).code == "ENROLLMENT_ACTIVE"
    c.call("enrollment.cancel")
    c.expect("enrollment.finished", enrollmentId=blocker)
    c.start(token=later)
    c.call("enrollment.cancel")
    # Replays stay refused across a restart (for as long as the database lives).
    s.daemon.stop()
    s.daemon.start()
    c = s.session()
    assert refused(later) == "ACTIVATION_TOKEN_REPLAYED"


# --- the CLI ------------------------------------------------------------------------------------------------------

class StationCLI:
    """`tessera enroll-station` as a subprocess: stdout lines arrive through a queue (reads time out), stderr goes
    to a file."""

    def __init__(self, s: Station, *args: str, answers: dict | None = None, stdin=subprocess.PIPE):
        cmd = [str(BIN / "tessera"), "--socket", s.daemon.socket, "enroll-station", *args]
        if answers is not None:
            path = s.root / f"answers-{uuid.uuid4().hex[:6]}.json"
            path.write_text(json.dumps(answers))
            cmd += ["--answers", str(path)]
        self.stderr_path = s.root / f"cli-stderr-{uuid.uuid4().hex[:6]}.log"
        self.err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=self.err, text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def readline(self, timeout: float = 60) -> str | None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output from enroll-station in {timeout} s; so far: {self.seen}\n"
                                 f"stderr: {self.stderr()}") from None
        if line is not None:
            self.seen.append(line)
        return line

    def until(self, predicate, timeout: float = 60, as_json: bool = False) -> list:
        """Lines up to and including the first one for which `predicate` holds."""
        out = []
        deadline = time.time() + timeout
        while True:
            line = self.readline(max(0.1, deadline - time.time()))
            if line is None:
                raise AssertionError(f"enroll-station ended before the expected line: {self.seen}\nstderr: {self.stderr()}")
            item = json.loads(line) if as_json else line.rstrip("\n")
            out.append(item)
            if predicate(item):
                return out

    def rest(self, timeout: float = 60) -> str:
        out = []
        while (line := self.readline(timeout)) is not None:
            out.append(line)
        return "".join(out)

    def write(self, text: str) -> None:
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        self.err.flush()
        return self.stderr_path.read_text(errors="replace")

    def __enter__(self) -> "StationCLI":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def test_cli_enroll_station_full_workflow_with_answers(station):
    s = station
    answers = {k: v for k, v in answers_for(s).items() if not callable(v)}
    with s.chip(), StationCLI(s, "--workflow", "full", "--user-verification", "required", "--json",
                              answers=answers) as cli:
        lines = cli.until(lambda m: m.get("notification") == "enrollment.stepRequired"
                          and m["params"]["key"] == "PHONE_OTP", as_json=True)
        eid = lines[-1]["params"]["enrollmentId"]
        assert lines[0]["call"] == "enrollment.subscribe"
        assert lines[1]["call"] == "enrollment.start" and lines[1]["result"]["enrollmentId"] == eid
        code = s.otp(eid)["code"]
        # The code is asked on stdin (it is not in the answers file): a wrong one is refused and asked again.
        cli.write(wrong(code) + "\n")
        lines = cli.until(lambda m: m.get("call") == "enrollment.submit" and "error" in m, as_json=True)
        assert lines[-1]["error"]["code"] == "OTP_INVALID" and lines[-1]["error"]["attemptsLeft"] == 2
        cli.write(code + "\n")
        lines = cli.until(lambda m: "exitStatus" in m, as_json=True)
        assert cli.wait() == 0
        assert "one-time code" in cli.stderr()
    final = lines[-1]
    assert final["outcome"] == "success" and final["exitStatus"] == 0 and final["enrollmentId"] == eid, final
    completed = [m["params"]["key"] for m in lines if m.get("notification") == "enrollment.stepCompleted"]
    assert completed == FULL_KEYS[2:]
    assert any(m.get("notification") == "enrollment.progress" for m in lines)
    check_credential(s.session(), final["credential"], None)


def test_cli_enroll_station_interactive_human(station):
    s = station
    with StationCLI(s, "--workflow", "contact") as cli:
        head = cli.until(lambda line: line.startswith("step EMAIL_INFO"))
        assert head[0].startswith("enrollment ") and "started: workflow contact (2 steps: EMAIL_INFO, CONFIRM)" in head[0]
        cli.write("not-an-email\n" + EMAIL + "\n")
        out = cli.until(lambda line: line.startswith("step CONFIRM"))
        assert "done: EMAIL_INFO (1/2)" in out, out
        assert out[-1] == "step CONFIRM: Confirm", out
        cli.write("maybe\ny\n")
        rest = cli.rest()
        assert cli.wait() == 0
        err = cli.stderr()
    assert "done: CONFIRM (2/2)" in rest and "enrollment succeeded" in rest
    assert "INVALID_INPUT" in err and "answer y or n" in err and "email" in err
    assert s.session().call("enrollment.status")["lastOutcome"]["outcome"] == "success"


def test_cli_enroll_station_ctrl_c_cancels(station):
    s = station
    with StationCLI(s, "--workflow", "contact") as cli:
        cli.until(lambda line: line.startswith("step EMAIL_INFO"))
        cli.proc.send_signal(signal.SIGINT)
        rest = cli.rest()
        assert cli.wait() == 6
    assert "enrollment cancelled" in rest
    assert s.session().call("enrollment.status")["lastOutcome"]["outcome"] == "cancelled"


def test_cli_enroll_station_step_answered_elsewhere(station):
    """The CLI waits at the code; a phone's deep link (a second CLI) answers it; the first carries on."""
    s = station
    with StationCLI(s, "--workflow", "otp", answers={"PHONE_INFO": {"phone": PHONE}, "CONFIRM": {"ok": True}}) as cli:
        lines = cli.until(lambda line: line.startswith("step PHONE_OTP"))
        assert "sent to" in lines[-1] and "3 attempts left" in lines[-1], lines
        eid = s.session().call("enrollment.status")["enrollmentId"]
        link = subprocess.run([str(BIN / "tessera"), "--socket", s.daemon.socket, "enroll-station", "--deep-link",
                               f"tessera://phone-binding?otp={s.otp(eid)['code']}"], capture_output=True, text=True,
                              timeout=60)
        assert link.returncode == 0 and "accepted" in link.stdout, link
        rest = cli.rest()
        assert cli.wait() == 0, rest
        assert "(answered elsewhere)" in cli.stderr()
    assert "done: PHONE_OTP (2/3)" in rest and "enrollment succeeded" in rest


def test_cli_enroll_station_retry_after_card_pulled(station):
    s = station
    with s.chip(True, "--remove-after-apdus", "40"):
        # No "retry" in the answers: the question is asked, and end of input answers no.
        with StationCLI(s, "--workflow", "chip", answers={"NFC_MRZ": {"mrz": MRZ}, "CONFIRM": {"ok": True}},
                        stdin=subprocess.DEVNULL) as cli:
            out = cli.rest()
            assert cli.wait() == 5, out
            assert "retry? [y/N]" in cli.stderr()
        assert "enrollment failed (retry possible)" in out and "CARD_REMOVED" in out
        # --resume continues the failed-retryable enrollment at the failed step.
        with StationCLI(s, "--resume", answers={"CONFIRM": {"ok": True}}, stdin=subprocess.DEVNULL) as cli:
            out = cli.rest()
            assert cli.wait() == 0, out
    assert "enrollment succeeded" in out and "document P UTO L898902C3: ERIKSSON, ANNA MARIA" in out
    # And the retry question answered from the file.
    with s.chip(True, "--remove-after-apdus", "40"):
        with StationCLI(s, "--workflow", "chip", answers={"NFC_MRZ": {"mrz": MRZ}, "CONFIRM": {"ok": True},
                                                         "retry": True}, stdin=subprocess.DEVNULL) as cli:
            out = cli.rest()
            assert cli.wait() == 0, out
    assert "enrollment failed (retry possible)" in out and "retrying at NFC_PHASE" in out and "enrollment succeeded" in out


def test_cli_enroll_station_errors(station):
    s = station
    run = lambda *a: subprocess.run([str(BIN / "tessera"), "--socket", s.daemon.socket, "enroll-station", *a],
                                    capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    out = run("--workflow", "doc-auth")
    assert out.returncode == 2 and "CANDIDATE_UNAVAILABLE" in out.stderr
    out = run("--resume")
    assert out.returncode == 2 and "NOTHING_TO_RESUME" in out.stderr
    out = run("--deep-link", "tessera://phone-binding?otp=123456")
    assert out.returncode == 1 and "not consumed" in out.stdout
    out = run("--workflow", "contact", "--resume")
    assert out.returncode == 64
    out = run("--token", s.lab.mint("match", exp=int(time.time()) - 3600))
    assert out.returncode == 2 and "ACTIVATION_TOKEN_EXPIRED" in out.stderr
    help_text = subprocess.run([str(BIN / "tessera"), "help", "enroll-station"], capture_output=True, text=True).stdout
    for needle in ["EXIT STATUS", "EXAMPLE SESSION", "--answers", "retry? [y/N]"]:
        assert needle in help_text
