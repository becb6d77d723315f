#!/usr/bin/env python3
"""Runs the shell examples of README.md and fails when one does not do what the README says (a stage of `make test`).

Every ```sh block of README.md is preceded by a comment that declares what it needs:

    <!-- example: lab -->               run with the lab started as the README says (scripts/lab.py start DIR; its
                                        variables TESSERA_SOCKET, PCSCLITE_CSOCK_NAME, SSH_AUTH_SOCK, MRZ, PIN, LAB,
                                        VPCD, VPCD_FREE exported), in a scratch working directory shared by the blocks
    <!-- example: shell -->             run as it is from the repository's root, without the lab
    <!-- example: path -->              the README's own line that puts the build on PATH: run once from the
                                        repository's root, and the PATH it leaves is every other block's PATH
    <!-- example: not run: REASON -->   listed as not run, with the reason; never counted as passed

and optionally, on the lines after it, `<!-- expect: TEXT -->` (the block's output must contain TEXT). A block passes
when it runs to the end under `bash -e -o pipefail` within its time limit, the programs it left running in the
background (`cmd &`, the emulators) are still running, and its output contains every expected TEXT. The blocks run
in the README's order with the PATH the README's `path` block makes (without one, the built `tessera`/`tesserad`
first on PATH). A ```sh block without a declaration fails
the run: say what it needs. `--list` prints the blocks and their declarations without running any; `--readme FILE` reads FILE instead of README.md.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(os.environ.get("TESSERA_BIN_DIR", ROOT / ".build" / "debug"))
DECLARATION = re.compile(r"^<!--\s*example:\s*(lab|shell|path|not run:\s*(?P<reason>.+?))\s*-->\s*$")
EXPECT = re.compile(r"^<!--\s*expect:\s*(?P<text>.+?)\s*-->\s*$")
TIME_LIMIT = 300


class Block:
    def __init__(self, line: int, code: str, kind: str | None, reason: str | None, expect: list[str]):
        self.line, self.code, self.kind, self.reason, self.expect = line, code, kind, reason, expect


def blocks(readme: pathlib.Path) -> list[Block]:
    """The ```sh blocks with the declaration and expectations in the comment lines right above each."""
    lines = readme.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() in ("```sh", "```bash", "```shell"):
            start = i
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            kind = reason = None
            expect = []
            j = start - 1
            while j >= 0 and lines[j].strip().startswith("<!--"):
                if m := EXPECT.match(lines[j].strip()):
                    expect.insert(0, m["text"])
                elif m := DECLARATION.match(lines[j].strip()):
                    kind, reason = ("not run", m["reason"]) if m["reason"] else (m[1], None)
                j -= 1
            out.append(Block(start + 1, "\n".join(body) + "\n", kind, reason, expect))
        i += 1
    return out


def run_block(block: Block, env: dict, cwd: pathlib.Path) -> tuple[bool, str]:
    # After the block: programs it started in the background must still be running (they serve until stopped); then
    # they are stopped, so that the block's output ends.
    script = ("set -eo pipefail\n" + block.code +
              '\n_bg=$(jobs -p); if [ -n "$_bg" ]; then sleep 2; for _p in $_bg; do\n'
              '  kill -0 "$_p" 2>/dev/null || { echo "a program started in the background (pid $_p) has exited"; exit 97; }\n'
              'done; kill $_bg 2>/dev/null; wait; fi\n')
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TIME_LIMIT)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        output, status = f"(still running after {TIME_LIMIT} s)", -1
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the block's background programs
        except ProcessLookupError:
            pass
        proc.wait()
    missing = [t for t in block.expect if t not in output]
    if status != 0:
        return False, f"exit status {status}\n{output}"
    if missing:
        return False, "output lacks " + ", ".join(repr(t) for t in missing) + f"\n{output}"
    return True, output


def lab_env(lab: pathlib.Path) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "lab.py"), "start", str(lab)],
                         capture_output=True, text=True, timeout=240)
    if out.returncode != 0:
        raise SystemExit(f"the lab did not start:\n{out.stderr}")
    # The printed lines are `export NAME=VALUE` in shell quoting: let bash read them.
    dump = subprocess.run(["bash", "-c", out.stdout + "\nenv -0"], capture_output=True, timeout=30, check=True)
    return dict(item.split("=", 1) for item in dump.stdout.decode().split("\0") if "=" in item)


def main() -> int:
    # --readme FILE: another file in README.md's form (the runner's own tests).
    readme = pathlib.Path(sys.argv[sys.argv.index("--readme") + 1]) if "--readme" in sys.argv else ROOT / "README.md"
    found = blocks(readme)
    if "--list" in sys.argv:
        for b in found:
            print(f"{readme.name}:{b.line}: {b.kind or 'UNDECLARED'}" + (f" ({b.reason})" if b.reason else ""))
        return 0
    undeclared = [b for b in found if b.kind is None]
    for b in undeclared:
        print(f"FAIL {readme.name}:{b.line}: a shell block without <!-- example: lab | shell | not run: REASON -->")
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="tessera-readme-"))
    work = scratch / "work"
    work.mkdir()
    base = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    for b in found:
        if b.kind == "path":  # exactly what the README tells its reader to run
            made = subprocess.run(["bash", "-c", "set -e\n" + b.code + 'printf %s "$PATH"'], cwd=ROOT,
                                  env=os.environ, capture_output=True, text=True, timeout=30)
            if made.returncode != 0:
                raise SystemExit(f"{readme.name}:{b.line}: the PATH block failed: {made.stderr}")
            base["PATH"] = made.stdout
            print(f"PATH {readme.name}:{b.line}: {b.code.strip()}")
    for name in ("TESSERA_SOCKET", "PCSCLITE_CSOCK_NAME", "SSH_AUTH_SOCK", "MRZ", "PIN", "LAB"):
        base.pop(name, None)
    passed, failed, not_run = 0, len(undeclared), []
    lab = None
    try:
        for b in found:
            if b.kind == "not run":
                not_run.append(b)
                print(f"NOT RUN {readme.name}:{b.line}: {b.reason}")
                continue
            if b.kind is None or b.kind == "path":
                continue
            if b.kind == "lab" and lab is None:
                lab = scratch / "lab"
                print(f"== the lab: scripts/lab.py start {lab}")
                lab_vars = lab_env(lab)
            env = {**base, **lab_vars, "PATH": base["PATH"]} if b.kind == "lab" else base
            began = time.time()
            ok, output = run_block(b, env, work if b.kind == "lab" else ROOT)
            if ok:
                passed += 1
                print(f"ok   {readme.name}:{b.line} ({b.kind}, {time.time() - began:.1f} s)")
            else:
                failed += 1
                print(f"FAIL {readme.name}:{b.line} ({b.kind}):\n{b.code}--- {output}")
    finally:
        if lab is not None:
            subprocess.run([sys.executable, str(ROOT / "scripts" / "lab.py"), "stop", str(lab)], timeout=120)
        if failed == 0:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print(f"(kept for inspection: {scratch})")
    print(f"README examples: {passed} passed, {failed} failed, {len(not_run)} not run")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
