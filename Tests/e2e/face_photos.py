"""The public-domain photos of face_recognition 1.3.0's source distribution (tests/test_images: obama*.jpg one
person, biden.jpg another), fetched with pip into .state/ (used by test_face.py and scripts/face-bench.py)."""
from __future__ import annotations

import pathlib
import subprocess
import sys
import tarfile

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def fetch_photos() -> pathlib.Path:
    """face_recognition 1.3.0's tests/test_images, from its sdist (pip download; cached under .state/)."""
    cache = ROOT / ".state" / "face-photos"
    images = cache / "face_recognition-1.3.0" / "tests" / "test_images"
    if not (images / "biden.jpg").exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "face_recognition==1.3.0", "--no-deps",
                        "--no-binary", ":all:", "-d", str(cache)], check=True, timeout=300)
        with tarfile.open(cache / "face_recognition-1.3.0.tar.gz") as t:
            t.extractall(cache, members=[m for m in t.getmembers() if "/tests/test_images/" in m.name],
                         filter="data")
    return images
