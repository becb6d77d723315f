#!/usr/bin/env python3
"""A scripted pinentry for the tests: speaks Assuan on stdin/stdout as pinentry does for gpg-agent.

Usage: scripted_pinentry.py STATE_DIR. STATE_DIR/answer says what the "user" does: `pin:TEXT` types TEXT at GETPIN
(and confirms a CONFIRM), `ok` confirms, `cancel` presses Cancel. Every request line is appended to STATE_DIR/log and
the number of questions asked (GETPIN, CONFIRM) is kept in STATE_DIR/asked, so a test sees what it was asked and how
often; STATE_DIR/argv and STATE_DIR/environ record how it was started."""
import os
import pathlib
import sys

state = pathlib.Path(sys.argv[1])


def send(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def escape(text: str) -> str:
    out = []
    for b in text.encode():
        out.append(f"%{b:02X}" if b in (0x25, 0x0A, 0x0D) or b < 0x20 else chr(b))
    return "".join(out)


def count() -> None:
    asked = state / "asked"
    n = int(asked.read_text()) if asked.exists() else 0
    asked.write_text(f"{n + 1}\n")


# What the program was started with, for the tests that check a PIN never travels in argv or the environment.
(state / "argv").write_text("\n".join(sys.argv) + "\n")
(state / "environ").write_text("".join(f"{k}={v}\n" for k, v in os.environ.items()))
send("OK Pleased to meet you")
for raw in sys.stdin:
    line = raw.rstrip("\r\n")
    command, _, argument = line.partition(" ")
    with open(state / "log", "a") as log:
        log.write(line + "\n")
    answer = (state / "answer").read_text().strip() if (state / "answer").exists() else "cancel"
    if command == "GETPIN":
        count()
        if answer.startswith("pin:"):
            send("D " + escape(answer[4:]))
            send("OK")
        else:
            send("ERR 83886179 Operation cancelled <Pinentry>")
    elif command == "CONFIRM":
        count()
        send("OK" if answer == "ok" or answer.startswith("pin:") else "ERR 83886194 Not confirmed <Pinentry>")
    elif command == "GETINFO":
        send("D 1.2.1-scripted" if argument == "version" else "D 0")
        send("OK")
    elif command == "BYE":
        send("OK closing connection")
        break
    elif command in ("OPTION", "SETTIMEOUT", "SETTITLE", "SETDESC", "SETPROMPT", "SETOK", "SETCANCEL", "SETERROR",
                     "SETKEYINFO", "SETREPEAT", "RESET", "NOP"):
        send("OK")
    else:
        send("ERR 536871187 Unknown IPC command <User defined source 1>")
