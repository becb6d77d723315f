#!/usr/bin/env python3
"""Renders a man page from a program's argument parser: `PROGRAM --experimental-dump-help` (swift-argument-parser's
JSON of every command, option and help text), so the page says exactly what `--help` says.

    scripts/gen-man.py PROGRAM SECTION VERSION > PROGRAM.SECTION

Every subcommand gets a subsection with its synopsis, description and options. Lines of the help texts that are
indented (examples, file lists) stay as they are; an upper-case line alone (EXAMPLES, FILES) becomes a subheading.
"""
import json
import os
import re
import subprocess
import sys


def esc(text: str) -> str:
    """Escapes text for roff: backslashes, and a leading dot or quote that would start a request."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"(?m)^([.'])", r"\\&\1", text)
    return text


def opt_name(name: dict) -> str:
    return ("-" if name["kind"] in ("short", "longWithSingleDash") else "--") + name["name"]


def option_heading(arg: dict) -> str:
    names = ", ".join(f"\\fB{esc(opt_name(n)).replace('-', chr(92) + '-')}\\fR" for n in arg.get("names", []))
    value = arg.get("valueName", "")
    if arg["kind"] == "positional":
        return f"\\fI{esc(value)}\\fR" + ("..." if arg.get("isRepeating") else "")
    if arg["kind"] == "option":
        names += f" \\fI{esc(value)}\\fR"
    return names


def synopsis(path: list[str], cmd: dict) -> str:
    parts = [f"\\fB{' '.join(path)}\\fR"]
    # The parser's own `help` is not a command of the program (tesserad has none).
    if any(sub["commandName"] != "help" for sub in cmd.get("subcommands", [])):
        parts.append("\\fICOMMAND\\fR")
    for arg in cmd.get("arguments", []):
        if not arg.get("shouldDisplay", True) or arg.get("preferredName", {}).get("name") in ("help", "version"):
            continue
        if arg["kind"] == "positional":
            text = f"\\fI{esc(arg['valueName'])}\\fR"
        else:
            text = f"\\fB{esc(opt_name(arg['preferredName'])).replace('-', chr(92) + '-')}\\fR"
            if arg["kind"] == "option":
                text += f" \\fI{esc(arg['valueName'])}\\fR"
        if arg.get("isRepeating"):
            text += "..."
        parts.append(f"[{text}]" if arg.get("isOptional") else text)
    return " ".join(parts)


def prose(text: str, heading: str) -> list[str]:
    """The help text's paragraphs; indented runs verbatim (examples, file lists), except an indented line longer
    than a terminal's 80 columns, which is prose and is filled as an indented paragraph; upper-case lines as
    headings."""
    out: list[str] = []
    verbatim = False
    for line in text.strip("\n").split("\n"):
        if line.startswith(" ") and len(line.strip()) > 78:
            if verbatim:
                out += [".RE", ".fi"]
                verbatim = False
            out += [".RS 4", ".PP", esc(line.strip()), ".RE"]
            continue
        if line.startswith(" ") and line.strip():
            if not verbatim:
                out += [".PP", ".nf", ".RS 4"]
                verbatim = True
            out.append(esc(line[2:] if line.startswith("  ") else line.lstrip()))
            continue
        if verbatim:
            out += [".RE", ".fi"]
            verbatim = False
        if not line.strip():
            continue
        if re.fullmatch(r"[A-Z][A-Z0-9 ()/&,-]+", line.strip()):
            out += [f".{heading} {esc(line.strip())}"]
        else:
            out += [".PP", esc(line)]
    if verbatim:
        out += [".RE", ".fi"]
    return out


def options(cmd: dict) -> list[str]:
    out: list[str] = []
    for arg in cmd.get("arguments", []):
        if not arg.get("shouldDisplay", True):
            continue
        out += [".TP", option_heading(arg)]
        text = arg.get("abstract", "")
        if arg.get("discussion"):
            text += " " + arg["discussion"]
        if "defaultValue" in arg and arg["kind"] == "option":
            text += f" (default: {arg['defaultValue']})"
        out.append(esc(text.strip()) or "\\&")
    return out


def command(path: list[str], cmd: dict, top: bool) -> list[str]:
    out: list[str] = []
    if not top:
        out += [f".SS {esc(' '.join(path[1:]))}", esc(cmd.get("abstract", "")), ".PP", synopsis(path, cmd)]
        out += prose(cmd.get("discussion", ""), "PP\n.B")
        if cmd.get("arguments"):
            out += [".PP", "Options:", ".RS 4"] + options(cmd) + [".RE"]
    for sub in cmd.get("subcommands", []):
        if sub.get("shouldDisplay", True) and sub["commandName"] != "help":
            out += command(path + [sub["commandName"]], sub, False)
    return out


def main() -> None:
    program, section, version = sys.argv[1], sys.argv[2], sys.argv[3]
    dump = json.loads(subprocess.run([program, "--experimental-dump-help"], check=True, capture_output=True).stdout)
    cmd = dump["command"]
    name = cmd["commandName"]
    out = [
        f'.TH {name.upper()} {section} "" "Tessera {esc(version)}" "Tessera"',
        ".SH NAME",
        f"{name} \\- {esc(cmd.get('abstract', ''))}",
        ".SH SYNOPSIS",
        synopsis([name], cmd),
        ".SH DESCRIPTION",
    ]
    out += prose(cmd.get("discussion", ""), "SS")
    out += [".SH OPTIONS"] + options(cmd)
    subs = command([name], cmd, True)
    if subs:
        out += [".SH COMMANDS", f"Every command takes the options of its own; \\fB{name} help\\fR \\fICOMMAND\\fR shows the same text."]
        out += subs
    out += [".SH SEE ALSO", "\\fBtessera\\fR(1), \\fBtesserad\\fR(8); /usr/share/doc/tessera (API.md, CONFIG.md, INSTALL.md)"]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
