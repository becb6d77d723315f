#!/usr/bin/env python3
"""Writes the link order of tesserad's hot code (make order-file; packaging/tesserad.order).

Every function tesserad executes from start-up through a run of assertions to its shutdown on SIGTERM is named in
a callgrind profile of `tessera-bench --callgrind N --callgrind-out DIR`, run with VALGRIND_OPTS=--demangle=no so
the names are the symbols' own. lld places the functions of the order file first, in its order (RELEASE_FLAGS:
--symbol-ordering-file; every Swift function in a section of its own, -function-sections): the code a running
daemon touches sits together in ~1.5 MB instead of being spread over 20 MB of text, and the kernel maps fewer
pages of the binary (each page fault maps up to 16 pages around it that are in the page cache).

Usage: order-file.py PROFILE BINARY OUTPUT   (PROFILE: tessera-bench --order-profile's, of BINARY)
Code the profile names only by its address (valgrind finds no symbol whose size covers it: code the compiler placed
after a function's recorded end) is ordered with the function that precedes it in BINARY's symbol table. Names no
longer in a build are ignored by the linker (--no-warn-symbol-ordering): a stale file costs memory, never a build.
"""

import bisect
import re
import subprocess
import sys

ENTRY = re.compile(r"(c?(?:ob|fn))=\((\d+)\)(?: (.*))?$")


def code_symbols(binary: str) -> tuple[list[int], list[str]]:
    """The addresses and names of `binary`'s function symbols, by address."""
    listing = subprocess.run(["nm", "-n", "--defined-only", binary], capture_output=True, text=True, check=True)
    addresses: list[int] = []
    names: list[str] = []
    for line in listing.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tTwW":
            addresses.append(int(parts[0], 16))
            names.append(parts[2])
    return addresses, names


def hot_functions(profile: str, object_name: str, binary: str) -> list[str]:
    """The functions of `object_name` (a path's last component) with a cost line in `profile`, in their order."""
    addresses, symbols = code_symbols(binary)
    objects: dict[str, str] = {}
    functions: dict[str, str] = {}
    current_object = ""
    seen: dict[str, None] = {}
    with open(profile, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            match = ENTRY.match(line.rstrip("\n"))
            if not match:
                continue
            kind, number, name = match.groups()
            table = objects if kind.endswith("ob") else functions
            if name:
                table[number] = name
            if kind == "ob":
                current_object = objects.get(number, "")
            elif kind == "fn" and current_object.rsplit("/", 1)[-1] == object_name:
                symbol = functions[number]
                if symbol.startswith("0x"):
                    index = bisect.bisect_right(addresses, int(symbol, 16)) - 1
                    if index < 0:
                        continue
                    symbol = symbols[index]
                if symbol != "(below main)":
                    seen.setdefault(symbol)
    return list(seen)


def main() -> int:
    if len(sys.argv) != 4:
        print("usage: order-file.py PROFILE BINARY OUTPUT", file=sys.stderr)
        return 2
    names = hot_functions(sys.argv[1], "tesserad", sys.argv[2])
    if len(names) < 1000:
        print(f"order-file: only {len(names)} functions of tesserad in {sys.argv[1]}: not a full run", file=sys.stderr)
        return 1
    with open(sys.argv[3], "w", encoding="utf-8") as out:
        out.write("\n".join(names) + "\n")
    print(f"order-file: {len(names)} functions written to {sys.argv[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
