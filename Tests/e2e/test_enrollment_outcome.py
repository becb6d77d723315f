"""One terminal outcome per enrollment (docs/ENROLLMENT.md, "One outcome"). The race of issue 18 is forced: the daemon
pauses (TESSERA_FAILPOINTS, pause kind) after PASSKEY_CREATION recorded the passkey and before the outcome is
written, a cancel is sent there, and the daemon signals (a second pause point) that the cancel arrived before it
is let go. The audit, status, lastOutcome, the notifications and the daemon log must then agree on one outcome,
and the token (listed by OpenSC's pkcs11-tool) holds a key only when that outcome is success."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from tessera_harness import SOFTHSM_MODULE, Client, Daemon, SoftHSM, reached, release

RP = "outcome.example"
PASSKEY = {"key": "PASSKEY_CREATION", "rpId": RP}
CONFIRM = {"key": "CONFIRM", "client": True, "prompt": "Confirm"}
RECORDED = "enrollment.afterPasskeyRecorded"
WAITS = "enrollment.terminalTransitionWaits"


@pytest.fixture
def station(tmp_path: pathlib.Path):
    hsm = SoftHSM(tmp_path)
    hsm.add_token("tessera-test", pin="1234")
    pin_file = tmp_path / "pin"
    pin_file.write_text("1234")
    pin_file.chmod(0o600)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"pinFiles": {"tessera-test": str(pin_file)}, "enrollment": {"workflows": {
        "quick": {"remote": True, "steps": ["EMAIL_INFO", PASSKEY]},
        "confirm-after": {"remote": True, "steps": ["EMAIL_INFO", PASSKEY, CONFIRM]},
    }}}))
    pauses = tmp_path / "failpoints"
    pauses.mkdir()
    env = {**hsm.env, "TESSERA_FAILPOINTS": f"{RECORDED}=pause:{pauses},{WAITS}=pause:{pauses}"}
    d = Daemon(tmp_path, env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config", str(config)])
    d.start()
    yield d, hsm, pauses
    d.stop()


def private_keys(hsm: SoftHSM) -> list[str]:
    """Labels of the private keys on the token, as pkcs11-tool (an independent PKCS#11 client) lists them."""
    out = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "tessera-test", "--login",
                          "--pin", "1234", "--list-objects", "--type", "privkey"], capture_output=True, text=True,
                         check=True, env={**os.environ, **hsm.env}).stdout
    return [line.split(":", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("label:")]


def response(c: Client, rid: int) -> dict:
    while True:
        m = c.read_message()
        assert m is not None, "the daemon closed the connection"
        if "id" not in m:
            c.notifications.append(m)
        elif m["id"] == rid:
            return m


def test_cancel_racing_the_last_step_records_one_outcome(station):
    d, hsm, pauses = station
    c = d.client()
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "quick"}}})["enrollmentId"]
    c.call("enrollment.submit", {"stepKey": "EMAIL_INFO", "payload": {"email": "anna@outcome.example"}})
    reached(pauses, RECORDED)  # the passkey is on the token and recorded; the outcome is not written
    assert len(private_keys(hsm)) == 1

    # The cancel is sent while the step is paused, and the daemon says it is there before the step goes on.
    c.send_raw(json.dumps({"jsonrpc": "2.0", "id": 900, "method": "enrollment.cancel", "params": {}}).encode() + b"\n")
    reached(pauses, WAITS)
    release(pauses, WAITS)
    release(pauses, RECORDED)
    cancel = response(c, 900)
    status = c.call("enrollment.status")  # every notification the daemon sent before is in by now

    finished = [n["params"] for n in c.notifications if n["method"] == "enrollment.finished"]
    assert len(finished) == 1, finished
    outcome = finished[0]["outcome"]
    assert outcome == "success", finished  # the step's transition began first
    assert cancel["result"] == {"cancelled": False, "enrollmentId": eid, "outcome": "success"}
    assert status["active"] is False and status["lastOutcome"] == finished[0]
    records = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert [r["outcome"] for r in records] == [outcome]
    credential = finished[0]["credential"]
    assert records[0]["credentialId"] == credential["credentialId"]
    assert [x["credentialId"] for x in c.call("credentials.list")["credentials"]] == [credential["credentialId"]]
    assert private_keys(hsm) == [f"tessera:{credential['credentialId']}"]
    logged = [line for line in d.log.read_text().splitlines() if "enrollment finished" in line and eid in line]
    assert len(logged) == 1 and "outcome=success" in logged[0], logged


def test_a_cancelled_enrollment_leaves_no_passkey(station):
    """PASSKEY_CREATION completed but the workflow goes on: a cancel then deletes the passkey it created."""
    d, hsm, pauses = station
    release(pauses, RECORDED)
    c = d.client()
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "confirm-after"}}})["enrollmentId"]
    c.call("enrollment.submit", {"stepKey": "EMAIL_INFO", "payload": {"email": "anna@outcome.example"}})
    while c.wait_notification("enrollment.stepRequired")["key"] != "CONFIRM":
        pass
    [created] = c.call("credentials.list")["credentials"]
    assert private_keys(hsm) == [f"tessera:{created['credentialId']}"]

    assert c.call("enrollment.cancel") == {"cancelled": True, "enrollmentId": eid}
    finished = c.wait_notification("enrollment.finished")
    assert finished == {"enrollmentId": eid, "outcome": "cancelled"}
    assert c.call("credentials.list")["credentials"] == []
    assert private_keys(hsm) == []
    [record] = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert record["outcome"] == "cancelled" and "credentialId" not in record
    assert c.call("enrollment.status")["lastOutcome"] == finished
