"""Passkeys end to end: the real tesserad, a real SoftHSM2 token, independent WebAuthn verifiers."""
import os

import pytest
from webauthn.helpers.exceptions import InvalidAuthenticationResponse, InvalidRegistrationResponse

from tessera_harness import RPCError, b64u, unb64u
from verify import verify_assertion, verify_registration

RP = "example.com"
ORIGIN = "https://example.com"


def enroll(client, pin="1234", attestation="packed", rp=RP, user_id=None, **extra):
    """A fresh user each call unless `user_id` is given (a second passkey for one user on one token is refused
    by the provisioning check unless `replace=True`)."""
    challenge = os.urandom(32)
    user_id = user_id or b"user-" + os.urandom(6).hex().encode()
    params = {"rpId": rp, "user": {"id": b64u(user_id), "name": "alice", "displayName": "Alice"},
              "challenge": b64u(challenge), "attestation": attestation, **extra}
    if pin is not None:
        params["pin"] = pin
    return client.call("passkey.enroll", params), challenge


def authenticate(client, cred_id, pin="1234", rp=RP, **extra):
    challenge = os.urandom(32)
    params = {"rpId": rp, "challenge": b64u(challenge), "allowCredentials": [cred_id], **extra}
    if pin is not None:
        params["pin"] = pin
    return client.call("passkey.authenticate", params), challenge


@pytest.mark.parametrize("attestation", ["packed", "none"])
def test_enroll_and_authenticate_accepted_by_independent_verifiers(daemon, attestation):
    c = daemon.client()
    reg, challenge = enroll(c, attestation=attestation, user_id=b"user-1")
    verified = verify_registration(reg, challenge, RP, ORIGIN, require_uv=True)
    assert getattr(verified.fmt, "value", verified.fmt) == attestation
    assert verified.sign_count == 0
    assert unb64u(reg["credentialId"]) == verified.credential_id
    public_key = verified.credential_public_key
    assert public_key == unb64u(reg["publicKey"])

    last = 0
    for _ in range(5):
        res, ch = authenticate(c, reg["credentialId"])
        v = verify_assertion(res, ch, RP, ORIGIN, public_key, last, require_uv=True)
        assert v.new_sign_count > last
        last = v.new_sign_count
        assert unb64u(res["userHandle"]) == b"user-1"


def test_assertion_tampering_is_rejected(daemon):
    c = daemon.client()
    reg, challenge = enroll(c)
    key = verify_registration(reg, challenge, RP, ORIGIN).credential_public_key
    res, ch = authenticate(c, reg["credentialId"])

    sig = bytearray(unb64u(res["signature"]))
    sig[-3] ^= 0x01
    with pytest.raises(InvalidAuthenticationResponse):
        verify_assertion({**res, "signature": b64u(bytes(sig))}, ch, RP, ORIGIN, key, 0)
    with pytest.raises(InvalidAuthenticationResponse):
        verify_assertion(res, ch, "other.example", ORIGIN, key, 0)
    with pytest.raises(InvalidAuthenticationResponse):
        verify_assertion(res, os.urandom(32), RP, ORIGIN, key, 0)
    with pytest.raises(InvalidRegistrationResponse):
        verify_registration(reg, os.urandom(32), RP, ORIGIN)
    # The untampered assertion still verifies.
    verify_assertion(res, ch, RP, ORIGIN, key, 0)


def test_user_verification_flag_only_with_pin(daemon):
    c = daemon.client()
    reg, challenge = enroll(c)  # logs the token in with the PIN
    key = verify_registration(reg, challenge, RP, ORIGIN).credential_public_key
    res, ch = authenticate(c, reg["credentialId"], pin=None)
    assert res["userVerified"] is False
    verify_assertion(res, ch, RP, ORIGIN, key, 0, require_uv=False)
    with pytest.raises(InvalidAuthenticationResponse):
        verify_assertion(res, ch, RP, ORIGIN, key, 0, require_uv=True)
    with pytest.raises(RPCError) as e:
        authenticate(c, reg["credentialId"], pin=None, userVerification="required")
    assert e.value.code == "PIN_REQUIRED"


def test_made_with_user_verification_required_is_never_used_without_it(daemon):
    """A passkey enrolled with userVerification "required" keeps that requirement on every door: an assertion
    without the PIN is refused although the token is logged in and the request asks for no UV (issue 27 §3)."""
    c = daemon.client()
    strict, _ = enroll(c, userVerification="required")  # logs the token in with the PIN
    plain, _ = enroll(c)
    assert authenticate(c, plain["credentialId"], pin=None)[0]["userVerified"] is False
    with pytest.raises(RPCError) as e:
        authenticate(c, strict["credentialId"], pin=None, userVerification="discouraged")
    assert e.value.code == "PIN_REQUIRED"
    assert authenticate(c, strict["credentialId"])[0]["userVerified"] is True


def test_pin_required_before_first_login(daemon):
    c = daemon.client()
    with pytest.raises(RPCError) as e:
        enroll(c, pin=None)
    assert e.value.code == "PIN_REQUIRED"


def test_exclude_credentials(daemon):
    c = daemon.client()
    reg, _ = enroll(c)
    with pytest.raises(RPCError) as e:
        enroll(c, excludeCredentials=[reg["credentialId"]])
    assert e.value.code == "CREDENTIAL_EXCLUDED"
    # Descriptor form too; an id for another rpId does not exclude.
    with pytest.raises(RPCError) as e:
        enroll(c, excludeCredentials=[{"type": "public-key", "id": reg["credentialId"]}])
    assert e.value.code == "CREDENTIAL_EXCLUDED"
    enroll(c, rp="other.example", excludeCredentials=[reg["credentialId"]])


def test_wrong_pin_is_refused_before_excluded_credentials_are_named(daemon):
    """Which credentials exist is told only past the PIN (issue #27): a wrong PIN is PIN_INVALID, not
    CREDENTIAL_EXCLUDED."""
    c = daemon.client()
    reg, _ = enroll(c)
    with pytest.raises(RPCError) as e:
        enroll(c, pin="9999", excludeCredentials=[reg["credentialId"]])
    assert e.value.code == "PIN_INVALID"


def test_wrong_pin_is_refused_before_the_provisioning_check(daemon):
    """A wrong PIN is PIN_INVALID, not CREDENTIAL_EXISTS naming the user's credential ids (issue #27)."""
    c = daemon.client()
    reg, _ = enroll(c, user_id=b"user-held")
    with pytest.raises(RPCError) as e:
        enroll(c, user_id=b"user-held")
    assert e.value.code == "CREDENTIAL_EXISTS"
    with pytest.raises(RPCError) as e:
        enroll(c, pin="9999", user_id=b"user-held")
    assert e.value.code == "PIN_INVALID"
    assert reg["credentialId"] not in str(e.value)


def token_key_labels(softhsm) -> str:
    """Objects on the SoftHSM2 token as OpenSC's pkcs11-tool (an independent PKCS#11 client) lists them."""
    import subprocess
    from tessera_harness import SOFTHSM_MODULE
    out = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "tessera-test", "--login",
                          "--pin", "1234", "--list-objects"], capture_output=True, text=True, check=True,
                         env={**os.environ, **softhsm.env})
    return out.stdout


def test_credentials_list_get_delete(daemon, softhsm):
    c = daemon.client()
    reg, _ = enroll(c)
    objects = token_key_labels(softhsm)
    assert f"tessera:{reg['credentialId']}" in objects
    assert "Private Key Object; EC" in objects
    reg2, _ = enroll(c, rp="other.example")
    ids = [x["credentialId"] for x in c.call("credentials.list")["credentials"]]
    assert ids == [reg["credentialId"], reg2["credentialId"]]
    only = c.call("credentials.list", {"rpId": RP})["credentials"]
    assert [x["credentialId"] for x in only] == [reg["credentialId"]]
    got = c.call("credentials.get", {"credentialId": reg["credentialId"]})
    assert got["rpId"] == RP and got["user"]["name"] == "alice" and got["publicKey"] == reg["publicKey"]
    assert c.call("credentials.delete", {"credentialId": reg["credentialId"]})["deleted"] is True
    assert f"tessera:{reg['credentialId']}" not in token_key_labels(softhsm)
    assert f"tessera:{reg2['credentialId']}" in token_key_labels(softhsm)
    with pytest.raises(RPCError) as e:
        c.call("credentials.get", {"credentialId": reg["credentialId"]})
    assert e.value.code == "PASSKEY_NOT_FOUND"
    with pytest.raises(RPCError) as e:
        authenticate(c, reg["credentialId"])
    assert e.value.code == "PASSKEY_NOT_FOUND"


def test_cli_enroll_and_authenticate(daemon):
    from tessera_harness import cli
    import json

    out = cli(daemon, "enroll", "--rp-id", RP, "--user-name", "bob", "--pin-stdin", "--json", input="1234\n")
    reg = json.loads(out.stdout)
    assert reg["tokenId"]
    out = cli(daemon, "authenticate", "--rp-id", RP, "--credential", reg["credentialId"], "--pin", "1234", "--json")
    res = json.loads(out.stdout)
    assert res["signCount"] >= 1
    # Ids and challenges are base64url and may begin with '-': the CLI must take them as values.
    cid = reg["credentialId"]
    dash = "-" + cid[1:] if cid[0] != "-" else "-" + ("B" if cid[1] == "A" else "A") + cid[2:]  # never the real id
    bad = cli(daemon, "authenticate", "--rp-id", RP, "--credential", dash, "--challenge", "-AAAAAAAAAAAAAAAAAAAAA", check=False)
    assert bad.returncode == 2 and "PASSKEY_NOT_FOUND" in bad.stderr, bad.stderr
    got = cli(daemon, "--json", "credentials", "get", "--", reg["credentialId"])
    assert json.loads(got.stdout)["credentialId"] == reg["credentialId"]
    human = cli(daemon, "credentials", "list")
    assert reg["credentialId"] in human.stdout
    bad = cli(daemon, "authenticate", "--rp-id", RP, "--credential", b64u(b"nope"), check=False)
    assert bad.returncode == 2 and "PASSKEY_NOT_FOUND" in bad.stderr


def test_credentials_delete_takes_the_pin_of_a_pin_protected_token(tmp_path, softhsm):
    from tessera_harness import SOFTHSM_MODULE, Daemon, cli
    args = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]
    first = Daemon(tmp_path, softhsm.env, args).start()
    try:
        reg, _ = enroll(first.client())
        reg2, _ = enroll(first.client(), rp="other.example")
    finally:
        first.stop()
    # A fresh daemon is not logged in: the token's private keys need the PIN.
    d = Daemon(tmp_path, softhsm.env, args).start()
    try:
        c = d.client()
        with pytest.raises(RPCError) as e:
            c.call("credentials.delete", {"credentialId": reg["credentialId"]})
        assert e.value.code == "PIN_REQUIRED"
        assert c.call("credentials.get", {"credentialId": reg["credentialId"]})
        with pytest.raises(RPCError) as e:
            c.call("credentials.delete", {"credentialId": reg["credentialId"], "pin": "9999"})
        assert e.value.code == "PIN_INVALID"
        assert f"tessera:{reg['credentialId']}" in token_key_labels(softhsm)
    finally:
        d.stop()
    # A new daemon (the wrong PIN above put root in back-off) deletes with the PIN, over the socket and from the CLI.
    d = Daemon(tmp_path, softhsm.env, args).start()
    try:
        c = d.client()
        assert c.call("credentials.delete", {"credentialId": reg["credentialId"], "pin": "1234"})["deleted"] is True
        assert f"tessera:{reg['credentialId']}" not in token_key_labels(softhsm)
        with pytest.raises(RPCError) as e:
            c.call("credentials.get", {"credentialId": reg["credentialId"]})
        assert e.value.code == "PASSKEY_NOT_FOUND"
    finally:
        d.stop()
    d = Daemon(tmp_path, softhsm.env, args).start()
    try:
        out = cli(d, "credentials", "delete", "--pin-stdin", "--", reg2["credentialId"], input="1234\n")
        assert "deleted" in out.stdout
        assert f"tessera:{reg2['credentialId']}" not in token_key_labels(softhsm)
    finally:
        d.stop()
