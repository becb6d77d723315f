#!/usr/bin/env python3
"""Times the reference face matcher (matcher/tessera-face-match) comparing two 640x480 JPEGs of one person
(face_recognition's test photos, Tests/e2e/face_photos.py, scaled into a 640x480 frame): run once per comparison
(one-shot: the models loaded each time) and resident (--resident, as the daemon runs it: the models loaded once).
Prints the median of each, the resident matcher's first comparison (with the model load) and its RSS. Usage:
.venv/bin/python scripts/face-bench.py [--runs N]"""
import argparse
import base64
import io
import json
import pathlib
import statistics
import subprocess
import sys
import time

from PIL import Image, ImageOps

root = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root / "Tests" / "e2e"))
from face_photos import fetch_photos  # noqa: E402

MATCHER = str(root / "matcher" / "tessera-face-match")


def photo(path: pathlib.Path) -> dict:
    out = io.BytesIO()
    ImageOps.pad(Image.open(path).convert("RGB"), (640, 480), color=(128, 128, 128)).save(out, "JPEG", quality=90)
    return {"mediaType": "image/jpeg", "data": base64.b64encode(out.getvalue()).decode()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    src = fetch_photos()
    request = json.dumps({"reference": photo(src / "obama.jpg"), "probes": [photo(src / "obama2.jpg")]})

    one_shot = []
    for _ in range(args.runs):
        start = time.monotonic()
        out = subprocess.run([MATCHER], input=request, capture_output=True, text=True, check=True, timeout=300)
        one_shot.append(time.monotonic() - start)
        assert json.loads(out.stdout)["decision"] == "match", out

    matcher = subprocess.Popen([MATCHER, "--resident"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    resident = []
    for _ in range(args.runs + 1):
        start = time.monotonic()
        matcher.stdin.write(request + "\n")
        matcher.stdin.flush()
        answer = json.loads(matcher.stdout.readline())
        resident.append(time.monotonic() - start)
        assert answer["decision"] == "match", answer
    rss = next(line.split()[1] for line in open(f"/proc/{matcher.pid}/status") if line.startswith("VmRSS:"))
    matcher.stdin.close()
    matcher.wait(timeout=30)

    ms = lambda s: f"{s * 1000:.0f} ms"
    print(f"face matcher, two 640x480 JPEGs, {args.runs} runs (median):")
    print(f"  one-shot  {ms(statistics.median(one_shot))} per comparison (min {ms(min(one_shot))})")
    print(f"  resident  {ms(statistics.median(resident[1:]))} per comparison (min {ms(min(resident[1:]))}); "
          f"first, with the model load: {ms(resident[0])}; RSS {int(rss) // 1024} MB")


if __name__ == "__main__":
    main()
