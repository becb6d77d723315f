"""Socket handling, systemd integration and crash durability of the real daemon."""
import os
import pathlib
import signal
import socket
import stat
import subprocess
import threading
import time

import pytest

from tessera_harness import BIN, SOFTHSM_MODULE, Client, Daemon, RPCError, b64u
from test_passkeys import ORIGIN, RP, authenticate, enroll
from verify import verify_assertion, verify_registration

ARGS = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]


def test_socket_mode_and_single_instance(daemon, tmp_path, softhsm):
    assert stat.S_ISSOCK(os.stat(daemon.socket).st_mode)
    assert os.stat(daemon.socket).st_mode & 0o777 == 0o660
    second = Daemon(tmp_path, softhsm.env, ARGS, name="tesserad")
    second.start(wait=False)
    assert second.proc.wait(30) != 0
    assert "already serving" in second.log.read_text()
    assert "version" in daemon.client().call("daemon.status")


def test_stale_socket_is_replaced(tmp_path, softhsm):
    d = Daemon(tmp_path, softhsm.env, ARGS)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(d.socket)
    s.close()  # leaves a socket file nobody serves
    d.start()
    try:
        assert "version" in d.client().call("daemon.status")
    finally:
        d.stop()


def test_refuses_to_replace_a_regular_file(tmp_path, softhsm):
    d = Daemon(tmp_path, softhsm.env, ARGS)
    open(d.socket, "w").write("precious")
    d.start(wait=False)
    assert d.proc.wait(30) != 0
    assert open(d.socket).read() == "precious"


def test_sigterm_drains_and_exits_cleanly(daemon):
    c = daemon.client()
    c.call("daemon.status")
    assert daemon.stop(signal.SIGTERM) == 0


def test_socket_activation_and_ready_notification(tmp_path, softhsm):
    path = str(tmp_path / "activated.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    notify_path = str(tmp_path / "notify.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(60)
    env = {**os.environ, **softhsm.env, "NOTIFY_SOCKET": notify_path}
    state = str(tmp_path / "state")

    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(listener.fileno(), 3)
            os.set_inheritable(3, True)
            env["LISTEN_FDS"] = "1"
            env["LISTEN_PID"] = str(os.getpid())
            log = os.open(str(tmp_path / "activated.log"), os.O_WRONLY | os.O_CREAT)
            os.dup2(log, 2)
            os.execve(str(BIN / "tesserad"), [str(BIN / "tesserad"), "--state-dir", state, *ARGS], env)
        finally:
            os._exit(127)
    try:
        msg = notify.recv(4096).decode()
        assert "READY=1" in msg
        c = Client(path)
        assert "version" in c.call("daemon.status")
        c.close()
    finally:
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert b"STOPPING=1" in notify.recv(4096)


def test_kill9_mid_burst_never_repeats_a_sign_count(tmp_path, softhsm):
    d = Daemon(tmp_path, softhsm.env, ARGS).start()
    c = d.client()
    reg, ch = enroll(c)
    key = verify_registration(reg, ch, RP, ORIGIN).credential_public_key
    returned: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def burst():
        try:
            cl = d.client()
            while not stop.is_set():
                res, _ = authenticate(cl, reg["credentialId"], pin=None)
                with lock:
                    returned.append(res["signCount"])
        except (ConnectionError, OSError, RPCError, ValueError):
            pass

    threads = [threading.Thread(target=burst) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    d.kill9()
    stop.set()
    for t in threads:
        t.join(10)
    assert len(returned) > 20
    assert len(set(returned)) == len(returned)

    d2 = Daemon(tmp_path, softhsm.env, ARGS).start()
    try:
        c2 = d2.client()
        # A fresh daemon is not logged in: without a PIN the token refuses to sign.
        with pytest.raises(RPCError) as e:
            authenticate(c2, reg["credentialId"], pin=None)
        assert e.value.code == "PIN_REQUIRED"
        res, ch = authenticate(c2, reg["credentialId"], pin="1234")
        assert res["signCount"] > max(returned)
        verify_assertion(res, ch, RP, ORIGIN, key, max(returned))
    finally:
        d2.stop()


NO_CAPS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]


def start_with_prefix(d: Daemon, prefix: list[str]) -> None:
    """Starts `d` like Daemon.start does, with `prefix` before the tesserad command line."""
    cmd = [*prefix, str(BIN / "tesserad"), "--socket", d.socket, "--state-dir", str(d.state), *d.args]
    d.logf = open(d.log, "ab")
    d.proc = subprocess.Popen(cmd, env=d.env, stdout=d.logf, stderr=d.logf)
    d.wait_ready()


def read_proc_environ_without_capabilities(pid: int) -> subprocess.CompletedProcess:
    return subprocess.run([*NO_CAPS, "cat", f"/proc/{pid}/environ"], capture_output=True, timeout=30)


def test_daemon_is_not_dumpable(tmp_path, softhsm):
    """A process of the same uid and the same (here: no) capabilities may read /proc/PID/environ of a dumpable
    process, not of a non-dumpable one (ptrace access mode READ)."""
    d = Daemon(tmp_path, softhsm.env, ARGS)
    start_with_prefix(d, NO_CAPS)
    control = subprocess.Popen([*NO_CAPS, "sleep", "60"])
    try:
        pid = int(d.client().call("daemon.status")["pid"])
        assert pid == d.proc.pid  # setpriv execs tesserad in place
        ok = read_proc_environ_without_capabilities(control.pid)
        assert ok.returncode == 0, ok.stderr
        refused = read_proc_environ_without_capabilities(pid)
        assert refused.returncode != 0 and b"Permission denied" in refused.stderr, refused
    finally:
        control.kill()
        control.wait()
        d.stop()


def test_systemd_unit_disables_core_dumps():
    unit = (pathlib.Path(__file__).resolve().parents[2] / "systemd" / "tesserad.service").read_text()
    assert "LimitCORE=0" in unit.splitlines()


def test_embedded_token_is_initialised_through_pkcs11_without_a_pin_on_any_command_line(tmp_path):
    d = Daemon(tmp_path, {}, ["--pkcs11-module", SOFTHSM_MODULE])
    d.env.pop("SOFTHSM2_CONF", None)
    trace = tmp_path / "execve.trace"
    daemon_pid = None
    try:
        start_with_prefix(d, ["strace", "-f", "-qq", "-e", "trace=execve", "-s", "4096", "-o", str(trace)])
        status = d.client().call("daemon.status")
        labels = [t["label"] for t in status["tokens"]]
        assert "Tessera Embedded" in labels, status
        daemon_pid = int(status["pid"])
    finally:
        if daemon_pid:  # d.proc is strace; stop the daemon itself
            os.kill(daemon_pid, signal.SIGTERM)
        d.stop()
    pin_file = d.state / "softhsm" / "user.pin"
    assert stat.S_IMODE(os.stat(pin_file).st_mode) == 0o600
    pin = pin_file.read_text().strip()
    assert len(pin) == 8
    execs = [line for line in trace.read_text().splitlines() if "execve(" in line]
    assert execs and all(pin not in line for line in execs), execs
    assert not any("softhsm2-util" in line for line in execs), execs
    # The user PIN set through C_InitPIN is the one in user.pin (an independent PKCS#11 client logs in with it).
    conf = d.state / "softhsm" / "softhsm2.conf"
    out = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", "Tessera Embedded", "--login",
                          "--pin", pin, "--list-objects"], capture_output=True, text=True,
                         env={**os.environ, "SOFTHSM2_CONF": str(conf)})
    assert out.returncode == 0, out.stderr
