#!/usr/bin/env python3
"""Measures the reference MRZ reader (matcher/tessera-mrz-read) on the test image set (Tests/e2e/mrz_images.py:
the ICAO specimens and generated TD3s in OCR-B, clean, blurred, tilted, with glare): read rate (the exact MRZ
back) and time per frame, the reader resident as the daemon runs it. Usage: .venv/bin/python scripts/mrz-read-bench.py
[--generated N] [--seed S]"""
import argparse
import base64
import io
import json
import pathlib
import random
import statistics
import subprocess
import sys
import time

root = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root / "Tests" / "e2e"))
sys.path.insert(0, str(root / "matcher"))
import mrz_images  # noqa: E402
import tessera_mrz_read  # noqa: E402  (its check digits, to count reads that pass them yet are wrong)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--generated", type=int, default=12)
    ap.add_argument("--seed", type=int, default=38)
    args = ap.parse_args()
    images = mrz_images.image_set(random.Random(args.seed), args.generated)
    reader = subprocess.Popen([str(root / "matcher" / "tessera-mrz-read")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    rows, times, wrongs = {}, [], 0
    for name, mrz, img in images:
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=85)
        request = {"image": {"mediaType": "image/jpeg", "data": base64.b64encode(buf.getvalue()).decode()}}
        start = time.monotonic()
        reader.stdin.write(json.dumps(request) + "\n")
        reader.stdin.flush()
        answer = json.loads(reader.stdout.readline())
        times.append(time.monotonic() - start)
        kind = name.split("-", 1)[1]
        lines, want = answer.get("lines"), mrz.split("\n")
        ok = lines == want
        # The lines with the number and dates (TD1: the first two; TD2/TD3: the second): what opens the chip.
        access = [0, 1] if len(want) == 3 else [1]
        usable = bool(lines) and len(lines) == len(want) and all(lines[i] == want[i] for i in access)
        wrong = bool(lines) and not usable and tessera_mrz_read.checks_hold(lines)
        rows.setdefault(kind, []).append((ok, usable))
        wrongs += wrong
        print(f"{name:22} {'exact' if ok else 'usable' if usable else 'missed':7} {times[-1]:.2f} s  {lines}",
              file=sys.stderr)
    reader.stdin.close()
    reader.wait(timeout=30)
    exact = sum(ok for v in rows.values() for ok, _ in v)
    usable = sum(u for v in rows.values() for _, u in v)
    n = len(times)
    print("| images | number and dates read right | every character right |\n|---|---|---|")
    for kind, v in rows.items():
        print(f"| {kind} ({len(v)}) | {sum(u for _, u in v)} | {sum(ok for ok, _ in v)} |")
    print(f"| all ({n}) | {usable} ({100 * usable / n:.0f} %) | {exact} ({100 * exact / n:.0f} %) |")
    print(f"\nread wrong yet passing every check digit: {wrongs}")
    print(f"time per frame: median {statistics.median(times):.2f} s, max {max(times):.2f} s")

if __name__ == "__main__":
    main()
