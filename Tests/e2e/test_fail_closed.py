"""The socket and the configuration fail closed; one slow client cannot stall the daemon (issue 10, 4 and 5)."""
from __future__ import annotations

import datetime
import grp
import json
import os
import pathlib
import signal
import socket
import stat
import threading
import time

import pytest

from tessera_harness import SOFTHSM_MODULE, AsUser, Client, Daemon, RPCError, SoftHSM, b64u
from tessera_harness import let_other_uids_reach
from test_passkeys import RP, authenticate, enroll

ARGS = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]
NOBODY = 65534


def with_config(tmp_path: pathlib.Path, config: dict, name: str = "tesserad.json") -> list[str]:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return [*ARGS, "--config", str(path)]


def open_path_to(tmp_path: pathlib.Path) -> None:
    """Lets other uids reach sockets under tmp_path."""
    let_other_uids_reach(tmp_path)


# --- the socket never exists with wider permissions than configured -------------------------------------------

@pytest.mark.parametrize("config,at_creation", [
    ({"socketMode": "0600"}, 0o600),
    ({"socketMode": "0660"}, 0o660),
    # With a group still to be set, only the owner bits exist until the chown.
    ({"socketMode": "0660", "socketGroup": "nogroup"}, 0o600),
])
def test_socket_file_has_its_final_mode_from_the_first_instant(tmp_path, softhsm, config, at_creation):
    # A failpoint kills the daemon right after bind(), before any chmod: the file left behind shows the mode it was
    # created with. The daemon runs with umask 0, which without a umask at bind() would give 0777.
    d = Daemon(tmp_path, {**softhsm.env, "TESSERA_FAILPOINTS": "socket.bound"}, with_config(tmp_path, config))
    old = os.umask(0)
    try:
        d.start(wait=False)
    finally:
        os.umask(old)
    assert d.proc.wait(60) == -signal.SIGKILL, d.log.read_text()
    st = os.stat(d.socket)
    assert stat.S_ISSOCK(st.st_mode)
    assert oct(st.st_mode & 0o777) == oct(at_creation)


def test_socket_group_and_mode_once_serving(tmp_path, softhsm):
    d = Daemon(tmp_path, softhsm.env, with_config(tmp_path, {"socketMode": "0640", "socketGroup": "nogroup"}))
    old = os.umask(0)
    try:
        d.start()
    finally:
        os.umask(old)
    try:
        st = os.stat(d.socket)
        assert oct(st.st_mode & 0o777) == "0o640"
        assert st.st_gid == grp.getgrnam("nogroup").gr_gid
    finally:
        d.stop()


# --- a wrong setting stops start-up, naming it ------------------------------------------------------------------

@pytest.mark.parametrize("config,named", [
    ({"socketMode": "0999"}, "socketMode"),
    ({"socketMode": "rw-rw----"}, "socketMode"),
    ({"socketMode": "01777"}, "socketMode"),
    ({"socketGroup": "no-such-group-tessera"}, "no-such-group-tessera"),
    ({"sockteMode": "0600"}, "sockteMode"),
    ({"policy": {"sing": {"users": ["0"]}}}, "sing"),
    ({"policy": {"sign": {"user": ["0"]}}}, "user"),
    ({"policy": {"admin": {"users": ["no-such-user-tessera"]}}}, "no-such-user-tessera"),
    ({"counterBlock": 0}, "counterBlock"),
    ({"counterBlock": 1000001}, "counterBlock"),
    ({"maxRequestsInFlight": 0}, "maxRequestsInFlight"),
    ({"maxQueuedNotifications": 0}, "maxQueuedNotifications"),
    ({"maxConnections": 0}, "maxConnections"),
    ({"maxConnections": 8, "maxConnectionsPerUid": 9}, "maxConnectionsPerUid"),
    ({"pinBackoff": {"initialSecond": 1}}, "initialSecond"),
    ({"pinBackoff": {"initialSeconds": -1}}, "pinBackoff"),
])
def test_invalid_setting_stops_start_up(tmp_path, softhsm, config, named):
    d = Daemon(tmp_path, softhsm.env, with_config(tmp_path, config))
    d.start(wait=False)
    assert d.proc.wait(60) == 1
    log = d.log.read_text()
    assert named in log, log
    assert not os.path.exists(d.socket)


@pytest.mark.parametrize("counter_block", [1, 1000000])
def test_counter_block_bounds_are_accepted(tmp_path, softhsm, counter_block):
    d = Daemon(tmp_path, softhsm.env, with_config(tmp_path, {"counterBlock": counter_block})).start()
    try:
        c = d.client()
        reg, _ = enroll(c)
        counts = [authenticate(c, reg["credentialId"], pin=None)[0]["signCount"] for _ in range(3)]
        assert counts == [1, 2, 3]
    finally:
        d.stop()


def test_unreadable_or_unparseable_csca_stops_start_up(tmp_path, softhsm):
    garbage = tmp_path / "garbage.der"
    garbage.write_bytes(b"this is no certificate")
    missing = tmp_path / "missing.pem"
    anchors = tmp_path / "anchors"
    anchors.mkdir()
    (anchors / "broken.cer").write_bytes(b"\x30\x03\x02\x01")
    for path, named in [(garbage, "garbage.der"), (missing, "missing.pem"), (anchors, "broken.cer")]:
        d = Daemon(tmp_path, softhsm.env, [*ARGS, "--csca", str(path)], name=f"d-{named}")
        d.start(wait=False)
        assert d.proc.wait(60) == 1
        log = d.log.read_text()
        assert named in log, log


# --- supplementary groups are the ones the peer had when it connected ------------------------------------------

GROUP = 4242  # a gid no account has: only the test's child holds it


def connect_then_change_groups(socket_path: str, groups_at_connect: list[int], groups_after: list[int]) -> dict:
    """A child that connects as uid nobody holding `groups_at_connect`, then switches to `groups_after` before
    calling passkey.authenticate; returns the error code it got."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(groups_at_connect)
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, 0)  # keeps saved uid 0 so the groups can change after connecting
            c = Client(socket_path)
            c.call("daemon.status")
            os.seteuid(0)
            os.setgroups(groups_after)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            try:
                c.call("passkey.authenticate", {"rpId": RP, "challenge": b64u(b"c" * 16),
                                                "allowCredentials": [b64u(b"x")]})
                out = {"code": "ok"}
            except RPCError as e:
                out = {"code": e.code}
            os.write(w, json.dumps(out).encode())
        except BaseException as e:  # report, so the parent's assertion shows why
            os.write(w, json.dumps({"child error": repr(e)}).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)


def test_supplementary_group_policy_uses_the_groups_at_connect(tmp_path, softhsm):
    if os.geteuid() != 0:
        pytest.fail("this test needs root to act as uid nobody (CI runs as root)")
    open_path_to(tmp_path)
    d = Daemon(tmp_path, softhsm.env, with_config(tmp_path, {
        "socketMode": "0666", "policy": {"sign": {"groups": [str(GROUP)]}}})).start()
    try:
        # Holding the group when connecting: allowed (the credential is unknown, so PASSKEY_NOT_FOUND).
        assert connect_then_change_groups(d.socket, [GROUP], [GROUP]) == {"code": "PASSKEY_NOT_FOUND"}
        assert connect_then_change_groups(d.socket, [1, GROUP, 4243], [1, GROUP, 4243]) == {"code": "PASSKEY_NOT_FOUND"}
        # The kernel's record of the connecting process decides, not what the pid holds later.
        assert connect_then_change_groups(d.socket, [GROUP], []) == {"code": "PASSKEY_NOT_FOUND"}
        assert connect_then_change_groups(d.socket, [], [GROUP]) == {"code": "UNAUTHORIZED"}
        assert connect_then_change_groups(d.socket, [1, 4243], [1, 4243]) == {"code": "UNAUTHORIZED"}
    finally:
        d.stop()


# --- one uid cannot take every connection ------------------------------------------------------------------------

def test_connection_bounds_refuse_one_uid_and_leave_another_its_place(tmp_path, softhsm):
    if os.geteuid() != 0:
        pytest.fail("this test needs root to act as uid nobody (CI runs as root)")
    open_path_to(tmp_path)
    agent = str(tmp_path / "agent.sock")
    d = Daemon(tmp_path, softhsm.env, with_config(tmp_path, {
        "socketMode": "0666", "maxConnections": 4, "maxConnectionsPerUid": 3,
        "sshAgent": {"socket": agent, "socketMode": "0666"}})).start()
    try:
        mine = [d.client()]
        deadline = time.time() + 30
        while mine[0].call("daemon.status")["connections"]["open"] > 1:  # wait_ready's connection has gone
            assert time.time() < deadline
            time.sleep(0.02)
        mine += [d.client(), d.client()]
        for c in mine:
            assert "version" in c.call("daemon.status")
        # A fourth of this uid: one BUSY error naming the bound, then the end of the connection.
        extra = d.client()
        m = extra.read_message()
        assert m["id"] is None and m["error"]["data"]["code"] == "BUSY" and m["error"]["data"]["retryable"]
        assert "uid 0" in m["error"]["message"]
        assert extra.read_message() is None
        # The SSH agent socket shares the bounds, but its protocol has no "busy": the connection waits, unread, and
        # is answered when a place frees (as OpenSSH's agent answers every client).
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(1)
        s.connect(agent)
        s.sendall(b"\x00\x00\x00\x01\x0b")  # SSH_AGENTC_REQUEST_IDENTITIES
        with pytest.raises(TimeoutError):
            s.recv(64)
        mine.pop().close()
        s.settimeout(30)
        assert s.recv(5)[4] == 12  # SSH_AGENT_IDENTITIES_ANSWER
        s.close()
        deadline = time.time() + 30
        while mine[0].call("daemon.status")["connections"]["open"] > 2:
            assert time.time() < deadline
            time.sleep(0.02)
        mine.append(d.client())
        assert "version" in mine[-1].call("daemon.status")

        # Another uid still gets the place the total leaves; past the total it is refused too.
        def body(c: Client, ready) -> dict:
            first = c.call("daemon.status")["connections"]["open"]
            second = Client(d.socket, timeout=30).read_message()
            return {"open": first, "second": second["error"]["data"]["code"] if second else None}
        assert AsUser(65534, d.socket, body).result() == {"open": 4, "second": "BUSY"}
        assert mine[0].call("daemon.status")["connections"]["refused"] == 2
        # A place freed is taken again.
        mine.pop().close()
        deadline = time.time() + 30
        while True:
            try:
                assert "version" in d.client().call("daemon.status")
                break
            except ConnectionError:
                assert time.time() < deadline
                time.sleep(0.05)
    finally:
        d.stop()


# --- a client that stops reading is cut off; nobody waits for it ------------------------------------------------

def test_subscriber_that_never_reads_is_closed_and_counted(tmp_path, softhsm):
    d = Daemon(tmp_path, softhsm.env, with_config(tmp_path, {
        "maxQueuedNotifications": 8,
        "enrollment": {"workflows": {"contact": {"remote": True, "steps": ["EMAIL_INFO"]}}}})).start()
    try:
        slow = d.client()
        slow.call("enrollment.subscribe")  # and never reads again
        driver, watcher = d.client(), d.client()
        assert watcher.call("daemon.status")["connections"]["closedSlow"] == 0
        cycles = 0
        while watcher.call("daemon.status")["connections"]["closedSlow"] == 0:
            assert cycles < 5000, "the silent subscriber was never cut off"
            for _ in range(10):
                driver.call("enrollment.start", {"type": {"remote": {"candidate": "contact"}}})
                driver.call("enrollment.cancel")
            cycles += 10
        status = watcher.call("daemon.status")["connections"]
        assert status["closedSlow"] == 1
        # The other clients kept working throughout and still do.
        driver.call("enrollment.start", {"type": {"remote": {"candidate": "contact"}}})
        driver.call("enrollment.cancel")
        # The slow client finds its connection closed once it drains what was sent before.
        slow.sock.settimeout(30)
        while slow.sock.recv(1 << 20):
            pass
        assert "does not read its notifications" in d.log.read_text()
    finally:
        d.stop()


def test_more_requests_in_flight_than_allowed_get_busy(daemon):
    c = daemon.client()
    watcher = daemon.client()
    n = 3000
    frames = b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "daemon.methods"}).encode() + b"\n"
                      for i in range(n))
    sender = threading.Thread(target=c.send_raw, args=(frames,))
    sender.start()
    # Not reading lets answers pile up until 64 wait to be written; the daemon must then refuse with BUSY.
    polls = 0
    while watcher.call("daemon.status")["connections"]["busy"] == 0:
        polls += 1
        assert polls < 3000, "every request was admitted: nothing was refused BUSY"
        time.sleep(0.01)
    answers = {}
    while len(answers) < n:
        m = c.read_message()
        assert m is not None
        assert m["id"] not in answers
        answers[m["id"]] = m
    sender.join()
    busy = [m for m in answers.values() if "error" in m]
    assert busy, "no request was refused"
    for m in busy:
        assert m["error"]["data"]["code"] == "BUSY" and m["error"]["data"]["retryable"] is True
    assert len(busy) == watcher.call("daemon.status")["connections"]["busy"]
    assert any("result" in m for m in answers.values())
    # The connection still works once the client reads again.
    assert "daemon.status" in c.call("daemon.methods")["methods"]


def test_max_requests_in_flight_is_configurable(tmp_path, softhsm):
    d = Daemon(tmp_path, softhsm.env, with_config(tmp_path, {"maxRequestsInFlight": 1})).start()
    try:
        c = d.client()
        reg, _ = enroll(c)
        frames = b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "passkey.authenticate", "params": {
            "rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [reg["credentialId"]]}}).encode()
            + b"\n" for i in range(50))
        c.send_raw(frames)
        answers = [c.read_message() for _ in range(50)]
        codes = {m["error"]["data"]["code"] for m in answers if "error" in m}
        assert codes == {"BUSY"}
    finally:
        d.stop()


# --- lastUsedAt ---------------------------------------------------------------------------------------------------

def test_last_used_at_is_the_last_assertion_after_sigterm(tmp_path, softhsm):
    d = Daemon(tmp_path, softhsm.env, ARGS).start()
    c = d.client()
    reg, _ = enroll(c)
    authenticate(c, reg["credentialId"], pin=None)  # reserves the counter block (a database write)
    first = c.call("credentials.get", {"credentialId": reg["credentialId"]})["lastUsedAt"]
    # lastUsedAt has one-second resolution: the next assertion must fall in a later second.
    deadline_second = datetime.datetime.fromisoformat(first.replace("Z", "+00:00")) + datetime.timedelta(seconds=1)
    while datetime.datetime.now(datetime.timezone.utc) < deadline_second + datetime.timedelta(milliseconds=50):
        time.sleep(0.05)
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    authenticate(c, reg["credentialId"], pin=None)  # within the reserved block: no database write
    assert d.stop(signal.SIGTERM) == 0
    d = Daemon(tmp_path, softhsm.env, ARGS).start()
    try:
        last = d.client().call("credentials.get", {"credentialId": reg["credentialId"]})["lastUsedAt"]
        assert datetime.datetime.fromisoformat(last.replace("Z", "+00:00")) >= before > \
            datetime.datetime.fromisoformat(first.replace("Z", "+00:00"))
    finally:
        d.stop()
