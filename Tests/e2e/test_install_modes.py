"""The default paths of the two modes (docs/INSTALL.md), with the real tesserad and tessera and real OpenSSH clients:
per-user mode with a private XDG_RUNTIME_DIR/XDG_STATE_HOME, started by hand and the way the user units start it
(their own ListenStream and ExecStart lines under systemd-socket-activate), reached by `tessera` without --socket and
by `ssh-add -L` through the SSH_AUTH_SOCK of the packaged environment.d snippet; a socket in a missing directory."""
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import time

import signal
import socket

from tessera_harness import BIN, NOBODY, ROOT, SOFTHSM_MODULE, Client, Daemon, let_other_uids_reach, run_as
from tessera_harness import stop_process

PIN = "1234"


def session_env(tmp_path: pathlib.Path, softhsm) -> dict:
    """A login session's environment of its own: nothing here may reach a daemon outside tmp_path."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("TESSERA_SOCKET", "SSH_AUTH_SOCK", "STATE_DIRECTORY")}
    env.update(softhsm.env, XDG_RUNTIME_DIR=str(run), XDG_STATE_HOME=str(tmp_path / "xdg-state"),
               HOME=str(tmp_path / "home"))
    return env


def tessera(env: dict, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user types it: no --socket."""
    return subprocess.run([str(BIN / "tessera"), *args], env=env, input=input, capture_output=True, text=True,
                          timeout=60)


def ssh_auth_sock(env: dict) -> str:
    """SSH_AUTH_SOCK as systemd's environment.d expands the packaged snippet for this session."""
    text = (ROOT / "packaging/environment.d/60-tessera-ssh-agent.conf").read_text()
    value = re.search(r"^SSH_AUTH_SOCK=(.*)$", text, re.M).group(1)
    return value.replace("${XDG_RUNTIME_DIR}", env["XDG_RUNTIME_DIR"])


def wait_for(path: pathlib.Path, proc: subprocess.Popen, log: pathlib.Path, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, log.read_text()
        assert time.time() < deadline, f"{path} never appeared:\n{log.read_text()}"
        time.sleep(0.05)


def check_user_session(env: dict, tmp_path: pathlib.Path) -> None:
    runtime = pathlib.Path(env["XDG_RUNTIME_DIR"]) / "tessera"
    status = tessera(env, "--json", "status")
    assert status.returncode == 0, status.stderr
    assert '"version"' in status.stdout
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
    assert (pathlib.Path(env["XDG_STATE_HOME"]) / "tessera" / "tessera.sqlite").is_file()

    made = tessera(env, "ssh", "keygen", "--comment", "alice@session", "--pin-stdin", input=PIN + "\n")
    assert made.returncode == 0, made.stderr
    pub = made.stdout.strip()
    agent_env = {**env, "SSH_AUTH_SOCK": ssh_auth_sock(env)}
    assert agent_env["SSH_AUTH_SOCK"] == str(runtime / "ssh-agent.sock")
    listed = subprocess.run(["ssh-add", "-L"], env=agent_env, capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    assert listed.returncode == 0, listed.stderr
    assert pub in listed.stdout.splitlines()
    # The key is a real P-256 OpenSSH key: ssh-keygen reads it back.
    key = tmp_path / "key.pub"
    key.write_text(pub + "\n")
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(key)], capture_output=True, text=True, check=True)
    assert "ECDSA" in fingerprint.stdout and "256" in fingerprint.stdout
    # The CTAP socket of per-user mode is there too, in the same directory.
    assert stat.S_ISSOCK((runtime / "ctap.sock").stat().st_mode)


def test_user_mode_by_hand_serves_tessera_and_ssh_add_at_the_documented_paths(tmp_path, softhsm):
    env = session_env(tmp_path, softhsm)
    log = tmp_path / "tesserad.log"
    with open(log, "ab") as logf:
        proc = subprocess.Popen([str(BIN / "tesserad"), "--user", "--pkcs11-module", SOFTHSM_MODULE,
                                 "--no-embedded-softhsm"], env=env, stdout=logf, stderr=logf)
    try:
        wait_for(pathlib.Path(env["XDG_RUNTIME_DIR"]) / "tessera" / "tesserad.sock", proc, log)
        check_user_session(env, tmp_path)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, log.read_text()


def doctor_socket_line(env: dict) -> dict:
    out = tessera(env, "doctor", "--json")
    return {c["name"]: c for c in json.loads(out.stdout)["checks"]}["daemon socket"]


def test_a_user_daemon_keeps_its_sockets_to_its_user_and_takes_them_when_it_stops(tmp_path, softhsm):
    """Issue #36: the per-user sockets were 0660 (INSTALL.md says 0600); after SIGTERM tesserad.sock and
    ssh-agent.sock stayed behind, and `tessera doctor` called the stale socket ok. The hints are per-user mode's."""
    env = session_env(tmp_path, softhsm)
    runtime = pathlib.Path(env["XDG_RUNTIME_DIR"]) / "tessera"
    sockets = [runtime / name for name in ("tesserad.sock", "ssh-agent.sock", "ctap.sock")]
    log = tmp_path / "tesserad.log"
    with open(log, "ab") as logf:
        proc = subprocess.Popen([str(BIN / "tesserad"), "--user", "--pkcs11-module", SOFTHSM_MODULE,
                                 "--no-embedded-softhsm"], env=env, stdout=logf, stderr=logf)
    try:
        for path in sockets:
            wait_for(path, proc, log)
        assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in sockets} == \
            {p.name: "0o600" for p in sockets}
        assert doctor_socket_line(env)["status"] == "ok"
        # Another uid meets a 0700 directory: no group can help, the hint says to run their own daemon.
        if os.geteuid() == 0:
            copy = tmp_path / "tessera-copy"  # nobody runs a copy below tmp_path, not the checkout's
            shutil.copy(BIN / "tessera", copy)
            let_other_uids_reach(tmp_path)

            def as_other():
                r = subprocess.run([str(copy), "--socket", str(sockets[0]), "status"], capture_output=True,
                                   text=True, timeout=60, env={"PATH": os.environ["PATH"]})
                return r.returncode, r.stderr
            status, err = run_as(NOBODY, as_other)
            assert status == 3 and "another user's per-user daemon" in err and "join" not in err, err
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, log.read_text()
    assert [p.name for p in sockets if p.exists()] == [], log.read_text()
    # A socket left behind (a daemon killed): doctor says stale, the CLI says how to start the per-user daemon.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sockets[0]))
    stale.close()
    line = doctor_socket_line(env)
    assert line["status"] == "fail" and "stale" in line["detail"], line
    assert "systemctl --user start tesserad.socket" in line["fix"], line
    status = tessera(env, "status")
    assert status.returncode == 3 and "systemctl --user start tesserad.socket" in status.stderr, status.stderr
    assert "sudo" not in status.stderr, status.stderr


def unit_value(path: pathlib.Path, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", path.read_text(), re.M)


def test_user_units_socket_activate_the_user_daemon(tmp_path, softhsm):
    """The user units' own lines: ListenStream (with %t), FileDescriptorName and ExecStart (tesserad --user)."""
    env = session_env(tmp_path, softhsm)
    units = ROOT / "systemd/user"
    runtime = pathlib.Path(env["XDG_RUNTIME_DIR"])
    (runtime / "tessera").mkdir(mode=0o700)  # DirectoryMode=0700 of the socket units
    listen: list[str] = []
    for unit in ("tesserad.socket", "tesserad-ssh-agent.socket"):
        [stream] = unit_value(units / unit, "ListenStream")
        [name] = unit_value(units / unit, "FileDescriptorName")
        listen += ["-l", stream.replace("%t", str(runtime)), f"--fdname={name}"]
    [exec_start] = unit_value(units / "tesserad.service", "ExecStart")
    argv = exec_start.split()
    assert argv[:2] == ["/usr/sbin/tesserad", "--user"]
    # The programs under test instead of /usr/sbin; the token of the test instead of the user's p11-kit registry.
    argv = [str(BIN / "tesserad"), *argv[1:], "--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]
    names = ":".join(a.split("=", 1)[1] for a in listen if a.startswith("--fdname="))
    listen = [a for a in listen if not a.startswith("--fdname=")] + [f"--fdname={names}"]
    log = tmp_path / "activated.log"
    with open(log, "ab") as logf:
        proc = subprocess.Popen(["systemd-socket-activate", *listen, "-E", "SOFTHSM2_CONF", "-E", "XDG_RUNTIME_DIR",
                                 "-E", "XDG_STATE_HOME", "-E", "HOME", *argv], env=env, stdout=logf, stderr=logf)
    try:
        wait_for(runtime / "tessera" / "ssh-agent.sock", proc, log)
        wait_for(runtime / "tessera" / "tesserad.sock", proc, log)
        Client(str(runtime / "tessera" / "tesserad.sock"), timeout=60).call("daemon.status")  # starts tesserad
        check_user_session(env, tmp_path)
    finally:
        stop_process(proc)


def test_without_a_user_daemon_the_cli_tries_the_system_socket(tmp_path, softhsm):
    env = session_env(tmp_path, softhsm)
    # No user daemon: the system socket is the one tried (and named).
    r = tessera(env, "status")
    assert r.returncode == 3
    assert "/run/tesserad/tesserad.sock" in r.stderr
    # TESSERA_SOCKET wins over both.
    r = tessera({**env, "TESSERA_SOCKET": str(tmp_path / "elsewhere.sock")}, "status")
    assert r.returncode == 3 and str(tmp_path / "elsewhere.sock") in r.stderr


def test_a_socket_in_a_missing_directory_stops_start_up_in_words(tmp_path, softhsm):
    env = session_env(tmp_path, softhsm)
    missing = tmp_path / "no-such-dir"
    r = subprocess.run([str(BIN / "tesserad"), "--socket", str(missing / "t.sock"), "--state-dir",
                        str(tmp_path / "state"), "--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert f"the directory {missing} does not exist" in r.stderr
    assert f"mkdir -p {missing}" in r.stderr
    assert not missing.exists()
    # Per-user mode without a session says what to set.
    no_session = {k: v for k, v in env.items() if k != "XDG_RUNTIME_DIR"}
    r = subprocess.run([str(BIN / "tesserad"), "--user"], env=no_session, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "XDG_RUNTIME_DIR" in r.stderr


def test_config_keys_beginning_with_slashes_are_comments_and_typos_still_stop_start_up(tmp_path, softhsm):
    """The packaged /etc/tessera/tesserad.json explains itself in "//" keys (its load as installed is in
    scripts/check-deb.sh); a misspelled key beside them still stops start-up."""
    env = session_env(tmp_path, softhsm)
    for name, extra, ok in (("good", {}, True), ("typo", {"maxConnectionz": 8}, False)):
        config = tmp_path / f"{name}.json"
        config.write_text(json.dumps({"//": "a comment", "//maxConnections": "another", "maxConnections": 8,
                                      "sshAgent": {"//": "in a section"}, "pinBackoff": {"//x": "too"}, **extra}))
        d = Daemon(tmp_path, env, ["--config", str(config), "--pkcs11-module", SOFTHSM_MODULE,
                                   "--no-embedded-softhsm"], name=name)
        if ok:
            d.start()
            assert d.client().call("daemon.status")["version"]
            assert d.stop() == 0
        else:
            d.start(wait=False)
            assert d.proc.wait(60) == 1
            assert "unknown key 'maxConnectionz'" in d.log.read_text()


def test_make_install_under_a_prefix_names_that_prefix_and_renders_the_man_pages_for_80_columns(tmp_path):
    """Issue #36: after `make install PREFIX=/usr/local` the environment.d snippet and /etc/tessera/tesserad.json
    named /usr/share/...; tesserad(8)'s SYNOPSIS read `tesserad COMMAND` (tesserad has no commands); tessera(1)'s
    SOCKET and PINS paragraphs were ~300-character unfilled lines. The build's own programs stand in for the release
    build here (the pages come from their argument parsers, which are the same)."""
    stage = tmp_path / "stage"
    out = subprocess.run(["make", "--no-print-directory", "install", f"DESTDIR={stage}", "PREFIX=/usr/local",
                          f"RELEASE_BIN={BIN}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    snippet = (stage / "usr/local/share/tessera/environment.d/60-tessera-ssh-agent.conf").read_text()
    config = (stage / "etc/tessera/tesserad.json").read_text()
    assert "/usr/local/share/tessera/environment.d/" in snippet and "/usr/share/" not in snippet, snippet
    assert "/usr/local/share/doc/tessera" in config and "/usr/share/" not in config, config
    json.loads(config)
    tesserad8 = (stage / "usr/local/share/man/man8/tesserad.8").read_text()
    synopsis = tesserad8.split(".SH SYNOPSIS\n", 1)[1].split("\n", 1)[0]
    assert synopsis.startswith("\\fBtesserad\\fR [") and "COMMAND" not in synopsis, synopsis
    page = subprocess.run(["man", "-l", "-Tutf8", str(stage / "usr/local/share/man/man1/tessera.1")],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "MANWIDTH": "80"})
    assert page.returncode == 0, page.stderr
    plain = re.sub(r".\x08", "", page.stdout)
    for heading in ("SOCKET", "PINS"):
        assert f"\n   {heading}\n" in plain, plain[:3000]
        lines = []
        for line in plain.split(f"\n   {heading}\n", 1)[1].splitlines():
            if re.match(r"^ {3}\S", line):  # the next heading
                break
            if line.strip():
                lines.append(line)
        assert len(lines) > 2 and max(len(line) for line in lines) <= 80, "\n".join(lines)
