"""Starts real components for end-to-end tests: SoftHSM2 tokens in a temp dir and the real tesserad."""
from __future__ import annotations

import base64
import json
import os
import pathlib
import random
import select
import signal
import socket
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("TESSERA_BIN_DIR", ROOT / ".build" / "debug"))
SOFTHSM_MODULE = "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so"
SPY_MODULE = "/usr/lib/x86_64-linux-gnu/pkcs11/pkcs11-spy.so"


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SoftHSM:
    """A private SoftHSM2 token directory; tokens are created with softhsm2-util."""

    def __init__(self, root: pathlib.Path):
        self.dir = root / "softhsm"
        (self.dir / "tokens").mkdir(parents=True, exist_ok=True)
        self.conf = self.dir / "softhsm2.conf"
        self.conf.write_text(
            f"directories.tokendir = {self.dir / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n"
        )
        self.env = {"SOFTHSM2_CONF": str(self.conf)}

    def add_token(self, label: str, pin: str = "1234", so_pin: str = "5678") -> None:
        subprocess.run(
            ["softhsm2-util", "--init-token", "--free", "--label", label, "--pin", pin, "--so-pin", so_pin],
            check=True, capture_output=True, env={**os.environ, **self.env},
        )

    def delete_token(self, label: str) -> None:
        subprocess.run(["softhsm2-util", "--delete-token", "--token", label], check=True,
                       capture_output=True, env={**os.environ, **self.env})


class RPCError(Exception):
    def __init__(self, error: dict):
        super().__init__(f"{error.get('data', {}).get('code')}: {error.get('message')}")
        self.error = error
        self.code = error.get("data", {}).get("code")
        self.data = error.get("data", {})


class Client:
    """A minimal NDJSON JSON-RPC client (independent of the Swift client)."""

    def __init__(self, path: str, timeout: float = 60):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.next_id = 1
        self.notifications: list[dict] = []

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_message(self) -> dict | None:
        while b"\n" not in self.buf:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                # Linux reports a peer that closed with our bytes unread as ECONNRESET, after the data it sent.
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def next_notification(self, timeout: float = 30) -> dict:
        """The next notification: those that arrived during a call first, then the next one from the socket."""
        if self.notifications:
            return self.notifications.pop(0)
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            while True:
                m = self.read_message()
                if m is None:
                    raise ConnectionError("daemon closed the connection")
                if "id" not in m:
                    return m
        finally:
            self.sock.settimeout(old)

    def wait_notification(self, method: str, timeout: float = 30) -> dict:
        """The params of the next `method` notification; notifications before it are dropped."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.next_notification(max(0.1, deadline - time.time()))
            if m.get("method") == method:
                return m["params"]
        raise TimeoutError(f"no {method} notification within {timeout} s")

    def call(self, method: str, params: dict | None = None) -> dict:
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}
        self.send_raw(json.dumps(msg).encode() + b"\n")
        while True:
            m = self.read_message()
            if m is None:
                raise ConnectionError("daemon closed the connection")
            if "id" not in m:
                self.notifications.append(m)
                continue
            if m["id"] != rid:
                continue
            if "error" in m:
                raise RPCError(m["error"])
            return m["result"]


class Daemon:
    """The real tesserad on a temporary socket."""

    def __init__(self, root: pathlib.Path, env: dict, args: list[str] | None = None, name: str = "tesserad"):
        self.root = root
        self.socket = str(root / f"{name}.sock")
        self.state = root / f"{name}-state"
        self.env = {**os.environ, **env}
        self.args = args or []
        self.proc: subprocess.Popen | None = None
        self.log = root / f"{name}.log"

    def start(self, wait: bool = True) -> "Daemon":
        cmd = [str(BIN / "tesserad"), "--socket", self.socket, "--state-dir", str(self.state), *self.args]
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.logf, stderr=self.logf)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tesserad exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                c = Client(self.socket, timeout=5)
                c.call("daemon.status")
                c.close()
                return
            except (FileNotFoundError, ConnectionRefusedError, ConnectionError, socket.timeout, OSError):
                time.sleep(0.05)
        raise TimeoutError(f"tesserad not ready:\n{self.log.read_text()}")

    def client(self) -> Client:
        return Client(self.socket)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else 0

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


def cli(daemon: Daemon, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "tessera"), "--socket", daemon.socket, *args],
                          input=input, capture_output=True, text=True, check=check, timeout=60)


VPCD_DRIVER = "/usr/lib/pcsc/drivers/serial/libifdvpcd.so"


def free_port_pair() -> int:
    """A port P with P and P+1 both free on 127.0.0.1 (vpcd serves two readers on P and P+1). Taken below
    Linux's ephemeral range (32768+), so an outgoing connection's source port cannot take it before pcscd binds."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(20000, 32700)
        held = []
        try:
            for p in (port, port + 1):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError("no free port pair")


class PCSCD:
    """A private pcscd (own mount namespace, /run/pcscd bind-mounted from a temp dir) with one vpcd reader line:
    readers "Tessera VPCD 00 00" on `port` and "Tessera VPCD 00 01" on `port + 1`.
    Clients reach it through PCSCLITE_CSOCK_NAME (in `env`); a host pcscd is never touched."""

    def __init__(self, root: pathlib.Path):
        self.dir = root / "pcscd"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port_pair()
        self.conf = root / "reader.conf"
        self.conf.write_text(
            f'FRIENDLYNAME "Tessera VPCD"\nDEVICENAME   /dev/null:0x{self.port:X}\n'
            f"LIBPATH      {VPCD_DRIVER}\nCHANNELID    0x{self.port:X}\n"
        )
        self.socket = str(self.dir / "pcscd.comm")
        self.env = {"PCSCLITE_CSOCK_NAME": self.socket}
        self.log = root / "pcscd.log"
        self.proc: subprocess.Popen | None = None
        self.readers = ["Tessera VPCD 00 00", "Tessera VPCD 00 01"]

    def start(self) -> "PCSCD":
        script = (
            "set -e\n"
            "if [ ! -d /run/pcscd ]; then mount -t tmpfs -o mode=0755 tessera-run /run; mkdir -p /run/pcscd; fi\n"
            'mount --bind "$1" /run/pcscd\n'
            'exec pcscd --foreground --info --config "$2"\n'
        )
        args = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen([*args, "/bin/sh", "-c", script, "pcscd", str(self.dir), str(self.conf)],
                                     stdout=self.logf, stderr=self.logf, stdin=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pcscd exited: {self.log.read_text()}")
            if os.path.exists(self.socket) and self._listening(self.port):
                return self
            time.sleep(0.05)
        raise TimeoutError(f"pcscd not ready: {self.log.read_text()}")

    @staticmethod
    def _listening(port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                pass
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            stop_process(self.proc)


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


MRZ_ANNA = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"


def make_passport_profile(directory: pathlib.Path, mrz: str = MRZ_ANNA, *args: str,
                          timeout: float = 60) -> pathlib.Path:
    """Issues a test e-passport (and its test CSCA, DIR/csca.pem) with `tessera lab make-profile`."""
    out = subprocess.run([str(BIN / "tessera"), "lab", "make-profile", str(directory), "--mrz", mrz, *args],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return directory


class EmulatedPassport:
    """`tessera lab emulate-passport` holding a profile's chip in vpcd reader `slot` of a PCSCD while the `with`
    block runs. `card_present(reader)` (e.g. through a daemon's readers.list) tells when pcscd sees the card."""

    def __init__(self, pcscd: PCSCD, profile: pathlib.Path, card_present, *args: str, slot: int = 0,
                 log: pathlib.Path | None = None):
        self.pcscd, self.profile, self.card_present, self.args, self.slot = pcscd, profile, card_present, args, slot
        self.reader = pcscd.readers[slot]
        self.log = log or pcscd.dir.parent / f"emulator-{profile.name}-{slot}.log"
        self.proc: subprocess.Popen | None = None

    def wait_card(self, present: bool, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.card_present(self.reader) == present:
                return
            time.sleep(0.05)
        raise TimeoutError(f"card in {self.reader} never became {'present' if present else 'absent'}")

    def __enter__(self) -> "EmulatedPassport":
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen([str(BIN / "tessera"), "lab", "emulate-passport", "--profile", str(self.profile),
                                      "--vpcd", f"127.0.0.1:{self.pcscd.port + self.slot}", *self.args],
                                     stdout=subprocess.PIPE, stderr=self.logf, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("inserted"), f"emulator did not start: {line!r}"
        self.wait_card(True)
        return self

    def __exit__(self, *exc) -> None:
        stop_process(self.proc)
        self.logf.close()
        self.wait_card(False)


NOBODY = 65534


class AsUser:
    """A forked child that has become uid/gid `uid` (no supplementary groups), connected to the socket, running
    `body(client, ready)`; `ready()` lets the parent's `wait_ready` return (e.g. once subscribed). `result()` waits for
    the child and returns what `body` returned (JSON), or {"child error": ...}."""

    def __init__(self, uid: int, socket_path: str, body):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                out = body(Client(socket_path), lambda: os.write(w, b"R"))
            except BaseException as e:  # report, so the parent's assertion shows why
                out = {"child error": repr(e)}
            try:
                os.write(w, b"=" + json.dumps(out).encode())
            finally:
                os._exit(0)
        os.close(w)
        self.pid, self.fd, self.buf = pid, r, b""

    def _read(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            raise TimeoutError(f"child uid did not answer within {timeout} s")
        return os.read(self.fd, 4096)

    def wait_ready(self, timeout: float = 30) -> None:
        while not self.buf:
            chunk = self._read(timeout)
            if not chunk:
                raise AssertionError("the child ended before it was ready")
            self.buf += chunk
        if self.buf[:1] == b"=":
            raise AssertionError(f"the child ended before it was ready: {self.buf[1:].decode()}")
        self.buf = self.buf[1:]

    def result(self, timeout: float = 60):
        while chunk := self._read(timeout):
            self.buf += chunk
        os.close(self.fd)
        os.waitpid(self.pid, 0)
        data = self.buf.lstrip(b"R")
        assert data[:1] == b"=", data
        return json.loads(data[1:])


def let_other_uids_reach(path) -> None:
    """Opens every directory from `path` up to, not including, / for traversal by other uids (g+x, o+x), so that a
    process that has become another uid can reach a socket below it."""
    p = pathlib.Path(path)
    while p != p.parent:
        os.chmod(p, os.stat(p).st_mode | 0o011)
        p = p.parent


def run_as(uid: int, fn):
    """Runs `fn()` in a forked child that has become uid/gid `uid` (no supplementary groups) and returns what it
    returned (JSON-serializable); an exception in the child fails the caller with the child's repr of it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            out = {"result": fn()}
        except BaseException as e:  # report, so the parent's assertion shows why
            out = {"error": repr(e)}
        try:
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    out = json.loads(data)
    if "error" in out:
        raise AssertionError(f"in the child as uid {uid}: {out['error']}")
    return out["result"]


def as_nobody(socket_path: str, calls: list[tuple[str, dict]], uid: int = NOBODY) -> dict:
    """Runs the calls in a child process that has become uid/gid nobody (or `uid`); returns method → "ok" or error
    code."""
    def body(c: Client, ready) -> dict:
        out = {}
        for method, params in calls:
            try:
                c.call(method, params)
                out[method] = "ok"
            except RPCError as e:
                out[method] = e.code
        return out
    return AsUser(uid, socket_path, body).result()


def calls_as(uid: int, socket_path: str, calls: list[tuple[str, dict]]) -> tuple[int, list[dict]]:
    """Runs the calls in order in a child process that has become `uid`; returns the child's pid and, per call,
    {"result": ...} or {"code": ..., "data": ...}."""
    def body(c: Client, ready) -> list:
        out = []
        for method, params in calls:
            try:
                out.append({"result": c.call(method, params)})
            except RPCError as e:
                out.append({"code": e.code, "data": e.data})
        return out
    child = AsUser(uid, socket_path, body)
    return child.pid, child.result()


def reached(pauses: pathlib.Path, point: str, timeout: float = 30) -> None:
    """Waits until the daemon is held at the pause point `point` (TESSERA_FAILPOINTS `point=pause:pauses`)."""
    deadline = time.time() + timeout
    while not (pauses / f"{point}.reached").exists():
        assert time.time() < deadline, f"the daemon did not reach {point}"
        time.sleep(0.01)


def release(pauses: pathlib.Path, point: str) -> None:
    """Lets every task held at the pause point `point` go on."""
    (pauses / f"{point}.continue").touch()
