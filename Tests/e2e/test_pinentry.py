"""PIN entry the desktop way (issue 29): the SSH agent asks through pinentry (a scripted Assuan pinentry that counts
how often it was asked, and Debian's real pinentry-tty typed into through a pseudo-terminal), a pinentry CONFIRM as
presence source, and the CLI's no-echo prompt on a terminal; real tesserad, SoftHSM2 behind pkcs11-spy (C_Login
calls counted), real ssh-keygen -Y sign/verify."""
import contextlib
import json
import os
import pathlib
import pty
import select
import shutil
import subprocess
import sys
import time

import pytest

from tessera_harness import BIN, cli
from test_ssh_agent import PIN, TOKEN, Agent, key_part, pcscd  # noqa: F401 (pcscd: the fixture)
from test_ssh_agent import piv_agent, piv_card_with_certificates, piv_token_id, sign_with, wait_until

HERE = pathlib.Path(__file__).resolve().parent


def scripted_pinentry(tmp_path: pathlib.Path, answer: str) -> tuple[pathlib.Path, pathlib.Path]:
    """A pinentry program (a wrapper naming its state directory) and that directory."""
    state = tmp_path / "pinentry-state"
    state.mkdir(exist_ok=True)
    (state / "answer").write_text(answer)
    program = tmp_path / "pinentry"
    program.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'scripted_pinentry.py'} {state}\n")
    program.chmod(0o755)
    return program, state


def asked(state: pathlib.Path) -> int:
    f = state / "asked"
    return int(f.read_text()) if f.exists() else 0


# The agent asks only when the dialog has somewhere to appear: the client's terminal or a display. The scripted
# pinentry needs neither; the tests give it a display name (and check that it got it).
DISPLAY = {"DISPLAY": ":97"}


def start_agent(tmp_path, softhsm, config: dict) -> Agent:
    a = Agent(tmp_path, softhsm)
    path = tmp_path / "tesserad.json"
    path.write_text(json.dumps(config))
    a.daemon.args += ["--config", str(path)]
    return a.start()


@contextlib.contextmanager
def pinentry_agent(tmp_path, softhsm, answer: str, **pinentry):
    """The agent with the scripted pinentry answering `answer`, its state directory, and a key that needs an unlock."""
    program, state = scripted_pinentry(tmp_path, answer)
    a = start_agent(tmp_path, softhsm, {"pinentry": {"program": str(program), "environment": DISPLAY, **pinentry}})
    try:
        yield a, state, keygen(a)
    finally:
        a.daemon.stop()


def keygen(a: Agent, *extra: str) -> pathlib.Path:
    """An SSH key made with the PIN; the daemon restarted so no login is left: the key needs an unlock."""
    line = cli(a.daemon, "ssh", "keygen", "--comment", "alice@tessera", "--pin", PIN, *extra).stdout.strip()
    a.restart()
    pub = a.tmp / "id.pub"
    pub.write_text(line + "\n")
    return pub


def sign(a: Agent, pub: pathlib.Path, stdin=None) -> subprocess.CompletedProcess:
    msg = a.tmp / "msg.txt"
    msg.write_text("signed through tesserad and pinentry\n")
    (a.tmp / "msg.txt.sig").unlink(missing_ok=True)
    env = {**os.environ, "SSH_AUTH_SOCK": a.sock}
    env.pop("DISPLAY", None)
    return subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg)], env=env,
                          capture_output=True, text=True, timeout=60, stdin=stdin or subprocess.DEVNULL)


def verifies(a: Agent, pub: pathlib.Path) -> bool:
    signers = a.tmp / "allowed_signers"
    signers.write_text("alice@tessera " + key_part(pub.read_text()) + "\n")
    msg = a.tmp / "msg.txt"
    with open(msg) as stdin:
        v = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "alice@tessera", "-n", "file",
                            "-s", str(msg) + ".sig"], stdin=stdin, capture_output=True, text=True, timeout=60)
    return v.returncode == 0


def test_right_pin_from_pinentry_signs_once_asked(tmp_path, softhsm):
    with pinentry_agent(tmp_path, softhsm, f"pin:{PIN}", timeoutSeconds=20) as (a, state, pub):
        before = a.logins()
        r = sign(a, pub)
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]
        assert verifies(a, pub)
        assert asked(state) == 1 and a.logins() == before + 1
        log = (state / "log").read_text().splitlines()
        assert log[-1] == "BYE" and log[-2] == "GETPIN"
        desc = next(l for l in log if l.startswith("SETDESC "))
        assert "alice@tessera" in desc and "%0A" in desc
        # The unlock lasts pinCacheSeconds, as after ssh-add -s: the next signature asks nothing.
        assert sign(a, pub).returncode == 0 and asked(state) == 1
        # The PIN was in no argv, environment or log line.
        assert PIN not in (state / "argv").read_text()
        environ = (state / "environ").read_text()
        assert f"={PIN}\n" not in environ and "DISPLAY=:97\n" in environ
        assert not [l for l in a.daemon.log.read_text().splitlines() if "pinentry" in l and PIN in l]
        assert "unlocked by uid" in a.daemon.log.read_text()


def test_cancel_fails_cleanly_and_is_not_retried(tmp_path, softhsm):
    with pinentry_agent(tmp_path, softhsm, "cancel") as (a, state, pub):
        before = a.logins()
        assert sign(a, pub).returncode != 0
        assert asked(state) == 1, "a cancelled PIN entry must not be asked again behind the user's back"
        assert a.logins() == before, "a cancelled PIN entry must not reach the token"
        assert "cancelled" in a.daemon.log.read_text()
        # The next signature asks again (one question per signature), and the PIN then works.
        (state / "answer").write_text(f"pin:{PIN}")
        assert sign(a, pub).returncode == 0 and asked(state) == 2


def test_wrong_pin_fails_and_costs_exactly_one_try(tmp_path, softhsm):
    with pinentry_agent(tmp_path, softhsm, "pin:0000") as (a, state, pub):
        before = a.logins()
        assert sign(a, pub).returncode != 0
        assert asked(state) == 1
        assert a.logins() == before + 1, "a wrong PIN must cost exactly one C_Login"
        assert "PIN_INVALID" in a.daemon.log.read_text()
        # The uid's back-off holds: right after a wrong PIN nothing is asked and nothing reaches the token.
        (state / "answer").write_text(f"pin:{PIN}")
        assert sign(a, pub).returncode != 0
        assert asked(state) == 1 and a.logins() == before + 1
        time.sleep(2.2)
        assert sign(a, pub).returncode == 0 and asked(state) == 2 and a.logins() == before + 2
        # An empty PIN typed into the pinentry is refused before the token (PIN_EMPTY), not taken as no PIN.
        a.restart()
        (state / "answer").write_text("pin:")
        before = a.logins()
        assert sign(a, pub).returncode != 0
        assert a.logins() == before and "PIN_EMPTY" in a.daemon.log.read_text()


def test_piv_card_wrong_pin_moves_the_retry_counter_by_one_and_the_final_try_is_never_asked(tmp_path, softhsm, pcscd):
    """A PIV card (real retry counter): a wrong PIN from pinentry costs exactly one try; with one try left the agent
    asks nothing and spends nothing."""
    program, state = scripted_pinentry(tmp_path, "pin:000000")
    card, piv_keys = piv_card_with_certificates(pcscd, tmp_path, serial=5353, pin_retries=2)
    card.insert()
    a = piv_agent(tmp_path, softhsm, pcscd, config={"pinBackoff": {"initialSeconds": 0},
                                                    "pinentry": {"program": str(program), "environment": DISPLAY}})
    try:
        assert wait_until(lambda: len(a.listed()) == 2), a.listed()
        token = piv_token_id(a)
        c = a.daemon.client()
        line_9a = next(l for l in a.listed() if key_part(l) == key_part(piv_keys["9a"]))
        assert c.call("tokens.pinStatus", {"tokenId": token})["retriesLeft"] == 2
        assert sign_with(a, tmp_path, line_9a).returncode != 0
        assert asked(state) == 1
        assert c.call("tokens.pinStatus", {"tokenId": token})["retriesLeft"] == 1
        (state / "answer").write_text("pin:123456")
        assert sign_with(a, tmp_path, line_9a).returncode != 0
        assert asked(state) == 1, "with one try left the agent must not ask for a PIN it will not try"
        assert c.call("tokens.pinStatus", {"tokenId": token})["retriesLeft"] == 1
        assert "one PIN try left" in a.daemon.log.read_text()
    finally:
        a.daemon.stop()
        card.remove()


def test_pinentry_confirm_as_presence(tmp_path, softhsm):
    """presence.pinentry: a `confirm` key's signature is approved by a pinentry CONFIRM (OK) and refused by Cancel."""
    program, state = scripted_pinentry(tmp_path, "ok")
    a = start_agent(tmp_path, softhsm, {"pinentry": {"program": str(program), "sshAgent": False},
                                       "presence": {"pinentry": True, "timeoutSeconds": 10}})
    try:
        pub = keygen(a, "--confirm")
        assert a.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
        r = sign(a, pub)
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]
        assert verifies(a, pub) and asked(state) == 1
        log = (state / "log").read_text().splitlines()
        assert "CONFIRM" in log and "GETPIN" not in log
        assert "SSH signature" in next(l for l in log if l.startswith("SETDESC "))
        (state / "answer").write_text("cancel")
        assert sign(a, pub).returncode != 0 and asked(state) == 2
        assert "pinentry denied" in a.daemon.log.read_text()
        # sshAgent: false: the agent itself asks for no PIN (ssh-add -s only).
        assert a.run("ssh-add", "-e", TOKEN).returncode == 0
        assert sign(a, pub).returncode != 0 and asked(state) == 2
        assert "ssh-add -s" in a.daemon.log.read_text()
    finally:
        a.daemon.stop()


def read_until(fd: int, needle: bytes | None, timeout: float = 30) -> bytes:
    """What a pty's master reads until `needle` (which must come in time) or, with None, until end of output."""
    out = b""
    deadline = time.time() + timeout
    while needle is None or needle not in out:
        left = deadline - time.time()
        if left <= 0:
            assert needle is None, f"{needle!r} never came; saw {out!r}"
            break
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    return out


def test_real_pinentry_tty_on_the_clients_terminal(tmp_path, softhsm):
    """Debian's pinentry-tty, not our script: the agent gives it the signing client's terminal (the daemon runs as
    the client's uid), the PIN is typed there, and ssh-keygen's signature verifies."""
    program = shutil.which("pinentry-tty")
    assert program, "pinentry-tty is not installed (scripts/setup.sh installs it)"
    a = start_agent(tmp_path, softhsm, {"pinentry": {"program": program, "timeoutSeconds": 30}})
    master, slave = pty.openpty()
    try:
        pub = keygen(a)
        msg = a.tmp / "msg.txt"
        msg.write_text("signed through pinentry-tty\n")
        env = {**os.environ, "SSH_AUTH_SOCK": a.sock}
        env.pop("DISPLAY", None)
        proc = subprocess.Popen(["ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg)], env=env,
                                stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = read_until(master, b"PIN:")
        assert b"alice@tessera" in seen
        os.write(master, PIN.encode() + b"\r")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err + a.daemon.log.read_text()[-2000:]
        assert verifies(a, pub)
    finally:
        os.close(master)
        os.close(slave)
        a.daemon.stop()


def test_real_pinentry_tty_confirms_presence_on_the_clients_terminal(tmp_path, softhsm):
    """presence.pinentry with Debian's pinentry-tty: a `confirm` key's signature shows Allow/Deny on the signing
    client's terminal; "a" allows (the signature verifies), "d" denies."""
    program = shutil.which("pinentry-tty")
    assert program, "pinentry-tty is not installed (scripts/setup.sh installs it)"
    a = start_agent(tmp_path, softhsm, {"pinentry": {"program": program, "sshAgent": False},
                                       "presence": {"pinentry": True, "timeoutSeconds": 30}})
    try:
        pub = keygen(a, "--confirm")
        assert a.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
        for key, allowed in ((b"a", True), (b"d", False)):
            master, slave = pty.openpty()
            try:
                msg = a.tmp / "msg.txt"
                msg.write_text("confirmed on the terminal\n")
                (a.tmp / "msg.txt.sig").unlink(missing_ok=True)
                env = {**os.environ, "SSH_AUTH_SOCK": a.sock}
                env.pop("DISPLAY", None)
                proc = subprocess.Popen(["ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg)],
                                        env=env, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                seen = read_until(master, b"[ad]? ")
                assert b"SSH signature" in seen and b"Allow it?" in seen
                os.write(master, key)
                _, err = proc.communicate(timeout=60)
                assert (proc.returncode == 0) == allowed, err + a.daemon.log.read_text()[-2000:]
                if allowed:
                    assert verifies(a, pub)
            finally:
                os.close(master)
                os.close(slave)
        assert "pinentry denied" in a.daemon.log.read_text()
    finally:
        a.daemon.stop()


def run_on_terminal(args: list[str], typed: bytes | None, expect: bytes = b"PIN: ") -> tuple[int, bytes]:
    """Runs the CLI with a pseudo-terminal as stdin, stdout and stderr; types `typed` after `expect` appears."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(args[0], args)
    seen = b""
    try:
        if typed is not None:
            seen = read_until(fd, expect)
            os.write(fd, typed)
        seen += read_until(fd, None, 60)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), seen


def test_cli_asks_for_the_pin_on_the_terminal_without_echo(tmp_path, softhsm):
    a = Agent(tmp_path, softhsm).start()
    try:
        tessera = [str(BIN / "tessera"), "--socket", a.daemon.socket]
        # --pin-stdin on a terminal: the prompt, no echo of what is typed.
        status, seen = run_on_terminal(tessera + ["ssh", "keygen", "--comment", "tty", "--pin-stdin"],
                                       PIN.encode() + b"\r")
        assert status == 0, seen
        assert b"PIN: " in seen and PIN.encode() not in seen
        assert b"ecdsa-sha2-nistp256 " in seen
        # No PIN option: the daemon answers PIN_REQUIRED (the token is not logged in), the CLI asks, sends once more.
        a.restart()
        status, seen = run_on_terminal(tessera + ["ssh", "keygen", "--comment", "asked"], PIN.encode() + b"\r")
        assert status == 0, seen
        assert b"PIN: " in seen and PIN.encode() not in seen
        # An empty typed PIN is refused with its code; nothing is made.
        a.restart()
        keys = len(a.daemon.client().call("ssh.list")["keys"])
        status, seen = run_on_terminal(tessera + ["ssh", "keygen", "--comment", "empty", "--pin-stdin"], b"\r")
        assert status == 2 and b"PIN_EMPTY" in seen, seen
        # Ctrl-D at the prompt: cancelled, nothing sent.
        status, seen = run_on_terminal(tessera + ["ssh", "keygen", "--comment", "eof", "--pin-stdin"], b"\x04")
        assert status == 2 and b"PIN_ENTRY_CANCELLED" in seen, seen
        assert len(a.daemon.client().call("ssh.list")["keys"]) == keys
        # The terminal echoes again after the prompt (stty reports echo on).
        status, seen = run_on_terminal(["/bin/sh", "-c", f"{tessera[0]} --socket {a.daemon.socket} ssh keygen "
                                        "--comment again --pin-stdin; stty -a"], PIN.encode() + b"\r")
        assert b" echo " in seen.replace(b"\r\n", b" ").replace(b";", b" ") and b"-echo " not in seen
    finally:
        a.daemon.stop()


def test_pin_stdin_with_empty_input_is_refused_not_taken_as_no_pin(tmp_path, softhsm):
    """issue 29: `--pin-stdin` with empty input enrolled without user verification. Now PIN_EMPTY, exit 2, no
    credential; the daemon refuses an empty `pin` with the same code."""
    a = Agent(tmp_path, softhsm).start()
    try:
        for given in ("", "\n"):
            r = cli(a.daemon, "enroll", "--rp-id", "example.com", "--user-name", "alice", "--pin-stdin",
                    input=given, check=False)
            assert r.returncode == 2 and "PIN_EMPTY" in r.stderr, r.stderr
        assert a.daemon.client().call("credentials.list")["credentials"] == []
        # The same for the new PIN of `ctap set-pin`: refused in the CLI, nothing is sent.
        r = cli(a.daemon, "ctap", "set-pin", "--pin-stdin", "--new-pin-stdin", input=f"{PIN}\n\n", check=False)
        assert r.returncode == 2 and "PIN_EMPTY" in r.stderr and "--new-pin-stdin" in r.stderr, r.stderr
        from tessera_harness import RPCError
        with pytest.raises(RPCError) as e:
            a.daemon.client().call("passkey.enroll", {"rpId": "example.com", "pin": "", "challenge": "AAAA",
                                                      "user": {"id": "AAAA", "name": "a", "displayName": "a"}})
        assert e.value.code == "PIN_EMPTY"
        # Without a PIN option the PIN is absent, not empty: nothing is read or asked (stdin is no terminal), and this
        # token, which needs a login, answers PIN_REQUIRED.
        r = cli(a.daemon, "enroll", "--rp-id", "example.com", "--user-name", "alice", input="", check=False)
        assert r.returncode == 2 and "PIN_REQUIRED" in r.stderr and "PIN: " not in r.stderr, r.stderr
    finally:
        a.daemon.stop()


def created_in(directory: pathlib.Path):
    """A context manager watching `directory` with inotify (IN_CREATE, IN_MOVED_TO); yields the list of names created
    there, filled when the block ends."""
    import ctypes
    import ctypes.util
    import struct

    @contextlib.contextmanager
    def watch():
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK)
        assert fd >= 0, ctypes.get_errno()
        assert libc.inotify_add_watch(fd, str(directory).encode(), 0x100 | 0x80) >= 0, ctypes.get_errno()
        names: list[str] = []
        try:
            yield names
        finally:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                data = b""
            os.close(fd)
            offset = 0
            while offset < len(data):
                _, _, _, length = struct.unpack_from("iIII", data, offset)
                names.append(data[offset + 16:offset + 16 + length].rstrip(b"\0").decode())
                offset += 16 + length
    return watch()


def test_the_pin_from_pinentry_never_touches_a_file(tmp_path, softhsm):
    """The daemon's TMPDIR is an empty directory watched with inotify while the agent asks pinentry for the PIN and
    signs: nothing is created there (ProgramRunner gives the program its input and reads its answer, the PIN, through
    pipes; it used to go through unlinked files in $TMPDIR)."""
    program, state = scripted_pinentry(tmp_path, f"pin:{PIN}")
    tmpdir = tmp_path / "daemon-tmp"
    tmpdir.mkdir()
    a = Agent(tmp_path, softhsm, extra_env={"TMPDIR": str(tmpdir)})
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"pinentry": {"program": str(program), "environment": DISPLAY}}))
    a.daemon.args += ["--config", str(config)]
    a.start()
    try:
        pub = keygen(a)
        with created_in(tmpdir) as names:
            r = sign(a, pub)
        assert r.returncode == 0 and asked(state) == 1, r.stderr
        assert names == [], names
        assert list(tmpdir.iterdir()) == []
    finally:
        a.daemon.stop()
