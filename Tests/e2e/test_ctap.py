"""CTAP 2.1 authenticator end to end: the real tesserad serving --ctap-socket (SOCK_SEQPACKET, one 64-byte CTAPHID
report per packet) over a SoftHSM2 token, driven by python-fido2's CtapHidDevice / Ctap2 / Fido2Client and checked
by py_webauthn; interoperation with the JSON-RPC passkey methods (one credential store, one signCount)."""
import hashlib
import json
import os
import pathlib
import re
import socket
import struct
import threading
import time

import pytest
from fido2 import cbor
from fido2.client import DefaultClientDataCollector, Fido2Client, UserInteraction
from fido2.ctap import CtapError
from fido2.ctap2 import ClientPin, Ctap2, PinProtocolV1, PinProtocolV2
from fido2.hid import CtapHidDevice
from fido2.hid.base import CtapHidConnection, HidDescriptor
from fido2.webauthn import (AttestationObject, PublicKeyCredentialCreationOptions, PublicKeyCredentialDescriptor,
                            PublicKeyCredentialParameters, PublicKeyCredentialRequestOptions,
                            PublicKeyCredentialRpEntity, PublicKeyCredentialUserEntity)
from webauthn import verify_authentication_response, verify_registration_response

from tessera_harness import NOBODY, SOFTHSM_MODULE, SPY_MODULE, Client, Daemon, RPCError, SoftHSM, b64u, cli, run_as, unb64u
from tessera_harness import let_other_uids_reach

RP = "example.com"
ORIGIN = "https://example.com"


class SeqpacketConnection(CtapHidConnection):
    """python-fido2's HID connection over the daemon's SOCK_SEQPACKET socket: one report per packet."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.sock.settimeout(60)

    def read_packet(self) -> bytes:
        return self.sock.recv(64)

    def write_packet(self, data: bytes) -> None:
        assert len(data) == 64
        self.sock.send(data)

    def close(self) -> None:
        self.sock.close()


class CTAPDaemon:
    """tesserad with --ctap-socket; presence from a script whose answer (exit status, or "sleep") a file sets."""

    def __init__(self, tmp_path: pathlib.Path, softhsm, presence: bool = True, extra: dict | None = None,
                 top: dict | None = None, module: str = SOFTHSM_MODULE, env: dict | None = None,
                 presence_extra: dict | None = None):
        self.tmp = tmp_path
        self.sock = str(tmp_path / "ctap.sock")
        pin_file = tmp_path / "pin"
        pin_file.write_text("1234")
        self.answer = tmp_path / "presence-answer"
        self.answer.write_text("0")
        self.asked = tmp_path / "presence-asked"
        script = tmp_path / "presence.sh"
        script.write_text(f'#!/bin/sh\ncat >> "{self.asked}"; echo >> "{self.asked}"\n'
                          f'a=$(cat "{self.answer}")\n[ "$a" = sleep ] && exec sleep 60\nexit "$a"\n')
        script.chmod(0o755)
        broker = {"command": [str(script)]} if presence else {}
        config = {"pinFiles": {"tessera-test": str(pin_file)}, "ctap": extra or {},
                  "presence": {**broker, **(presence_extra or {})}, **(top or {})}
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps(config))
        self.daemon = Daemon(tmp_path, env or softhsm.env, ["--pkcs11-module", module, "--no-embedded-softhsm",
                                                     "--config", str(cfg), "--ctap-socket", self.sock])

    def start(self):
        self.daemon.start()
        return self

    def device(self) -> CtapHidDevice:
        return CtapHidDevice(HidDescriptor(self.sock, 0, 0, 64, 64, "tessera", None), SeqpacketConnection(self.sock))

    def presence_requests(self) -> list[dict]:
        if not self.asked.exists():
            return []
        return [json.loads(l) for l in self.asked.read_text().splitlines() if l.strip()]


@pytest.fixture
def ctap(tmp_path, softhsm):
    d = CTAPDaemon(tmp_path, softhsm).start()
    yield d
    d.daemon.stop()


def creation_options(user_id=b"user-1", name="alice", rk="discouraged", challenge=None):
    return PublicKeyCredentialCreationOptions(
        rp=PublicKeyCredentialRpEntity(id=RP, name="Example"),
        user=PublicKeyCredentialUserEntity(id=user_id, name=name, display_name=name.title()),
        challenge=challenge or os.urandom(32),
        pub_key_cred_params=[PublicKeyCredentialParameters(type="public-key", alg=-7)],
        attestation="direct",
        authenticator_selection={"residentKey": rk, "userVerification": "discouraged"},
    )


def registration_json(reg) -> dict:
    return {"id": b64u(reg.raw_id), "rawId": b64u(reg.raw_id), "type": "public-key",
            "response": {"clientDataJSON": b64u(bytes(reg.response.client_data)),
                         "attestationObject": b64u(bytes(reg.response.attestation_object))}}


def assertion_json(a) -> dict:
    r = a.response
    out = {"clientDataJSON": b64u(bytes(r.client_data)), "authenticatorData": b64u(bytes(r.authenticator_data)),
           "signature": b64u(r.signature)}
    if r.user_handle:
        out["userHandle"] = b64u(r.user_handle)
    return {"id": b64u(a.raw_id), "rawId": b64u(a.raw_id), "type": "public-key", "response": out}


def client(dev) -> Fido2Client:
    return Fido2Client(dev, DefaultClientDataCollector(ORIGIN))


def test_register_and_authenticate_with_fido2_client_verified_by_py_webauthn(ctap):
    dev = ctap.device()
    info = Ctap2(dev).get_info()
    assert info.versions == ["FIDO_2_0", "FIDO_2_1"]
    assert info.aaguid == bytes.fromhex("2667032d1b764c2daf0fc249e8f53b79")
    assert info.options["rk"] is True and info.options["up"] is True
    options = creation_options()
    reg = client(dev).make_credential(options)
    att = AttestationObject(bytes(reg.response.attestation_object))
    assert att.fmt == "packed"
    verified = verify_registration_response(credential=registration_json(reg), expected_challenge=options.challenge,
                                            expected_rp_id=RP, expected_origin=ORIGIN)
    assert ctap.presence_requests()[-1]["operation"] == "makeCredential"
    assert ctap.presence_requests()[-1]["rpId"] == RP

    challenge = os.urandom(32)
    result = client(dev).get_assertion(PublicKeyCredentialRequestOptions(
        challenge=challenge, rp_id=RP, allow_credentials=[PublicKeyCredentialDescriptor(type="public-key", id=reg.raw_id)],
        user_verification="discouraged"))
    a = result.get_response(0)
    checked = verify_authentication_response(credential=assertion_json(a), expected_challenge=challenge, expected_rp_id=RP,
                                             expected_origin=ORIGIN, credential_public_key=verified.credential_public_key,
                                             credential_current_sign_count=0)
    assert checked.new_sign_count >= 1
    assert ctap.presence_requests()[-1]["operation"] == "getAssertion"

    # The same credential through the JSON-RPC methods: listed, usable, one signature counter.
    c = ctap.daemon.client()
    listed = c.call("credentials.list", {"rpId": RP})["credentials"]
    assert [x["credentialId"] for x in listed] == [b64u(reg.raw_id)]
    rpc_challenge = os.urandom(32)
    rpc = c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(rpc_challenge),
                                          "allowCredentials": [b64u(reg.raw_id)]})
    rpc_count = struct.unpack(">I", unb64u(rpc["authenticatorData"])[33:37])[0]
    assert rpc_count > checked.new_sign_count
    again = client(dev).get_assertion(PublicKeyCredentialRequestOptions(
        challenge=os.urandom(32), rp_id=RP, allow_credentials=[PublicKeyCredentialDescriptor(type="public-key", id=reg.raw_id)],
        user_verification="discouraged")).get_response(0)
    assert again.response.authenticator_data.counter > rpc_count


def test_discoverable_credentials_and_get_next_assertion(ctap):
    dev = ctap.device()
    ctap2 = Ctap2(dev)
    made = []
    for i in range(2):
        reg = client(dev).make_credential(creation_options(user_id=b"user-%d" % i, name=f"user{i}", rk="required"))
        made.append(reg.raw_id)
    # A passkey made over JSON-RPC is discoverable over CTAP too.
    c = ctap.daemon.client()
    rpc = c.call("passkey.enroll", {"rpId": RP, "user": {"id": b64u(b"user-rpc"), "name": "rpc", "displayName": "RPC"},
                                    "challenge": b64u(os.urandom(32))})
    made.append(unb64u(rpc["credentialId"]))
    # A non-discoverable one is not.
    client(dev).make_credential(creation_options(user_id=b"user-nrk", name="nrk", rk="discouraged"))

    assertions = ctap2.get_assertions(RP, hashlib.sha256(b"cd").digest())
    assert assertions[0].number_of_credentials == 3
    assert sorted(a.credential["id"] for a in assertions) == sorted(made)
    assert {a.user["id"] for a in assertions} == {b"user-0", b"user-1", b"user-rpc"}
    with pytest.raises(CtapError) as e:
        ctap2.get_next_assertion()
    assert e.value.code == CtapError.ERR.NOT_ALLOWED
    # Fido2Client picks them up too, each signature verifying with its credential's key.
    keys = {x["credentialId"]: x["publicKey"] for x in c.call("credentials.list", {"rpId": RP})["credentials"]}
    challenge = os.urandom(32)
    result = client(dev).get_assertion(PublicKeyCredentialRequestOptions(challenge=challenge, rp_id=RP,
                                                                        user_verification="discouraged"))
    assert len(result.get_assertions()) == 3
    for i in range(3):
        a = result.get_response(i)
        verify_authentication_response(credential=assertion_json(a), expected_challenge=challenge, expected_rp_id=RP,
                                       expected_origin=ORIGIN, credential_public_key=unb64u(keys[b64u(a.raw_id)]),
                                       credential_current_sign_count=0)


def test_exclude_list_and_cred_protect(ctap):
    dev = ctap.device()
    ctap2 = Ctap2(dev)
    cdh = hashlib.sha256(b"x").digest()
    rp = {"id": RP, "name": "Example"}
    key_params = [{"type": "public-key", "alg": -7}]
    r1 = ctap2.make_credential(cdh, rp, {"id": b"u1", "name": "u1"}, key_params, options={"rk": True},
                               extensions={"credProtect": 2})
    assert r1.auth_data.extensions == {"credProtect": 2}
    id1 = r1.auth_data.credential_data.credential_id
    with pytest.raises(CtapError) as e:
        ctap2.make_credential(cdh, rp, {"id": b"u1", "name": "u1"}, key_params,
                              exclude_list=[{"type": "public-key", "id": id1}])
    assert e.value.code == CtapError.ERR.CREDENTIAL_EXCLUDED
    # Level 2: not discoverable without UV, usable by id.
    with pytest.raises(CtapError) as e:
        ctap2.get_assertion(RP, cdh)
    assert e.value.code == CtapError.ERR.NO_CREDENTIALS
    assert ctap2.get_assertion(RP, cdh, allow_list=[{"type": "public-key", "id": id1}]).credential["id"] == id1
    # Level 3: never without UV.
    r3 = ctap2.make_credential(cdh, rp, {"id": b"u3", "name": "u3"}, key_params, options={"rk": True},
                               extensions={"credProtect": 3})
    id3 = r3.auth_data.credential_data.credential_id
    with pytest.raises(CtapError) as e:
        ctap2.get_assertion(RP, cdh, allow_list=[{"type": "public-key", "id": id3}])
    assert e.value.code == CtapError.ERR.NO_CREDENTIALS
    # The protection survives a restart (it is stored with the credential).
    ctap.daemon.stop()
    ctap.daemon.start()
    ctap2 = Ctap2(ctap.device())
    with pytest.raises(CtapError) as e:
        ctap2.get_assertion(RP, cdh)
    assert e.value.code == CtapError.ERR.NO_CREDENTIALS


def test_silent_assertion_has_no_up_flag_and_asks_no_presence(ctap):
    dev = ctap.device()
    ctap2 = Ctap2(dev)
    cdh = hashlib.sha256(b"y").digest()
    r = ctap2.make_credential(cdh, {"id": RP}, {"id": b"u", "name": "u"}, [{"type": "public-key", "alg": -7}])
    cid = r.auth_data.credential_data.credential_id
    asked = len(ctap.presence_requests())
    a = ctap2.get_assertion(RP, cdh, allow_list=[{"type": "public-key", "id": cid}], options={"up": False})
    assert not a.auth_data.is_user_present()
    assert len(ctap.presence_requests()) == asked
    a.verify(cdh, r.auth_data.credential_data.public_key)


def test_presence_refused_and_reset_refused(ctap):
    ctap2 = Ctap2(ctap.device())
    ctap.answer.write_text("1")
    with pytest.raises(CtapError) as e:
        ctap2.make_credential(hashlib.sha256(b"z").digest(), {"id": RP}, {"id": b"u", "name": "u"},
                              [{"type": "public-key", "alg": -7}])
    assert e.value.code == CtapError.ERR.OPERATION_DENIED
    assert ctap.daemon.client().call("credentials.list", {})["credentials"] == []
    with pytest.raises(CtapError) as e:
        ctap2.reset()
    assert e.value.code == CtapError.ERR.OPERATION_DENIED


def test_cancel_while_waiting_for_presence(ctap):
    ctap.answer.write_text("sleep")
    dev = ctap.device()
    ctap2 = Ctap2(dev)
    cancel = threading.Event()
    statuses = []

    def keepalive(status):
        statuses.append(status)
        if status == 2:  # UPNEEDED: the user is being asked; the client gives up
            cancel.set()

    with pytest.raises(CtapError) as e:
        ctap2.make_credential(hashlib.sha256(b"c").digest(), {"id": RP}, {"id": b"u", "name": "u"},
                              [{"type": "public-key", "alg": -7}], event=cancel, on_keepalive=keepalive)
    assert e.value.code == CtapError.ERR.KEEPALIVE_CANCEL
    assert 2 in statuses
    # The authenticator is free again for the next request.
    ctap.answer.write_text("0")
    assert Ctap2(dev).get_info().versions == ["FIDO_2_0", "FIDO_2_1"]
    # SIGTERM with a client still connected: a clean stop, the socket file removed.
    assert ctap.daemon.stop() == 0
    assert not os.path.exists(ctap.sock)


def test_no_presence_source_is_refused_with_a_log_line(tmp_path, softhsm):
    d = CTAPDaemon(tmp_path, softhsm, presence=False).start()
    try:
        ctap2 = Ctap2(d.device())
        with pytest.raises(CtapError) as e:
            ctap2.make_credential(hashlib.sha256(b"n").digest(), {"id": RP}, {"id": b"u", "name": "u"},
                                  [{"type": "public-key", "alg": -7}])
        assert e.value.code == CtapError.ERR.OPERATION_DENIED
        assert "presence.command" in d.daemon.log.read_text()
    finally:
        d.daemon.stop()


def test_presence_confirm_on_the_main_socket(tmp_path, softhsm):
    d = CTAPDaemon(tmp_path, softhsm, presence=False, presence_extra={"confirmOnSocket": True}).start()
    try:
        ctap2 = Ctap2(d.device())
        out = {}

        def make():
            try:
                out["r"] = ctap2.make_credential(hashlib.sha256(b"p").digest(), {"id": RP}, {"id": b"u", "name": "u"},
                                                 [{"type": "public-key", "alg": -7}])
            except CtapError as e:
                out["e"] = e

        t = threading.Thread(target=make)
        t.start()
        c = d.daemon.client()
        pending = []
        while not pending and t.is_alive():
            pending = c.call("presence.list", {})["requests"]
        assert pending[0]["operation"] == "makeCredential" and pending[0]["rpId"] == RP
        c.call("presence.confirm", {"requestId": pending[0]["requestId"]})
        t.join(60)
        assert "r" in out, out
        assert out["r"].auth_data.is_user_present()
    finally:
        d.daemon.stop()


# MARK: raw CTAPHID


class Raw:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.connect(path)
        self.s.settimeout(30)

    def send(self, cid: int, cmd: int, payload: bytes, length: int | None = None):
        self.s.send((struct.pack(">IBH", cid, 0x80 | cmd, len(payload) if length is None else length) + payload).ljust(64, b"\0"))

    def recv(self, skip_keepalive=True):
        """One message (continuation packets joined)."""
        while True:
            p = self.s.recv(64)
            cid, cmd, n = struct.unpack(">IBH", p[:7])
            if skip_keepalive and cmd == 0xBB:
                continue
            data = p[7:7 + n]
            seq = 0
            while len(data) < n:
                p = self.s.recv(64)
                assert struct.unpack(">IB", p[:5]) == (cid, seq)
                data += p[5:5 + min(59, n - len(data))]
                seq += 1
            return cid, cmd, data

    def open(self) -> int:
        nonce = os.urandom(8)
        self.send(0xFFFFFFFF, 0x06, nonce)
        cid, cmd, data = self.recv()
        assert cmd == 0x86 and data[:8] == nonce
        return struct.unpack(">I", data[8:12])[0]


def test_bad_input(ctap):
    r = Raw(ctap.sock)
    cid = r.open()
    # Malformed CBOR: INVALID_CBOR (0x12) as a CTAP2 status.
    r.send(cid, 0x10, bytes([0x01, 0xA1, 0x01]))
    assert r.recv() == (cid, 0x90, bytes([0x12]))
    # Not a map: CBOR_UNEXPECTED_TYPE.
    r.send(cid, 0x10, bytes([0x02, 0x01]))
    assert r.recv() == (cid, 0x90, bytes([0x11]))
    # Unknown CTAP2 command.
    r.send(cid, 0x10, bytes([0x55]))
    assert r.recv() == (cid, 0x90, bytes([0x01]))
    # Init packets with wrong lengths: INIT without an 8-byte nonce, a message beyond 7609 bytes.
    r.send(0xFFFFFFFF, 0x06, b"1234", length=4)
    assert r.recv() == (0xFFFFFFFF, 0xBF, bytes([0x03]))
    r.send(cid, 0x01, b"", length=7610)
    assert r.recv() == (cid, 0xBF, bytes([0x03]))
    # A channel that was never allocated, and the broadcast channel for anything but INIT.
    r.send(0x01020304, 0x01, b"x")
    assert r.recv() == (0x01020304, 0xBF, bytes([0x0B]))
    r.send(0xFFFFFFFF, 0x01, b"x")
    assert r.recv() == (0xFFFFFFFF, 0xBF, bytes([0x0B]))
    # A continuation packet with the wrong sequence number.
    r.send(cid, 0x01, b"a" * 57, length=100)
    r.s.send((struct.pack(">IB", cid, 5) + b"b" * 43).ljust(64, b"\0"))
    assert r.recv() == (cid, 0xBF, bytes([0x04]))
    # PING still echoes across packets afterwards.
    payload = os.urandom(150)
    r.send(cid, 0x01, payload[:57], length=150)
    r.s.send((struct.pack(">IB", cid, 0) + payload[57:116]).ljust(64, b"\0"))
    r.s.send((struct.pack(">IB", cid, 1) + payload[116:]).ljust(64, b"\0"))
    assert r.recv() == (cid, 0x81, payload)
    # A message whose continuation never comes: MSG_TIMEOUT.
    r.send(cid, 0x01, b"a" * 57, length=100)
    assert r.recv() == (cid, 0xBF, bytes([0x05]))


def test_interleaved_channels_get_channel_busy(ctap):
    ctap.answer.write_text("sleep")
    a = Raw(ctap.sock)
    b = Raw(ctap.sock)
    ca = a.open()
    cb = b.open()
    assert ca != cb
    # Selection on A waits for presence; B is told the authenticator is busy; A's channel can't be used by B.
    a.send(ca, 0x10, bytes([0x0B]))
    while True:  # KEEPALIVE PROCESSING, then UPNEEDED while the presence command runs
        cid, cmd, data = a.recv(skip_keepalive=False)
        assert (cid, cmd) == (ca, 0xBB) and data[0] in (1, 2)
        if data[0] == 2:
            break
    b.send(cb, 0x10, bytes([0x04]))
    assert b.recv() == (cb, 0xBF, bytes([0x06]))
    b.send(ca, 0x10, bytes([0x04]))
    assert b.recv() == (ca, 0xBF, bytes([0x0B]))
    # CANCEL from A ends its request with KEEPALIVE_CANCEL; then B is served.
    a.send(ca, 0x11, b"")
    assert a.recv() == (ca, 0x90, bytes([0x2D]))
    b.send(cb, 0x10, bytes([0x04]))
    cid, cmd, data = b.recv()
    assert (cid, cmd, data[0]) == (cb, 0x90, 0)
    assert cbor.decode(data[1:])[1] == ["FIDO_2_0", "FIDO_2_1"]


# MARK: uhid


def test_uhid_device(tmp_path, softhsm):
    """--ctap-uhid where /dev/uhid exists; where it does not, the daemon must refuse to start and say why."""
    pin_file = tmp_path / "pin"
    pin_file.write_text("1234")
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--ctap-uhid"])
    if not os.path.exists("/dev/uhid"):
        d.start(wait=False)
        assert d.proc.wait(60) == 1
        assert "cannot open /dev/uhid" in d.log.read_text()
        pytest.skip("DID NOT RUN: /dev/uhid does not exist on this machine (only the refusal to start was checked)")
    from fido2.hid import list_devices
    d.start()
    try:
        devices = [dev for dev in list_devices() if dev.descriptor.product_name == "Tessera CTAP"]
        assert devices, "no hidraw node for the Tessera CTAP uhid device"
        assert Ctap2(devices[0]).get_info().versions == ["FIDO_2_0", "FIDO_2_1"]
    finally:
        d.stop()


def test_libfido2_make_cred_and_get_assert(ctap, tmp_path):
    """libfido2 (an independent C client) over the socket through fido_dev_set_io_functions."""
    import subprocess
    source = pathlib.Path(__file__).parent / "fido2_socket.c"
    binary = tmp_path / "fido2_socket"
    subprocess.run(["cc", "-Wall", "-Werror", str(source), "-lfido2", "-o", str(binary)], check=True)
    r = subprocess.run([str(binary), ctap.sock], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OK 32 ") and r.stdout.strip().endswith("uv=0,0")
    listed = ctap.daemon.client().call("credentials.list", {"rpId": RP})["credentials"]
    assert [x["user"]["name"] for x in listed] == ["carol"]


def test_policy_refuses_a_client_without_sign(tmp_path, softhsm):
    """The CTAP socket checks the connecting uid like the main socket: without `sign` the connection is closed."""
    d = CTAPDaemon(tmp_path, softhsm, extra={"socketMode": "0666"})
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["policy"] = {"sign": {"users": ["root"]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    let_other_uids_reach(tmp_path)  # let nobody reach the socket
    d.start()
    try:
        assert oct(os.stat(d.sock).st_mode & 0o777) == "0o666"
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.setgid(65534)
                os.setuid(65534)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(d.sock)
                s.settimeout(30)
                s.send(struct.pack(">IBH", 0xFFFFFFFF, 0x86, 8).ljust(64, b"\0"))
                code = 0 if s.recv(64) == b"" else 1
            except (ConnectionResetError, BrokenPipeError):  # closed before or while it wrote
                code = 0
            except BaseException as e:
                os.write(2, f"child: {e!r}\n".encode())
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, "nobody's CTAP connection was not closed"
        assert "ctap: connection refused" in d.daemon.log.read_text()
        # root (holder of sign) is served.
        assert Ctap2(d.device()).get_info().versions == ["FIDO_2_0", "FIDO_2_1"]
    finally:
        d.daemon.stop()


def test_token_choice_with_several_tokens(tmp_path, softhsm):
    """With two tokens present, makeCredential needs ctap.tokenId; with it, the credential lands on that token."""
    softhsm.add_token("second", pin="1234")
    d = CTAPDaemon(tmp_path, softhsm).start()
    try:
        args = (hashlib.sha256(b"t").digest(), {"id": RP}, {"id": b"u", "name": "u"}, [{"type": "public-key", "alg": -7}])
        with pytest.raises(CtapError) as e:
            Ctap2(d.device()).make_credential(*args)
        assert e.value.code == CtapError.ERR.OPERATION_DENIED
        assert "set ctap.tokenId" in d.daemon.log.read_text()
        tokens = d.daemon.client().call("tokens.list")["tokens"]
        second = next(t["id"] for t in tokens if t.get("label") == "second")
        d.daemon.stop()
        cfg = json.loads((tmp_path / "config.json").read_text())
        cfg["ctap"]["tokenId"] = second
        cfg["pinFiles"]["second"] = cfg["pinFiles"]["tessera-test"]
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        d.daemon.start()
        Ctap2(d.device()).make_credential(*args)
        assert [c["tokenId"] for c in d.daemon.client().call("credentials.list", {})["credentials"]] == [second]
    finally:
        d.daemon.stop()


def test_presence_timeout(tmp_path, softhsm):
    """No answer within presence.timeoutSeconds: USER_ACTION_TIMEOUT, nothing made."""
    d = CTAPDaemon(tmp_path, softhsm, presence_extra={"timeoutSeconds": 1})
    d.answer.write_text("sleep")
    d.start()
    try:
        with pytest.raises(CtapError) as e:
            Ctap2(d.device()).make_credential(hashlib.sha256(b"w").digest(), {"id": RP}, {"id": b"u", "name": "u"},
                                              [{"type": "public-key", "alg": -7}])
        assert e.value.code == CtapError.ERR.USER_ACTION_TIMEOUT
        assert d.daemon.client().call("credentials.list", {})["credentials"] == []
    finally:
        d.daemon.stop()


# ClientPIN: the token's PIN is the hashed form of the CTAP PIN, lower-case hex of LEFT(SHA-256(PIN), 16).
def ctap_token_pin(pin: str) -> str:
    return hashlib.sha256(pin.encode()).digest()[:16].hex()


@pytest.fixture
def pin_ctap(tmp_path):
    """tesserad with ctap.clientPin over a token whose PIN is the hashed form of "1234" (no PIN file: logged out),
    through pkcs11-spy so that every C_Login and C_SetPIN is counted; no back-off (wrong PINs follow each other)."""
    hsm = SoftHSM(tmp_path)
    hsm.add_token("ctap-pin", pin=ctap_token_pin("1234"))
    spy_log = tmp_path / "spy.log"
    env = {**hsm.env, "PKCS11SPY": SOFTHSM_MODULE, "PKCS11SPY_OUTPUT": str(spy_log)}
    d = CTAPDaemon(tmp_path, hsm, extra={"clientPin": True}, top={"pinBackoff": {"initialSeconds": 0}},
                   module=SPY_MODULE, env=env).start()
    d.hsm = hsm
    d.calls = lambda name: len(re.findall(rf"^\d+: {name}$", spy_log.read_text(), re.M))  # noqa: E731
    yield d
    d.daemon.stop()


class PinInteraction(UserInteraction):
    def __init__(self, pin: str):
        self.pin = pin

    def request_pin(self, permissions, rp_id):
        return self.pin


def uv_flag(auth_data) -> bool:
    return bool(auth_data.flags & 0x04)


def test_client_pin_with_fido2_client_and_uv_verified_by_py_webauthn(pin_ctap):
    dev = pin_ctap.device()
    info = Ctap2(dev).get_info()
    assert info.options["clientPin"] is True and info.options["pinUvAuthToken"] is True
    assert info.options["uv"] is False and info.pin_uv_protocols == [2, 1]
    assert ClientPin(Ctap2(dev)).get_pin_retries() == (8, False)
    fido = Fido2Client(dev, DefaultClientDataCollector(ORIGIN), user_interaction=PinInteraction("1234"))
    options = creation_options(rk="required")
    options = PublicKeyCredentialCreationOptions(
        rp=options.rp, user=options.user, challenge=options.challenge, pub_key_cred_params=options.pub_key_cred_params,
        attestation="direct", authenticator_selection={"residentKey": "required", "userVerification": "required"})
    reg = fido.make_credential(options)
    verified = verify_registration_response(credential=registration_json(reg), expected_challenge=options.challenge,
                                            expected_rp_id=RP, expected_origin=ORIGIN, require_user_verification=True)
    assert verified.user_verified
    challenge = os.urandom(32)
    result = fido.get_assertion(PublicKeyCredentialRequestOptions(challenge=challenge, rp_id=RP,
                                                                  user_verification="required"))
    a = result.get_response(0)
    assert uv_flag(a.response.authenticator_data)
    verify_authentication_response(credential=assertion_json(a), expected_challenge=challenge, expected_rp_id=RP,
                                   expected_origin=ORIGIN, credential_public_key=verified.credential_public_key,
                                   credential_current_sign_count=0, require_user_verification=True)
    # With UV the user's name comes back for a discoverable credential.
    assert result.get_assertions()[0].user["name"] == "alice"


@pytest.mark.parametrize("protocol", [PinProtocolV1, PinProtocolV2])
def test_pin_protocols_permissions_and_cred_protect_3(pin_ctap, protocol):
    dev = pin_ctap.device()
    ctap2 = Ctap2(dev)
    client_pin = ClientPin(ctap2, protocol())
    proto = client_pin.protocol
    cdh = hashlib.sha256(b"mc").digest()
    mc = ClientPin.PERMISSION.MAKE_CREDENTIAL
    ga = ClientPin.PERMISSION.GET_ASSERTION
    token = client_pin.get_pin_token("1234", mc, RP)
    att = ctap2.make_credential(cdh, {"id": RP}, {"id": b"u3", "name": "u3"}, [{"type": "public-key", "alg": -7}],
                                extensions={"credProtect": 3}, options={"rk": True},
                                pin_uv_param=proto.authenticate(token, cdh), pin_uv_protocol=proto.VERSION)
    assert uv_flag(att.auth_data) and att.auth_data.extensions == {"credProtect": 3}
    cred_id = att.auth_data.credential_data.credential_id
    allow = [{"type": "public-key", "id": cred_id}]
    # credProtect 3: not without UV, not even with its id.
    with pytest.raises(CtapError) as e:
        ctap2.get_assertion(RP, cdh, allow)
    assert e.value.code == CtapError.ERR.NO_CREDENTIALS
    # The token's permissions were used up by makeCredential; one without ga is refused.
    with pytest.raises(CtapError) as e:
        ctap2.get_assertion(RP, cdh, allow, pin_uv_param=proto.authenticate(token, cdh), pin_uv_protocol=proto.VERSION)
    assert e.value.code == CtapError.ERR.PIN_AUTH_INVALID
    token = client_pin.get_pin_token("1234", ga, "other.example")
    with pytest.raises(CtapError) as e:
        ctap2.get_assertion(RP, cdh, allow, pin_uv_param=proto.authenticate(token, cdh), pin_uv_protocol=proto.VERSION)
    assert e.value.code == CtapError.ERR.PIN_AUTH_INVALID
    with pytest.raises(CtapError) as e:
        client_pin.get_pin_token("1234", ClientPin.PERMISSION.BIO_ENROLL)
    assert e.value.code == CtapError.ERR.UNAUTHORIZED_PERMISSION
    token = client_pin.get_pin_token("1234", ga, RP)
    got = ctap2.get_assertion(RP, cdh, allow, pin_uv_param=proto.authenticate(token, cdh), pin_uv_protocol=proto.VERSION)
    assert uv_flag(got.auth_data) and got.credential["id"] == cred_id
    # The assertion is the credential's: its signature verifies with the stored key.
    key = {x["credentialId"]: x["publicKey"] for x in pin_ctap.daemon.client().call(
        "credentials.list", {"rpId": RP})["credentials"]}[b64u(cred_id)]
    from fido2.cose import CoseKey
    CoseKey.parse(cbor.decode(unb64u(key))).verify(bytes(got.auth_data) + cdh, got.signature)


def test_wrong_pin_costs_exactly_one_token_try_and_three_block(pin_ctap):
    dev = pin_ctap.device()
    client_pin = ClientPin(Ctap2(dev), PinProtocolV2())
    logins = lambda: pin_ctap.calls("C_Login")  # noqa: E731
    before = logins()
    with pytest.raises(CtapError) as e:
        client_pin.get_pin_token("0000")
    assert e.value.code == CtapError.ERR.PIN_INVALID
    assert logins() == before + 1
    assert "wrong PIN" in pin_ctap.daemon.log.read_text()
    # getPINRetries (no token try): SoftHSM2 says "count low" after a wrong PIN: at least 1 left over CTAP.
    assert client_pin.get_pin_retries() == (1, False)
    assert logins() == before + 1
    client_pin.get_pin_token("1234")
    assert logins() == before + 2
    assert client_pin.get_pin_retries() == (8, False)
    for i, code in enumerate([CtapError.ERR.PIN_INVALID, CtapError.ERR.PIN_INVALID, CtapError.ERR.PIN_AUTH_BLOCKED]):
        with pytest.raises(CtapError) as e:
            client_pin.get_pin_token("000%d" % i)
        assert e.value.code == code
        assert logins() == before + 3 + i
    # Blocked until the daemon restarts (power cycle): even the right PIN does not reach the token.
    with pytest.raises(CtapError) as e:
        client_pin.get_pin_token("1234")
    assert e.value.code == CtapError.ERR.PIN_AUTH_BLOCKED
    assert logins() == before + 5
    assert client_pin.get_pin_retries()[1] is True


def test_change_pin_sets_the_token_pin(pin_ctap):
    import subprocess
    dev = pin_ctap.device()
    client_pin = ClientPin(Ctap2(dev), PinProtocolV1())
    client_pin.change_pin("1234", "5678")
    assert pin_ctap.calls("C_SetPIN") == 1
    with pytest.raises(CtapError) as e:
        client_pin.change_pin("1234", "9999")
    assert e.value.code == CtapError.ERR.PIN_INVALID
    assert ClientPin(Ctap2(dev), PinProtocolV2()).get_pin_token("5678")
    # The token's own PIN is now the hashed form of the new PIN.
    login = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "ctap-pin", "--login",
                            "--pin", ctap_token_pin("5678"), "--list-objects"], capture_output=True, text=True,
                           env={**os.environ, **pin_ctap.hsm.env})
    assert login.returncode == 0, login.stderr
    # setPIN: the token has a PIN already.
    with pytest.raises(CtapError) as e:
        ClientPin(Ctap2(dev), PinProtocolV2()).set_pin("4321")
    assert e.value.code == CtapError.ERR.NOT_ALLOWED


def test_libfido2_make_cred_and_get_assert_with_pin(pin_ctap, tmp_path):
    import subprocess
    source = pathlib.Path(__file__).parent / "fido2_socket.c"
    binary = tmp_path / "fido2_socket"
    subprocess.run(["cc", "-Wall", "-Werror", str(source), "-lfido2", "-o", str(binary)], check=True)
    r = subprocess.run([str(binary), pin_ctap.sock, "1234"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OK 32 ") and r.stdout.strip().endswith("uv=1,1")


def test_ctap_set_pin_converts_the_token_pin(tmp_path, softhsm):
    """ctap.setPin (and `tessera ctap set-pin`): the token's PIN "1234" becomes the hashed form of a CTAP PIN."""
    import subprocess
    # No back-off: the wrong CTAP PIN below would hold uid 0's next PIN, the JSON-RPC one too (one set of PIN rules).
    d = CTAPDaemon(tmp_path, softhsm, extra={"clientPin": True}, top={"pinBackoff": {"initialSeconds": 0}}).start()
    try:
        c = d.daemon.client()
        with pytest.raises(RPCError) as e:
            c.call("ctap.setPin", {"pin": "1234", "newPin": "12"})
        assert e.value.code == "INVALID_INPUT"
        with pytest.raises(CtapError) as e:
            ClientPin(Ctap2(d.device())).get_pin_token("1234")
        assert e.value.code == CtapError.ERR.PIN_INVALID
        # In place: the CTAP PIN is the token's current PIN.
        assert c.call("ctap.setPin", {"pin": "1234"}) == {"changed": True, "tokenId": c.call("tokens.list")["tokens"][0]["id"]}
        assert ClientPin(Ctap2(d.device())).get_pin_token("1234")
        # The CLI, to another CTAP PIN.
        r = cli(d.daemon, "ctap", "set-pin", "--pin-stdin", "--new-pin-stdin", input=ctap_token_pin("1234") + "\n5678\n")
        assert "hashed form" in r.stdout
        assert ClientPin(Ctap2(d.device()), PinProtocolV1()).get_pin_token("5678")
        login = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "tessera-test", "--login",
                                "--pin", ctap_token_pin("5678"), "--list-objects"], capture_output=True, text=True,
                               env={**os.environ, **softhsm.env})
        assert login.returncode == 0, login.stderr
    finally:
        d.daemon.stop()


def test_credential_management_with_python_fido2(pin_ctap):
    from fido2.ctap2 import CredentialManagement
    dev = pin_ctap.device()
    ctap2 = Ctap2(dev)
    assert ctap2.info.options["credMgmt"] is True
    # Discoverable credentials with clientPin on: python-fido2 asks for the PIN (makeCredUvNotRqd covers only the others).
    fido = Fido2Client(dev, DefaultClientDataCollector(ORIGIN), user_interaction=PinInteraction("1234"))
    made = [fido.make_credential(creation_options(user_id=b"user-%d" % i, name=f"user{i}", rk="required")).raw_id
            for i in range(2)]
    c = pin_ctap.daemon.client()
    c.call("passkey.enroll", {"rpId": "other.example", "user": {"id": b64u(b"o"), "name": "o", "displayName": "O"},
                              "challenge": b64u(os.urandom(32)), "pin": ctap_token_pin("1234")})
    # Non-discoverable credentials are not managed.
    client(dev).make_credential(creation_options(user_id=b"user-nrk", name="nrk", rk="discouraged"))
    client_pin = ClientPin(ctap2, PinProtocolV2())
    token = client_pin.get_pin_token("1234", ClientPin.PERMISSION.CREDENTIAL_MGMT)
    cm = CredentialManagement(ctap2, client_pin.protocol, token)
    assert cm.get_metadata()[CredentialManagement.RESULT.EXISTING_CRED_COUNT] == 3
    rps = cm.enumerate_rps()
    assert sorted(r[CredentialManagement.RESULT.RP]["id"] for r in rps) == ["example.com", "other.example"]
    creds = cm.enumerate_creds(hashlib.sha256(RP.encode()).digest())
    assert sorted(x[CredentialManagement.RESULT.CREDENTIAL_ID]["id"] for x in creds) == sorted(made)
    listed = {x["credentialId"]: x for x in c.call("credentials.list", {"rpId": RP})["credentials"]}
    for x in creds:
        # The public key is the stored one.
        assert cbor.encode(x[CredentialManagement.RESULT.PUBLIC_KEY]) == unb64u(
            listed[b64u(x[CredentialManagement.RESULT.CREDENTIAL_ID]["id"])]["publicKey"])
    target = PublicKeyCredentialDescriptor(type="public-key", id=made[0])
    cm.update_user_info(target, PublicKeyCredentialUserEntity(id=b"user-0", name="renamed", display_name="Renamed"))
    assert c.call("credentials.get", {"credentialId": b64u(made[0])})["user"]["name"] == "renamed"
    cm.delete_cred(target)
    assert b64u(made[0]) not in [x["credentialId"] for x in c.call("credentials.list", {"rpId": RP})["credentials"]]
    assert len(cm.enumerate_creds(hashlib.sha256(RP.encode()).digest())) == 1
    # A token without the cm permission is refused.
    mc = client_pin.get_pin_token("1234", ClientPin.PERMISSION.MAKE_CREDENTIAL)
    with pytest.raises(CtapError) as e:
        CredentialManagement(ctap2, client_pin.protocol, mc).get_metadata()
    assert e.value.code == CtapError.ERR.PIN_AUTH_INVALID


def secret_key_labels(hsm, pin: str) -> list[str]:
    """Labels of the secret key objects on the "ctap-pin" token (pkcs11-tool, logged in)."""
    import subprocess
    r = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "ctap-pin", "--login", "--pin", pin,
                        "--list-objects", "--type", "secrkey"], capture_output=True, text=True,
                       env={**os.environ, **hsm.env})
    assert r.returncode == 0, r.stderr
    # Each one generated on the token and never extractable.
    assert r.stdout.count("Secret Key Object") == r.stdout.count("never extractable, local")
    assert "wrap" not in r.stdout  # they sign (HMAC) only
    return re.findall(r"label:\s+(.*\S)", r.stdout)


def test_hmac_secret_on_the_token(pin_ctap):
    """hmac-secret (CTAP 2.1 §12.5) through python-fido2's HmacSecretExtension: the CredRandoms are secret keys made
    on the SoftHSM2 token, the HMAC is computed there; outputs are stable, per salt, per credential and per UV, and
    survive a restart; deleting the credential deletes its secret keys."""
    from fido2.ctap2.extensions import HmacSecretExtension
    dev = pin_ctap.device()
    assert "hmac-secret" in Ctap2(dev).get_info().extensions

    def fido(d):
        return Fido2Client(d, DefaultClientDataCollector(ORIGIN), user_interaction=PinInteraction("1234"),
                           extensions=[HmacSecretExtension(allow_hmac_secret=True)])

    def make(user_id):
        options = creation_options(user_id=user_id, name=user_id.decode())
        options = PublicKeyCredentialCreationOptions(
            rp=options.rp, user=options.user, challenge=options.challenge,
            pub_key_cred_params=options.pub_key_cred_params, attestation="direct",
            authenticator_selection={"residentKey": "discouraged", "userVerification": "required"},
            extensions={"hmacCreateSecret": True})
        reg = fido(dev).make_credential(options)
        assert reg.client_extension_results["hmacCreateSecret"] is True
        assert AttestationObject(bytes(reg.response.attestation_object)).auth_data.extensions == {"hmac-secret": True}
        return reg.raw_id

    def get(d, cred_id, salt1, salt2=None, uv="required"):
        salts = {"salt1": salt1, **({"salt2": salt2} if salt2 else {})}
        result = fido(d).get_assertion(PublicKeyCredentialRequestOptions(
            challenge=os.urandom(32), rp_id=RP, user_verification=uv,
            allow_credentials=[PublicKeyCredentialDescriptor(type="public-key", id=cred_id)],
            extensions={"hmacGetSecret": salts}))
        a = result.get_response(0)
        assert a.response.authenticator_data.flags & 0x80  # ED
        # The client's JSON form: base64url.
        out = {k: unb64u(v) if isinstance(v, str) else bytes(v) for k, v in
               a.client_extension_results["hmacGetSecret"].items()}
        return out["output1"], out.get("output2") or None

    first, second = make(b"hs-1"), make(b"hs-2")
    labels = secret_key_labels(pin_ctap.hsm, ctap_token_pin("1234"))
    for cred in (first, second):
        assert sorted(l for l in labels if l.startswith(f"tessera:{b64u(cred)} ")) == [
            f"tessera:{b64u(cred)} hmac-secret", f"tessera:{b64u(cred)} hmac-secret-uv"]
    s1, s2 = os.urandom(32), os.urandom(32)
    o1, none = get(dev, first, s1)
    assert len(o1) == 32 and none is None
    assert get(dev, first, s1) == (o1, None)
    o2, _ = get(dev, first, s2)
    assert len(o2) == 32 and o2 != o1
    assert get(dev, first, s1, s2) == (o1, o2)
    assert get(dev, second, s1)[0] not in (o1, o2)
    # The CredRandom without UV is another secret (the token is still logged in from the PIN above).
    assert get(dev, first, s1, uv="discouraged")[0] != o1
    # The secret is on the token, not in the daemon: the same outputs after a restart.
    pin_ctap.daemon.stop()
    pin_ctap.daemon.start()
    assert get(pin_ctap.device(), first, s1, s2) == (o1, o2)
    # Deleting the credential deletes its secret keys from the token, not the other credential's.
    c = pin_ctap.daemon.client()
    c.call("credentials.delete", {"credentialId": b64u(first), "pin": ctap_token_pin("1234")})
    labels = secret_key_labels(pin_ctap.hsm, ctap_token_pin("1234"))
    assert not [l for l in labels if l.startswith(f"tessera:{b64u(first)} ")]
    assert len([l for l in labels if l.startswith(f"tessera:{b64u(second)} ")]) == 2


def test_hmac_secret_migration_keeps_older_rows(ctap):
    """A database from before the hmacSecret column (v7-ctap-hmac-secret): the migration adds it, the older rows
    read as without hmac-secret and keep their credProtect."""
    import sqlite3
    cdh = hashlib.sha256(b"m").digest()
    made = Ctap2(ctap.device()).make_credential(cdh, {"id": RP}, {"id": b"old", "name": "old"},
                                                [{"type": "public-key", "alg": -7}], options={"rk": True},
                                                extensions={"credProtect": 2})
    cred_id = made.auth_data.credential_data.credential_id
    ctap.daemon.stop()
    db = ctap.tmp / "tesserad-state" / "tessera.sqlite"
    with sqlite3.connect(db) as c:
        c.execute("ALTER TABLE ctap_credential DROP COLUMN hmacSecret")
        assert c.execute("DELETE FROM grdb_migrations WHERE identifier = 'v7-ctap-hmac-secret'").rowcount == 1
    ctap.daemon.start()
    ctap2 = Ctap2(ctap.device())
    with pytest.raises(CtapError) as e:
        ctap2.get_assertion(RP, cdh)
    assert e.value.code == CtapError.ERR.NO_CREDENTIALS
    assert ctap2.get_assertion(RP, cdh, [{"type": "public-key", "id": cred_id}]).credential["id"] == cred_id
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT credProtect, hmacSecret FROM ctap_credential WHERE credentialId = ?",
                         (cred_id,)).fetchall() == [(2, 0)]


def test_get_next_assertion_and_enumeration_belong_to_their_channel(pin_ctap):
    """getNextAssertion and credentialManagement's GetNext subcommands continue only on the channel (connection)
    that began them: another client gets NOT_ALLOWED and the owner still continues."""
    from fido2.ctap2 import CredentialManagement
    dev = pin_ctap.device()
    fido = Fido2Client(dev, DefaultClientDataCollector(ORIGIN), user_interaction=PinInteraction("1234"))
    for i in range(2):
        fido.make_credential(creation_options(user_id=b"user-%d" % i, name=f"user{i}", rk="required"))
    c = pin_ctap.daemon.client()
    c.call("passkey.enroll", {"rpId": "other.example", "user": {"id": b64u(b"o"), "name": "o", "displayName": "O"},
                              "challenge": b64u(os.urandom(32)), "pin": ctap_token_pin("1234")})
    owner, other = Ctap2(dev), Ctap2(pin_ctap.device())
    client_pin = ClientPin(owner, PinProtocolV2())
    cdh = hashlib.sha256(b"next").digest()
    token = client_pin.get_pin_token("1234", ClientPin.PERMISSION.GET_ASSERTION, RP)
    first = owner.get_assertion(RP, cdh, pin_uv_param=client_pin.protocol.authenticate(token, cdh),
                                pin_uv_protocol=client_pin.protocol.VERSION)
    assert first.number_of_credentials == 2
    with pytest.raises(CtapError) as e:
        other.get_next_assertion()
    assert e.value.code == CtapError.ERR.NOT_ALLOWED
    assert owner.get_next_assertion().user["id"] == b"user-0"

    token = client_pin.get_pin_token("1234", ClientPin.PERMISSION.CREDENTIAL_MGMT)
    cm = CredentialManagement(owner, client_pin.protocol, token)
    other_cm = CredentialManagement(other, client_pin.protocol, token)
    assert cm.enumerate_rps_begin()[CredentialManagement.RESULT.TOTAL_RPS] == 2
    with pytest.raises(CtapError) as e:
        other_cm.enumerate_rps_next()
    assert e.value.code == CtapError.ERR.NOT_ALLOWED
    assert cm.enumerate_rps_next()[CredentialManagement.RESULT.RP]["id"] == RP
    begun = cm.enumerate_creds_begin(hashlib.sha256(RP.encode()).digest())
    assert begun[CredentialManagement.RESULT.TOTAL_CREDENTIALS] == 2
    with pytest.raises(CtapError) as e:
        other_cm.enumerate_creds_next()
    assert e.value.code == CtapError.ERR.NOT_ALLOWED
    assert cm.enumerate_creds_next()[CredentialManagement.RESULT.USER]["id"] == b"user-0"


def test_long_user_names_are_cut_to_64_bytes_on_every_door(pin_ctap):
    """An 8 KB name through passkey.enroll is stored cut to 64 bytes (at a character boundary), so getAssertion with
    UV and credential management over CTAP still answer (before, the name was stored whole and the answer trapped
    in CTAPHID's framing); makeCredential and updateUserInformation cut too."""
    from fido2.ctap2 import CredentialManagement
    c = pin_ctap.daemon.client()
    long_name = "é" * 4096  # 8192 bytes of UTF-8
    rpc = c.call("passkey.enroll", {"rpId": RP, "user": {"id": b64u(b"long"), "name": long_name,
                                                         "displayName": "x" * 8192},
                                    "challenge": b64u(os.urandom(32)), "pin": ctap_token_pin("1234")})
    stored = c.call("credentials.get", {"credentialId": rpc["credentialId"]})["user"]
    assert stored["name"] == "é" * 32 and stored["displayName"] == "x" * 64
    dev = pin_ctap.device()
    ctap2 = Ctap2(dev)
    client_pin = ClientPin(ctap2, PinProtocolV2())
    cdh = hashlib.sha256(b"long").digest()
    token = client_pin.get_pin_token("1234", ClientPin.PERMISSION.GET_ASSERTION, RP)
    got = ctap2.get_assertion(RP, cdh, pin_uv_param=client_pin.protocol.authenticate(token, cdh),
                              pin_uv_protocol=client_pin.protocol.VERSION)
    assert got.user == {"id": b"long", "name": "é" * 32, "displayName": "x" * 64}
    # makeCredential: a 1000-byte name (one multi-byte character across the limit) is kept cut.
    token = client_pin.get_pin_token("1234", ClientPin.PERMISSION.MAKE_CREDENTIAL, RP)
    att = ctap2.make_credential(cdh, {"id": RP}, {"id": b"ctap-long", "name": "a" + "€" * 333},
                                [{"type": "public-key", "alg": -7}], options={"rk": True},
                                pin_uv_param=client_pin.protocol.authenticate(token, cdh),
                                pin_uv_protocol=client_pin.protocol.VERSION)
    made = att.auth_data.credential_data.credential_id
    assert c.call("credentials.get", {"credentialId": b64u(made)})["user"]["name"] == "a" + "€" * 21
    token = client_pin.get_pin_token("1234", ClientPin.PERMISSION.CREDENTIAL_MGMT)
    cm = CredentialManagement(ctap2, client_pin.protocol, token)
    creds = cm.enumerate_creds(hashlib.sha256(RP.encode()).digest())
    assert sorted(x[CredentialManagement.RESULT.USER]["name"] for x in creds) == sorted(["é" * 32, "a" + "€" * 21])
    cm.update_user_info(PublicKeyCredentialDescriptor(type="public-key", id=made),
                        PublicKeyCredentialUserEntity(id=b"ctap-long", name="n" * 500, display_name="d" * 500))
    assert c.call("credentials.get", {"credentialId": b64u(made)})["user"] == {
        "id": b64u(b"ctap-long"), "name": "n" * 64, "displayName": "d" * 64}


def test_cred_protect_3_needs_the_pin_over_json_rpc_too(pin_ctap):
    """A credProtect 3 credential made over CTAP is not used by passkey.authenticate without the PIN, even while
    the token is logged in (before, it signed without UV); with the PIN it is."""
    dev = pin_ctap.device()
    ctap2 = Ctap2(dev)
    client_pin = ClientPin(ctap2, PinProtocolV2())
    cdh = hashlib.sha256(b"cp3").digest()
    token = client_pin.get_pin_token("1234", ClientPin.PERMISSION.MAKE_CREDENTIAL, RP)
    att = ctap2.make_credential(cdh, {"id": RP}, {"id": b"u3", "name": "u3"}, [{"type": "public-key", "alg": -7}],
                                extensions={"credProtect": 3}, options={"rk": True},
                                pin_uv_param=client_pin.protocol.authenticate(token, cdh),
                                pin_uv_protocol=client_pin.protocol.VERSION)
    cred = b64u(att.auth_data.credential_data.credential_id)
    level1 = ctap2.make_credential(cdh, {"id": RP}, {"id": b"u1", "name": "u1"}, [{"type": "public-key", "alg": -7}],
                                   options={"rk": False})
    c = pin_ctap.daemon.client()
    # The token is logged in (the PIN check above): a level-1 credential signs without a PIN.
    ok = c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(os.urandom(32)),
                                         "allowCredentials": [b64u(level1.auth_data.credential_data.credential_id)]})
    assert ok["userVerified"] is False
    for uv in ["discouraged", "preferred"]:
        with pytest.raises(RPCError) as e:
            c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [cred],
                                            "userVerification": uv})
        assert e.value.code == "PIN_REQUIRED"
    # The daemon restarted (nothing cached): still refused.
    pin_ctap.daemon.stop()
    pin_ctap.daemon.start()
    c = pin_ctap.daemon.client()
    c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [cred],
                                    "pin": ctap_token_pin("1234")})
    with pytest.raises(RPCError) as e:
        c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [cred]})
    assert e.value.code == "PIN_REQUIRED"
    a = c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [cred],
                                        "pin": ctap_token_pin("1234")})
    assert a["userVerified"] is True


def test_wrong_pins_block_client_pin_only_for_their_uid(tmp_path):
    """Three wrong PINs over CTAP from uid 0 block its ClientPIN until a restart; uid nobody still gets a
    pinUvAuthToken with getPinToken (before, the block held for every client)."""
    hsm = SoftHSM(tmp_path)
    hsm.add_token("ctap-pin", pin=ctap_token_pin("1234"))
    d = CTAPDaemon(tmp_path, hsm, extra={"clientPin": True, "socketMode": "0666"},
                   top={"pinBackoff": {"initialSeconds": 0}, "policy": {"sign": {"users": ["0", str(NOBODY)]}}})
    let_other_uids_reach(tmp_path)  # let nobody reach the socket
    d.start()
    try:
        client_pin = ClientPin(Ctap2(d.device()), PinProtocolV2())
        for code in [CtapError.ERR.PIN_INVALID, CtapError.ERR.PIN_INVALID, CtapError.ERR.PIN_AUTH_BLOCKED]:
            with pytest.raises(CtapError) as e:
                client_pin.get_pin_token("0000")
            assert e.value.code == code
        assert client_pin.get_pin_retries()[1] is True
        def theirs() -> str:
            client = ClientPin(Ctap2(d.device()), PinProtocolV2())
            blocked = client.get_pin_retries()[1]
            token = client.get_pin_token("1234")  # no permissions: getPinToken (0x05)
            return f"{blocked} {len(token)}"
        assert run_as(NOBODY, theirs) == "False 32"
        # uid 0 stays blocked, without reaching the token.
        with pytest.raises(CtapError) as e:
            client_pin.get_pin_token("1234")
        assert e.value.code == CtapError.ERR.PIN_AUTH_BLOCKED
    finally:
        d.daemon.stop()


def test_another_uids_credential_does_not_exist_over_ctap(tmp_path, softhsm):
    """A credential is its creator's (docs/API.md, "Owners"): over CTAP another uid gets NO_CREDENTIALS for it, by
    id and as a discoverable credential, exactly as for an id never made; each uid sees its own."""
    d = CTAPDaemon(tmp_path, softhsm, extra={"socketMode": "0666"})
    let_other_uids_reach(tmp_path)  # let nobody reach the socket
    d.start()
    try:
        cdh = hashlib.sha256(b"owners").digest()
        rp = {"id": RP, "name": "Example"}
        params = [{"type": "public-key", "alg": -7}]
        made = Ctap2(d.device()).make_credential(cdh, rp, {"id": b"root-user", "name": "root"}, params,
                                                 options={"rk": True})
        root_id = made.auth_data.credential_data.credential_id

        def theirs() -> dict:
            out = {}
            ctap2 = Ctap2(d.device())
            for name, allow in [("byId", [{"type": "public-key", "id": root_id}]),
                                ("neverMade", [{"type": "public-key", "id": os.urandom(32)}]),
                                ("discoverable", None)]:
                try:
                    ctap2.get_assertion(RP, cdh, allow_list=allow)
                    out[name] = "asserted"
                except CtapError as e:
                    out[name] = int(e.code)
            own = ctap2.make_credential(cdh, rp, {"id": b"nobody-user", "name": "nobody"}, params,
                                        options={"rk": True})
            out["own"] = own.auth_data.credential_data.credential_id.hex()
            got = ctap2.get_assertion(RP, cdh)
            out["sees"] = [got.credential["id"].hex(), got.number_of_credentials or 1]
            return out
        out = run_as(NOBODY, theirs)
        no_credentials = int(CtapError.ERR.NO_CREDENTIALS)
        assert out["byId"] == out["neverMade"] == out["discoverable"] == no_credentials
        assert out["sees"] == [out["own"], 1]
        # Root, too, sees only its own over CTAP; on the main socket (an administrator) both, with their owners.
        mine = Ctap2(d.device()).get_assertion(RP, cdh)
        assert mine.credential["id"] == root_id and (mine.number_of_credentials or 1) == 1
        owners = {c["credentialId"]: c["ownerUid"] for c in d.daemon.client().call("credentials.list")["credentials"]}
        assert owners == {b64u(root_id): os.geteuid(), b64u(bytes.fromhex(out["own"])): NOBODY}
    finally:
        d.daemon.stop()


def test_connections_are_served_on_the_event_loops_within_the_connection_bounds(tmp_path, softhsm):
    """CTAP connections take no thread each, and count against maxConnectionsPerUid: one uid at its bound is
    refused (closed) while another uid is still served, and that uid's INIT flood leaves the first uid's channels."""
    d = CTAPDaemon(tmp_path, softhsm, extra={"socketMode": "0666"},
                   top={"maxConnections": 32, "maxConnectionsPerUid": 12, "socketMode": "0666"})
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["policy"] = {"sign": {"users": ["root", "65534"]}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    let_other_uids_reach(tmp_path)  # let nobody reach the socket
    d.start()
    try:
        # The harness's readiness probe (root, on the main socket) holds one of root's places until the daemon has
        # seen it close: wait for that, asking as nobody, whose connections are not root's.
        def settled() -> bool:
            c = Client(d.daemon.socket)
            try:
                for _ in range(500):
                    if c.call("daemon.status")["connections"]["open"] == 1:
                        return True
                    time.sleep(0.02)
                return False
            finally:
                c.close()
        assert run_as(NOBODY, settled), "root's readiness probe never closed"
        tasks = pathlib.Path(f"/proc/{d.daemon.proc.pid}/task")
        mine = [Raw(d.sock)]
        mine[0].open()
        threads = len(os.listdir(tasks))
        mine += [Raw(d.sock) for _ in range(11)]
        for r in mine:
            r.open()
        assert len(os.listdir(tasks)) < threads + 4, "a thread per CTAP connection"
        # A thirteenth connection of root is closed unanswered.
        extra = Raw(d.sock)
        try:
            extra.send(0xFFFFFFFF, 0x06, os.urandom(8))
            assert extra.s.recv(64) == b""
        except (ConnectionResetError, BrokenPipeError):
            pass
        assert "ctap: connection refused" in d.daemon.log.read_text()
        # Another uid still gets its places.
        def theirs() -> None:
            for r in [Raw(d.sock) for _ in range(3)]:
                r.open()
        run_as(NOBODY, theirs)  # nobody's CTAP connections are served
        # An INIT flood of that uid (past the device's 1024 channels) does not take root's channel.
        victim = mine[0].open()
        def flood() -> None:
            raw = Raw(d.sock)
            for _ in range(1100):
                raw.open()
        run_as(NOBODY, flood)
        mine[0].send(victim, 0x01, b"still mine")
        assert mine[0].recv() == (victim, 0x81, b"still mine")
        # A place freed is taken again, and every connection still answers.
        mine.pop().s.close()
        for _ in range(100):
            again = Raw(d.sock)
            try:
                again.open()
                break
            except (ConnectionResetError, BrokenPipeError, struct.error):
                time.sleep(0.05)
        else:
            raise AssertionError("a freed place was not taken again")
        for r in mine:
            r.open()
    finally:
        d.daemon.stop()
