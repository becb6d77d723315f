"""PIV end to end: the real tesserad, a private pcscd with vpcd readers, the emulated PIV card
(`tessera lab emulate-piv`), and independent WebAuthn verifiers (py_webauthn, python-fido2)."""
import json
import os
import pathlib
import socket
import subprocess
import time

import pytest

from tessera_harness import BIN, NOBODY, PCSCD, SOFTHSM_MODULE, Daemon, RPCError, SoftHSM, b64u, calls_as, unb64u
from tessera_harness import let_other_uids_reach
from verify import verify_assertion, verify_registration

RP = "example.com"
ORIGIN = "https://example.com"


class EmulatedPIV:
    """`tessera lab emulate-piv` in a vpcd reader of the private pcscd."""

    def __init__(self, pcscd: PCSCD, root: pathlib.Path, serial: int = 4242, slot: int = 0):
        self.cmd = [str(BIN / "tessera"), "lab", "emulate-piv", "--vpcd", f"127.0.0.1:{pcscd.port + slot}",
                    "--state", str(root / f"piv-{serial}.json"), "--serial", str(serial)]
        self.env = {**os.environ, **pcscd.env}
        self.proc = None

    def insert(self) -> "EmulatedPIV":
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        assert "inserted PIV card" in line, line
        return self

    def remove(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def pcscd(tmp_path):
    p = PCSCD(tmp_path).start()
    yield p
    p.stop()


def start_daemon(tmp_path, pcscd, extra=(), config=None):
    hsm = SoftHSM(tmp_path)  # no token: the PIV card is the only key store
    env = {**hsm.env, **pcscd.env}
    if config is not None:
        path = tmp_path / "tesserad.json"
        path.write_text(json.dumps(config))
        extra = (*extra, "--config", str(path))
    return Daemon(tmp_path, env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                  "--allow-default-piv-management-key", *extra]).start()

# Tests that send wrong PINs in a row on purpose turn the per-uid back-off off (it has its own test).
NO_BACKOFF = {"pinBackoff": {"initialSeconds": 0}}


def wait_for(predicate, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


def piv_token(client):
    return next((t for t in client.call("tokens.list")["tokens"] if t["backend"] == "piv"), None)


def test_enroll_and_authenticate_on_a_piv_card(tmp_path, pcscd):
    card = EmulatedPIV(pcscd, tmp_path).insert()
    daemon = start_daemon(tmp_path, pcscd, config=NO_BACKOFF)
    try:
        c = daemon.client()
        token = wait_for(lambda: piv_token(c))
        assert token, c.call("tokens.list")
        assert token["id"].startswith("piv-") and token["present"] is True
        assert c.call("tokens.list")["piv"]["status"] == "OK"

        challenge = os.urandom(32)
        reg = c.call("passkey.enroll", {"rpId": RP, "user": {"id": b64u(b"user-1"), "name": "alice"},
                                        "challenge": b64u(challenge), "tokenId": token["id"], "pin": "123456",
                                        "attestation": "packed"})
        assert reg["tokenId"] == token["id"]
        verified = verify_registration(reg, challenge, RP, ORIGIN, require_uv=True)
        key = verified.credential_public_key
        cred = c.call("credentials.get", {"credentialId": reg["credentialId"]})
        assert cred["backend"] == "piv"

        last = 0
        for pin in ["123456", "123456", None]:
            ch = os.urandom(32)
            params = {"rpId": RP, "challenge": b64u(ch), "allowCredentials": [reg["credentialId"]]}
            if pin:
                params["pin"] = pin
            res = c.call("passkey.authenticate", params)
            v = verify_assertion(res, ch, RP, ORIGIN, key, last, require_uv=pin is not None)
            assert v.new_sign_count > last
            last = v.new_sign_count
            assert unb64u(res["userHandle"]) == b"user-1"

        # Wrong PIN: exactly one try gone, reported with retriesLeft.
        before = c.call("tokens.pinStatus", {"tokenId": token["id"]})
        with pytest.raises(RPCError) as e:
            c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(os.urandom(32)),
                                            "allowCredentials": [reg["credentialId"]], "pin": "000000"})
        assert e.value.code == "PIN_INVALID" and e.value.data["retriesLeft"] == 2
        after = c.call("tokens.pinStatus", {"tokenId": token["id"]})
        assert before.get("retriesLeft", 3) - after["retriesLeft"] == 1

        # PIN change (admin) through CHANGE REFERENCE DATA; the old PIN no longer works.
        c.call("tokens.changePin", {"tokenId": token["id"], "oldPin": "123456", "newPin": "24681357"})
        with pytest.raises(RPCError) as e:
            c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(os.urandom(32)),
                                            "allowCredentials": [reg["credentialId"]], "pin": "123456"})
        assert e.value.code == "PIN_INVALID"
        ch = os.urandom(32)
        res = c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(ch),
                                              "allowCredentials": [reg["credentialId"]], "pin": "24681357"})
        verify_assertion(res, ch, RP, ORIGIN, key, last, require_uv=True)

        c.call("credentials.delete", {"credentialId": reg["credentialId"]})
        with pytest.raises(RPCError) as e:
            c.call("credentials.get", {"credentialId": reg["credentialId"]})
        assert e.value.code == "PASSKEY_NOT_FOUND"
    finally:
        daemon.stop()
        card.remove()


def test_tokens_changed_is_broadcast_on_insert_and_remove(tmp_path, pcscd):
    daemon = start_daemon(tmp_path, pcscd)
    card = EmulatedPIV(pcscd, tmp_path, serial=777)
    try:
        c = daemon.client()
        assert piv_token(c) is None
        card.insert()
        c.sock.settimeout(15)
        note = c.read_message()
        while note is not None and note.get("method") != "tokens.changed":
            note = c.read_message()
        assert note and note["params"]["backend"] == "piv"
        assert wait_for(lambda: piv_token(c))
        c.notifications.clear()
        card.remove()
        assert wait_for(lambda: piv_token(c) is None)
        assert any(n.get("method") == "tokens.changed" for n in c.notifications), c.notifications
    finally:
        daemon.stop()
        card.remove()


def test_daemon_starts_without_pcscd_and_recovers(tmp_path):
    pcscd = PCSCD(tmp_path)  # configured, not started: its socket does not exist yet
    daemon = start_daemon(tmp_path, pcscd)
    card = None
    try:
        c = daemon.client()
        assert wait_for(lambda: c.call("tokens.list")["piv"]["status"] == "PCSC_UNAVAILABLE")
        with pytest.raises(RPCError) as e:
            c.call("passkey.enroll", {"rpId": RP, "user": {"id": b64u(b"u"), "name": "u"},
                                      "challenge": b64u(os.urandom(16)), "tokenId": "piv-0000000000000000"})
        assert e.value.code == "TOKEN_NOT_PRESENT"
        pcscd.start()
        card = EmulatedPIV(pcscd, tmp_path, serial=99).insert()
        token = wait_for(lambda: piv_token(c), timeout=20)
        assert token, c.call("tokens.list")
        assert c.call("tokens.list")["piv"]["status"] == "OK"
        reg = c.call("passkey.enroll", {"rpId": RP, "user": {"id": b64u(b"u"), "name": "u"},
                                        "challenge": b64u(os.urandom(16)), "tokenId": token["id"], "pin": "123456"})
        assert reg["tokenId"] == token["id"]
    finally:
        daemon.stop()
        if card:
            card.remove()
        pcscd.stop()


def test_default_management_key_in_a_file_is_refused(tmp_path, pcscd):
    keyfile = tmp_path / "piv.key"
    keyfile.write_text("010203040506070801020304050607080102030405060708\n")
    hsm = SoftHSM(tmp_path)
    d = Daemon(tmp_path, {**hsm.env, **pcscd.env}, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                                     "--piv-management-key-file", str(keyfile)])
    d.start(wait=False)
    assert d.proc.wait(30) != 0
    log = d.log.read_text()
    assert "default PIV management key" in log
    assert "0102030405060708" not in log  # the key itself is never logged


def enroll_on(c, token, pin="123456"):
    challenge = os.urandom(32)
    return c.call("passkey.enroll", {"rpId": RP, "user": {"id": b64u(b"user-1"), "name": "alice"},
                                     "challenge": b64u(challenge), "tokenId": token["id"], "pin": pin})


def assertion_params(reg, pin, **extra):
    return {"rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [reg["credentialId"]], "pin": pin,
            **extra}


def test_final_pin_try_is_kept_unless_the_request_allows_it(tmp_path, pcscd):
    card = EmulatedPIV(pcscd, tmp_path).insert()
    daemon = start_daemon(tmp_path, pcscd, config=NO_BACKOFF)
    try:
        c = daemon.client()
        token = wait_for(lambda: piv_token(c))
        assert token, c.call("tokens.list")
        reg = enroll_on(c, token)
        for left in (2, 1):
            with pytest.raises(RPCError) as e:
                c.call("passkey.authenticate", assertion_params(reg, "000000"))
            assert e.value.code == "PIN_INVALID" and e.value.data["retriesLeft"] == left
        assert c.call("tokens.pinStatus", {"tokenId": token["id"]})["retriesLeft"] == 1

        # One try left: no PIN reaches the card without allowFinalPinTry, on any path; the counter stays at 1.
        refused = [
            ("passkey.authenticate", assertion_params(reg, "000000")),
            ("passkey.authenticate", assertion_params(reg, "123456")),
            ("passkey.enroll", {"rpId": RP, "user": {"id": b64u(b"user-2"), "name": "bob"},
                                "challenge": b64u(os.urandom(32)), "tokenId": token["id"], "pin": "123456"}),
            ("credentials.delete", {"credentialId": reg["credentialId"], "pin": "123456"}),
            ("tokens.changePin", {"tokenId": token["id"], "oldPin": "000000", "newPin": "24681357"}),
        ]
        for method, params in refused:
            with pytest.raises(RPCError) as e:
                c.call(method, params)
            assert e.value.code == "PIN_FINAL_TRY_PROTECTED", method
            assert e.value.data["retriesLeft"] == 1 and e.value.data["retryable"] is False
            assert c.call("tokens.pinStatus", {"tokenId": token["id"]})["retriesLeft"] == 1, method
        assert c.call("credentials.get", {"credentialId": reg["credentialId"]})

        # Allowed: the PIN is tried (a correct one resets the counter).
        res = c.call("passkey.authenticate", assertion_params(reg, "123456", allowFinalPinTry=True))
        assert res["userVerified"] is True
        status = c.call("tokens.pinStatus", {"tokenId": token["id"]})
        assert status["verified"] is True or status.get("retriesLeft") == 3
    finally:
        daemon.stop()
        card.remove()


def test_wrong_pin_backs_off_that_uid_before_the_card_is_touched(tmp_path, pcscd):
    # nobody must be able to reach the socket: open the directories on the way to it.
    let_other_uids_reach(tmp_path)
    card = EmulatedPIV(pcscd, tmp_path).insert()
    daemon = start_daemon(tmp_path, pcscd, config={"socketMode": "0666"})  # default back-off: 2 s, doubling
    try:
        c = daemon.client()
        token = wait_for(lambda: piv_token(c))
        assert token, c.call("tokens.list")
        reg = enroll_on(c, token)
        # The passkey is root's; nobody may use only its own (docs/API.md, "Owners"): hand it over.
        c.call("credentials.chown", {"credentialId": reg["credentialId"], "owner": str(NOBODY)})

        pid, out = calls_as(NOBODY, daemon.socket, [
            ("passkey.authenticate", assertion_params(reg, "000000")),
            ("passkey.authenticate", assertion_params(reg, "000000")),
            ("passkey.authenticate", assertion_params(reg, "123456")),
        ])
        assert out[0].get("code") == "PIN_INVALID" and out[0]["data"]["retriesLeft"] == 2, out
        for second in out[1:]:
            assert second.get("code") == "PIN_BACKOFF", out
            assert second["data"]["retryable"] is True and second["data"]["retryAfterSeconds"] >= 1
        # Refused before the card: still two tries left.
        assert c.call("tokens.pinStatus", {"tokenId": token["id"]})["retriesLeft"] == 2
        # Another uid (root here, an administrator) is not held back by nobody's wrong PIN.
        assert c.call("passkey.authenticate", assertion_params(reg, "123456"))["userVerified"] is True

        # The wrong PIN is logged with the caller's uid and pid.
        log = daemon.log.read_text()
        wrong = [line for line in log.splitlines() if "wrong PIN" in line]
        assert any(f"uid={NOBODY}" in line and f"pid={pid}" in line for line in wrong), wrong
    finally:
        daemon.stop()
        card.remove()
