"""Enrollment data belongs to the uid that started it (docs/ENROLLMENT.md, "Whose data"): other uids cannot drive
the enrollment or read its data, and the notifications and status they get carry no personal data. Other uids are
real processes (forked, setuid) on the real daemon's socket. Also: the one-time code's MAC key is derived from the
daemon's secret file, so the database alone reveals no code."""
from __future__ import annotations

import hmac
import json
import os
import pathlib
import sqlite3

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tessera_harness import let_other_uids_reach, NOBODY, SOFTHSM_MODULE, AsUser, Client, Daemon, SoftHSM, as_nobody, unb64u
from tessera_harness import calls_as as harness_calls_as

RP = "owner.example"
EMAIL = "anna.eriksson@example.com"
ADMIN_UID = 4242  # an administrator by the policy below
STRANGER_UID = 4243  # neither owner nor administrator
WORKFLOW = {"remote": True, "steps": ["EMAIL_INFO", "EMAIL_OTP", {"key": "PASSKEY_CREATION", "rpId": RP}]}


@pytest.fixture
def station(tmp_path: pathlib.Path):
    if os.geteuid() != 0:
        pytest.fail("this test needs root to act as other uids (CI runs as root)")
    let_other_uids_reach(tmp_path)  # other uids must be able to reach the socket
    hsm = SoftHSM(tmp_path)
    hsm.add_token("tessera-test", pin="1234")
    pin_file = tmp_path / "pin"
    pin_file.write_text("1234")
    pin_file.chmod(0o600)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "socketMode": "0666", "pinFiles": {"tessera-test": str(pin_file)},
        "policy": {"admin": {"users": [str(ADMIN_UID)]}},
        "enrollment": {"notifier": {"directory": str(tmp_path / "otp")}, "workflows": {"owned": WORKFLOW}},
    }))
    d = Daemon(tmp_path, hsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                   "--config", str(config)]).start()
    yield d
    d.stop()


def code_of(d: Daemon, eid: str) -> str:
    [message] = [json.loads(p.read_text()) for p in (d.root / "otp").glob(f"{eid}-EMAIL_OTP-*.json")]
    return message["code"]


def watcher(d: Daemon, uid: int) -> AsUser:
    """A subscriber as `uid`: returns every enrollment notification up to the first enrollment.finished."""
    def body(c: Client, ready) -> list:
        c.call("enrollment.subscribe")
        ready()
        seen = []
        while True:
            n = c.next_notification(60)
            if n["method"].startswith("enrollment."):
                seen.append(n)
            if n["method"] == "enrollment.finished":
                return seen
    w = AsUser(uid, d.socket, body)
    w.wait_ready()
    return w


def calls_as(d: Daemon, uid: int, calls: list[tuple[str, dict]]) -> list:
    """Each call's result, or {"error": code}, made by `uid`."""
    _, out = harness_calls_as(uid, d.socket, calls)
    return [o["result"] if "result" in o else {"error": o["code"]} for o in out]


def submit(step: str, payload: dict) -> tuple[str, dict]:
    return ("enrollment.submit", {"stepKey": step, "payload": payload})


def test_only_the_owner_or_an_admin_drives_and_reads_an_enrollment(station):
    d = station
    owner = d.client()  # root: the owner here
    stranger = watcher(d, STRANGER_UID)
    admin = watcher(d, ADMIN_UID)
    eid = owner.call("enrollment.start", {"type": {"remote": {"candidate": "owned"}}})["enrollmentId"]
    assert owner.wait_notification("enrollment.stepRequired")["key"] == "EMAIL_INFO"

    # Nothing the stranger sends reaches the enrollment.
    refused = calls_as(d, STRANGER_UID, [
        submit("EMAIL_INFO", {"email": "mallory@example.com"}), ("enrollment.retry", {}),
        ("enrollment.resume", {}), ("enrollment.transactionData", {}), ("enrollment.cancel", {}),
        ("enrollment.start", {"type": {"remote": {"candidate": "owned"}}, "force": True})])
    assert refused == [{"error": "UNAUTHORIZED"}] * 6
    owner.call("enrollment.submit", {"stepKey": "EMAIL_INFO", "payload": {"email": EMAIL}})
    required = owner.wait_notification("enrollment.stepRequired")
    assert required["key"] == "EMAIL_OTP" and required["attemptsLeft"] == 5 and "@" in required["to"]

    # A stranger's code (submit or deep link) spends no attempt; the stranger's status has no personal data.
    [wrong, link, status] = calls_as(d, STRANGER_UID, [
        submit("EMAIL_OTP", {"otp": "000000"}), ("enrollment.handleDeepLink", {"url": "tessera://email-binding?otp=000000"}),
        ("enrollment.status", {})])
    assert wrong == link == {"error": "UNAUTHORIZED"}
    assert "required" not in status and EMAIL.split("@")[1] not in json.dumps(status)
    assert status["enrollmentId"] == eid and status["state"] == "waitingForInput" and status["step"] == "EMAIL_OTP"
    assert owner.call("enrollment.status")["required"]["attemptsLeft"] == 5
    # The administrator by policy reads everything.
    [data] = calls_as(d, ADMIN_UID, [("enrollment.transactionData", {})])
    assert data["data"]["email"] == EMAIL

    owner.call("enrollment.submit", {"stepKey": "EMAIL_OTP", "payload": {"otp": code_of(d, eid)}})
    finished = owner.wait_notification("enrollment.finished")
    assert finished["outcome"] == "success" and finished["credential"]["rpId"] == RP

    seen = stranger.result()
    by_method = {}
    for n in seen:
        by_method.setdefault(n["method"], []).append(n["params"])
    assert [p["key"] for p in by_method["enrollment.stepRequired"]] == ["EMAIL_INFO", "EMAIL_OTP"]
    assert all(p == {"enrollmentId": eid, "key": p["key"]} for p in by_method["enrollment.stepRequired"])
    assert by_method["enrollment.finished"] == [{"enrollmentId": eid, "outcome": "success"}]
    assert [p["key"] for p in by_method["enrollment.stepCompleted"]] == ["EMAIL_INFO", "EMAIL_OTP", "PASSKEY_CREATION"]
    assert EMAIL.split("@")[1] not in json.dumps(seen)
    # The administrator's subscription got the full events.
    admin_seen = admin.result()
    assert [n["params"] for n in admin_seen if n["method"] == "enrollment.finished"] == [finished]
    assert any("to" in n["params"] for n in admin_seen if n["method"] == "enrollment.stepRequired")

    # lastOutcome follows the same rule.
    [status] = calls_as(d, STRANGER_UID, [("enrollment.status", {})])
    assert status == {"active": False, "lastOutcome": {"enrollmentId": eid, "outcome": "success"}}
    assert owner.call("enrollment.status")["lastOutcome"]["credential"] == finished["credential"]


def test_an_enrollment_started_by_another_uid_is_that_uids(station):
    d = station
    root = d.client()
    started = AsUser(NOBODY, d.socket, lambda c, ready: c.call(
        "enrollment.start", {"type": {"remote": {"candidate": "owned"}}})).result()
    eid = started["enrollmentId"]
    # Root is an administrator: it may read (and drive) nobody's enrollment; the stranger may not.
    assert root.call("enrollment.transactionData") == {"enrollmentId": eid, "data": {}}
    assert as_nobody(d.socket, [("enrollment.transactionData", {})], uid=STRANGER_UID) == {
        "enrollment.transactionData": "UNAUTHORIZED"}
    [accepted, status, data] = calls_as(d, NOBODY, [
        submit("EMAIL_INFO", {"email": EMAIL}), ("enrollment.status", {}), ("enrollment.transactionData", {})])
    assert accepted == {"accepted": True, "stepKey": "EMAIL_INFO"}
    assert data["data"]["email"] == EMAIL
    assert status["enrollmentId"] == eid and status["completedSteps"] == ["EMAIL_INFO"]
    [cancel] = calls_as(d, STRANGER_UID, [("enrollment.cancel", {})])
    assert cancel == {"error": "UNAUTHORIZED"}
    assert calls_as(d, NOBODY, [("enrollment.cancel", {})]) == [{"cancelled": True, "enrollmentId": eid}]


def test_a_copy_of_the_database_alone_reveals_no_code(station):
    d = station
    c = d.client()
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "owned"}}})["enrollmentId"]
    c.call("enrollment.submit", {"stepKey": "EMAIL_INFO", "payload": {"email": EMAIL}})
    assert c.wait_notification("enrollment.stepRequired")["key"] == "EMAIL_INFO"
    assert c.wait_notification("enrollment.stepRequired")["key"] == "EMAIL_OTP"
    code = code_of(d, eid)

    db = sqlite3.connect(str(d.state / "tessera.sqlite"))
    (state,) = db.execute("SELECT stepState FROM enrollment WHERE id = ?", (eid,)).fetchone()
    db.close()
    stored = json.loads(state)["otp"]
    assert set(stored) == {"salt", "mac", "issuedAt", "expiresAt", "attemptsLeft"}, stored
    salt, mac = unb64u(stored["salt"]), unb64u(stored["mac"])
    # Every code under every key the row offers: none matches.
    for key in (salt, b""):
        assert not any(hmac.digest(key, f"{n:06d}".encode(), "sha256") == mac for n in range(1_000_000))

    secret_file = d.state / "daemon.secret"
    st = secret_file.stat()
    assert st.st_mode & 0o777 == 0o600 and st.st_size == 32 and st.st_uid == os.geteuid()
    secret = secret_file.read_bytes()
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt,
               info=b"tessera enrollment one-time code v1").derive(secret)
    assert hmac.digest(key, code.encode(), "sha256") == mac

    # The secret survives a kill -9: the code sent before it still completes the step after a restart.
    d.kill9()
    d.start()
    assert (d.state / "daemon.secret").read_bytes() == secret
    c = d.client()
    c.call("enrollment.resume")
    assert c.wait_notification("enrollment.stepRequired")["key"] == "EMAIL_OTP"
    c.call("enrollment.submit", {"stepKey": "EMAIL_OTP", "payload": {"otp": code}})
    assert c.wait_notification("enrollment.finished")["outcome"] == "success"


def test_a_daemon_secret_others_can_read_stops_start_up(station):
    d = station
    d.stop()
    (d.state / "daemon.secret").chmod(0o644)
    with pytest.raises(RuntimeError) as e:
        d.start()
    assert "daemon.secret" in str(e.value) and "0600" in str(e.value)
    assert d.proc.returncode == 1
