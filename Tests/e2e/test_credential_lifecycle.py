"""Credential lifecycle end to end (issue 11; vendor documents 003 and 004): suspend / resume / deactivate by an
administrator or by a lifecycle command (JWS) from the access-control backend, the audit trail, the
pre-provisioning check and its use by passkey.enroll and an enrollment's PASSKEY_CREATION. Every assertion the
daemon signs is checked as a relying party would, with py_webauthn."""
import base64
import json
import os
import pathlib
import sqlite3
import subprocess
import threading
import time
import uuid

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tessera_harness import (MRZ_ANNA, NOBODY, PCSCD, SOFTHSM_MODULE, Daemon, EmulatedPassport, RPCError, SoftHSM,
                             as_nobody, b64u, calls_as, cli, make_passport_profile, reached, release, unb64u)
from tessera_harness import let_other_uids_reach
from verify import verify_assertion, verify_registration

RP = "badge.example.com"
ORIGIN = f"https://{RP}"
PIN = "1234"
STATION = "kiosk-lifecycle-1"
ISSUER = "https://pacs.example"
KID = "pacs-2026"
PASSKEY = {"key": "PASSKEY_CREATION", "rpId": RP, "attestation": "packed"}
NFC = {"key": "NFC_PHASE", "requirePassiveAuthentication": True, "cardWaitSeconds": 20}
CONFIRM = {"key": "CONFIRM", "client": True, "prompt": "Confirm",
           "input": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}}


class Station:
    """A daemon with two SoftHSM2 tokens and an issuer trusted for activation tokens and lifecycle commands."""

    def __init__(self, root: pathlib.Path, pcscd: PCSCD | None = None, csca: list[pathlib.Path] = (),
                 pin_file: bool = False, recovery: dict | None = None):
        self.root, self.pcscd = root, pcscd
        self.hsm = SoftHSM(root)
        self.hsm.add_token("first", pin=PIN)
        self.hsm.add_token("second", pin=PIN)
        self.key = ec.generate_private_key(ec.SECP256R1())
        pem = root / "issuer.pem"
        pem.write_bytes(self.key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
        config = root / "tesserad.json"
        extra = {}
        if pin_file:  # an unattended token: the daemon can delete a key left by a crash on its own
            (root / "pin").write_text(PIN)
            (root / "pin").chmod(0o600)
            extra["pinFiles"] = {"first": str(root / "pin")}
        enrollment = {"recovery": recovery} if recovery else {}
        config.write_text(json.dumps({**extra, "enrollment": {**enrollment,
            "issuers": [{"issuer": ISSUER, "keyId": KID, "publicKeyFile": str(pem)}],
            "stationId": STATION,
            "workflows": {"badge": {"remote": False, "steps": [CONFIRM, PASSKEY]},
                          "badge-replace": {"remote": False, "steps": [CONFIRM, dict(PASSKEY, replace=True)]},
                          "chip-badge": {"remote": True, "steps": ["NFC_MRZ", NFC, PASSKEY]}},
        }}))
        self.env = {**self.hsm.env, **(pcscd.env if pcscd else {})}
        self.args = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config", str(config),
                     *[a for c in csca for a in ("--csca", str(c))]]
        self.daemon = Daemon(root, self.env, self.args).start()
        self.c = self.daemon.client()
        tokens = {t["label"]: t["id"] for t in self.c.call("tokens.list")["tokens"]}
        self.first, self.second = tokens["first"], tokens["second"]

    def sign(self, claims: dict, typ: str = "tessera-lifecycle+jwt") -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "jti": uuid.uuid4().hex, "iat": now, "exp": now + 300, "aud": [STATION], **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, self.key, algorithm="ES256", headers={"typ": typ, "kid": KID})

    def enroll(self, user: bytes, token: str | None = None, **extra) -> tuple[dict, bytes]:
        """passkey.enroll; returns the result and the credential's public key, verified with py_webauthn."""
        challenge = os.urandom(32)
        params = {"rpId": RP, "user": {"id": b64u(user), "name": user.decode()}, "challenge": b64u(challenge),
                  "pin": PIN, "attestation": "packed", "tokenId": token or self.first, **extra}
        reg = self.c.call("passkey.enroll", params)
        verified = verify_registration(reg, challenge, RP, ORIGIN, require_uv=True)
        return reg, verified.credential_public_key

    def assert_signs(self, cred_id: str, key: bytes, user: bytes) -> int:
        challenge = os.urandom(32)
        res = self.c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(challenge), "pin": PIN,
                                                   "allowCredentials": [cred_id]})
        v = verify_assertion(res, challenge, RP, ORIGIN, key, 0, require_uv=True)
        assert unb64u(res["userHandle"]) == user
        return v.new_sign_count

    def refused(self, cred_id: str) -> RPCError:
        with pytest.raises(RPCError) as e:
            self.c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(os.urandom(32)), "pin": PIN,
                                                 "allowCredentials": [cred_id]})
        return e.value

    def error(self, method: str, params: dict) -> RPCError:
        with pytest.raises(RPCError) as e:
            self.c.call(method, params)
        return e.value

    def state(self, cred_id: str) -> str:
        return self.c.call("credentials.get", {"credentialId": cred_id})["state"]

    def drive(self, start: dict, answers: dict) -> dict:
        """Runs an enrollment on a subscribed connection, answering each stepRequired; the finished params."""
        c = self.daemon.client()
        c.call("enrollment.subscribe")
        eid = c.call("enrollment.start", start)["enrollmentId"]
        while True:
            n = c.next_notification(60)
            p = n["params"]
            if n["method"] == "enrollment.stepRequired":
                c.call("enrollment.submit", {"stepKey": p["key"], "payload": answers[p["key"]]})
            elif n["method"] == "enrollment.finished" and p["enrollmentId"] == eid:
                return p

    def restart(self, failpoints: str | None = None) -> None:
        """A new daemon on the same state (with `failpoints` armed, TESSERA_FAILPOINTS)."""
        if self.daemon.proc.poll() is None:
            self.daemon.stop()
        env = {**self.env, "TESSERA_FAILPOINTS": failpoints} if failpoints else self.env
        self.daemon = Daemon(self.root, env, self.args).start()
        self.c = self.daemon.client()

    def card_present(self, reader: str) -> bool:
        return any(r["name"] == reader and r["cardPresent"] for r in self.c.call("readers.list")["readers"])

    def check(self, user: bytes, token: str | None = None) -> dict:
        params = {"rpId": RP, "userId": b64u(user)}
        if token:
            params["tokenId"] = token
        return self.c.call("credentials.provisioningCheck", params)


@pytest.fixture
def station(tmp_path):
    s = Station(tmp_path)
    yield s
    s.daemon.stop()


def test_suspend_resume_deactivate(station):
    s = station
    reg, key = s.enroll(b"alice")
    cid = reg["credentialId"]
    first = s.assert_signs(cid, key, b"alice")
    cred = s.c.call("credentials.get", {"credentialId": cid})
    assert cred["state"] == "active" and cred["rpId"] == RP and cred["createdAt"] and "identityBinding" not in cred

    out = s.c.call("credentials.suspend", {"credentialId": cid, "reason": "badge reported lost"})
    assert out["changed"] is True and out["credential"]["state"] == "suspended"
    assert s.c.call("credentials.suspend", {"credentialId": cid})["changed"] is False
    e = s.refused(cid)
    assert e.code == "CREDENTIAL_SUSPENDED" and e.data["retryable"] is False and e.data["state"] == "suspended"
    assert [c["state"] for c in s.c.call("credentials.list", {"rpId": RP})["credentials"]] == ["suspended"]

    assert s.c.call("credentials.resume", {"credentialId": cid, "reason": "found"})["credential"]["state"] == "active"
    assert s.assert_signs(cid, key, b"alice") > first
    assert s.c.call("credentials.get", {"credentialId": cid})["lastUsedAt"]

    s.c.call("credentials.deactivate", {"credentialId": cid, "reason": "left the company"})
    e = s.refused(cid)
    assert e.code == "CREDENTIAL_DEACTIVATED" and e.data["retryable"] is False
    # Final: neither resumed nor suspended again.
    for method in ["credentials.resume", "credentials.suspend"]:
        assert s.error(method, {"credentialId": cid}).code == "CREDENTIAL_DEACTIVATED"
    assert s.state(cid) == "deactivated"

    events = s.c.call("credentials.history", {"credentialId": cid})["events"]
    assert [(e.get("from"), e["to"]) for e in events] == [
        (None, "active"), ("active", "suspended"), ("suspended", "active"), ("active", "deactivated")]
    assert [e.get("reason") for e in events[1:]] == ["badge reported lost", "found", "left the company"]
    assert all(e["actor"] == "uid:0" for e in events)
    assert s.error("credentials.suspend", {"credentialId": b64u(b"no such credential")}).code == "PASSKEY_NOT_FOUND"


def test_delete_returns_the_record_and_is_audited(station):
    s = station
    reg, _ = s.enroll(b"bob")
    s.c.call("credentials.suspend", {"credentialId": reg["credentialId"]})
    out = s.c.call("credentials.delete", {"credentialId": reg["credentialId"], "pin": PIN})
    assert out["deleted"] is True and out["credentialId"] == reg["credentialId"]
    assert out["credential"]["credentialId"] == reg["credentialId"] and out["credential"]["state"] == "suspended"
    assert out["credential"]["user"]["id"] == b64u(b"bob") and out["credential"]["rpId"] == RP
    assert s.error("credentials.get", {"credentialId": reg["credentialId"]}).code == "PASSKEY_NOT_FOUND"
    events = s.c.call("credentials.history", {"credentialId": reg["credentialId"]})["events"]
    assert events[-1]["to"] == "deleted" and events[-1]["from"] == "suspended"


def test_lifecycle_commands(station):
    s = station
    a1, k1 = s.enroll(b"carol")
    a2, k2 = s.enroll(b"carol", token=s.second)
    other, ko = s.enroll(b"dave")

    command = s.sign({"action": "suspend", "credentialId": a1["credentialId"], "reason": "PACS: badge lost"})
    out = s.c.call("credentials.applyLifecycle", {"command": command})
    assert out["action"] == "suspend" and out["changed"] == [a1["credentialId"]]
    assert s.refused(a1["credentialId"]).code == "CREDENTIAL_SUSPENDED"
    s.assert_signs(a2["credentialId"], k2, b"carol")
    # Single use.
    e = s.error("credentials.applyLifecycle", {"command": command})
    assert e.code == "LIFECYCLE_COMMAND_REPLAYED" and e.data["retryable"] is False

    # Refused before anything changes: another station, an activation token's type, another key, expired.
    resume = {"action": "resume", "credentialId": a1["credentialId"]}
    bad = [s.sign(dict(resume, aud=["kiosk-elsewhere"])), s.sign(dict(resume, aud=None)),
           s.sign(resume, typ="tessera-activation+jwt"), s.sign(resume, typ="JWT"),
           s.sign(dict(resume, exp=int(time.time()) - 3600)),
           jwt.encode({"iss": ISSUER, "jti": "x", "exp": int(time.time()) + 60, "aud": STATION, **resume},
                      ec.generate_private_key(ec.SECP256R1()), algorithm="ES256",
                      headers={"typ": "tessera-lifecycle+jwt", "kid": KID})]
    for token in bad:
        assert s.error("credentials.applyLifecycle", {"command": token}).code == "LIFECYCLE_COMMAND_INVALID"
    assert s.state(a1["credentialId"]) == "suspended"

    out = s.c.call("credentials.applyLifecycle", {"command": s.sign(resume)})
    assert out["changed"] == [a1["credentialId"]]
    s.assert_signs(a1["credentialId"], k1, b"carol")

    # By user: every credential of carol at the RP, dave's untouched.
    out = s.c.call("credentials.applyLifecycle", {"command": s.sign(
        {"action": "deactivate", "rpId": RP, "userId": b64u(b"carol"), "reason": "PACS: contract ended"})})
    assert sorted(out["changed"]) == sorted([a1["credentialId"], a2["credentialId"]])
    for cid in [a1["credentialId"], a2["credentialId"]]:
        assert s.refused(cid).code == "CREDENTIAL_DEACTIVATED"
    s.assert_signs(other["credentialId"], ko, b"dave")
    last = s.c.call("credentials.history", {"credentialId": a2["credentialId"]})["events"][-1]
    assert last["to"] == "deactivated" and last["reason"] == "PACS: contract ended"
    assert last["actor"].startswith(f"issuer:{ISSUER} jti:")


def test_provisioning_check_and_enroll(station):
    s = station
    erin = b"erin"
    assert s.check(erin) == {"decision": "provision", "credentials": []}
    first, k_first = s.enroll(erin)
    check = s.check(erin, s.first)
    assert check["decision"] == "alreadyProvisioned"
    assert [c["credentialId"] for c in check["credentials"]] == [first["credentialId"]]
    # Without tokenId: the token passkey.enroll would use (the first of tokens.list).
    default = s.c.call("tokens.list")["tokens"][0]["id"]
    assert s.check(erin)["decision"] == ("alreadyProvisioned" if default == s.first else "provisionedOnOtherToken")

    e = s.error("passkey.enroll", {"rpId": RP, "user": {"id": b64u(erin), "name": "erin"}, "pin": PIN,
                                   "challenge": b64u(os.urandom(32)), "tokenId": s.first})
    assert e.code == "CREDENTIAL_EXISTS" and e.data["decision"] == "alreadyProvisioned" and not e.data["retryable"]
    assert e.data["credentialIds"] == [first["credentialId"]]
    assert len(s.c.call("credentials.list", {"userId": b64u(erin)})["credentials"]) == 1

    # 003's remote pass: a credential on another token only.
    assert s.check(erin, s.second)["decision"] == "provisionedOnOtherToken"
    second, k_second = s.enroll(erin, token=s.second)

    s.c.call("credentials.suspend", {"credentialId": second["credentialId"]})
    assert s.check(erin, s.first)["decision"] == "suspended"
    e = s.error("passkey.enroll", {"rpId": RP, "user": {"id": b64u(erin), "name": "erin"}, "pin": PIN,
                                   "challenge": b64u(os.urandom(32)), "tokenId": s.first})
    assert e.code == "CREDENTIAL_EXISTS" and e.data["decision"] == "suspended"

    # replace: a new credential; the others are replaced (final) and never sign again.
    third, k_third = s.enroll(erin, replace=True)
    assert s.state(first["credentialId"]) == "replaced" and s.state(second["credentialId"]) == "replaced"
    for cid in [first["credentialId"], second["credentialId"]]:
        assert s.refused(cid).code == "CREDENTIAL_DEACTIVATED"
    s.assert_signs(third["credentialId"], k_third, erin)
    assert s.check(erin, s.first)["decision"] == "alreadyProvisioned"
    replaced = s.c.call("credentials.history", {"credentialId": first["credentialId"]})["events"][-1]
    assert replaced["to"] == "replaced" and replaced["reason"] == f"replaced by {third['credentialId']}"

    # Deactivated: refused with CREDENTIAL_DEACTIVATED, on any token, unless replace.
    s.c.call("credentials.deactivate", {"credentialId": third["credentialId"]})
    assert s.check(erin, s.second)["decision"] == "deactivated"
    e = s.error("passkey.enroll", {"rpId": RP, "user": {"id": b64u(erin), "name": "erin"}, "pin": PIN,
                                   "challenge": b64u(os.urandom(32)), "tokenId": s.second})
    assert e.code == "CREDENTIAL_DEACTIVATED" and e.data["decision"] == "deactivated"
    fourth, k_fourth = s.enroll(erin, token=s.second, replace=True)
    assert s.state(third["credentialId"]) == "replaced"
    s.assert_signs(fourth["credentialId"], k_fourth, erin)


def test_default_token_is_the_first_of_tokens_list_and_stays_so(station):
    """Without tokenId, passkey.enroll and the provisioning check use the first token of tokens.list (module and slot
    order, not a dictionary's), the same one after a restart."""
    s = station
    order = [t["id"] for t in s.c.call("tokens.list")["tokens"]]
    assert sorted(order) == sorted([s.first, s.second])
    for user in [b"lena", b"mads"]:
        params = {"rpId": RP, "user": {"id": b64u(user), "name": user.decode()}, "challenge": b64u(os.urandom(32)),
                  "pin": PIN}
        assert s.c.call("passkey.enroll", params)["tokenId"] == order[0]
        assert s.check(user)["decision"] == "alreadyProvisioned"
        s.restart()
        assert [t["id"] for t in s.c.call("tokens.list")["tokens"]] == order


def test_concurrent_enrolls_cannot_both_pass_the_check(station, tmp_path):
    """Two passkey.enroll for one user on one token, both held (pause point) after their key exists, i.e. after the
    early check passed for both: the check in the transaction that records the credential lets one through."""
    s = station
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    point = "passkey.afterKeyGeneration"
    s.restart(failpoints=f"{point}=pause:{pauses}")
    user = b"kim"
    out = {}

    def enroll(name: str) -> None:
        challenge = os.urandom(32)
        try:
            reg = s.daemon.client().call("passkey.enroll", {
                "rpId": RP, "user": {"id": b64u(user), "name": "kim"}, "challenge": b64u(challenge), "pin": PIN,
                "attestation": "packed", "tokenId": s.first})
            out[name] = (reg, challenge)
        except RPCError as e:
            out[name] = e

    workers = []
    for name in ["a", "b"]:
        workers.append(threading.Thread(target=enroll, args=(name,)))
        workers[-1].start()
        reached(pauses, point)
        (pauses / f"{point}.reached").unlink()  # the next one shows the second request held there too
    release(pauses, point)
    for w in workers:
        w.join(60)
    errors = [r for r in out.values() if isinstance(r, RPCError)]
    wins = [r for r in out.values() if not isinstance(r, RPCError)]
    assert len(wins) == 1 and len(errors) == 1, out
    assert errors[0].code == "CREDENTIAL_EXISTS" and errors[0].data["decision"] == "alreadyProvisioned"
    reg, challenge = wins[0]
    assert errors[0].data["credentialIds"] == [reg["credentialId"]]
    key = verify_registration(reg, challenge, RP, ORIGIN, require_uv=True).credential_public_key
    s.assert_signs(reg["credentialId"], key, user)
    assert [c["credentialId"] for c in s.c.call("credentials.list", {"userId": b64u(user)})["credentials"]] == [
        reg["credentialId"]]
    assert private_keys(s) == 1, "the refused request's key is deleted"


def test_enrollment_passkey_creation_applies_the_check(station):
    s = station

    def run(workflow: str) -> dict:
        now = int(time.time())
        token = jwt.encode({"iss": ISSUER, "jti": uuid.uuid4().hex, "exp": now + 300, "aud": STATION,
                            "workflow": workflow, "sub": "employee-77"}, s.key, algorithm="ES256",
                           headers={"typ": "tessera-activation+jwt", "kid": KID})
        return s.drive({"type": {"activationToken": token}}, {"CONFIRM": {"ok": True}, "PASSKEY_CREATION": {"pin": PIN}})

    done = run("badge")
    assert done["outcome"] == "success", done
    first = s.c.call("credentials.list", {"userId": b64u(b"employee-77")})["credentials"]
    assert [c["state"] for c in first] == ["active"]
    events = s.c.call("credentials.history", {"credentialId": first[0]["credentialId"]})["events"]
    assert events[0]["actor"].startswith("enrollment:")

    again = run("badge")
    assert again["outcome"] != "success"
    assert again["error"]["code"] == "CREDENTIAL_EXISTS", again
    assert len(s.c.call("credentials.list", {"userId": b64u(b"employee-77")})["credentials"]) == 1

    replaced = run("badge-replace")
    assert replaced["outcome"] == "success", replaced
    states = {c["credentialId"]: c["state"] for c in
              s.c.call("credentials.list", {"userId": b64u(b"employee-77")})["credentials"]}
    assert states[first[0]["credentialId"]] == "replaced" and sorted(states.values()) == ["active", "replaced"]


def test_lifecycle_methods_need_admin(tmp_path, station):
    s = station
    reg, _ = s.enroll(b"frank")
    open_socket_to_others(s, tmp_path)
    cid = {"credentialId": reg["credentialId"]}
    out = as_nobody(s.daemon.socket, [("credentials.suspend", cid), ("credentials.deactivate", cid),
                                      ("credentials.history", cid),
                                      ("credentials.provisioningCheck", {"rpId": RP, "userId": b64u(b"frank")})])
    assert out == {"credentials.suspend": "UNAUTHORIZED", "credentials.deactivate": "UNAUTHORIZED",
                   "credentials.history": "UNAUTHORIZED", "credentials.provisioningCheck": "ok"}
    assert s.state(reg["credentialId"]) == "active"


def test_cli(station):
    s = station
    reg, key = s.enroll(b"gina")
    cid = reg["credentialId"]
    out = cli(s.daemon, "credentials", "suspend", "--reason", "desk", "--", cid).stdout
    assert "suspended" in out
    assert s.refused(cid).code == "CREDENTIAL_SUSPENDED"
    assert "active" in cli(s.daemon, "credentials", "resume", "--", cid).stdout
    s.assert_signs(cid, key, b"gina")
    assert cli(s.daemon, "credentials", "check", "--rp-id", RP, "--user-id", b64u(b"gina"),
               "--token", s.second).stdout.splitlines()[0] == "provisionedOnOtherToken"
    history = cli(s.daemon, "credentials", "history", "--", cid).stdout
    assert "active → suspended" in history and "(desk)" in history
    command = s.sign({"action": "deactivate", "credentialId": cid})
    assert "1 of 1" in cli(s.daemon, "credentials", "apply", "-", input=command + "\n").stdout
    assert "already deactivated" in cli(s.daemon, "credentials", "deactivate", "--", cid).stdout
    assert s.refused(cid).code == "CREDENTIAL_DEACTIVATED"


# --- identity binding (emulated passport behind pcscd + vpcd) -----------------------------------------------------

@pytest.fixture(scope="module")
def chip_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("binding")
    pcscd = PCSCD(root).start()
    profile = make_passport_profile(root / "passport", MRZ_ANNA, "--pace", "ecdh-gm-p256-aes128", "--aa")
    yield pcscd, profile
    pcscd.stop()


@pytest.fixture
def chip_station(tmp_path, chip_lab, other_profiles):
    pcscd, profile = chip_lab
    s = Station(tmp_path, pcscd, [profile / "csca.pem", other_profiles[0] / "csca.pem"])
    s.profile = profile
    yield s
    s.daemon.stop()


PLAIN = ["L898902C3", "ERIKSSON", "ANNA", "740812", "1974-08-12"]


def stored_bindings(s: Station) -> list[str]:
    db = sqlite3.connect(s.daemon.state / "tessera.sqlite")
    try:
        return [r[0] for r in db.execute("SELECT identityBinding FROM credential WHERE identityBinding IS NOT NULL")]
    finally:
        db.close()


def test_enrollment_with_a_verified_document_binds_the_passkey(chip_station):
    s = chip_station
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        done = s.drive({"type": {"remote": {"candidate": "chip-badge"}}},
                       {"NFC_MRZ": {"mrz": MRZ_ANNA}, "PASSKEY_CREATION": {"pin": PIN}})
    assert done["outcome"] == "success", done
    cid = done["credential"]["credentialId"]
    cred = s.c.call("credentials.get", {"credentialId": cid})
    assert cred["identityBinding"] == {"issuingState": "UTO"}
    # (The user name the enrollment gave the passkey is the holder's name; the binding adds nothing readable.)
    listed = s.c.call("credentials.list", {})["credentials"][0]
    assert listed["identityBinding"] == {"issuingState": "UTO"}
    (stored,) = stored_bindings(s)
    binding = json.loads(stored)
    assert binding["issuingState"] == "UTO" and binding["documentType"] == "P" and binding["enrollmentId"] == done["enrollmentId"]
    assert not any(p in stored for p in PLAIN)
    assert all(len(unb64u(binding[k])) == 32 for k in ["documentNumber", "names", "birthDate"])


def test_passkey_enroll_document_binding_needs_an_authentic_read_on_the_connection(chip_station):
    s = chip_station
    params = lambda user: {"rpId": RP, "user": {"id": b64u(user), "name": user.decode()}, "pin": PIN,  # noqa: E731
                           "challenge": b64u(os.urandom(32)), "documentBinding": True}
    e = s.error("passkey.enroll", params(b"hank"))
    assert e.code == "INVALID_INPUT" and e.data.get("field") == "documentBinding"
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        read = s.c.call("documents.read", {"mrz": MRZ_ANNA})
    assert read["verdict"] == "authentic", read["reasons"]
    # Another connection has read nothing.
    other = s.daemon.client()
    with pytest.raises(RPCError) as e:
        other.call("passkey.enroll", params(b"hank"))
    assert e.value.code == "INVALID_INPUT"
    reg = s.c.call("passkey.enroll", params(b"hank"))
    assert s.c.call("credentials.get", {"credentialId": reg["credentialId"]})["identityBinding"] == {"issuingState": "UTO"}
    # Used once.
    assert s.error("passkey.enroll", params(b"ivan")).code == "INVALID_INPUT"
    (stored,) = stored_bindings(s)
    assert "enrollmentId" not in json.loads(stored) and not any(p in stored for p in PLAIN)


# --- step-up --------------------------------------------------------------------------------------------------------

def check_digit(s: str) -> str:
    values = {**{str(d): d for d in range(10)}, **{chr(65 + i): 10 + i for i in range(26)}, "<": 0}
    return str(sum(values[c] * (7, 3, 1)[i % 3] for i, c in enumerate(s)) % 10)


def td3(surname: str, given: str, number: str, birth: str, sex: str = "M", expiry: str = "341231") -> str:
    line1 = f"P<UTO{surname}<<{given.replace(' ', '<')}".ljust(44, "<")
    number = number.ljust(9, "<")
    optional = "<" * 14
    parts = [number + check_digit(number), birth + check_digit(birth), expiry + check_digit(expiry),
             optional + check_digit(optional)]
    composite = check_digit(parts[0] + parts[1] + parts[2] + parts[3])
    line2 = parts[0] + "UTO" + parts[1] + sex + parts[2] + parts[3] + composite
    assert len(line1) == 44 and len(line2) == 44
    return line1 + "\n" + line2


MRZ_OTHER = td3("MUSTERMANN", "ERIK", "C01X00T47", "830812")


@pytest.fixture(scope="module")
def other_profiles(chip_lab, tmp_path_factory):
    root = tmp_path_factory.mktemp("stepup")
    other = make_passport_profile(root / "other", MRZ_OTHER, "--pace", "ecdh-gm-p256-aes128", "--aa")
    # Anna's data again, under a CSCA the station does not trust: not authentic.
    untrusted = make_passport_profile(root / "untrusted", MRZ_ANNA, "--pace", "ecdh-gm-p256-aes128", "--aa")
    return other, untrusted


@pytest.fixture
def bound(chip_station):
    """A chip station and Anna's passkey with an identity binding (from an enrollment that read her passport)."""
    s = chip_station
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        done = s.drive({"type": {"remote": {"candidate": "chip-badge"}}},
                       {"NFC_MRZ": {"mrz": MRZ_ANNA}, "PASSKEY_CREATION": {"pin": PIN}})
    assert done["outcome"] == "success", done
    cred = done["credential"]
    key = verify_registration(cred, unb64u(json.loads(unb64u(cred["clientDataJSON"]))["challenge"]), RP, ORIGIN,
                              require_uv=True).credential_public_key
    return s, cred, key


CONTEXT = {"contentB64": base64.b64encode(json.dumps({"transfer": "1000 EUR to DE89"}).encode()).decode(),
           "mime": "application/json"}


def stepup_params(cred: dict, challenge: bytes, **extra) -> dict:
    return {"rpId": RP, "challenge": b64u(challenge), "allowCredentials": [cred["credentialId"]], "pin": PIN,
            "operationContext": CONTEXT, **extra}


def test_stepup_with_the_holders_document(bound):
    s, cred, key = bound
    ui = s.daemon.client()
    ui.call("enrollment.subscribe")
    challenge = os.urandom(32)
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        res = s.c.call("stepup.start", stepup_params(cred, challenge, document={"required": True, "mrz": MRZ_ANNA}))
    v = verify_assertion(res, challenge, RP, ORIGIN, key, 0, require_uv=True)
    assert v.new_sign_count > 0
    assert res["stepUpId"] and res["postOperationContext"] == CONTEXT
    assert res["document"]["verdict"] == "authentic" and res["document"]["matched"] == "binding"
    context = ui.wait_notification("stepup.context")
    assert context["stepUpId"] == res["stepUpId"] and context["operationContext"] == CONTEXT
    assert context["user"]["name"]
    finished = ui.wait_notification("stepup.finished")
    assert finished == {"stepUpId": res["stepUpId"], "outcome": "success"}


def test_stepup_asks_for_the_document_and_takes_it_from_submit(bound):
    s, cred, key = bound
    ui = s.daemon.client()
    ui.call("enrollment.subscribe")
    challenge = os.urandom(32)
    out = {}
    worker = threading.Thread(target=lambda: out.update(
        result=s.daemon.client().call("stepup.start", stepup_params(cred, challenge, document={"required": True}))))
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        worker.start()
        asked = ui.wait_notification("stepup.inputRequired")
        assert asked["key"] == "DOCUMENT"
        with pytest.raises(RPCError) as e:
            ui.call("stepup.submit", {"stepUpId": asked["stepUpId"]})
        assert e.value.code == "INVALID_INPUT" and e.value.data["field"] == "payload"
        ui.call("stepup.submit", {"stepUpId": asked["stepUpId"], "payload": {"mrz": MRZ_ANNA}})
        worker.join(60)
    verify_assertion(out["result"], challenge, RP, ORIGIN, key, 0, require_uv=True)


def test_stepup_with_another_persons_document(bound, other_profiles):
    s, cred, _ = bound
    other, _ = other_profiles
    with EmulatedPassport(s.pcscd, other, s.card_present):
        with pytest.raises(RPCError) as e:
            s.c.call("stepup.start", stepup_params(cred, os.urandom(32), document={"required": True, "mrz": MRZ_OTHER}))
    assert e.value.code == "STEP_UP_CREDENTIAL_USER_MISMATCH" and e.value.data["retryable"] is False
    assert "names" in e.value.data["mismatches"] and "birthDate" in e.value.data["mismatches"]
    # Expected attributes instead of the binding: the holder's document, but not the expected person.
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        with pytest.raises(RPCError) as e:
            s.c.call("stepup.start", stepup_params(cred, os.urandom(32), document={
                "required": True, "mrz": MRZ_ANNA, "expected": {"surname": "MUSTERMANN"}}))
    assert e.value.code == "STEP_UP_CREDENTIAL_USER_MISMATCH"


def test_stepup_document_not_authentic(bound, other_profiles):
    s, cred, _ = bound
    _, untrusted = other_profiles
    with EmulatedPassport(s.pcscd, untrusted, s.card_present):
        with pytest.raises(RPCError) as e:
            s.c.call("stepup.start", stepup_params(cred, os.urandom(32), document={"required": True, "mrz": MRZ_ANNA}))
    assert e.value.code == "DOCUMENT_NOT_AUTHENTIC"


def test_stepup_expired_challenge_unknown_passkey_and_suspended(bound):
    s, cred, _ = bound
    past = stepup_params(cred, os.urandom(32), document={"required": True}, expiresAt=int(time.time()) - 5)
    assert s.error("stepup.start", past).code == "CHALLENGE_EXPIRED"
    # Expires while waiting for the document.
    soon = stepup_params(cred, os.urandom(32), document={"required": True},
                         expiresAt=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2)))
    e = s.error("stepup.start", soon)
    assert e.code == "CHALLENGE_EXPIRED" and e.data["retryable"] is False
    unknown = dict(stepup_params(cred, os.urandom(32)), allowCredentials=[b64u(os.urandom(32))])
    assert s.error("stepup.start", unknown).code == "PASSKEY_NOT_FOUND"
    s.c.call("credentials.suspend", {"credentialId": cred["credentialId"]})
    assert s.error("stepup.start", stepup_params(cred, os.urandom(32))).code == "CREDENTIAL_SUSPENDED"


def test_stepup_cancel_and_session_mismatch(bound):
    s, cred, _ = bound
    ui = s.daemon.client()
    ui.call("enrollment.subscribe")
    out = {}

    def run():
        try:
            s.daemon.client().call("stepup.start", stepup_params(
                cred, os.urandom(32), document={"required": True}, crossPlatformSessionId="session-A"))
        except RPCError as e:
            out["error"] = e

    worker = threading.Thread(target=run)
    worker.start()
    asked = ui.wait_notification("stepup.inputRequired")
    sid = asked["stepUpId"]
    status = ui.call("stepup.status", {"stepUpId": sid})
    assert (status["state"], status["running"], status["waitingForInput"]) == ("waitingForDocument", True, True)
    for params in [{"stepUpId": sid, "payload": {"mrz": MRZ_ANNA}, "crossPlatformSessionId": "session-B"},
                   {"stepUpId": sid, "payload": {"mrz": MRZ_ANNA}}]:
        with pytest.raises(RPCError) as e:
            ui.call("stepup.submit", params)
        assert e.value.code == "STEP_UP_AUTH_SESSION_MISMATCH"
    with pytest.raises(RPCError) as e:
        ui.call("stepup.cancel", {"stepUpId": sid, "crossPlatformSessionId": "session-B"})
    assert e.value.code == "STEP_UP_AUTH_SESSION_MISMATCH"
    assert ui.call("stepup.cancel", {"stepUpId": sid, "crossPlatformSessionId": "session-A"})["cancelled"] is True
    worker.join(30)
    assert out["error"].code == "USER_CANCELLED" and out["error"].data["retryable"] is True
    finished = ui.wait_notification("stepup.finished")
    assert finished["outcome"] == "cancelled" and finished["error"]["code"] == "USER_CANCELLED"
    status = ui.call("stepup.status", {"stepUpId": sid})
    assert (status["state"], status["running"], status["error"]) == ("cancelled", False, {"code": "USER_CANCELLED"})


def test_stepup_cli(bound):
    s, cred, key = bound
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        out = cli(s.daemon, "--json", "stepup", "--rp-id", RP, "--credential", cred["credentialId"], "--mrz", MRZ_ANNA,
                  "--context", '{"transfer": 5}', "--pin-stdin", input=PIN + "\n").stdout
    res = json.loads(out)
    challenge = unb64u(json.loads(unb64u(res["clientDataJSON"]))["challenge"])
    verify_assertion(res, challenge, RP, ORIGIN, key, 0, require_uv=True)
    assert json.loads(base64.b64decode(res["postOperationContext"]["contentB64"])) == {"transfer": 5}


def test_stepup_reuses_a_recent_authentic_read_on_the_connection(bound, other_profiles):
    """document.maxAgeSeconds: an authentic documents.read on the same connection, at most that old, is used (once)
    instead of a new read; an older one, another connection's or none: a fresh read."""
    s, cred, key = bound
    other, _ = other_profiles
    c = s.daemon.client()
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        assert c.call("documents.read", {"mrz": MRZ_ANNA})["verdict"] == "authentic"
    # No passport in the reader now: the read made on this connection is the document.
    challenge = os.urandom(32)
    res = c.call("stepup.start", stepup_params(cred, challenge, document={"required": True, "maxAgeSeconds": 600}))
    verify_assertion(res, challenge, RP, ORIGIN, key, 0, require_uv=True)
    assert res["document"]["reused"] is True and res["document"]["matched"] == "binding"
    assert res["document"]["verdict"] == "authentic" and res["document"]["issuingState"] == "UTO"

    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        assert c.call("documents.read", {"mrz": MRZ_ANNA})["verdict"] == "authentic"
        # Older than maxAgeSeconds (0): read again, with the key given.
        challenge = os.urandom(32)
        res = c.call("stepup.start", stepup_params(cred, challenge, document={
            "required": True, "maxAgeSeconds": 0, "mrz": MRZ_ANNA}))
        verify_assertion(res, challenge, RP, ORIGIN, key, 0, require_uv=True)
        assert res["document"]["reused"] is False
        # Another connection's read is not this one's.
        res = s.daemon.client().call("stepup.start", stepup_params(cred, os.urandom(32), document={
            "required": True, "maxAgeSeconds": 600, "mrz": MRZ_ANNA}))
        assert res["document"]["reused"] is False
    # The read too old for 0 s is still there for a longer window, and then used up.
    res = c.call("stepup.start", stepup_params(cred, os.urandom(32), document={"required": True, "maxAgeSeconds": 600,
                                                                               "mrz": MRZ_ANNA}))
    assert res["document"]["reused"] is True
    # A reused read is matched like a fresh one: another person's document is refused.
    with EmulatedPassport(s.pcscd, other, s.card_present):
        assert c.call("documents.read", {"mrz": MRZ_OTHER})["verdict"] == "authentic"
    with pytest.raises(RPCError) as e:
        c.call("stepup.start", stepup_params(cred, os.urandom(32), document={"required": True, "maxAgeSeconds": 600,
                                                                             "mrz": MRZ_OTHER}))
    assert e.value.code == "STEP_UP_CREDENTIAL_USER_MISMATCH"


@pytest.mark.parametrize("failpoint", ["stepup.afterStart", "stepup.afterDocument"])
def test_stepup_crash_resumes_with_one_assertion(bound, failpoint, tmp_path):
    s, cred, key = bound
    challenge = os.urandom(32)
    sid = f"stepup-{uuid.uuid4().hex}"
    s.restart(failpoints=failpoint)
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        with pytest.raises((ConnectionError, OSError)):
            s.c.call("stepup.start", stepup_params(cred, challenge, stepUpId=sid,
                                                   document={"required": True, "mrz": MRZ_ANNA}))
        assert s.daemon.proc.wait(30) == -9, "the failpoint should have killed the daemon"
        s.restart()
    status = s.c.call("stepup.status", {"stepUpId": sid})
    assert status["running"] is False and status["credentialId"] == cred["credentialId"] and "result" not in status
    # Only its owner (or an administrator) sees it.
    open_socket_to_others(s, tmp_path)
    _, out = calls_as(NOBODY, s.daemon.socket, [("stepup.status", {"stepUpId": sid}),
                                                ("stepup.submit", {"stepUpId": sid, "payload": {"mrz": MRZ_ANNA}})])
    assert [o.get("code") for o in out] == ["UNAUTHORIZED", "STEP_UP_AUTH_SESSION_MISMATCH"]
    if failpoint == "stepup.afterStart":
        assert status["state"] == "waitingForDocument"
        # The access key was not kept: the submit after the restart gives it.
        e = s.error("stepup.submit", {"stepUpId": sid, "pin": PIN})
        assert e.code == "INVALID_INPUT" and e.data["field"] == "payload"
        with EmulatedPassport(s.pcscd, s.profile, s.card_present):
            res = s.c.call("stepup.submit", {"stepUpId": sid, "payload": {"mrz": MRZ_ANNA}, "pin": PIN})
    else:
        assert status["state"] == "documentVerified" and status["document"]["matched"] == "binding"
        # The document was verified before the crash: no access key needed (here through the CLI).
        res = json.loads(cli(s.daemon, "--json", "stepup", "--continue", sid, "--pin-stdin", input=PIN + "\n").stdout)
    assert res["resumed"] is True and res["stepUpId"] == sid and res["postOperationContext"] == CONTEXT
    assert res["document"]["verdict"] == "authentic" and res["document"]["matched"] == "binding"
    verify_assertion(res, challenge, RP, ORIGIN, key, 0, require_uv=True)
    # Exactly one assertion: asking again (submit, status, the CLI) gives the same one, nothing is signed again.
    again = s.c.call("stepup.submit", {"stepUpId": sid, "pin": PIN})
    assert (again["signature"], again["signCount"]) == (res["signature"], res["signCount"])
    status = s.c.call("stepup.status", {"stepUpId": sid})
    assert status["state"] == "succeeded" and status["result"]["signature"] == res["signature"]
    assert f"step-up {sid}: succeeded" in cli(s.daemon, "stepup", "--status", sid).stdout
    e = s.error("stepup.start", stepup_params(cred, os.urandom(32), stepUpId=sid))
    assert e.code == "INVALID_INPUT" and e.data["field"] == "stepUpId"


def test_stepup_after_a_restart_expired_or_cancelled(bound):
    s, cred, _ = bound
    ids = {"cancelled": f"c-{uuid.uuid4().hex}", "expired": f"x-{uuid.uuid4().hex}"}
    s.restart(failpoints="stepup.afterStart")
    for name, sid in ids.items():
        expires = int(time.time()) + 4 if name == "expired" else None
        with pytest.raises((ConnectionError, OSError)):
            s.c.call("stepup.start", stepup_params(cred, os.urandom(32), stepUpId=sid, expiresAt=expires,
                                                   document={"required": True}))
        assert s.daemon.proc.wait(30) == -9
        s.restart(failpoints="stepup.afterStart" if name == "cancelled" else None)
    out = s.c.call("stepup.cancel", {"stepUpId": ids["cancelled"]})
    assert out["cancelled"] is True
    assert s.c.call("stepup.cancel", {"stepUpId": ids["cancelled"]})["cancelled"] is False
    e = s.error("stepup.submit", {"stepUpId": ids["cancelled"], "payload": {"mrz": MRZ_ANNA}, "pin": PIN})
    assert e.code == "USER_CANCELLED" and e.data["state"] == "cancelled"
    while time.time() <= expires + 1:  # the challenge's expiry is the subject here: wait for the clock to pass it
        time.sleep(0.2)
    e = s.error("stepup.submit", {"stepUpId": ids["expired"], "payload": {"mrz": MRZ_ANNA}, "pin": PIN})
    assert e.code == "CHALLENGE_EXPIRED" and e.data["retryable"] is False
    status = s.c.call("stepup.status", {"stepUpId": ids["expired"]})
    assert status["state"] == "failed" and status["error"] == {"code": "CHALLENGE_EXPIRED"}
    assert s.error("stepup.status", {"stepUpId": "no-such-step-up"}).code == "PASSKEY_NOT_FOUND"


# --- recovery -------------------------------------------------------------------------------------------------------

LIMITS = {"maxAttemptsPerUser": 3, "maxAttemptsPerStation": 20, "windowSeconds": 3600}


@pytest.fixture
def recovering(tmp_path, chip_lab, other_profiles):
    """A station (the token's PIN in a PIN file) where Anna, user employee-9, lost the passkey she got after a
    verified read of her passport."""
    pcscd, profile = chip_lab
    other, _ = other_profiles
    s = Station(tmp_path, pcscd, [profile / "csca.pem", other / "csca.pem"], pin_file=True, recovery=LIMITS)
    s.profile, s.other = profile, other
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        assert s.c.call("documents.read", {"mrz": MRZ_ANNA})["verdict"] == "authentic"
    lost, lost_key = s.enroll(b"employee-9", documentBinding=True)
    s.lost, s.lost_key = lost["credentialId"], lost_key
    yield s
    s.daemon.stop()


def recovery_token(s: Station, **claims) -> str:
    now = int(time.time())
    payload = {"iss": ISSUER, "jti": uuid.uuid4().hex, "exp": now + 600, "aud": [STATION], "sub": "employee-9",
               "rpId": RP, "user": {"name": "anna", "displayName": "Anna"}, "bindingOf": s.lost, **claims}
    payload = {k: v for k, v in payload.items() if v is not None}
    return jwt.encode(payload, s.key, algorithm="ES256", headers={"typ": "tessera-recovery+jwt", "kid": KID})


def recover(s: Station, token: str, attempt: str | None = None, document: dict | None = None, **extra) -> dict:
    params = {"recoveryAttemptId": attempt or uuid.uuid4().hex, "recoveryToken": token, "pin": PIN,
              "tokenId": s.first, **extra}
    if document is not None:
        params["document"] = document
    return s.c.call("recovery.start", params)


def private_keys(s: Station) -> int:
    """Private keys on the token "first", as OpenSC's pkcs11-tool (an independent PKCS#11 client) lists them."""
    out = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "first", "--login", "--pin", PIN,
                          "--list-objects", "--type", "privkey"], capture_output=True, text=True, check=True,
                         env={**os.environ, **s.hsm.env}).stdout
    return sum(line.startswith("Private Key Object") for line in out.splitlines())


def check_replacement(s: Station, res: dict, challenge: bytes | None) -> None:
    """The registration (py_webauthn), the old credential replaced and refused, the new one signing."""
    if challenge is not None:
        key = verify_registration(res, challenge, RP, ORIGIN, require_uv=True).credential_public_key
    else:  # rebuilt after a crash: `none` attestation over the planned challenge
        challenge = unb64u(json.loads(unb64u(res["clientDataJSON"]))["challenge"])
        key = verify_registration(res, challenge, RP, ORIGIN).credential_public_key
    assert res["replaced"] == [s.lost]
    assert s.state(s.lost) == "replaced" and s.refused(s.lost).code == "CREDENTIAL_DEACTIVATED"
    s.assert_signs(res["credentialId"], key, b"employee-9")
    creds = s.c.call("credentials.list", {"userId": b64u(b"employee-9")})["credentials"]
    assert sorted(c["state"] for c in creds) == ["active", "replaced"]
    new = next(c for c in creds if c["state"] == "active")
    assert new["identityBinding"] == {"issuingState": "UTO"}


def test_recovery_with_a_valid_token(recovering):
    s = recovering
    token = recovery_token(s)
    challenge = os.urandom(32)
    attempt = uuid.uuid4().hex
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        res = recover(s, token, attempt, {"mrz": MRZ_ANNA}, challenge=b64u(challenge))
    assert res["resumed"] is False and res["recoveryAttemptId"] == attempt
    check_replacement(s, res, challenge)
    assert private_keys(s) == 2  # the lost key stays (Tessera may not see the lost token), one replacement
    # The same attempt again: its result, nothing new. The token with another attempt: a replay.
    again = recover(s, token, attempt)
    assert again["credentialId"] == res["credentialId"] and again["resumed"] is True
    e = s.error("recovery.start", {"recoveryAttemptId": "another", "recoveryToken": token})
    assert e.code == "RECOVERY_TOKEN_INVALID" and e.data["retryable"] is False
    assert private_keys(s) == 2
    history = s.c.call("credentials.history", {"credentialId": s.lost})["events"]
    assert history[-1]["to"] == "replaced" and history[-1]["actor"] == f"recovery:{attempt}"


def test_recovery_by_expected_attributes(recovering):
    s = recovering
    token = recovery_token(s, bindingOf=None, expected={"surname": "Eriksson", "dateOfBirth": "1974-08-12"})
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        res = recover(s, token, document={"mrz": MRZ_ANNA})
    check_replacement(s, res, None)


def test_recovery_refusals(recovering):
    s = recovering
    expired = recovery_token(s, exp=int(time.time()) - 3600)
    assert s.error("recovery.start", {"recoveryAttemptId": "a1", "recoveryToken": expired}).code == "RECOVERY_ATTEMPT_EXPIRED"
    for bad in [recovery_token(s, aud=["kiosk-elsewhere"]), recovery_token(s, bindingOf=None),
                jwt.encode({"iss": ISSUER, "jti": "x", "exp": int(time.time()) + 60, "aud": STATION, "sub": "employee-9",
                            "rpId": RP, "bindingOf": s.lost}, s.key, algorithm="ES256",
                           headers={"typ": "tessera-activation+jwt", "kid": KID})]:
        assert s.error("recovery.start", {"recoveryAttemptId": "a2", "recoveryToken": bad}).code == "RECOVERY_TOKEN_INVALID"
    # No document: the identity check is not done; the attempt stays open and can be cancelled.
    token = recovery_token(s)
    e = s.error("recovery.start", {"recoveryAttemptId": "a3", "recoveryToken": token, "pin": PIN})
    assert e.code == "RECOVERY_IDV_NOT_COMPLETED"
    assert s.c.call("recovery.cancel", {"recoveryAttemptId": "a3"})["cancelled"] is True
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        e = s.error("recovery.start", {"recoveryAttemptId": "a3", "recoveryToken": token, "document": {"mrz": MRZ_ANNA}})
    assert e.code == "RECOVERY_ATTEMPT_CANCELLED"
    assert s.state(s.lost) == "active" and private_keys(s) == 1


def test_recovery_wrong_person(recovering):
    s = recovering
    with EmulatedPassport(s.pcscd, s.other, s.card_present):
        e = s.error("recovery.start", {"recoveryAttemptId": "w1", "recoveryToken": recovery_token(s), "pin": PIN,
                                       "document": {"mrz": MRZ_OTHER}})
    assert e.code == "RECOVERY_MATCH_FAILED" and e.data["retryable"] is False
    assert s.state(s.lost) == "active" and private_keys(s) == 1
    s.assert_signs(s.lost, s.lost_key, b"employee-9")


def test_recovery_rate_limit_per_user(recovering):
    s = recovering
    for i in range(LIMITS["maxAttemptsPerUser"]):
        e = s.error("recovery.start", {"recoveryAttemptId": f"r{i}", "recoveryToken": recovery_token(s)})
        assert e.code == "RECOVERY_IDV_NOT_COMPLETED"
    e = s.error("recovery.start", {"recoveryAttemptId": "r-last", "recoveryToken": recovery_token(s)})
    assert e.code == "RECOVERY_RATE_LIMITED" and e.data["retryable"] is True and e.data["scope"] == "user"
    # Another user is not limited by employee-9's attempts.
    other = recovery_token(s, sub="employee-10", bindingOf=None, expected={"surname": "Eriksson"})
    assert s.error("recovery.start", {"recoveryAttemptId": "o1", "recoveryToken": other}).code == "RECOVERY_IDV_NOT_COMPLETED"


@pytest.mark.parametrize("failpoint", ["recovery.afterStart", "recovery.afterMatch", "recovery.afterPlan",
                                       "passkey.afterKeyGeneration", "recovery.afterPasskeyRecorded"])
def test_recovery_crash_at_every_step_leaves_one_replacement(recovering, failpoint):
    s = recovering
    token = recovery_token(s)
    attempt = uuid.uuid4().hex
    s.restart(failpoints=failpoint)
    with EmulatedPassport(s.pcscd, s.profile, s.card_present):
        with pytest.raises((ConnectionError, OSError)):
            recover(s, token, attempt, {"mrz": MRZ_ANNA})
        assert s.daemon.proc.wait(30) == -9, "the failpoint should have killed the daemon"
        s.restart()
        res = recover(s, token, attempt, {"mrz": MRZ_ANNA})
    check_replacement(s, res, None)
    assert private_keys(s) == 2, "exactly one replacement key besides the lost one"


def open_socket_to_others(s: Station, tmp_path: pathlib.Path) -> None:
    """Lets other uids reach the daemon's socket (they still need the policy's permissions)."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root to act as other uids (CI runs as root)")
    let_other_uids_reach(tmp_path)
    os.chmod(s.daemon.socket, 0o666)


def test_recovery_rate_limit_per_station(tmp_path):
    s = Station(tmp_path, recovery={"maxAttemptsPerUser": 2, "maxAttemptsPerStation": 3, "windowSeconds": 1800})
    s.lost = None
    try:
        tokens = {}

        def start(attempt: str, user: str) -> RPCError:
            token = tokens.setdefault(attempt, recovery_token(s, sub=user, bindingOf=None,
                                                              expected={"surname": "Eriksson"}))
            return s.error("recovery.start", {"recoveryAttemptId": attempt, "recoveryToken": token})

        assert start("u1-a", "user-1").code == "RECOVERY_IDV_NOT_COMPLETED"
        assert start("u1-b", "user-1").code == "RECOVERY_IDV_NOT_COMPLETED"
        e = start("u1-c", "user-1")
        assert e.code == "RECOVERY_RATE_LIMITED" and e.data["scope"] == "user" and e.data["retryable"] is True
        assert start("u2-a", "user-2").code == "RECOVERY_IDV_NOT_COMPLETED"
        # Three attempts in the window in all (a refused one is not counted): the station's limit, for anyone.
        e = start("u3-a", "user-3")
        assert e.code == "RECOVERY_RATE_LIMITED" and e.data["scope"] == "station" and e.data["retryable"] is True
        assert e.data["retryAfterSeconds"] == 1800
        # The attempts already started go on (an existing attempt id is not a new attempt).
        assert start("u1-a", "user-1").code == "RECOVERY_IDV_NOT_COMPLETED"
    finally:
        s.daemon.stop()


STRANGER_UID = 4243


def test_recovery_cancel_only_by_its_owner_or_an_admin(tmp_path):
    s = Station(tmp_path, recovery=LIMITS)
    s.lost = None
    try:
        open_socket_to_others(s, tmp_path)
        token = lambda user: recovery_token(s, sub=user, bindingOf=None, expected={"surname": "Eriksson"})  # noqa: E731
        # Root (an administrator) starts one attempt, nobody another; neither has a document yet: both stay open.
        root_token = token("employee-1")
        assert s.error("recovery.start", {"recoveryAttemptId": "root-1", "recoveryToken": root_token}).code \
            == "RECOVERY_IDV_NOT_COMPLETED"
        _, out = calls_as(NOBODY, s.daemon.socket, [
            ("recovery.start", {"recoveryAttemptId": "nobody-1", "recoveryToken": token("employee-2")}),
            ("recovery.cancel", {"recoveryAttemptId": "root-1"})])
        assert out[0]["code"] == "RECOVERY_IDV_NOT_COMPLETED"
        assert out[1]["code"] == "UNAUTHORIZED" and out[1]["data"]["retryable"] is False
        _, out = calls_as(STRANGER_UID, s.daemon.socket, [("recovery.cancel", {"recoveryAttemptId": "nobody-1"}),
                                                          ("recovery.cancel", {"recoveryAttemptId": "root-1"})])
        assert [o.get("code") for o in out] == ["UNAUTHORIZED", "UNAUTHORIZED"]
        # Nothing was cancelled by them.
        db = sqlite3.connect(s.daemon.state / "tessera.sqlite")
        try:
            rows = dict(db.execute("SELECT id, stage FROM recovery_attempt"))
            owners = dict(db.execute("SELECT id, ownerUid FROM recovery_attempt"))
        finally:
            db.close()
        assert rows == {"root-1": "started", "nobody-1": "started"} and owners == {"root-1": 0, "nobody-1": NOBODY}
        _, out = calls_as(NOBODY, s.daemon.socket, [("recovery.cancel", {"recoveryAttemptId": "nobody-1"})])
        assert out == [{"result": {"cancelled": True, "recoveryAttemptId": "nobody-1"}}]
        assert s.c.call("recovery.cancel", {"recoveryAttemptId": "root-1"})["cancelled"] is True
        e = s.error("recovery.start", {"recoveryAttemptId": "root-1", "recoveryToken": root_token,
                                       "document": {"mrz": MRZ_ANNA}})
        assert e.code == "RECOVERY_ATTEMPT_CANCELLED"
    finally:
        s.daemon.stop()
