"""`mrz.read` (docs/API.md, docs/KIOSK.md "The MRZ from the camera") on the real tesserad with the reference reader
(matcher/tessera-mrz-read: Debian's tesseract-ocr), resident between frames: the ICAO specimens rendered in OCR-B
(mrz_images.py) come back as their lines, a frame without a document is MRZ_NOT_FOUND, a reader that crashes or is
not configured is MRZ_READER_UNAVAILABLE, and one that died is started again by the next frame."""
from __future__ import annotations

import base64
import io
import json
import stat

import pytest

from tessera_harness import Daemon, RPCError
import mrz_images


def frame(img, fmt: str = "JPEG") -> dict:
    buf = io.BytesIO()
    img.save(buf, fmt, quality=85) if fmt == "JPEG" else img.save(buf, fmt)
    return {"mediaType": f"image/{fmt.lower()}", "data": base64.b64encode(buf.getvalue()).decode()}


def daemon(tmp_path, reader: dict | None) -> Daemon:
    config = tmp_path / "tesserad.json"
    config.write_text(json.dumps({"mrzReader": reader} if reader is not None else {}))
    return Daemon(tmp_path, {}, ["--config", str(config)]).start()


@pytest.fixture
def reference(tmp_path):
    d = daemon(tmp_path, None)  # no mrzReader section: the reference reader of the checkout
    yield d
    d.stop()


def test_the_specimens_are_read_and_a_blank_frame_is_not_found(reference):
    c = reference.client()
    for name in ["td3", "td2"]:
        mrz = mrz_images.SPECIMENS[name]
        assert c.call("mrz.read", {"image": frame(mrz_images.page(mrz))})["lines"] == mrz.split("\n"), name
    blank = mrz_images.page("<" * 44 + "\n" + "<" * 44).crop((0, 0, 400, 300))
    with pytest.raises(RPCError) as e:
        c.call("mrz.read", {"image": frame(blank, "PNG")})
    assert e.value.code == "MRZ_NOT_FOUND"
    with pytest.raises(RPCError) as e:
        c.call("mrz.read", {"image": {"mediaType": "image/gif", "data": "R0lG"}})
    assert e.value.code == "INVALID_INPUT"
    # The reader stayed resident: one start for all those frames.
    log = reference.log.read_text()
    assert log.count("started ") == 1, log


def test_a_crashing_reader_is_unavailable_and_restarted(tmp_path):
    # Answers the first frame with nothing found, then dies on the second: MRZ_READER_UNAVAILABLE (retryable), and
    # the third frame starts it again.
    crash = tmp_path / "crash-reader"
    crash.write_text("#!/bin/sh\nread -r line\necho '{\"found\": false}'\nread -r line\nexit 7\n")
    crash.chmod(crash.stat().st_mode | stat.S_IEXEC)
    d = daemon(tmp_path, {"command": [str(crash)], "timeoutSeconds": 5})
    try:
        c = d.client()
        img = frame(mrz_images.page(mrz_images.SPECIMENS["td3"]))
        codes = []
        for _ in range(3):
            with pytest.raises(RPCError) as e:
                c.call("mrz.read", {"image": img})
            codes.append(e.value.code)
        assert codes == ["MRZ_NOT_FOUND", "MRZ_READER_UNAVAILABLE", "MRZ_NOT_FOUND"], codes
        assert d.log.read_text().count("started ") == 2
    finally:
        d.stop()


def test_no_reader_and_a_bad_section(tmp_path):
    d = daemon(tmp_path, {"command": ["/nonexistent/tessera-mrz-read"]})
    try:
        with pytest.raises(RPCError) as e:
            d.client().call("mrz.read", {"image": frame(mrz_images.page(mrz_images.SPECIMENS["td1"]))})
        assert e.value.code == "MRZ_READER_UNAVAILABLE"
    finally:
        d.stop()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tesserad.json").write_text(json.dumps({"mrzReader": {"timeoutSeconds": 0}}))
    with pytest.raises(RuntimeError, match="mrzReader"):
        Daemon(bad, {}, ["--config", str(bad / "tesserad.json")]).start()
