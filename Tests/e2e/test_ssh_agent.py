"""SSH agent end to end: the real tesserad serving --ssh-agent-socket, a SoftHSM2 token (through pkcs11-spy, to count
C_Login calls), and real OpenSSH clients: ssh-add, ssh-keygen -Y sign/verify, ssh against a real sshd, git commit -S."""
import os
import pathlib
import re
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

from tessera_harness import BIN, SOFTHSM_MODULE, SPY_MODULE, Daemon, b64u, cli, stop_process
from test_passkeys import enroll

TOKEN = "tessera-test"
PIN = "1234"


class Agent:
    """tesserad with an agent socket, SoftHSM2 behind pkcs11-spy."""

    def __init__(self, tmp_path: pathlib.Path, softhsm):
        self.tmp = tmp_path
        self.spy_log = tmp_path / "spy.log"
        env = {**softhsm.env, "PKCS11SPY": SOFTHSM_MODULE, "PKCS11SPY_OUTPUT": str(self.spy_log)}
        self.sock = str(tmp_path / "agent.sock")
        self.daemon = Daemon(tmp_path, env, ["--pkcs11-module", SPY_MODULE, "--no-embedded-softhsm",
                                             "--ssh-agent-socket", self.sock])
        askpass = tmp_path / "askpass.sh"
        askpass.write_text('#!/bin/sh\ncat "$ASKPASS_FILE"\n')
        askpass.chmod(0o755)
        self.askpass = str(askpass)

    def start(self):
        self.daemon.start()
        return self

    def restart(self):
        self.daemon.stop()
        self.daemon.start()

    def logins(self) -> int:
        return len(re.findall(r"^\d+: C_Login$", self.spy_log.read_text(), re.M))

    def run(self, *args, secret: str | None = None, check=False, **kw) -> subprocess.CompletedProcess:
        env = {**os.environ, "SSH_AUTH_SOCK": self.sock}
        env.pop("DISPLAY", None)
        if secret is not None:
            f = self.tmp / "askpass.txt"
            f.write_text(secret + "\n")
            env.update(SSH_ASKPASS=self.askpass, SSH_ASKPASS_REQUIRE="force", DISPLAY=":0", ASKPASS_FILE=str(f))
        return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60, check=check,
                              stdin=subprocess.DEVNULL, **kw)

    def listed(self) -> list[str]:
        r = self.run("ssh-add", "-L")
        return [l for l in r.stdout.splitlines() if l.strip()] if r.returncode == 0 else []


def offers_both(agent) -> bool:
    """The fixture's token holds two SSH keys: the one from ssh keygen and the pkcs11-tool one."""
    listed = agent.listed()
    return len(listed) == 2 and agent.pub in listed


def key_part(line: str) -> str:
    return " ".join(line.split()[:2])


@pytest.fixture
def agent(tmp_path, softhsm):
    # An existing EC key pair made by another program (what OpenSSH's PKCS#11 provider would offer too).
    subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", TOKEN, "--login", "--pin", PIN,
                    "--keypairgen", "--key-type", "EC:prime256v1", "--id", "0102", "--label", "legacy"],
                   env={**os.environ, **softhsm.env}, check=True, capture_output=True)
    a = Agent(tmp_path, softhsm).start()
    # An SSH key made for SSH, and a passkey on the same token (which must never be offered).
    out = cli(a.daemon, "ssh", "keygen", "--comment", "alice@tessera", "--pin", PIN).stdout.strip()
    a.pub = out
    enroll(a.daemon.client())
    # A fresh daemon process: the keygen login is gone, the keys stay on the token.
    a.restart()
    yield a
    a.daemon.stop()


def test_ssh_add_lists_exactly_the_ssh_keys(agent):
    assert agent.pub.startswith("ecdsa-sha2-nistp256 ") and agent.pub.endswith(" alice@tessera")
    listed = agent.listed()
    assert len(listed) == 2 and agent.pub in listed
    legacy = next(l for l in listed if l != agent.pub)
    assert legacy.startswith("ecdsa-sha2-nistp256 ") and legacy.endswith(" legacy")
    assert sorted(cli(agent.daemon, "ssh", "list").stdout.strip().splitlines()) == sorted(listed)
    # The passkey's key pair is on the token as well (three EC pairs), and is not offered.
    assert len(agent.daemon.client().call("credentials.list")["credentials"]) == 1
    objects = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", TOKEN, "--list-objects",
                              "--type", "pubkey"], env=agent.daemon.env, capture_output=True, text=True, check=True)
    assert objects.stdout.count("Public Key Object; EC") == 3


def test_existing_key_signs_too(agent, tmp_path):
    legacy = next(l for l in agent.listed() if l.endswith(" legacy"))
    assert agent.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
    pub = tmp_path / "legacy.pub"
    pub.write_text(legacy + "\n")
    msg = tmp_path / "msg"
    msg.write_text("x")
    r = agent.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg))
    assert r.returncode == 0, r.stderr
    signers = tmp_path / "signers"
    signers.write_text("l@x " + key_part(legacy) + "\n")
    with open(msg) as stdin:
        v = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "l@x", "-n", "file",
                            "-s", str(msg) + ".sig"], stdin=stdin, capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stderr


def test_unlock_expires_after_pin_cache_seconds(tmp_path, softhsm):
    import json
    a = Agent(tmp_path, softhsm)
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"sshAgent": {"pinCacheSeconds": 1}}))
    a.daemon.args += ["--config", str(config)]
    a.start()
    try:
        pub_line = cli(a.daemon, "ssh", "keygen", "--pin", PIN).stdout.strip()
        a.restart()
        pub = tmp_path / "k.pub"
        pub.write_text(pub_line + "\n")
        msg = tmp_path / "m"
        msg.write_text("x")
        assert a.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
        deadline = time.time() + 30
        while "expired" not in a.daemon.log.read_text():
            assert time.time() < deadline, "the unlock never expired"
            time.sleep(0.1)
        r = a.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg))
        assert r.returncode != 0
        assert a.daemon.log.read_text().count("needs a PIN") == 1
    finally:
        a.daemon.stop()


def test_sign_needs_ssh_add_s_and_wrong_pin_costs_one_login(agent, tmp_path):
    pub = tmp_path / "id.pub"
    pub.write_text(agent.pub + "\n")
    msg = tmp_path / "msg.txt"
    msg.write_text("signed through tesserad\n")

    # Not unlocked: the sign fails, the log names the token and the fix.
    r = agent.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg))
    assert r.returncode != 0
    assert "ssh-add -s" in agent.daemon.log.read_text()

    before = agent.logins()
    r = agent.run("ssh-add", "-s", TOKEN, secret="0000")
    assert r.returncode != 0
    assert agent.logins() == before + 1, "a wrong PIN must cost exactly one C_Login"
    r = agent.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg))
    assert r.returncode != 0

    # The daemon's PIN rules hold on this socket too: the same uid's next PIN right after a wrong one is refused
    # before the token (per-uid back-off, 2 s by default), then accepted.
    r = agent.run("ssh-add", "-s", TOKEN, secret=PIN)
    assert r.returncode != 0
    assert agent.logins() == before + 1, "a PIN refused by the back-off must not reach the token"
    assert "refused: PIN_BACKOFF" in agent.daemon.log.read_text()
    time.sleep(2.2)
    r = agent.run("ssh-add", "-s", TOKEN, secret=PIN)
    assert r.returncode == 0, r.stderr
    assert agent.logins() == before + 2
    r = agent.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg))
    assert r.returncode == 0, r.stderr + agent.daemon.log.read_text()[-2000:]
    signers = tmp_path / "allowed_signers"
    signers.write_text("alice@tessera " + key_part(agent.pub) + "\n")
    with open(msg) as stdin:
        v = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "alice@tessera", "-n", "file",
                            "-s", str(msg) + ".sig"], stdin=stdin, capture_output=True, text=True, timeout=60)
    assert v.returncode == 0, v.stdout + v.stderr
    # A tampered message does not verify (the check above can fail).
    with open(pub) as stdin:
        v = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "alice@tessera", "-n", "file",
                            "-s", str(msg) + ".sig"], stdin=stdin, capture_output=True, text=True, timeout=60)
    assert v.returncode != 0

    # ssh-add -e forgets the unlock: signing fails again.
    r = agent.run("ssh-add", "-e", TOKEN)
    assert r.returncode == 0, r.stderr
    r = agent.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg))
    assert r.returncode != 0


def test_lock_and_unlock(agent):
    assert agent.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
    r = agent.run("ssh-add", "-x", secret="lock-pass")
    assert r.returncode == 0, r.stderr
    assert agent.listed() == []
    assert agent.run("ssh-add", "-X", secret="wrong").returncode != 0
    assert agent.listed() == []
    r = agent.run("ssh-add", "-X", secret="lock-pass")
    assert r.returncode == 0, r.stderr
    assert offers_both(agent)
    # Locking dropped the token unlock: signing needs ssh-add -s again.
    pub = agent.tmp / "id.pub"
    pub.write_text(agent.pub + "\n")
    msg = agent.tmp / "m"
    msg.write_text("x")
    assert agent.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg)).returncode != 0


def test_add_identity_of_a_software_key_is_refused(agent, tmp_path):
    key = tmp_path / "soft"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(key)], check=True)
    r = agent.run("ssh-add", str(key))
    assert r.returncode != 0
    assert offers_both(agent)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def sshd(tmp_path):
    sshd_bin = shutil.which("sshd") or "/usr/sbin/sshd"
    assert os.path.exists(sshd_bin), "sshd missing: run scripts/setup.sh (openssh-server)"
    d = tmp_path / "sshd"
    d.mkdir()
    host_key = d / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    authorized = d / "authorized_keys"
    authorized.write_text("")
    port = free_port()
    config = d / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nAuthorizedKeysFile {authorized}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {d / 'sshd.pid'}\nPubkeyAuthentication yes\nAuthenticationMethods publickey\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    log = open(d / "sshd.log", "ab")
    proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None, (d / "sshd.log").read_text()
            time.sleep(0.05)
    yield port, authorized, d / "sshd.log"
    stop_process(proc)


def test_ssh_login_through_the_agent(agent, sshd):
    port, authorized, log = sshd
    authorized.write_text(agent.pub + "\n")
    assert agent.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
    args = ["ssh", "-o", f"IdentityAgent={agent.sock}", "-o", "StrictHostKeyChecking=no", "-o",
            "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "PreferredAuthentications=publickey",
            "-p", str(port), f"{os.environ.get('USER', 'root')}@127.0.0.1", "echo", "ok"]
    r = agent.run(*args)
    assert r.returncode == 0, r.stderr + log.read_text()
    assert r.stdout.strip() == "ok"
    # ssh binds the session: the agent records it.
    assert "session bound to a ssh-ed25519 host key" in agent.daemon.log.read_text()
    # Without the key in authorized_keys the same login is refused (the check above can fail).
    authorized.write_text("")
    assert agent.run(*args).returncode != 0


def test_git_commit_signed_through_the_agent(agent, tmp_path):
    assert agent.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
    repo = tmp_path / "repo"
    repo.mkdir()
    signers = tmp_path / "allowed_signers"
    signers.write_text("alice@example.com " + key_part(agent.pub) + "\n")
    pub = tmp_path / "signing.pub"
    pub.write_text(agent.pub + "\n")

    def git(*args, check=True):
        return agent.run("git", "-C", str(repo), *args, check=check)

    git("init", "-q")
    for k, v in [("user.name", "Alice"), ("user.email", "alice@example.com"), ("gpg.format", "ssh"),
                 ("user.signingkey", str(pub)), ("gpg.ssh.allowedSignersFile", str(signers))]:
        git("config", k, v)
    (repo / "f").write_text("x")
    git("add", "f")
    r = git("commit", "-q", "-S", "-m", "signed", check=False)
    assert r.returncode == 0, r.stderr
    r = git("verify-commit", "HEAD", check=False)
    assert r.returncode == 0, r.stderr
    assert "Good \"git\" signature" in r.stderr


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def recv_frame(s: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    n = struct.unpack(">I", head)[0]
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def connect(agent) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(agent.sock)
    return s


def test_bad_input(agent):
    s = connect(agent)
    # Unknown message number → FAILURE, the connection keeps working.
    s.sendall(frame(bytes([200, 1, 2, 3])))
    assert recv_frame(s) == bytes([5])
    # A malformed SIGN_REQUEST (truncated string inside a complete frame) → FAILURE.
    s.sendall(frame(bytes([13, 0, 0, 1, 0, 1])))
    assert recv_frame(s) == bytes([5])
    # An empty frame → FAILURE.
    s.sendall(frame(b""))
    assert recv_frame(s) == bytes([5])
    s.sendall(frame(bytes([11])))
    answer = recv_frame(s)
    assert answer[0] == 12 and struct.unpack(">I", answer[1:5])[0] == 2
    # A query extension lists what the agent understands.
    s.sendall(frame(bytes([27]) + struct.pack(">I", 5) + b"query"))
    answer = recv_frame(s)
    assert answer[0] == 6 and b"session-bind@openssh.com" in answer
    # An unknown extension → EXTENSION_FAILURE.
    s.sendall(frame(bytes([27]) + struct.pack(">I", 3) + b"foo"))
    assert recv_frame(s) == bytes([28])
    s.close()

    # Over 256 KiB: refused and closed without an answer.
    s = connect(agent)
    s.sendall(struct.pack(">I", 256 * 1024 + 1) + bytes([11]))
    assert recv_frame(s) is None
    s.close()

    # A truncated frame, then the client goes away: nothing breaks for the next client.
    s = connect(agent)
    s.sendall(struct.pack(">I", 100) + bytes([11, 0]))
    s.close()

    # 64 concurrent connections each get the identity list.
    results = []
    lock = threading.Lock()

    def one():
        c = connect(agent)
        c.sendall(frame(bytes([11])))
        a = recv_frame(c)
        c.close()
        with lock:
            results.append(a)

    threads = [threading.Thread(target=one) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 64 and all(r is not None and r[0] == 12 for r in results)
    assert offers_both(agent)


def test_socket_activation_tells_the_two_sockets_apart(tmp_path, softhsm):
    """systemd-socket-activate passes the agent socket first and the JSON-RPC socket second, named as the units
    name them (FileDescriptorName=): each serves its own protocol."""
    main_sock, agent_sock = tmp_path / "main.sock", tmp_path / "ssh.sock"
    log = open(tmp_path / "activated.log", "ab")
    proc = subprocess.Popen(
        ["systemd-socket-activate", "-l", str(agent_sock), "-l", str(main_sock), "--fdname=ssh-agent:tesserad",
         "-E", "SOFTHSM2_CONF", str(BIN / "tesserad"), "--state-dir", str(tmp_path / "state"),
         "--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"],
        env={**os.environ, **softhsm.env}, stdout=log, stderr=log)
    try:
        deadline = time.time() + 20
        while not (main_sock.exists() and agent_sock.exists()):
            assert time.time() < deadline and proc.poll() is None, (tmp_path / "activated.log").read_text()
            time.sleep(0.05)
        from tessera_harness import Client
        c = Client(str(main_sock), timeout=60)  # the first connection starts tesserad
        assert "ssh.list" in c.call("daemon.methods")["methods"]
        c.close()
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(30)
        s.connect(str(agent_sock))
        s.sendall(frame(bytes([11])))
        assert recv_frame(s) == bytes([12, 0, 0, 0, 0])
        s.close()
    finally:
        stop_process(proc)


def sign_request(blob: bytes, data: bytes) -> bytes:
    return frame(bytes([13]) + struct.pack(">I", len(blob)) + blob + struct.pack(">I", len(data)) + data
                 + struct.pack(">I", 0))


def test_policy_on_the_agent_socket(tmp_path, softhsm):
    """From the config file (sshAgent.socket, socketMode): nobody may list but not sign when `sign` is root's."""
    import base64
    import json

    from tessera_harness import NOBODY
    p = tmp_path
    while p != p.parent:
        os.chmod(p, os.stat(p).st_mode | 0o011)
        p = p.parent
    agent_sock = tmp_path / "cfg-agent.sock"
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"sshAgent": {"socket": str(agent_sock), "socketMode": "0666"},
                                  "policy": {"sign": {"users": ["0"]}}}))
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                       "--config", str(config)]).start()
    try:
        pub = cli(d, "ssh", "keygen", "--pin", PIN).stdout.strip()
        blob = base64.b64decode(pub.split()[1])
        assert oct(os.stat(agent_sock).st_mode & 0o777) == "0o666"

        def exchange(requests: list[bytes]) -> list[bytes | None]:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(30)
            s.connect(str(agent_sock))
            out = []
            for r in requests:
                s.sendall(r)
                out.append(recv_frame(s))
            s.close()
            return out

        requests = [frame(bytes([11])), sign_request(blob, b"data")]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                os.write(w, json.dumps([a.hex() if a else None for a in exchange(requests)]).encode())
            except BaseException as e:
                os.write(w, json.dumps({"child error": repr(e)}).encode())
            finally:
                os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 4096):
            data += chunk
        os.waitpid(pid, 0)
        answers = json.loads(data)
        assert isinstance(answers, list), answers
        listed, signed = (bytes.fromhex(a) for a in answers)
        assert listed[0] == 12 and struct.unpack(">I", listed[1:5])[0] == 1
        assert signed == bytes([5])
        # Root holds `sign` (the token is logged in since keygen): the same request signs.
        assert exchange(requests)[1][0] == 14
    finally:
        d.stop()


def test_confirm_runs_the_presence_command(tmp_path, softhsm):
    """A `confirm` key (ssh keygen --confirm) and the `-c` constraint of ssh-add -s: each signature runs
    sshAgent.presenceCommand with a JSON description on stdin; exit 0 approves, another status or the timeout refuses."""
    import json
    mode = tmp_path / "presence-mode"
    request = tmp_path / "presence-request.json"
    script = tmp_path / "presence.sh"
    script.write_text(f'#!/bin/sh\ncat > {request}\ncase "$(cat {mode})" in\n  approve) exit 0 ;;\n'
                      '  hang) sleep 60 ;;\n  *) exit 1 ;;\nesac\n')
    script.chmod(0o755)
    a = Agent(tmp_path, softhsm)
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"sshAgent": {"presenceCommand": [str(script)], "presenceTimeoutSeconds": 2}}))
    a.daemon.args += ["--config", str(config)]
    a.start()
    try:
        bob = cli(a.daemon, "ssh", "keygen", "--comment", "bob", "--confirm", "--pin", PIN).stdout.strip()
        alice = cli(a.daemon, "ssh", "keygen", "--comment", "alice", "--pin", PIN).stdout.strip()
        confirms = {k["comment"]: k["confirm"] for k in a.daemon.client().call("ssh.list")["keys"]}
        assert confirms == {"bob": True, "alice": False}
        msg = tmp_path / "m"
        msg.write_text("x")

        def sign(pub_line: str) -> int:
            pub = tmp_path / "k.pub"
            pub.write_text(pub_line + "\n")
            (tmp_path / "m.sig").unlink(missing_ok=True)
            return a.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg)).returncode

        mode.write_text("approve")
        assert sign(bob) == 0
        described = json.loads(request.read_text())
        assert described["type"] == "ssh-sign" and described["key"] == bob
        mode.write_text("deny")
        assert sign(bob) != 0
        mode.write_text("hang")
        assert sign(bob) != 0
        assert "timed out" in a.daemon.log.read_text()
        # alice needs no confirmation: the command does not run.
        request.unlink()
        mode.write_text("deny")
        assert sign(alice) == 0
        assert not request.exists()
        # ssh-add -c -s: every key of the token needs confirmation while that unlock lasts.
        r = a.run("ssh-add", "-c", "-s", TOKEN, secret=PIN)
        assert r.returncode == 0, r.stderr
        assert sign(alice) != 0
        assert request.exists()
        mode.write_text("approve")
        assert sign(alice) == 0
    finally:
        a.daemon.stop()
