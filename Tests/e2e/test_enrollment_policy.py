"""Who may drive and read an enrollment (SO_PEERCRED + policy): the `enroll` permission gates enrollment.*,
`admin` gates the audit, and transactionData is for the uid that started the enrollment (or an admin)."""
from __future__ import annotations

import json
import os
import pathlib

import pytest

from tessera_harness import let_other_uids_reach, SOFTHSM_MODULE, Daemon, RPCError, SoftHSM, as_nobody

@pytest.fixture
def make_daemon(tmp_path: pathlib.Path):
    if os.geteuid() != 0:
        pytest.fail("this test needs root to act as uid nobody (CI runs as root)")
    let_other_uids_reach(tmp_path)  # nobody must be able to reach the socket
    hsm = SoftHSM(tmp_path)
    hsm.add_token("tessera-test", pin="1234")
    daemons = []

    def make(policy: dict) -> Daemon:
        config = tmp_path / f"config-{len(daemons)}.json"
        config.write_text(json.dumps({"socketMode": "0666", "policy": policy, "enrollment": {
            "workflows": {"contact": {"remote": True, "steps": ["EMAIL_INFO"]}}}}))
        d = Daemon(tmp_path, hsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                       "--config", str(config)], name=f"tesserad{len(daemons)}").start()
        daemons.append(d)
        return d

    yield make
    for d in daemons:
        d.stop()


def test_enroll_permission_gates_enrollment_methods(make_daemon):
    d = make_daemon({"enroll": {"users": ["0"]}})
    out = as_nobody(d.socket, [("enrollment.candidates", {}), ("enrollment.status", {}),
                               ("enrollment.start", {"type": {"remote": {"candidate": "contact"}}}),
                               ("enrollment.audit", {}), ("daemon.status", {})])
    assert out == {"enrollment.candidates": "UNAUTHORIZED", "enrollment.status": "UNAUTHORIZED",
                   "enrollment.start": "UNAUTHORIZED", "enrollment.audit": "UNAUTHORIZED", "daemon.status": "ok"}
    assert d.client().call("enrollment.status")["active"] is False


def test_transaction_data_is_for_the_owner(make_daemon):
    d = make_daemon({})  # enroll open to every client of the socket; admin only root and the daemon's uid
    c = d.client()
    c.call("enrollment.start", {"type": {"remote": {"candidate": "contact"}}})
    out = as_nobody(d.socket, [("enrollment.status", {}), ("enrollment.transactionData", {}),
                               ("enrollment.audit", {})])
    assert out == {"enrollment.status": "ok", "enrollment.transactionData": "UNAUTHORIZED",
                   "enrollment.audit": "UNAUTHORIZED"}
    assert c.call("enrollment.transactionData")["data"] == {}
    c.call("enrollment.cancel")
    with pytest.raises(RPCError) as e:
        c.call("enrollment.transactionData")
    assert e.value.code == "NO_ACTIVE_ENROLLMENT"
