"""Every credential has an owner (issue 27, section 2): the uid that created it, and administrators, see, use and
change it; to every other uid it does not exist, with the same answers as an id that was never made. Two real uids
on the real daemon's socket: root (the daemon's uid, an administrator) and nobody."""
import json
import os
import pathlib
import sqlite3

import pytest

from tessera_harness import NOBODY, SOFTHSM_MODULE, Daemon, RPCError, b64u, calls_as, cli
from tessera_harness import let_other_uids_reach
from verify import verify_assertion, verify_registration

RP = "owners.example.com"
ORIGIN = f"https://{RP}"


def open_to_others(tmp_path: pathlib.Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test needs root to act as another uid (CI runs as root)")
    let_other_uids_reach(tmp_path)


@pytest.fixture
def shared(tmp_path, softhsm):
    open_to_others(tmp_path)
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"socketMode": "0666"}))
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                       "--config", str(config)]).start()
    yield d
    d.stop()


def enroll_params(user: bytes, **extra) -> dict:
    return {"rpId": RP, "user": {"id": b64u(user), "name": user.decode(), "displayName": user.decode()},
            "challenge": b64u(os.urandom(32)), "pin": "1234", "attestation": "packed", **extra}


def auth_params(cred: str) -> dict:
    return {"rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [cred], "pin": "1234"}


def test_another_uids_passkey_does_not_exist_for_it(shared):
    root = shared.client()
    mine = root.call("passkey.enroll", enroll_params(b"root-user"))["credentialId"]
    never = b64u(os.urandom(32))
    # nobody: the root-owned credential answers exactly as one that was never made.
    _, out = calls_as(NOBODY, shared.socket, [
        ("credentials.list", {"rpId": RP}),
        ("credentials.get", {"credentialId": mine}),
        ("credentials.get", {"credentialId": never}),
        ("passkey.authenticate", auth_params(mine)),
        ("passkey.authenticate", auth_params(never)),
        ("credentials.delete", {"credentialId": mine, "pin": "1234"}),
        ("credentials.delete", {"credentialId": never, "pin": "1234"}),
        ("credentials.provisioningCheck", {"rpId": RP, "userId": b64u(b"root-user")}),
        ("passkey.enroll", enroll_params(b"nobody-user", excludeCredentials=[mine])),
        ("credentials.chown", {"credentialId": mine, "owner": str(NOBODY)}),
    ])
    assert out[0]["result"]["credentials"] == []
    assert out[1]["code"] == out[2]["code"] == "PASSKEY_NOT_FOUND"
    assert out[1]["data"] == out[2]["data"]
    assert out[3]["code"] == out[4]["code"] == "PASSKEY_NOT_FOUND"
    assert out[3]["data"] == out[4]["data"]
    assert out[5]["code"] == out[6]["code"] == "PASSKEY_NOT_FOUND"
    assert out[7]["result"]["decision"] == "provision" and out[7]["result"]["credentials"] == []
    theirs = out[8]["result"]["credentialId"]  # excludeCredentials naming another uid's id excludes nothing
    assert out[9]["code"] == "UNAUTHORIZED"

    # root's credential is untouched; root (an administrator) sees both, with their owners.
    assert root.call("credentials.get", {"credentialId": mine})["ownerUid"] == os.geteuid()
    listed = {c["credentialId"]: c["ownerUid"] for c in root.call("credentials.list", {"rpId": RP})["credentials"]}
    assert listed == {mine: os.geteuid(), theirs: NOBODY}

    # nobody sees and uses its own.
    _, out = calls_as(NOBODY, shared.socket, [("credentials.list", {"rpId": RP}),
                                             ("passkey.authenticate", auth_params(theirs))])
    assert [c["credentialId"] for c in out[0]["result"]["credentials"]] == [theirs]
    assert out[1]["result"]["credentialId"] == theirs

    # An administrator hands root's credential to nobody (the CLI's chown): now it is nobody's to use.
    res = cli(shared, "credentials", "chown", "--", mine, "nobody")
    assert f"uid {NOBODY}" in res.stdout
    _, out = calls_as(NOBODY, shared.socket, [("passkey.authenticate", auth_params(mine)),
                                             ("credentials.delete", {"credentialId": mine, "pin": "1234"})])
    assert out[0]["result"]["credentialId"] == mine
    assert out[1]["result"]["deleted"] is True
    events = root.call("credentials.history", {"credentialId": mine})["events"]
    assert any("owner uid 0 -> 65534" in (e.get("reason") or "") for e in events)


def test_rows_from_before_owners_belong_to_the_daemon(tmp_path, softhsm):
    """A database written before owners were recorded: its credentials become the daemon's uid's."""
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]).start()
    try:
        c = d.client()
        reg = c.call("passkey.enroll", enroll_params(b"old-user"))
    finally:
        d.stop()
    # Take the database back to the schema before the owner migration (the column and the migration's record).
    db = sqlite3.connect(d.state / "tessera.sqlite")
    try:
        db.execute("ALTER TABLE credential DROP COLUMN ownerUid")
        db.execute("DELETE FROM grdb_migrations WHERE identifier = 'v9-credential-owner'")
        db.commit()
    finally:
        db.close()
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]).start()
    try:
        got = d.client().call("credentials.get", {"credentialId": reg["credentialId"]})
        assert got["ownerUid"] == os.geteuid()
    finally:
        d.stop()
