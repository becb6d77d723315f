#!/usr/bin/env python3
"""Package.swift declares exactly what each target imports: every module a target's Swift files import is one of
its declared dependencies (a target of this package or a product), and every declared dependency is imported by
at least one of its files. Reads the manifest through `swift package dump-package`; exits 1 with one line per
drift. And no Swift file under Sources/, Tests/ or Benchmarks/ imports full Foundation (or a module that needs it): the
FoundationEssentials subset at most, so neither binary links Foundation's internationalisation or ICU (issue #39).
`make test` runs it; `make check-imports` alone."""
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Modules of the toolchain and the system: never declared in a manifest.
SYSTEM = {
    "Foundation", "FoundationEssentials", "FoundationNetworking", "FoundationXML", "Glibc", "Musl", "Darwin",
    "Dispatch", "Synchronization", "Testing", "XCTest", "_Concurrency", "Swift", "SwiftShims", "os", "CoreFoundation",
    "PackageDescription", "RegexBuilder", "Observation", "Distributed", "_StringProcessing",
}
# Full Foundation and the modules that bring it (or ICU) along; `FoundationEssentials` is the most a file imports.
FORBIDDEN = {
    "Foundation": "Foundation links ICU and its internationalisation",
    "FoundationNetworking": "FoundationNetworking needs full Foundation",
    "FoundationXML": "FoundationXML needs full Foundation",
    "FoundationInternationalization": "FoundationInternationalization links ICU",
    "CoreFoundation": "CoreFoundation is full Foundation's core",
    "_FoundationICU": "_FoundationICU is ICU",
}
# Directories whose Swift files are checked for FORBIDDEN, every target's (the fuzz harness's too, which the manifest
# declares only under TESSERA_FUZZ=1; the benchmarks').
NO_FOUNDATION_DIRS = ("Sources", "Tests", "Benchmarks")
TREES = ", ".join(NO_FOUNDATION_DIRS[:-1]) + " and " + NO_FOUNDATION_DIRS[-1]
IMPORT = re.compile(
    r"^\s*(?:@[\w(), ]+\s+)*(?:(?:public|package|internal|fileprivate|private)\s+)?import\s+"
    r"(?:(?:typealias|struct|class|enum|protocol|let|var|func)\s+)?([A-Za-z_][A-Za-z0-9_]*)")


def manifest() -> dict:
    out = subprocess.run(["swift", "package", "dump-package"], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def target_dir(t: dict) -> pathlib.Path:
    if t.get("path"):
        return ROOT / t["path"]
    return ROOT / ("Tests" if t["type"] == "test" else "Sources") / t["name"]


def declared(t: dict) -> set[str]:
    names = set()
    for dep in t.get("dependencies", []):
        for kind in ("byName", "target", "product"):
            if kind in dep:
                names.add(dep[kind][0])
    return names


def imports_of(f: pathlib.Path) -> list[tuple[int, str]]:
    """(line number, module) of each import line of `f`, outside block comments."""
    found = []
    in_block = False
    for number, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if in_block:
            in_block = "*/" not in stripped
            continue
        if stripped.startswith("/*"):
            in_block = "*/" not in stripped
            continue
        m = IMPORT.match(line)
        if m:
            found.append((number, m.group(1)))
    return found


def imported(directory: pathlib.Path) -> set[str]:
    return {name for f in directory.rglob("*.swift") for _, name in imports_of(f)}


def foundation_imports() -> list[str]:
    problems = []
    for top in NO_FOUNDATION_DIRS:
        for f in sorted((ROOT / top).rglob("*.swift")):
            for number, name in imports_of(f):
                if name in FORBIDDEN:
                    problems.append(f"{f.relative_to(ROOT)}:{number}: imports {name} ({FORBIDDEN[name]})")
    return problems


def main() -> int:
    pkg = manifest()
    problems = []
    for t in pkg["targets"]:
        if t["type"] in ("system", "binary", "plugin", "macro"):
            continue
        directory = target_dir(t)
        if not directory.is_dir():
            continue
        uses = imported(directory) - SYSTEM - {t["name"]}
        deps = declared(t)
        for name in sorted(uses - deps):
            problems.append(f"{t['name']}: imports {name} but Package.swift does not declare it")
        for name in sorted(deps - uses):
            problems.append(f"{t['name']}: Package.swift declares {name} but no file of it imports it")
    foundation = foundation_imports()
    for p in problems + foundation:
        print(p)
    print(f"imports: {len(problems)} drift(s) between Package.swift and the import lines" if problems
          else "imports: Package.swift declares exactly what each target imports")
    print(f"imports: {len(foundation)} import(s) of full Foundation under {TREES}: import "
          "FoundationEssentials at most; TesseraCore and TesseraRuntime have what it lacks (Locked, trimmingWhitespace, "
          "FilePaths, String(printf:), TesseraError.reason(of:), DedicatedThread, ChildProcess, OpenFile)"
          if foundation else f"imports: no file under {TREES} imports full Foundation")
    return 1 if problems or foundation else 0


if __name__ == "__main__":
    sys.exit(main())
