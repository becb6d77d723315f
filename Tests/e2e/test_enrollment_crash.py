"""Enrollment durability at the one point a crash could duplicate a passkey: between the key's generation on the
token and its record in the database. The daemon kills itself with SIGKILL there (TESSERA_FAILPOINTS, the
same as `kill -9` at that instant); after a restart, `resume` must finish with exactly one key pair on the
token (checked with OpenSC's pkcs11-tool) and one credential, which python-fido2 / py_webauthn accept."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from tessera_harness import SOFTHSM_MODULE, Daemon, SoftHSM, b64u, unb64u
from verify import verify_assertion, verify_registration

RP = "kiosk.example"
ORIGIN = f"https://{RP}"


@pytest.fixture
def station(tmp_path: pathlib.Path):
    hsm = SoftHSM(tmp_path)
    hsm.add_token("tessera-test", pin="1234")
    pin_file = tmp_path / "pin"
    pin_file.write_text("1234")
    pin_file.chmod(0o600)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "pinFiles": {"tessera-test": str(pin_file)},
        "enrollment": {
            "notifier": {"directory": str(tmp_path / "otp")},
            "workflows": {"quick": {"remote": True, "steps": [
                "EMAIL_INFO", {"key": "PASSKEY_CREATION", "rpId": RP, "attestation": "packed"}]}},
        },
    }))
    args = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config", str(config)]
    return tmp_path, hsm, args


def private_keys(hsm: SoftHSM) -> list[str]:
    """Labels of the private keys on the token, as pkcs11-tool (an independent PKCS#11 client) lists them."""
    out = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "tessera-test", "--login",
                          "--pin", "1234", "--list-objects", "--type", "privkey"], capture_output=True, text=True,
                         check=True, env={**os.environ, **hsm.env}).stdout
    return [line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("label:")]


def crash_at(root, hsm, args, failpoint: str) -> tuple[Daemon, str]:
    """Runs the workflow until the daemon kills itself at `failpoint`; returns a restarted daemon."""
    d = Daemon(root, {**hsm.env, "TESSERA_FAILPOINTS": failpoint}, args).start()
    c = d.client()
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "quick"}}})["enrollmentId"]
    try:
        c.call("enrollment.submit", {"stepKey": "EMAIL_INFO", "payload": {"email": "anna@kiosk.example"}})
    except ConnectionError:
        pass  # the passkey step runs on at once: the kill may come before the answer is written (kill -9 flushes nothing)
    assert d.proc.wait(30) == -9, "the failpoint should have killed the daemon"
    return Daemon(root, hsm.env, args).start(), eid


def resume_to_success(d: Daemon, eid: str) -> dict:
    c = d.client()
    can = c.call("enrollment.canResume")
    assert can == {"status": "canResume", "enrollmentId": eid, "step": "PASSKEY_CREATION",
                   "startedAt": can["startedAt"]}
    assert c.call("enrollment.resume")["completedSteps"] == ["EMAIL_INFO"]
    finished = c.wait_notification("enrollment.finished")
    assert finished["outcome"] == "success", finished
    return finished["credential"]


def check_usable(d: Daemon, credential: dict) -> None:
    public_key = unb64u(credential["publicKey"])
    challenge = os.urandom(32)
    a = d.client().call("passkey.authenticate", {"rpId": RP, "challenge": b64u(challenge),
                                                  "allowCredentials": [credential["credentialId"]]})
    verify_assertion(a, challenge, RP, ORIGIN, public_key, 0)


def test_crash_between_key_generation_and_record_leaves_one_passkey(station):
    root, hsm, args = station
    d, eid = crash_at(root, hsm, args, "passkey.afterKeyGeneration")
    try:
        orphan = private_keys(hsm)
        assert len(orphan) == 1 and orphan[0].startswith("tessera:"), orphan
        assert d.client().call("credentials.list")["credentials"] == []
        credential = resume_to_success(d, eid)
        assert "recovered" not in credential
        verify_registration(credential, unb64u(json.loads(unb64u(credential["clientDataJSON"]))["challenge"]),
                            RP, ORIGIN)
        assert private_keys(hsm) == [f"tessera:{credential['credentialId']}"]
        assert [c["credentialId"] for c in d.client().call("credentials.list")["credentials"]] == [credential["credentialId"]]
        check_usable(d, credential)
    finally:
        d.stop()


def test_crash_after_record_reuses_the_recorded_passkey(station):
    root, hsm, args = station
    d, eid = crash_at(root, hsm, args, "enrollment.afterPasskeyRecorded")
    try:
        recorded = d.client().call("credentials.list")["credentials"]
        assert len(recorded) == 1
        credential = resume_to_success(d, eid)
        assert credential["recovered"] is True
        assert credential["credentialId"] == recorded[0]["credentialId"]
        verify_registration(credential, unb64u(json.loads(unb64u(credential["clientDataJSON"]))["challenge"]),
                            RP, ORIGIN)
        assert private_keys(hsm) == [f"tessera:{credential['credentialId']}"]
        check_usable(d, credential)
        audit = d.client().call("enrollment.audit")["records"]
        assert audit[0]["outcome"] == "success" and audit[0]["credentialId"] == credential["credentialId"]
    finally:
        d.stop()


def test_cancel_after_a_crash_deletes_the_recorded_passkey(station):
    """A passkey recorded before the crash belongs to the enrollment: cancelled instead of resumed, it goes too."""
    root, hsm, args = station
    d, eid = crash_at(root, hsm, args, "enrollment.afterPasskeyRecorded")
    try:
        c = d.client()
        [recorded] = c.call("credentials.list")["credentials"]
        assert private_keys(hsm) == [f"tessera:{recorded['credentialId']}"]
        assert c.call("enrollment.cancel") == {"cancelled": True, "enrollmentId": eid}
        assert c.call("credentials.list")["credentials"] == []
        assert private_keys(hsm) == []
        [record] = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
        assert record["outcome"] == "cancelled" and "credentialId" not in record
    finally:
        d.stop()
