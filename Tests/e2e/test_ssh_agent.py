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
from tessera_harness import let_other_uids_reach
from test_passkeys import enroll

TOKEN = "tessera-test"
PIN = "1234"


class Agent:
    """tesserad with an agent socket, SoftHSM2 behind pkcs11-spy."""

    def __init__(self, tmp_path: pathlib.Path, softhsm, extra_env: dict | None = None):
        self.tmp = tmp_path
        self.spy_log = tmp_path / "spy.log"
        env = {**softhsm.env, "PKCS11SPY": SOFTHSM_MODULE, "PKCS11SPY_OUTPUT": str(self.spy_log), **(extra_env or {})}
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


def test_ssh_add_e_without_an_unlock_says_why_in_the_log(agent):
    """Issue #36: `ssh-add -e TOKEN` without a prior `-s` got "agent refused operation" and the log said nothing,
    though docs/API.md sends users to the log for the reason of every refusal."""
    r = agent.run("ssh-add", "-e", TOKEN)
    assert r.returncode != 0
    log = agent.daemon.log.read_text()
    assert f"ssh-add -e {TOKEN} refused" in log and "has not unlocked" in log, log[-2000:]
    r = agent.run("ssh-add", "-e", "no-such-token")
    assert r.returncode != 0
    assert "ssh-add -e no-such-token refused: no token is named no-such-token" in agent.daemon.log.read_text()


def token_id(agent) -> str:
    return next(t["id"] for t in agent.daemon.client().call("tokens.list")["tokens"] if t["label"] == TOKEN)


def test_a_login_for_another_method_does_not_unlock_the_agent(agent, tmp_path):
    """A PIN given to a JSON-RPC method logs the token in; SSH signing still needs the agent's own unlock."""
    line = cli(agent.daemon, "ssh", "keygen", "--comment", "other@tessera", "--pin", PIN).stdout.strip()
    token = token_id(agent)
    assert next(t for t in agent.daemon.client().call("tokens.list")["tokens"]
                if t["id"] == token)["flags"]["loggedIn"] is True
    signs = len(re.findall(r"^\d+: C_Sign$", agent.spy_log.read_text(), re.M))
    r = sign_with(agent, tmp_path, line)
    assert r.returncode != 0
    assert f"token {token} needs a PIN: run `ssh-add -s {token}`" in agent.daemon.log.read_text()
    assert len(re.findall(r"^\d+: C_Sign$", agent.spy_log.read_text(), re.M)) == signs, "refused before the token"
    before = agent.logins()
    assert agent.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
    assert agent.logins() == before, "the PIN of the login in force is checked without a C_Login"
    r = sign_with(agent, tmp_path, line)
    assert r.returncode == 0, r.stderr + agent.daemon.log.read_text()[-2000:]


def test_a_token_with_a_pin_file_signs_without_ssh_add_s(tmp_path, softhsm):
    import json
    pin_file = tmp_path / "token.pin"
    pin_file.write_text(PIN + "\n")
    a = Agent(tmp_path, softhsm)
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"pinFiles": {TOKEN: str(pin_file)}}))
    a.daemon.args += ["--config", str(config)]
    a.start()
    try:
        line = cli(a.daemon, "ssh", "keygen", "--comment", "unattended").stdout.strip()
        a.restart()
        r = sign_with(a, tmp_path, line)
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]
        assert "needs a PIN" not in a.daemon.log.read_text()
        # ssh-add -s / -e on it leave the daemon's login alone: it still signs afterwards.
        assert a.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
        assert a.run("ssh-add", "-e", TOKEN).returncode == 0
        r = sign_with(a, tmp_path, line)
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]
    finally:
        a.daemon.stop()


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

    # 30 concurrent connections each get the identity list (within the default maxConnectionsPerUid, 32).
    results = []
    lock = threading.Lock()

    def one():
        c = connect(agent)
        c.sendall(frame(bytes([11])))
        a = recv_frame(c)
        c.close()
        with lock:
            results.append(a)

    threads = [threading.Thread(target=one) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 30 and all(r is not None and r[0] == 12 for r in results)
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
    let_other_uids_reach(tmp_path)
    agent_sock = tmp_path / "cfg-agent.sock"
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"sshAgent": {"socket": str(agent_sock), "socketMode": "0666"},
                                  "socketMode": "0666", "policy": {"sign": {"users": ["0"]}}}))
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                       "--config", str(config)]).start()
    try:
        # nobody makes the key (keys are their creator's: docs/API.md, "Owners"); root is an administrator.
        from tessera_harness import calls_as
        _, made = calls_as(NOBODY, d.socket, [("ssh.keygen", {"pin": PIN})])
        pub = made[0]["result"]["publicKey"]
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
        # Root holds `sign`, and the token is logged in since keygen, but that login is not the agent's: refused
        # until an ADD_SMARTCARD_KEY (ssh-add -s) on this socket, then the same request signs.
        assert exchange(requests)[1] == bytes([5])
        unlock = frame(bytes([20]) + struct.pack(">I", len(TOKEN)) + TOKEN.encode() + struct.pack(">I", len(PIN))
                       + PIN.encode())
        unlocked, signed = exchange([unlock, requests[1]])
        assert unlocked == bytes([6]) and signed[0] == 14
    finally:
        d.stop()


def test_confirm_runs_the_presence_command(tmp_path, softhsm):
    """A `confirm` key (ssh keygen --confirm) and the `-c` constraint of ssh-add -s: each signature runs
    presence.command (the one presence broker, door "ssh") with a JSON description on stdin; exit 0 approves, another
    status or the timeout refuses."""
    import json
    mode = tmp_path / "presence-mode"
    request = tmp_path / "presence-request.json"
    script = tmp_path / "presence.sh"
    script.write_text(f'#!/bin/sh\ncat > {request}\ncase "$(cat {mode})" in\n  approve) exit 0 ;;\n'
                      '  hang) sleep 60 ;;\n  *) exit 1 ;;\nesac\n')
    script.chmod(0o755)
    a = Agent(tmp_path, softhsm)
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"presence": {"command": [str(script)], "timeoutSeconds": 2}}))
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

        # The keygen logins are not the agent's: the keys sign after ssh-add -s.
        assert a.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
        mode.write_text("approve")
        assert sign(bob) == 0
        described = json.loads(request.read_text())
        assert described["type"] == "ssh-sign" and described["key"] == bob and described["door"] == "ssh"
        assert described["forwarded"] is False and described["uid"] == os.getuid()
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


# PIV cards: the emulated card (`tessera lab emulate-piv`) behind a private pcscd + vpcd, with P-256 keys and
# certificates in slots 9A (needs the PIN: `ssh-add -s <token>`) and 9E (no PIN).

def tlv(tag: int, value: bytes) -> bytes:
    n = len(value)
    length = bytes([n]) if n < 0x80 else bytes([0x81, n]) if n < 0x100 else bytes([0x82, n >> 8, n & 0xFF])
    return bytes([tag]) + length + value


def piv_card_with_certificates(pcscd, root: pathlib.Path, serial: int, pin_retries: int = 3, rsa: bool = False):
    """A card whose state file holds keys (P-256, or RSA-2048 with `rsa`) and self-signed certificates in 9A and 9E;
    returns the card and {slot: authorized_keys key part}."""
    import datetime
    import json

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric import rsa as rsa_keys
    from cryptography.x509.oid import NameOID
    from test_piv import EmulatedPIV

    card = EmulatedPIV(pcscd, root, serial=serial)
    card.insert()  # creates the factory-fresh state file
    card.remove()
    state_file = root / f"piv-{serial}.json"
    state = json.loads(state_file.read_text())
    keys = {}
    for slot, tag in (("9a", "5fc105"), ("9e", "5fc101")):
        key = rsa_keys.generate_private_key(65537, 2048) if rsa else ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"slot {slot}")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now)
                .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
        der = cert.public_bytes(serialization.Encoding.DER)
        if rsa:
            state["keys"][slot] = {"algorithm": 0x07, "privateKey": key.private_bytes(
                serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).hex()}
        else:
            state["keys"][slot] = {"algorithm": 0x11,
                                   "privateKey": key.private_numbers().private_value.to_bytes(32, "big").hex()}
        state["objects"][tag] = (tlv(0x70, der) + tlv(0x71, b"\x00") + tlv(0xFE, b"")).hex()
        keys[slot] = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                   serialization.PublicFormat.OpenSSH).decode()
    state["pinRetries"] = pin_retries
    state_file.write_text(json.dumps(state))
    return card, keys


@pytest.fixture
def pcscd(tmp_path):
    from tessera_harness import PCSCD
    p = PCSCD(tmp_path).start()
    yield p
    p.stop()


def wait_until(predicate, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def piv_agent(tmp_path, softhsm, pcscd, config=None):
    import json
    a = Agent(tmp_path, softhsm, extra_env=pcscd.env)
    if config is not None:
        path = tmp_path / "tesserad.json"
        path.write_text(json.dumps(config))
        a.daemon.args += ["--config", str(path)]
    return a.start()


def piv_token_id(agent) -> str | None:
    return next((t["id"] for t in agent.daemon.client().call("tokens.list")["tokens"] if t["backend"] == "piv"), None)


def sign_with(agent, tmp_path, line: str) -> subprocess.CompletedProcess:
    pub = tmp_path / "sign.pub"
    pub.write_text(line + "\n")
    msg = tmp_path / "sign.msg"
    msg.write_text("signed by a PIV card\n")
    sig = pathlib.Path(str(msg) + ".sig")
    if sig.exists():
        sig.unlink()
    r = agent.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg))
    if r.returncode == 0:
        signers = tmp_path / "sign.signers"
        signers.write_text("piv@x " + key_part(line) + "\n")
        with open(msg) as stdin:
            v = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "piv@x", "-n", "file",
                                "-s", str(sig)], stdin=stdin, capture_output=True, text=True, timeout=60)
        assert v.returncode == 0, v.stderr
    return r


def test_piv_card_keys_are_offered_sign_and_follow_the_card(tmp_path, softhsm, pcscd, sshd):
    card, piv_keys = piv_card_with_certificates(pcscd, tmp_path, serial=5151)
    card.insert()
    a = piv_agent(tmp_path, softhsm, pcscd)
    try:
        softhsm_line = cli(a.daemon, "ssh", "keygen", "--comment", "hsm@tessera", "--pin", PIN).stdout.strip()
        expected = {key_part(softhsm_line), key_part(piv_keys["9a"]), key_part(piv_keys["9e"])}
        # Exactly the SoftHSM2 SSH key and the card's two certificate keys.
        assert wait_until(lambda: {key_part(l) for l in a.listed()} == expected), a.listed()
        assert len(a.listed()) == 3
        token = piv_token_id(a)
        line_9a = next(l for l in a.listed() if key_part(l) == key_part(piv_keys["9a"]))
        line_9e = next(l for l in a.listed() if key_part(l) == key_part(piv_keys["9e"]))
        assert line_9a.endswith("CN=slot 9a") and line_9e.endswith("CN=slot 9e"), a.listed()

        # 9E signs without a PIN: a real ssh login to a real sshd with the card's key.
        port, authorized, log = sshd
        authorized.write_text(piv_keys["9e"] + "\n")
        args = ["ssh", "-o", f"IdentityAgent={a.sock}", "-o", "StrictHostKeyChecking=no", "-o",
                "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "PreferredAuthentications=publickey",
                "-p", str(port), f"{os.environ.get('USER', 'root')}@127.0.0.1", "echo", "ok"]
        r = a.run(*args)
        assert r.returncode == 0, r.stderr + log.read_text()
        assert r.stdout.strip() == "ok"

        # 9A needs the card's PIN: refused (and the log says what to do) until ssh-add -s <token>.
        assert sign_with(a, tmp_path, line_9a).returncode != 0
        assert f"ssh-add -s {token}" in a.daemon.log.read_text()
        assert a.run("ssh-add", "-s", token, secret="123456").returncode == 0
        r = sign_with(a, tmp_path, line_9a)
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]
        authorized.write_text(piv_keys["9a"] + "\n")
        r = a.run(*args)
        assert r.returncode == 0, r.stderr + log.read_text()

        # The card is pulled: its keys leave the list, a sign fails cleanly (with a log line), the HSM key stays.
        card.remove()
        assert wait_until(lambda: {key_part(l) for l in a.listed()} == {key_part(softhsm_line)}), a.listed()
        assert sign_with(a, tmp_path, line_9e).returncode != 0
        s = connect(a)
        s.sendall(sign_request(__import__("base64").b64decode(line_9e.split()[1]), b"card gone"))
        assert recv_frame(s)[0] == 5  # SSH_AGENT_FAILURE
        s.close()
        assert wait_until(lambda: "sign request for a key this agent does not hold" in a.daemon.log.read_text())
        # Reinserted: the keys come back, and 9E signs with no restart.
        card.insert()
        assert wait_until(lambda: {key_part(l) for l in a.listed()} == expected), a.listed()
        r = sign_with(a, tmp_path, line_9e)
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]

        # pcscd restarted under the daemon: clean failure while it is gone, then signing again.
        card.remove()
        pcscd.stop()
        assert sign_with(a, tmp_path, line_9e).returncode != 0
        assert wait_until(lambda: {key_part(l) for l in a.listed()} == {key_part(softhsm_line)}), a.listed()
        pcscd.start()
        card.insert()
        assert wait_until(lambda: {key_part(l) for l in a.listed()} == expected, timeout=30), a.listed()
        r = sign_with(a, tmp_path, line_9e)
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]
        assert a.daemon.proc.poll() is None
    finally:
        a.daemon.stop()
        card.remove()


def test_piv_card_pulled_mid_sign_fails_cleanly_and_the_next_sign_works(tmp_path, softhsm, pcscd):
    card, piv_keys = piv_card_with_certificates(pcscd, tmp_path, serial=5353)
    normal = list(card.cmd)
    card.cmd += ["--delay", "87:3000"]  # GENERAL AUTHENTICATE answers after 3 s: time to pull the card
    card.insert()
    a = piv_agent(tmp_path, softhsm, pcscd)
    try:
        assert wait_until(lambda: key_part(piv_keys["9e"]) in {key_part(l) for l in a.listed()}), a.listed()
        blob = __import__("base64").b64decode(piv_keys["9e"].split()[1])
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(30)
        s.connect(a.sock)
        s.sendall(sign_request(blob, b"pulled mid-sign"))
        # Pulled while the emulator holds back the signature (the sign is on the card for 3 s).
        time.sleep(1.0)
        card.proc.kill()
        card.proc.wait()
        assert recv_frame(s)[0] == 5  # SSH_AGENT_FAILURE; the connection stays open
        assert "ssh-agent: sign with token" in a.daemon.log.read_text()
        card.cmd = normal
        card.insert()
        assert wait_until(lambda: key_part(piv_keys["9e"]) in {key_part(l) for l in a.listed()}), a.listed()
        s.sendall(sign_request(blob, b"after reinsertion"))
        assert recv_frame(s)[0] == 14  # SSH_AGENT_SIGN_RESPONSE on the same connection
        s.close()
    finally:
        a.daemon.stop()
        card.remove()


def test_ssh_add_s_on_a_piv_card_never_spends_the_final_pin_try(tmp_path, softhsm, pcscd):
    card, piv_keys = piv_card_with_certificates(pcscd, tmp_path, serial=5252, pin_retries=2)
    card.insert()
    a = piv_agent(tmp_path, softhsm, pcscd, config={"pinBackoff": {"initialSeconds": 0}})
    try:
        assert wait_until(lambda: len(a.listed()) == 2), a.listed()
        token = piv_token_id(a)
        c = a.daemon.client()
        assert c.call("tokens.pinStatus", {"tokenId": token})["retriesLeft"] == 2
        # A wrong PIN costs exactly one try.
        assert a.run("ssh-add", "-s", token, secret="000000").returncode != 0
        assert c.call("tokens.pinStatus", {"tokenId": token})["retriesLeft"] == 1
        # One try left: ssh-add -s cannot allow the final try, so not even the right PIN reaches the card.
        assert a.run("ssh-add", "-s", token, secret="123456").returncode != 0
        assert "PIN_FINAL_TRY_PROTECTED" in a.daemon.log.read_text()
        assert c.call("tokens.pinStatus", {"tokenId": token})["retriesLeft"] == 1
        line_9a = next(l for l in a.listed() if key_part(l) == key_part(piv_keys["9a"]))
        assert sign_with(a, tmp_path, line_9a).returncode != 0
    finally:
        a.daemon.stop()
        card.remove()


def test_ssh_keygen_on_a_piv_card_makes_an_ssh_key_never_a_passkey(tmp_path, softhsm, pcscd):
    from test_passkeys import enroll as enroll_passkey
    card, piv_keys = piv_card_with_certificates(pcscd, tmp_path, serial=5454)
    card.insert()
    a = Agent(tmp_path, softhsm, extra_env=pcscd.env)
    a.daemon.args += ["--allow-default-piv-management-key"]
    a.start()
    try:
        assert wait_until(lambda: piv_token_id(a) is not None)
        token = piv_token_id(a)
        c = a.daemon.client()
        line = cli(a.daemon, "ssh", "keygen", "--token", token, "--comment", "card@tessera").stdout.strip()
        assert line.startswith("ecdsa-sha2-nistp256 ") and line.endswith(" card@tessera")
        expected = {key_part(line), key_part(piv_keys["9a"]), key_part(piv_keys["9e"])}
        assert {key_part(l) for l in a.listed()} == expected
        assert line in a.listed()
        assert line in cli(a.daemon, "ssh", "list").stdout.splitlines()
        # It signs once the card is unlocked (a retired slot needs the PIN).
        assert sign_with(a, tmp_path, line).returncode != 0
        assert a.run("ssh-add", "-s", token, secret="123456").returncode == 0
        r = sign_with(a, tmp_path, line)
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]
        # A passkey on the same card (a retired slot too, without certificate) is never offered to SSH, and the SSH
        # key is no passkey.
        enroll_passkey(c, tokenId=token, pin="123456")
        assert {key_part(l) for l in a.listed()} == expected
        assert len(c.call("credentials.list")["credentials"]) == 1
        card.remove()
        assert wait_until(lambda: all(key_part(l) != key_part(line) for l in a.listed()))
        card.insert()
        assert wait_until(lambda: line in a.listed()), a.listed()
    finally:
        a.daemon.stop()
        card.remove()


def test_rsa_key_on_the_token_is_offered_and_signs_with_each_hash(agent, tmp_path, sshd):
    import base64

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding
    subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", TOKEN, "--login", "--pin", PIN,
                    "--keypairgen", "--key-type", "rsa:2048", "--id", "0a0b", "--label", "rsa-legacy"],
                   env=agent.daemon.env, check=True, capture_output=True)
    agent.restart()
    listed = agent.listed()
    rsa_lines = [l for l in listed if l.startswith("ssh-rsa ")]
    assert len(rsa_lines) == 1 and rsa_lines[0].endswith(" rsa-legacy"), listed
    assert len(listed) == 3  # the two EC keys of the fixture and the RSA key
    line = rsa_lines[0]
    public_key = serialization.load_ssh_public_key(line.encode())
    assert public_key.key_size == 2048
    assert agent.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0

    # SIGN_REQUEST flags: 0 = ssh-rsa (SHA-1), 2 = rsa-sha2-256, 4 = rsa-sha2-512; verified independently.
    blob = base64.b64decode(line.split()[1])
    s = connect(agent)
    for flags, algorithm, hash_ in ((0, "ssh-rsa", hashes.SHA1()), (2, "rsa-sha2-256", hashes.SHA256()),
                                    (4, "rsa-sha2-512", hashes.SHA512())):
        data = b"data signed with flags %d" % flags
        s.sendall(frame(bytes([13]) + struct.pack(">I", len(blob)) + blob + struct.pack(">I", len(data)) + data
                        + struct.pack(">I", flags)))
        reply = recv_frame(s)
        assert reply[0] == 14, (flags, reply)
        sig_blob = reply[5:]
        n = struct.unpack(">I", sig_blob[:4])[0]
        assert sig_blob[4:4 + n].decode() == algorithm
        sig = sig_blob[8 + n:]
        public_key.verify(sig, data, padding.PKCS1v15(), hash_)
        with pytest.raises(Exception):
            public_key.verify(sig, data + b"!", padding.PKCS1v15(), hash_)
    s.close()

    # ssh-keygen -Y sign/verify and a real sshd login with the RSA key.
    r = sign_with(agent, tmp_path, line)
    assert r.returncode == 0, r.stderr + agent.daemon.log.read_text()[-2000:]
    port, authorized, log = sshd
    authorized.write_text(line + "\n")
    r = agent.run("ssh", "-o", f"IdentityAgent={agent.sock}", "-o", "StrictHostKeyChecking=no", "-o",
                  "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "PreferredAuthentications=publickey",
                  "-p", str(port), f"{os.environ.get('USER', 'root')}@127.0.0.1", "echo", "rsa-ok")
    assert r.returncode == 0, r.stderr + log.read_text()
    assert r.stdout.strip() == "rsa-ok"


def test_keys_with_only_a_certificate_are_offered_and_sign(agent, tmp_path, sshd):
    """An EC and an RSA private key imported with their X.509 certificates and no public key object (what OpenSSH's
    PKCS#11 provider offers from the certificate): listed with the certificate's label, and they sign."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID
    expected = {}
    for kind, key_id, key in (("ec", "0c0d02", ec.generate_private_key(ec.SECP256R1())),
                              ("rsa", "0c0d01", rsa.generate_private_key(public_exponent=65537, key_size=2048))):
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cert only {kind}")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now)
                .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
        key_file, cert_file = tmp_path / f"{kind}.key.der", tmp_path / f"{kind}.crt.der"
        key_file.write_bytes(key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.DER))
        for path, kind_arg in ((key_file, "privkey"), (cert_file, "cert")):
            subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", TOKEN, "--login", "--pin", PIN,
                            "--write-object", str(path), "--type", kind_arg, "--id", key_id, "--label",
                            f"cert-{kind}"], env=agent.daemon.env, check=True, capture_output=True)
        expected[kind] = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                       serialization.PublicFormat.OpenSSH).decode()
    objects = subprocess.run(["pkcs11-tool", "--module", SOFTHSM_MODULE, "--token-label", TOKEN, "--list-objects",
                              "--type", "pubkey"], env=agent.daemon.env, capture_output=True, text=True, check=True)
    assert "0c0d0" not in objects.stdout, "the token must hold no public key object for these keys"
    agent.restart()
    listed = agent.listed()
    assert len(listed) == 4, listed  # the fixture's two EC keys and the two certificate keys
    for kind in ("ec", "rsa"):
        line = next(l for l in listed if key_part(l) == key_part(expected[kind]))
        assert line.endswith(f" cert-{kind}"), line
    assert agent.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
    port, authorized, log = sshd
    for kind in ("ec", "rsa"):
        r = sign_with(agent, tmp_path, expected[kind])
        assert r.returncode == 0, r.stderr + agent.daemon.log.read_text()[-2000:]
        authorized.write_text(expected[kind] + "\n")
        r = agent.run("ssh", "-o", f"IdentityAgent={agent.sock}", "-o", "StrictHostKeyChecking=no", "-o",
                      "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o",
                      "PreferredAuthentications=publickey", "-p", str(port),
                      f"{os.environ.get('USER', 'root')}@127.0.0.1", "echo", kind)
        assert r.returncode == 0, r.stderr + log.read_text()
        assert r.stdout.strip() == kind


def test_piv_rsa_keys_sign_rsa_sha2_256_and_512(tmp_path, softhsm, pcscd, sshd):
    """RSA-2048 keys in 9A (PIN) and 9E: offered as ssh-rsa, signing with each SIGN_REQUEST hash (verified
    independently), ssh-keygen -Y, and real ssh logins with rsa-sha2-256 and rsa-sha2-512."""
    import base64

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding
    card, piv_keys = piv_card_with_certificates(pcscd, tmp_path, serial=5555, rsa=True)
    card.insert()
    a = piv_agent(tmp_path, softhsm, pcscd)
    try:
        expected = {key_part(piv_keys["9a"]), key_part(piv_keys["9e"])}
        assert wait_until(lambda: {key_part(l) for l in a.listed()} == expected), a.listed()
        assert all(l.startswith("ssh-rsa ") for l in a.listed())
        token = piv_token_id(a)
        # 9A needs the PIN: refused, with the log line, until ssh-add -s.
        assert sign_with(a, tmp_path, piv_keys["9a"]).returncode != 0
        assert f"ssh-add -s {token}" in a.daemon.log.read_text()
        assert a.run("ssh-add", "-s", token, secret="123456").returncode == 0
        s = connect(a)
        for slot in ("9a", "9e"):
            public_key = serialization.load_ssh_public_key(piv_keys[slot].encode())
            blob = base64.b64decode(piv_keys[slot].split()[1])
            for flags, algorithm, hash_ in ((2, "rsa-sha2-256", hashes.SHA256()), (4, "rsa-sha2-512", hashes.SHA512()),
                                            (0, "ssh-rsa", hashes.SHA1())):
                data = b"PIV RSA with flags %d" % flags
                s.sendall(frame(bytes([13]) + struct.pack(">I", len(blob)) + blob + struct.pack(">I", len(data))
                                + data + struct.pack(">I", flags)))
                reply = recv_frame(s)
                assert reply[0] == 14, (slot, flags, reply, a.daemon.log.read_text()[-2000:])
                sig_blob = reply[5:]
                n = struct.unpack(">I", sig_blob[:4])[0]
                assert sig_blob[4:4 + n].decode() == algorithm
                sig = sig_blob[8 + n:]
                assert len(sig) == 256
                public_key.verify(sig, data, padding.PKCS1v15(), hash_)
                with pytest.raises(Exception):
                    public_key.verify(sig, data + b"!", padding.PKCS1v15(), hash_)
        s.close()
        r = sign_with(a, tmp_path, piv_keys["9a"])
        assert r.returncode == 0, r.stderr + a.daemon.log.read_text()[-2000:]
        port, authorized, log = sshd
        for slot, algorithm in (("9a", "rsa-sha2-256"), ("9e", "rsa-sha2-512")):
            authorized.write_text(piv_keys[slot] + "\n")
            r = a.run("ssh", "-o", f"IdentityAgent={a.sock}", "-o", "StrictHostKeyChecking=no", "-o",
                      "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "PreferredAuthentications=publickey",
                      "-o", f"PubkeyAcceptedAlgorithms={algorithm}", "-p", str(port),
                      f"{os.environ.get('USER', 'root')}@127.0.0.1", "echo", slot)
            assert r.returncode == 0, r.stderr + log.read_text()
            assert r.stdout.strip() == slot
    finally:
        a.daemon.stop()
        card.remove()


@pytest.mark.parametrize("n", [1_000, 50_000])
def test_a_flood_of_unread_requests_then_close_leaves_the_agent_serving(agent, n):
    """The agent socket's side of the JSON-RPC flood crash: requests sent without reading, then a close. The agent
    neither crashes nor keeps working for the closed connection."""
    flood = frame(bytes([11])) * n
    for _ in range(1):
        s = connect(agent)
        s.settimeout(1)
        sent = 0
        try:
            while sent < len(flood):
                sent += s.send(flood[sent:sent + (1 << 20)])
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            pass  # the agent holds the rest back
        s.close()
        assert sent > 0
        assert agent.daemon.proc.poll() is None, f"tesserad died after a flood of {n}"
        # What it left unanswered is dropped with the connection, not worked through (PKCS#11 calls in the spy log).
        deadline, last = time.time() + 5, -1
        while (size := os.path.getsize(agent.spy_log)) != last:
            assert time.time() < deadline, "the agent kept answering a closed connection"
            last = size
            time.sleep(0.5)
    s = connect(agent)
    s.sendall(frame(bytes([11])))
    assert recv_frame(s)[0] == 12
    s.close()
    assert agent.daemon.proc.poll() is None


# MARK: unlocks per uid, session-bind@openssh.com


def exchange(sock_path: str, requests: list[bytes]) -> list[bytes | None]:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(sock_path)
    out = []
    for r in requests:
        s.sendall(r)
        out.append(recv_frame(s))
    s.close()
    return out


def exchange_as(uid: int, sock_path: str, requests: list[bytes]) -> list[bytes | None]:
    """`exchange` on one connection from a child process that has become `uid`."""
    from tessera_harness import run_as
    answers = run_as(uid, lambda: [a.hex() if a else None for a in exchange(sock_path, requests)])
    return [bytes.fromhex(a) if a is not None else None for a in answers]


def ssh_string(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def smartcard_frame(kind: int, pin: str = "") -> bytes:
    return frame(bytes([kind]) + ssh_string(TOKEN.encode()) + ssh_string(pin.encode()))


def shared_agent(tmp_path, softhsm, extra: dict | None = None, top: dict | None = None) -> tuple[Daemon, str, bytes]:
    """tesserad whose agent socket (mode 0666) any uid may use; returns it, the socket and an SSH key blob (root's:
    `top` may make another uid an administrator, who alone sees it besides root)."""
    import base64
    import json
    let_other_uids_reach(tmp_path)
    agent_sock = str(tmp_path / "shared-agent.sock")
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"sshAgent": {"socket": agent_sock, "socketMode": "0666", **(extra or {})},
                                  **(top or {})}))
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                       "--config", str(config)]).start()
    pub = cli(d, "ssh", "keygen", "--pin", PIN).stdout.strip()
    # A fresh process: the keygen login is gone, the key needs the agent's own unlock.
    d.stop()
    d.start()
    return d, agent_sock, base64.b64decode(pub.split()[1])


def test_ssh_add_s_unlocks_for_its_own_uid_only(tmp_path, softhsm):
    """Root's `ssh-add -s` does not unlock the token for nobody; nobody's -e and -x do not lock root's unlock. The key
    is root's: nobody is made an administrator here so that it sees it at all (docs/API.md, "Owners")."""
    from tessera_harness import NOBODY
    d, sock, blob = shared_agent(tmp_path, softhsm, top={"policy": {"admin": {"users": [str(NOBODY)]}}})
    try:
        sign = sign_request(blob, b"data")
        unlocked, signed = exchange(sock, [smartcard_frame(20, PIN), sign])
        assert unlocked == bytes([6]) and signed[0] == 14
        # nobody: no unlock of its own, so no signature, even though the token is logged in for root.
        assert exchange_as(NOBODY, sock, [sign]) == [bytes([5])]
        # nobody's ssh-add -e ends nothing of root's; nobody's ssh-add -x locks nobody only.
        lock = frame(bytes([22]) + ssh_string(b"pw"))
        assert exchange_as(NOBODY, sock, [smartcard_frame(21), lock, sign]) == [bytes([5]), bytes([6]), bytes([5])]
        assert exchange(sock, [sign])[0][0] == 14
        # nobody unlocks with the PIN and signs; its -e then ends its own unlock, not root's.
        out = exchange_as(NOBODY, sock, [frame(bytes([23]) + ssh_string(b"pw")), smartcard_frame(20, PIN), sign,
                                         smartcard_frame(21), sign])
        assert out[0] == bytes([6]) and out[1] == bytes([6]) and out[2][0] == 14, out
        assert out[3] == bytes([6]) and out[4] == bytes([5]), out
        assert exchange(sock, [sign])[0][0] == 14
    finally:
        d.stop()


def host_key(tmp_path, name: str = "host"):
    """A real OpenSSH Ed25519 host key (ssh-keygen), loaded for signing session ids."""
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    key = load_ssh_private_key(path.read_bytes(), None)
    blob = __import__("base64").b64decode((tmp_path / f"{name}.pub").read_text().split()[1])
    return key, blob


def session_bind(key, blob: bytes, sid: bytes, forwarding: bool, signer=None) -> bytes:
    signature = ssh_string(b"ssh-ed25519") + ssh_string((signer or key).sign(sid))
    body = (ssh_string(b"session-bind@openssh.com") + ssh_string(blob) + ssh_string(sid) + ssh_string(signature)
            + bytes([1 if forwarding else 0]))
    return frame(bytes([27]) + body)


def rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_session_bind_is_verified_and_bounded(agent, tmp_path):
    key, blob = host_key(tmp_path)
    other, _ = host_key(tmp_path, "other")
    sid = os.urandom(32)
    # Signed by another key, or a tampered session id: refused, and nothing is recorded.
    assert exchange(agent.sock, [session_bind(key, blob, sid, False, signer=other)]) == [bytes([5])]
    tampered = bytearray(session_bind(key, blob, sid, False))
    tampered[-80] ^= 1
    assert exchange(agent.sock, [bytes(tampered)]) == [bytes([5])]
    assert exchange(agent.sock, [session_bind(key, blob, sid, False)]) == [bytes([6])]
    assert "does not verify" in agent.daemon.log.read_text()

    # A flood on one connection: 16 recorded (OpenSSH's limit), the rest refused, the daemon's memory bounded.
    binds = [session_bind(key, blob, i.to_bytes(4, "big") * 8, True) for i in range(10_000)]
    before = rss_kib(agent.daemon.proc.pid)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(agent.sock)
    answers = []
    for i in range(0, len(binds), 100):
        s.sendall(b"".join(binds[i:i + 100]))
        answers += [recv_frame(s) for _ in range(100)]
    s.close()
    grown = rss_kib(agent.daemon.proc.pid) - before
    assert answers[:16] == [bytes([6])] * 16 and answers[16:] == [bytes([5])] * (10_000 - 16)
    assert grown < 4096, f"RSS grew by {grown} KiB"
    assert agent.daemon.log.read_text().count("binds already recorded") == 1


def test_a_forwarded_connection_signs_only_with_allow_forwarded(tmp_path, softhsm):
    """A connection bound with is_forwarding=1 by a real host key is forwarded: with sshAgent.allowForwarded false it
    signs nothing, while a local connection still signs."""
    d, sock, blob = shared_agent(tmp_path, softhsm, {"allowForwarded": False})
    try:
        key, host_blob = host_key(tmp_path)
        sign = sign_request(blob, b"data")
        unlocked, signed = exchange(sock, [smartcard_frame(20, PIN), sign])
        assert unlocked == bytes([6]) and signed[0] == 14
        bound, refused = exchange(sock, [session_bind(key, host_blob, os.urandom(32), True), sign])
        assert bound == bytes([6]) and refused == bytes([5])
        assert "forwarded connection" in d.log.read_text()
        # Bound for authentication only (not forwarding): signs.
        bound, signed = exchange(sock, [session_bind(key, host_blob, os.urandom(32), False), sign])
        assert bound == bytes([6]) and signed[0] == 14
    finally:
        d.stop()


@pytest.mark.parametrize("allow_forwarded", [True, False])
def test_real_ssh_a_forwarding_is_known_as_forwarded(tmp_path, softhsm, sshd, allow_forwarded):
    """`ssh -A` to a real sshd, and on the far side ssh-keygen -Y sign through the forwarded agent: the local ssh
    binds that agent connection with is_forwarding=1 (signed by the sshd's host key). The presence request of the
    confirm key says forwarded: false for the login and true for the forwarded signature; with
    sshAgent.allowForwarded false the forwarded signature is refused before presence is asked."""
    import json
    port, authorized, log = sshd
    asked = tmp_path / "asked.jsonl"
    script = tmp_path / "presence.sh"
    script.write_text(f"#!/bin/sh\ncat >> {asked}\necho >> {asked}\nexit 0\n")
    script.chmod(0o755)
    a = Agent(tmp_path, softhsm)
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"presence": {"command": [str(script)]},
                                  "sshAgent": {"allowForwarded": allow_forwarded}}))
    a.daemon.args += ["--config", str(config)]
    a.start()
    try:
        pub_line = cli(a.daemon, "ssh", "keygen", "--comment", "fw", "--confirm", "--pin", PIN).stdout.strip()
        authorized.write_text(pub_line + "\n")
        pub = tmp_path / "fw.pub"
        pub.write_text(pub_line + "\n")
        msg = tmp_path / "m"
        msg.write_text("x")
        assert a.run("ssh-add", "-s", TOKEN, secret=PIN).returncode == 0
        remote = f"ssh-keygen -Y sign -n file -f {pub} {msg} && echo signed"
        r = a.run("ssh", "-A", "-o", f"IdentityAgent={a.sock}", "-o", "StrictHostKeyChecking=no", "-o",
                  "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "PreferredAuthentications=publickey",
                  "-p", str(port), f"{os.environ.get('USER', 'root')}@127.0.0.1", remote)
        requests = [json.loads(l) for l in asked.read_text().splitlines() if l.strip()]
        assert requests and requests[0]["door"] == "ssh" and requests[0]["forwarded"] is False, requests
        text = a.daemon.log.read_text()
        assert "(forwarding)" in text, text
        if allow_forwarded:
            assert r.returncode == 0 and "signed" in r.stdout, r.stderr + log.read_text()
            assert [q["forwarded"] for q in requests] == [False, True], requests
        else:
            assert "signed" not in r.stdout, r.stdout
            assert [q["forwarded"] for q in requests] == [False], requests
            assert "signing refused on a forwarded connection" in text
    finally:
        a.daemon.stop()


def test_another_uids_ssh_key_does_not_exist_for_it(tmp_path, softhsm):
    """Keys made with ssh.keygen are their creator's (docs/API.md, "Owners"): another uid neither lists root's key
    (ssh-add -L, ssh.list) nor signs with it, and gets the answer for a key the agent does not hold; its own key it
    lists and signs with after its own ssh-add -s."""
    from tessera_harness import NOBODY, calls_as
    d, sock, blob = shared_agent(tmp_path, softhsm, top={"socketMode": "0666"})
    try:
        _, made = calls_as(NOBODY, d.socket, [("ssh.keygen", {"pin": PIN, "comment": "nobodys"}),
                                             ("ssh.list", {})])
        theirs = __import__("base64").b64decode(made[0]["result"]["publicKey"].split()[1])
        assert [k["comment"] for k in made[1]["result"]["keys"]] == ["nobodys"]
        assert made[1]["result"]["keys"][0]["ownerUid"] == NOBODY
        listed, roots, never, unlocked, own = exchange_as(NOBODY, sock, [
            frame(bytes([11])), sign_request(blob, b"data"), sign_request(theirs[:-1] + b"\x00", b"data"),
            smartcard_frame(20, PIN), sign_request(theirs, b"data")])
        assert listed[0] == 12 and struct.unpack(">I", listed[1:5])[0] == 1 and theirs in listed
        assert roots == never == bytes([5])
        assert unlocked == bytes([6]) and own[0] == 14
        # Root (the daemon's uid, an administrator) lists both.
        listed = exchange(sock, [frame(bytes([11]))])[0]
        assert struct.unpack(">I", listed[1:5])[0] == 2
    finally:
        d.stop()


def test_a_refused_ssh_add_s_says_why_in_the_daemon_log(agent):
    """The agent protocol answers only FAILURE (ssh-add: "agent refused operation"); the reason is in the log."""
    r = agent.run("ssh-add", "-s", "no such token", secret=PIN)
    assert r.returncode != 0 and "refused" in r.stderr, r.stderr
    log = agent.daemon.log.read_text()
    assert "ssh-add -s no such token refused: TOKEN_NOT_PRESENT: no token with id or label 'no such token'" in log
    assert agent.run("ssh-add", "-x", secret="lock-pass").returncode == 0
    assert agent.run("ssh-add", "-s", TOKEN, secret=PIN).returncode != 0
    assert f"ssh-add -s {TOKEN} refused: the agent is locked (ssh-add -X)" in agent.daemon.log.read_text()


# MARK: a key serves one purpose; 64 clients at once


def ssh_line(public_key, comment: str) -> str:
    from cryptography.hazmat.primitives import serialization
    return public_key.public_bytes(serialization.Encoding.OpenSSH,
                                   serialization.PublicFormat.OpenSSH).decode() + " " + comment


def test_the_badge_ca_key_and_mdoc_device_keys_are_never_offered(tmp_path, softhsm):
    """The badge CA's key (accessControl.issuer) and an mdoc device key sit on the agent's token beside an SSH key.
    Neither is listed by ssh-add -L, and a SIGN_REQUEST for either blob is refused, for an administrator too, with
    the token unlocked by ssh-add -s; the SSH key still signs. The issuer's key stays refused after the config no
    longer names it (its purpose is recorded)."""
    import base64
    import json
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from test_access import make_token_ca

    ca = make_token_ca(tmp_path, softhsm)  # token "badges", key labelled badge-ca
    ca_key = x509.load_pem_x509_certificate(ca.read_bytes()).public_key()
    ca_line = ssh_line(ca_key, "badge-ca")
    a = Agent(tmp_path, softhsm)
    a.start()
    badges = next(t["id"] for t in a.daemon.client().call("tokens.list")["tokens"] if t.get("label") == "badges")
    ssh_token = next(t["id"] for t in a.daemon.client().call("tokens.list")["tokens"] if t.get("label") == TOKEN)
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"accessControl": {"anchors": [str(ca)], "issuer": {
        "tokenId": badges, "keyLabel": "badge-ca", "certificate": str(ca)}}}))
    a.daemon.args += ["--config", str(config)]
    a.restart()
    try:
        c = a.daemon.client()
        ssh_pub = cli(a.daemon, "ssh", "keygen", "--token", ssh_token, "--comment", "mine", "--pin", PIN).stdout.strip()
        made = c.call("mdoc.createDeviceKey", {"tokenId": ssh_token, "pin": PIN})
        from fido2 import cbor
        cose = cbor.decode(base64.urlsafe_b64decode(made["deviceKey"] + "=="))  # {1: 2, -1: 1, -2: x, -3: y}
        x, y = cose[-2], cose[-3]
        from cryptography.hazmat.primitives.asymmetric import ec
        mdoc_key = ec.EllipticCurvePublicNumbers(int.from_bytes(x, "big"), int.from_bytes(y, "big"),
                                                 ec.SECP256R1()).public_key()
        mdoc_line = ssh_line(mdoc_key, "mdoc")
        a.restart()
        for token in (TOKEN, "badges"):
            r = a.run("ssh-add", "-s", token, secret=PIN)
            assert r.returncode == 0, r.stderr + a.daemon.log.read_text()
        listed = [key_part(l) for l in a.listed()]
        assert key_part(ssh_pub) in listed, listed
        assert key_part(ca_line) not in listed and key_part(mdoc_line) not in listed, listed
        msg = tmp_path / "msg"
        msg.write_text("forged badge certificate")
        for name, line in (("mine", ssh_pub), ("badge-ca", ca_line), ("mdoc", mdoc_line)):
            pub = tmp_path / f"{name}.pub"
            pub.write_text(line + "\n")
            r = a.run("ssh-keygen", "-Y", "sign", "-n", "file", "-f", str(pub), str(msg))
            assert (r.returncode == 0) == (name == "mine"), (name, r.stderr)
            (tmp_path / "msg.sig").unlink(missing_ok=True)
        # The raw SIGN_REQUEST for the issuer's blob: SSH_AGENT_FAILURE (5).
        blob = base64.b64decode(ca_line.split()[1])
        assert exchange(a.sock, [sign_request(blob, b"data")]) == [bytes([5])]
        # The config no longer names the issuer: its key keeps its recorded purpose.
        config.write_text("{}")
        a.restart()
        assert a.run("ssh-add", "-s", "badges", secret=PIN).returncode == 0
        assert key_part(ca_line) not in [key_part(l) for l in a.listed()]
        assert exchange(a.sock, [sign_request(blob, b"data")]) == [bytes([5])]
    finally:
        a.daemon.stop()


def test_64_concurrent_connections_of_one_uid_are_all_answered(agent):
    """64 clients of one uid at once (ansible, parallel git): twice the per-uid bound (32). Those over it wait for a
    place, unread, instead of being reset, as OpenSSH's agent answers all of them: first raw sockets all connected
    before any sends, then 64 ssh-add -L processes at once."""
    n = 64
    barrier = threading.Barrier(n)
    answers: list = [None] * n

    def client(i: int):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(60)
        try:
            s.connect(agent.sock)
            barrier.wait(30)
            s.sendall(frame(bytes([11])))
            answers[i] = recv_frame(s)
        except OSError as e:
            answers[i] = repr(e)
        finally:
            s.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    answered = [a for a in answers if isinstance(a, bytes) and a[0] == 12]
    assert len(answered) == n, f"{len(answered)} of {n} answered: {[a for a in answers if a not in answered][:3]}"
    env = {**os.environ, "SSH_AUTH_SOCK": agent.sock}
    procs = [subprocess.Popen(["ssh-add", "-L"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True) for _ in range(n)]
    outputs = [p.communicate(timeout=90) for p in procs]
    listing = [o for (o, _), p in zip(outputs, procs) if p.returncode == 0 and agent.pub in o]
    assert len(listing) == n, [e for _, e in outputs if e][:3]
    assert agent.daemon.proc.poll() is None
