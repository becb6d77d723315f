"""One-time codes through a notifier *command* (the SMS/email gateway hook): the program gets the message as JSON
on stdin; a failing program makes the enrollment failedWithRetryPossibility (OTP_DELIVERY_FAILED), and
`retry` sends a new code once it works. The code is never stored in the clear."""
from __future__ import annotations

import json
import pathlib
import sqlite3
import sys

import pytest

from tessera_harness import SOFTHSM_MODULE, Daemon, RPCError, SoftHSM


@pytest.fixture
def station(tmp_path: pathlib.Path):
    hsm = SoftHSM(tmp_path)
    hsm.add_token("tessera-test", pin="1234")
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    gate = tmp_path / "gateway-down"
    gateway = tmp_path / "gateway.py"
    gateway.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        f"if os.path.exists({str(gate)!r}):\n"
        "    sys.exit(3)\n"
        "message = json.load(sys.stdin)\n"
        f"path = os.path.join({str(outbox)!r}, f\"{{time.time_ns()}}.json\")\n"
        "open(path, 'w').write(json.dumps(message))\n")
    gateway.chmod(0o755)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"enrollment": {
        "notifier": {"command": [str(gateway)]},
        "otp": {"attempts": 3, "ttlSeconds": 600, "maxResends": 1},
        "workflows": {"phone": {"remote": True, "steps": ["PHONE_INFO", "PHONE_OTP"]}},
    }}))
    d = Daemon(tmp_path, hsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                   "--config", str(config)]).start()
    yield d, outbox, gate
    d.stop()


def messages(outbox: pathlib.Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(outbox.iterdir())]


def test_command_notifier_delivers_and_failures_are_retryable(station):
    d, outbox, gate = station
    c = d.client()
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "phone"}}})["enrollmentId"]
    gate.touch()
    c.call("enrollment.submit", {"stepKey": "PHONE_INFO", "payload": {"phone": "+49 151 2345 6789"}})
    finished = c.wait_notification("enrollment.finished")
    assert finished["outcome"] == "failedWithRetryPossibility"
    assert finished["error"]["code"] == "OTP_DELIVERY_FAILED" and finished["error"]["retryable"] is True
    assert messages(outbox) == []

    gate.unlink()
    assert c.call("enrollment.retry")["step"] == "PHONE_OTP"
    required = c.wait_notification("enrollment.stepRequired")
    assert required["key"] == "PHONE_OTP" and required["attemptsLeft"] == 3 and required["resendsLeft"] == 1
    assert "2345" not in required["to"] and required["to"].endswith("89")
    [first] = messages(outbox)
    assert first["type"] == "otp" and first["channel"] == "sms" and first["to"] == "+4915123456789"
    assert first["enrollmentId"] == eid and first["stepKey"] == "PHONE_OTP" and len(first["code"]) == 6

    # The code is kept only as a MAC in the database.
    db = sqlite3.connect(str(d.state / "tessera.sqlite"))
    (state,) = db.execute("SELECT stepState FROM enrollment WHERE id = ?", (eid,)).fetchone()
    assert first["code"] not in state and "mac" in json.loads(state)["otp"]

    # A resend makes a new code and spends the only resend; the old code no longer works.
    c.call("enrollment.submit", {"stepKey": "PHONE_OTP", "payload": {"resend": True}})
    assert c.wait_notification("enrollment.stepRequired")["resendsLeft"] == 0
    second = messages(outbox)[-1]
    assert len(messages(outbox)) == 2
    with pytest.raises(RPCError) as e:
        c.call("enrollment.submit", {"stepKey": "PHONE_OTP", "payload": {"resend": True}})
    assert e.value.code == "INVALID_INPUT"
    if second["code"] != first["code"]:
        with pytest.raises(RPCError) as e:
            c.call("enrollment.submit", {"stepKey": "PHONE_OTP", "payload": {"otp": first["code"]}})
        assert e.value.code == "OTP_INVALID" and e.value.data["attemptsLeft"] == 2
    c.call("enrollment.submit", {"stepKey": "PHONE_OTP", "payload": {"otp": second["code"]}})
    assert c.wait_notification("enrollment.finished")["outcome"] == "success"
