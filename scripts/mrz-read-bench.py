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
import mrz_images  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--generated", type=int, default=12)
    ap.add_argument("--seed", type=int, default=38)
    args = ap.parse_args()
    images = mrz_images.image_set(random.Random(args.seed), args.generated)
    reader = subprocess.Popen([str(root / "matcher" / "tessera-mrz-read")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    rows, times = {}, []
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
        ok = answer.get("lines") == mrz.split("\n")
        rows.setdefault(kind, []).append(ok)
        print(f"{name:22} {'read' if ok else 'missed':7} {times[-1]:.2f} s  {answer.get('lines')}", file=sys.stderr)
    reader.stdin.close()
    reader.wait(timeout=30)
    total = sum(sum(v) for v in rows.values())
    print(f"| images | read | per frame (median, max) |\n|---|---|---|")
    for kind, v in rows.items():
        print(f"| {kind} ({len(v)}) | {sum(v)} of {len(v)} |  |")
    print(f"| all ({len(times)}) | {total} of {len(times)} ({100 * total / len(times):.0f} %) | "
          f"{statistics.median(times):.2f} s, {max(times):.2f} s |")


if __name__ == "__main__":
    main()
