#!/usr/bin/env python3
"""Writes the link order of tesserad's hot code (make order-file; packaging/tesserad.order).

Every function tesserad executes from start-up through an enrolment, assertions, 70 s idle and its shutdown is named
in the callgrind profile `tessera-bench --order-profile FILE` writes, run with VALGRIND_OPTS=--demangle=no so the
names are the symbols' own. lld places the functions of the order file first, in its order (RELEASE_FLAGS:
--symbol-ordering-file; every function in a section of its own): the code a running daemon touches sits together
instead of being spread over 20 MB of text, and the kernel maps fewer pages of the binary (a page fault maps the
pages around it that are in the page cache).

Usage: order-file.py PROFILE OUTPUT   (PROFILE: tessera-bench --order-profile's)
Code the profile names only by its address is the compiler's private functions, which have no symbol to order by:
packaging/tesserad-private-code.ld gathers them instead. Names no longer in a build are ignored by the linker
(--no-warn-symbol-ordering): a stale file costs memory, never a build.
"""

import re
import sys

ENTRY = re.compile(r"(c?(?:ob|fn))=\((\d+)\)(?: (.*))?$")


def hot_functions(profile: str, object_name: str) -> list[str]:
    """The functions of `object_name` (a path's last component) with a cost line in `profile`, in their order."""
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
                if not symbol.startswith("0x") and symbol != "(below main)":
                    seen.setdefault(symbol)
    return list(seen)


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: order-file.py PROFILE OUTPUT", file=sys.stderr)
        return 2
    names = hot_functions(sys.argv[1], "tesserad")
    if len(names) < 1000:
        print(f"order-file: only {len(names)} functions of tesserad in {sys.argv[1]}: not a full run", file=sys.stderr)
        return 1
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        out.write("\n".join(names) + "\n")
    print(f"order-file: {len(names)} functions written to {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
