"""`tessera doctor` against real components: a private pcscd with vpcd readers, SoftHSM2 tokens and the real tesserad.
Each test checks the report against what the components themselves say (daemon.status, the pcscd fixture's readers)."""
import json
import os
import pathlib
import shutil
import subprocess

from tessera_harness import (BIN, NOBODY, PCSCD, SOFTHSM_MODULE, Client, Daemon, let_other_uids_reach,
                             run_as)


def doctor(socket_path: str, env: dict) -> tuple[int, dict]:
    out = subprocess.run([str(BIN / "tessera"), "--socket", socket_path, "doctor", "--json"],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert out.stdout, out.stderr
    return out.returncode, {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def start(tmp_path: pathlib.Path, pcscd: PCSCD, *args: str, env: dict | None = None) -> Daemon:
    return Daemon(tmp_path, {**pcscd.env, **(env or {})},
                  ["--ssh-agent-socket", str(tmp_path / "agent.sock"), *args]).start()


def test_healthy_host_exits_zero(tmp_path, softhsm):
    pcscd = PCSCD(tmp_path).start()
    daemon = start(tmp_path, pcscd, "--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", env=softhsm.env)
    try:
        env = {**pcscd.env, **softhsm.env, "SSH_AUTH_SOCK": str(tmp_path / "agent.sock")}
        status, checks = doctor(daemon.socket, env)
        c = Client(daemon.socket)
        truth = c.call("daemon.status")
        c.close()
        assert status == 0, checks
        assert all(ch["status"] != "fail" for ch in checks.values()), checks
        assert checks["daemon socket"]["status"] == "ok"
        assert checks["daemon"]["detail"].startswith(f"tesserad {truth['version']}, up ")
        assert checks["tokens"]["status"] == "ok"
        assert all(f"{t['label']} ({t['id']})" in checks["tokens"]["detail"] for t in truth["tokens"])
        assert checks["pcscd"] == {"name": "pcscd", "status": "ok",
                                   "detail": f"{pcscd.socket} (PCSCLITE_CSOCK_NAME)"}
        assert all(r in checks["readers"]["detail"] for r in pcscd.readers), checks["readers"]
        assert checks["SSH_AUTH_SOCK"]["status"] == "ok", checks["SSH_AUTH_SOCK"]
        # p11-kit's view (the host's modules) is reported, whatever it holds.
        assert checks["p11-kit"]["status"] in ("ok", "warn")

        # Another agent in SSH_AUTH_SOCK is a warning with the export that fixes it, not a failure.
        status, checks = doctor(daemon.socket, {**env, "SSH_AUTH_SOCK": str(tmp_path / "other.sock")})
        assert status == 0
        assert checks["SSH_AUTH_SOCK"]["status"] == "warn"
        assert checks["SSH_AUTH_SOCK"]["fix"] == f"export SSH_AUTH_SOCK={tmp_path / 'agent.sock'}"
    finally:
        daemon.stop()
        pcscd.stop()


def test_pcscd_stopped_fails_and_says_to_start_it(tmp_path, softhsm):
    pcscd = PCSCD(tmp_path).start()
    daemon = start(tmp_path, pcscd, "--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", env=softhsm.env)
    try:
        pcscd.stop()
        status, checks = doctor(daemon.socket, {**pcscd.env, **softhsm.env})
        assert status == 1
        assert checks["pcscd"]["status"] == "fail"
        assert pcscd.socket in checks["pcscd"]["detail"]
        assert "private pcscd" in checks["pcscd"]["fix"]
        assert checks["readers"]["status"] == "info"
        # The rest of the host is still checked.
        assert checks["daemon"]["status"] == "ok"

        # The daemon's own PCSC_UNAVAILABLE says the same in words.
        out = subprocess.run([str(BIN / "tessera"), "--socket", daemon.socket, "passport", "readers"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2
        assert "PCSC_UNAVAILABLE" in out.stderr and "is pcscd running?" in out.stderr, out.stderr
    finally:
        daemon.stop()


def test_no_token_fails(tmp_path):
    pcscd = PCSCD(tmp_path).start()
    daemon = start(tmp_path, pcscd, "--no-embedded-softhsm")
    try:
        c = Client(daemon.socket)
        assert c.call("daemon.status")["tokens"] == []
        c.close()
        status, checks = doctor(daemon.socket, pcscd.env)
        assert status == 1
        assert checks["tokens"]["status"] == "fail"
        assert "--pkcs11-module" in checks["tokens"]["fix"]
    finally:
        daemon.stop()
        pcscd.stop()


def test_a_socket_the_user_cannot_reach(tmp_path, softhsm):
    """As nobody (no groups) the daemon's socket (root's, 0660) is closed: the socket line says why and what to do."""
    daemon = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]).start()
    try:
        # nobody runs a copy of the CLI below tmp_path (opened to other uids), not the checkout's.
        tessera = tmp_path / "tessera"
        shutil.copy(BIN / "tessera", tessera)
        let_other_uids_reach(tmp_path)
        st = os.stat(daemon.socket)
        assert st.st_mode & 0o006 == 0, oct(st.st_mode)  # others have no access: nobody is refused

        def as_other():
            out = subprocess.run([str(tessera), "--socket", daemon.socket, "doctor", "--json"],
                                 capture_output=True, text=True, timeout=120, env={"PATH": os.environ["PATH"]})
            plain = subprocess.run([str(tessera), "--socket", daemon.socket, "status"],
                                   capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})
            return out.returncode, out.stdout, plain.returncode, plain.stderr

        status, stdout, plain_status, plain_err = run_as(NOBODY, as_other)
        checks = {c["name"]: c for c in json.loads(stdout)["checks"]}
        assert status == 1
        sock = checks["daemon socket"]
        assert sock["status"] == "fail"
        assert daemon.socket in sock["detail"] and "srw-rw----" in sock["detail"], sock
        assert "fix" in sock
        assert checks["daemon"]["status"] == "fail"
        # The CLI's own error says it in words, not in socket calls.
        assert plain_status == 3
        assert "permission denied" in plain_err and "descriptor" not in plain_err, plain_err
    finally:
        daemon.stop()


def test_no_daemon_says_how_to_start_it(tmp_path):
    missing = str(tmp_path / "none.sock")
    status, checks = doctor(missing, {})
    assert status == 1
    assert checks["daemon socket"]["status"] == "fail"
    assert "start tesserad" in checks["daemon socket"]["fix"]
    out = subprocess.run([str(BIN / "tessera"), "--socket", missing, "status"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 3
    assert out.stderr.startswith(f"error: DAEMON_UNAVAILABLE: cannot reach tesserad at {missing}: no such socket"), \
        out.stderr
    assert "connect(descriptor" not in out.stderr
