#!/usr/bin/env python3
"""The lab in one command: a private pcscd with a vsmartcard vpcd reader pair, an emulated e-passport (a test document
under a fresh test CSCA) in the first reader, and tesserad (embedded SoftHSM2 token, the test CSCA as trust anchor,
an SSH agent socket) on sockets under DIR. Nothing of the host is touched: pcscd runs in its own mount namespace
and is reached through PCSCLITE_CSOCK_NAME.

    scripts/lab.py start DIR [TESSERAD-OPTION...]
                                starts it in the background and prints the shell variables to use:
                                eval "$(scripts/lab.py start .state/lab)"; options after DIR go to tesserad
                                (e.g. --config FILE; make demo's kiosk workflow)
    scripts/lab.py env DIR      prints them again
    scripts/lab.py stop DIR     stops everything it started

The variables: TESSERA_SOCKET, PCSCLITE_CSOCK_NAME, SSH_AUTH_SOCK (the lab's tesserad), MRZ (the passport's),
PIN (the embedded token's PIN), LAB (DIR; the passport profile is $LAB/passport, its CSCA $LAB/passport/csca.pem),
VPCD (the passport's reader, host:port) and VPCD_FREE (the second reader of the pair, free for another emulator).
The pieces are the end-to-end harness's (Tests/e2e/tessera_harness.py: PCSCD, EmulatedPassport, Daemon)."""
from __future__ import annotations

import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
import tessera_harness as h  # noqa: E402


def env_text(lab: pathlib.Path, port: int) -> str:
    pin_file = lab / "tesserad-state" / "softhsm" / "user.pin"  # none when tesserad found a hardware token
    pin = pin_file.read_text().strip() if pin_file.exists() else ""
    values = {
        "LAB": str(lab), "TESSERA_SOCKET": str(lab / "tesserad.sock"),
        "PCSCLITE_CSOCK_NAME": str(lab / "pcscd" / "pcscd.comm"), "SSH_AUTH_SOCK": str(lab / "ssh-agent.sock"),
        "VPCD": f"127.0.0.1:{port}", "VPCD_FREE": f"127.0.0.1:{port + 1}", "PIN": pin,
    }
    lines = [f"export {k}={shlex.quote(v)}" for k, v in values.items()]
    # The MRZ's two lines joined by a newline, as `--mrz "$MRZ"` takes them.
    lines.append("export MRZ=$'" + h.MRZ_ANNA.replace("\n", "\\n") + "'")
    return "\n".join(lines) + "\n"


def serve(lab: pathlib.Path, daemon_args: list[str]) -> None:
    """Runs the lab until SIGTERM; writes DIR/env once everything answers."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    pcscd = h.PCSCD(lab).start()
    daemon = None
    try:
        profile = lab / "passport"
        if not (profile / "profile.json").exists():
            h.make_passport_profile(profile, h.MRZ_ANNA, "--pace", "ecdh-gm-brainpoolp256r1-aes128", "--aa")
        daemon = h.Daemon(lab, pcscd.env, ["--csca", str(profile / "csca.pem"), "--ssh-agent-socket",
                                           str(lab / "ssh-agent.sock"), *daemon_args]).start()

        def card_present(reader: str) -> bool:
            c = daemon.client()
            try:
                return any(r["name"] == reader and r.get("cardPresent") for r in c.call("readers.list")["readers"])
            finally:
                c.close()

        with h.EmulatedPassport(pcscd, profile, card_present, log=lab / "emulator.log"):
            (lab / "env").write_text(env_text(lab, pcscd.port))
            while not stopping and daemon.proc.poll() is None and pcscd.proc.poll() is None:
                time.sleep(0.2)
    finally:
        (lab / "env").unlink(missing_ok=True)
        if daemon:
            daemon.stop()
        pcscd.stop()


def start(lab: pathlib.Path, daemon_args: list[str]) -> int:
    if (lab / "lab.pid").exists() and alive(int((lab / "lab.pid").read_text())):
        sys.stdout.write((lab / "env").read_text())
        return 0
    lab.mkdir(parents=True, exist_ok=True)
    (lab / "env").unlink(missing_ok=True)
    with open(lab / "lab.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, __file__, "serve", str(lab), *daemon_args], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
    (lab / "lab.pid").write_text(str(proc.pid))
    deadline = time.time() + 180
    while not (lab / "env").exists():
        if proc.poll() is not None or time.time() > deadline:
            sys.stderr.write(f"the lab did not start (log: {lab / 'lab.log'}):\n{(lab / 'lab.log').read_text()}")
            stop(lab)
            return 1
        time.sleep(0.1)
    sys.stdout.write((lab / "env").read_text())
    return 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def stop(lab: pathlib.Path) -> int:
    pidfile = lab / "lab.pid"
    if not pidfile.exists():
        return 0
    pid = int(pidfile.read_text())
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 60
        while alive(pid) and time.time() < deadline:
            try:  # reaps the child when this process started it (lab.py start that failed)
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.1)
    pidfile.unlink(missing_ok=True)
    return 0


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in ("start", "stop", "env", "serve") or \
            (len(sys.argv) > 3 and sys.argv[1] not in ("start", "serve")):
        sys.stderr.write(__doc__)
        return 64
    lab = pathlib.Path(sys.argv[2]).resolve()
    if sys.argv[1] == "serve":
        serve(lab, sys.argv[3:])
        return 0
    if sys.argv[1] == "env":
        if not (lab / "env").exists():
            sys.stderr.write(f"no lab runs in {lab}: scripts/lab.py start {lab}\n")
            return 1
        sys.stdout.write((lab / "env").read_text())
        return 0
    return start(lab, sys.argv[3:]) if sys.argv[1] == "start" else stop(lab)


if __name__ == "__main__":
    sys.exit(main())
