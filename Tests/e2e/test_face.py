"""Face matching end to end (issue 30; docs/ENROLLMENT.md, "Face matching"): the real tesserad with the reference
matcher (matcher/tessera-face-match: dlib's ResNet descriptor), an emulated passport whose DG2 is a real person's
portrait (`tessera lab make-profile --face`), and the public-domain photos of face_recognition 1.3.0's source
distribution (tests/test_images: obama*.jpg one person, biden.jpg another), fetched with pip at test time into
.state/. Scores are checked against dlib itself (face_recognition_models' weights, computed here)."""
from __future__ import annotations

import base64
import io
import json
import os
import pathlib
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from PIL import Image

from tessera_harness import (BIN, MRZ_ANNA, NOBODY, PCSCD, ROOT, SOFTHSM_MODULE, AsUser, Client, Daemon,
                             EmulatedPassport, RPCError, SoftHSM, calls_as, let_other_uids_reach, make_passport_profile)
from face_photos import fetch_photos
from test_enrollment import StationCLI
from test_mdoc import EmulatedMDoc, make_mdoc

PIN = "1234"
RP = "face.example.com"
NFC = {"key": "NFC_PHASE", "cardWaitSeconds": 30}
PASSKEY = {"key": "PASSKEY_CREATION", "rpId": RP}
CONFIRM = {"key": "CONFIRM", "client": True, "prompt": "Confirm",
           "input": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}}
WORKFLOWS = {
    "face": {"steps": ["NFC_MRZ", NFC, {"key": "FACE_MATCHING", "keepTemplate": True}, PASSKEY]},
    "selfie": {"steps": ["NFC_MRZ", NFC, "MID_SELFIE_MATCHING", CONFIRM]},
    "mdl-face": {"steps": [{"key": "MDOC_PHASE", "cardWaitSeconds": 30}, "FACE_MATCHING", CONFIRM]},
    "liveness": {"steps": ["NFC_MRZ", NFC, "FACE_MATCHING",
                           {"key": "LIVENESS_CHALLENGE_SESSION_CREATION", "actions": ["turnLeft", "turnRight"],
                            "length": 2},
                           "LIVENESS_CHALLENGE_PHASE", CONFIRM]},
}
# The matcher runs on a loaded CI machine: a generous timeout for the reference matcher.
TIMEOUT = 300


# --- photos ------------------------------------------------------------------------------------------------------

def jpeg(image: Image.Image, side: int, quality: int = 90, fmt: str = "JPEG") -> bytes:
    image = image.convert("RGB")
    image.thumbnail((side, side))
    out = io.BytesIO()
    image.save(out, fmt, quality=quality) if fmt == "JPEG" else image.save(out, fmt)
    return out.getvalue()


def sheared(image: Image.Image, k: float) -> Image.Image:
    """The face with its lower part shifted sideways: the nose tip moves against the eyes as in a head turn
    (k > 0: towards the image's right, the person's left)."""
    image = image.convert("RGB")
    image.thumbnail((480, 480))
    return image.transform(image.size, Image.AFFINE, (1, -k, k * image.height / 2, 0, 1, 0),
                           resample=Image.BICUBIC)


def item(data: bytes, media: str = "image/jpeg") -> dict:
    return {"mediaType": media, "data": base64.b64encode(data).decode()}


class Photos:
    def __init__(self, root: pathlib.Path):
        src = fetch_photos()
        self.obama = Image.open(src / "obama.jpg")
        # A chip-sized portrait, as JPEG and JPEG 2000.
        self.portrait = jpeg(self.obama, 240)
        self.portrait_jp2 = jpeg(self.obama, 240, fmt="JPEG2000")
        self.genuine = jpeg(Image.open(src / "obama2.jpg"), 480)
        self.genuine2 = jpeg(Image.open(src / "obama3.jpg"), 480)
        self.impostor = jpeg(Image.open(src / "biden.jpg"), 480)
        gradient = np.tile(np.linspace(0, 255, 320, dtype=np.uint8), (240, 1))
        self.noface = jpeg(Image.fromarray(np.stack([gradient] * 3, axis=-1)), 320)
        self.neutral = jpeg(sheared(Image.open(src / "obama2.jpg"), 0), 480)
        self.turns = {"turnLeft": jpeg(sheared(Image.open(src / "obama2.jpg"), 0.5), 480),
                      "turnRight": jpeg(sheared(Image.open(src / "obama2.jpg"), -0.5), 480)}
        for name in ("portrait", "genuine", "impostor", "noface"):
            (root / f"{name}.jpg").write_bytes(getattr(self, name))
        (root / "portrait.jp2").write_bytes(self.portrait_jp2)
        self.root = root


def dlib_score(reference: bytes, probe: bytes) -> float:
    """1 - the Euclidean distance of dlib's descriptors of the two images, computed here with dlib directly."""
    import dlib
    import face_recognition_models as m
    detector = dlib.get_frontal_face_detector()
    shapes = dlib.shape_predictor(m.pose_predictor_model_location())
    encoder = dlib.face_recognition_model_v1(m.face_recognition_model_location())

    def descriptor(data: bytes):
        pixels = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        box = max(detector(pixels, 1), key=lambda r: r.width() * r.height())
        return np.array(encoder.compute_face_descriptor(pixels, shapes(pixels, box), 1))
    return 1 - float(np.linalg.norm(descriptor(reference) - descriptor(probe)))


# --- fixtures ----------------------------------------------------------------------------------------------------

class Lab:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.photos = Photos(root)
        self.pcscd = PCSCD(root).start()
        self.profile = make_passport_profile(root / "passport", MRZ_ANNA, "--pace", "ecdh-gm-p256-aes128", "--aa",
                                             "--face", str(root / "portrait.jpg"))
        # An mDL whose portrait is the same person's.
        self.mdl = make_mdoc(root / "mdl", "--photo", str(root / "portrait.jpg"))
        self.crash = root / "crash-matcher"
        self.crash.write_text("#!/bin/sh\ncat >/dev/null\necho 'matcher going down' >&2\nkill -SEGV $$\n")
        self.crash.chmod(0o755)

    def stop(self):
        self.pcscd.stop()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("face"))
    yield lab
    lab.stop()


class Station:
    def __init__(self, lab: Lab, root: pathlib.Path, face: dict, extra: dict | None = None):
        self.lab, self.root = lab, root
        root.mkdir(parents=True, exist_ok=True)
        self.hsm = SoftHSM(root)
        self.hsm.add_token("kiosk", pin=PIN)
        config = root / "tesserad.json"
        config.write_text(json.dumps({"faceMatching": face, "enrollment": {"workflows": WORKFLOWS}, **(extra or {})}))
        self.daemon = Daemon(root, {**self.hsm.env, **lab.pcscd.env},
                             ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config", str(config),
                              "--csca", str(lab.profile / "csca.pem"), "--iaca", str(lab.mdl / "iaca.pem")]).start()

    def client(self) -> Client:
        return Client(self.daemon.socket, timeout=TIMEOUT)

    def chip(self) -> EmulatedPassport:
        def present(reader):
            return any(r["name"] == reader and r["cardPresent"]
                       for r in self.client().call("readers.list")["readers"])
        return EmulatedPassport(self.lab.pcscd, self.lab.profile, present)

    def holder(self) -> EmulatedMDoc:
        def wait_card(present: bool) -> None:
            reader = self.lab.pcscd.readers[0]
            deadline = time.time() + 30
            while time.time() < deadline:
                readers = self.client().call("readers.list")["readers"]
                if any(r["name"] == reader and r["cardPresent"] for r in readers) == present:
                    return
                time.sleep(0.05)
            raise TimeoutError(f"card never became {'present' if present else 'absent'}")
        return EmulatedMDoc(self.root, self.lab.pcscd.port, self.lab.mdl, wait_card)

    def stop(self):
        self.daemon.stop()


@pytest.fixture(scope="module")
def station(lab, tmp_path_factory):
    s = Station(lab, tmp_path_factory.mktemp("station"), {"timeoutSeconds": TIMEOUT})
    yield s
    s.stop()


class Session:
    def __init__(self, station: Station):
        self.c = station.client()
        self.c.call("enrollment.subscribe")

    def submit(self, key: str, payload: dict) -> dict:
        return self.c.call("enrollment.submit", {"stepKey": key, "payload": payload})

    def until(self, method: str, **match) -> dict:
        while True:
            n = self.c.next_notification(TIMEOUT)
            p = n["params"]
            if n["method"] == method and all(p.get(k) == v for k, v in match.items()):
                return p
            assert n["method"] != "enrollment.finished" or method == "enrollment.finished", p

    def start(self, workflow: str) -> str:
        return self.c.call("enrollment.start", {"type": {"remote": {"candidate": workflow}}, "force": True})[
            "enrollmentId"]

    def read_chip(self) -> None:
        self.until("enrollment.stepRequired", key="NFC_MRZ")
        t = time.monotonic()
        self.submit("NFC_MRZ", {"mrz": MRZ_ANNA})
        self.until("enrollment.stepCompleted", key="NFC_PHASE")
        print(f"\nNFC_PHASE (DG2: a 240 px portrait) read and verified in {time.monotonic() - t:.2f} s")


def rpc_error(fn, *args) -> RPCError:
    with pytest.raises(RPCError) as e:
        fn(*args)
    return e.value


# --- tests -------------------------------------------------------------------------------------------------------

def test_make_profile_puts_the_face_in_dg2(lab, tmp_path):
    """--face IMAGE (JPEG or JPEG 2000) is DG2's image (the enrollment test reads it back from the chip)."""
    for name, data in (("portrait.jpg", lab.photos.portrait), ("portrait.jp2", lab.photos.portrait_jp2)):
        out = make_passport_profile(tmp_path / name, MRZ_ANNA, "--face", str(lab.root / name))
        dg2 = (out / "DG2.bin").read_bytes()
        assert data in dg2, name
    bad = subprocess.run([str(BIN / "tessera"), "lab", "make-profile", str(tmp_path / "x"), "--mrz", MRZ_ANNA,
                          "--face", str(lab.crash)], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "JPEG" in bad.stderr


def test_face_compare(station, lab):
    p = lab.photos
    c = station.client()
    t = time.monotonic()
    genuine = c.call("face.compare", {"reference": item(p.portrait), "probes": [item(p.genuine)]})
    elapsed = time.monotonic() - t
    impostor = c.call("face.compare", {"reference": item(p.portrait), "probes": [item(p.impostor)]})
    noface = c.call("face.compare", {"reference": item(p.portrait), "probes": [item(p.noface)]})
    jp2 = c.call("face.compare", {"reference": item(p.portrait_jp2, "image/jp2"), "probes": [item(p.genuine)]})
    print(f"\nface.compare genuine {genuine['score']} (replay {genuine['replayScore']}) impostor {impostor['score']} "
          f"jp2 {jp2['score']} matcher {genuine['elapsedMs']} ms, call {elapsed:.2f} s")
    assert genuine["match"] is True and genuine["decision"] == "match" and genuine["faceFound"] is True
    assert genuine["matcher"] == "tessera-face-match" and genuine["threshold"] is None
    assert "template" not in genuine
    assert impostor["match"] is False and impostor["decision"] == "noMatch" and impostor["score"] < 0.4
    assert noface["match"] is False and noface["decision"] == "noFace" and noface["faceFound"] is False
    assert jp2["match"] is True
    # The score is dlib's: 1 - the descriptor distance, as dlib computes it here.
    assert abs(genuine["score"] - dlib_score(p.portrait, p.genuine)) < 0.01
    assert abs(impostor["score"] - dlib_score(p.portrait, p.impostor)) < 0.01
    # Bad input never reaches the matcher.
    for bad in [{"reference": item(p.portrait)}, {"reference": item(p.portrait), "probes": []},
                {"reference": {"mediaType": "image/jpeg", "data": "!!"}, "probes": [item(p.genuine)]},
                {"reference": item(p.portrait), "probes": [item(p.genuine)], "challenge": ["nod"]}]:
        assert rpc_error(c.call, "face.compare", bad).code == "INVALID_INPUT", bad

    # The CLI: exit 0 on a match, 1 on none; --json is the method's result.
    run = lambda *a: subprocess.run([str(BIN / "tessera"), "--socket", station.daemon.socket, "face", "compare", *a],
                                    capture_output=True, text=True, timeout=TIMEOUT)
    out = run(str(lab.root / "portrait.jpg"), str(lab.root / "genuine.jpg"))
    assert out.returncode == 0 and "match     yes" in out.stdout and "tessera-face-match" in out.stdout, out
    out = run("--json", str(lab.root / "portrait.jp2"), str(lab.root / "impostor.jpg"))
    assert out.returncode == 1 and json.loads(out.stdout)["decision"] == "noMatch", out
    out = run(str(lab.root / "portrait.jpg"), str(lab.crash))
    assert out.returncode == 64 and "not a JPEG" in out.stderr, out


def test_face_matching_enrollment(station, lab):
    """NFC_PHASE reads the obama portrait from DG2; biden is FACE_MISMATCH (retry offered), a picture without a face
    is FACE_NOT_FOUND (the step keeps waiting), the genuine capture enrolls; the template is kept; the database
    never holds a capture, and the audit keeps decision, score and matcher."""
    p = lab.photos
    s = Session(station)
    with station.chip():
        eid = s.start("face")
        s.read_chip()
        req = s.until("enrollment.stepRequired", key="FACE_MATCHING")
        assert req["input"]["properties"]["images"]["type"] == "array"
        data = s.c.call("enrollment.transactionData")["data"]
        assert base64.b64decode(data["facePortrait"]["data"]) == p.portrait
        # Another person.
        e = rpc_error(s.submit, "FACE_MATCHING", {"images": [item(p.impostor)]})
        # A mismatch says mismatch, never how close: the score stays in the audit.
        assert e.code == "FACE_MISMATCH" and e.data["retryable"] is True and "score" not in e.data, e
        assert e.data["attemptsLeft"] == 4, e
        fin = s.until("enrollment.finished")
        assert fin["outcome"] == "failedWithRetryPossibility" and fin["error"]["code"] == "FACE_MISMATCH"
        assert "score" not in json.dumps(fin), fin
        assert s.c.call("enrollment.retry")["step"] == "FACE_MATCHING"
        s.until("enrollment.stepRequired", key="FACE_MATCHING")
        # No face: the step waits for another capture.
        e = rpc_error(s.submit, "FACE_MATCHING", {"images": [item(p.noface)]})
        assert e.code == "FACE_NOT_FOUND" and e.data["retryable"] is True and "score" not in e.data, e
        assert s.c.call("enrollment.status")["required"]["key"] == "FACE_MATCHING"
        assert rpc_error(s.submit, "FACE_MATCHING", {"images": []}).code == "INVALID_INPUT"
        # The person of the portrait.
        t = time.monotonic()
        s.submit("FACE_MATCHING", {"images": [item(p.genuine), item(p.genuine2)]})
        s.until("enrollment.stepCompleted", key="FACE_MATCHING")
        print(f"\nFACE_MATCHING submit to stepCompleted (2 frames): {time.monotonic() - t:.2f} s")
        result = s.c.call("enrollment.transactionData")["data"]["faceMatching"]["FACE_MATCHING"]
        assert result["matched"] is True and "score" not in result and result["templateKept"] is True
        s.until("enrollment.stepRequired", key="PASSKEY_CREATION")
        s.submit("PASSKEY_CREATION", {"pin": PIN})
        fin = s.until("enrollment.finished")
        assert fin["outcome"] == "success", fin

    (record,) = [r for r in s.c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    checks = record["faceChecks"]
    assert [(x["decision"], x["matcher"]) for x in checks] == [
        ("noMatch", "tessera-face-match"), ("noFace", "tessera-face-match"), ("match", "tessera-face-match")]
    assert checks[0]["score"] < 0.4 < checks[2]["score"]
    assert checks[2]["replayScore"] < 0.95
    # No capture and no portrait ever reached the database (its files, WAL included) or the log: needles from the
    # images' entropy-coded data (their headers' tables are the same in every JPEG Pillow writes).
    db = station.daemon.state / "tessera.sqlite"
    blob = b"".join(f.read_bytes() for f in db.parent.glob("tessera.sqlite*"))
    log = station.daemon.log.read_bytes()
    for image in (p.genuine, p.genuine2, p.impostor, p.noface, p.portrait):
        for needle in (image[-400:-336], base64.b64encode(image)[-600:-536]):
            assert needle not in blob and needle not in log
    rows = sqlite3.connect(db).execute("select mediaType, length(template), matcher from face_template").fetchall()
    assert rows == [("application/vnd.tessera.dlib-descriptor", 512, "tessera-face-match")]


def test_mid_selfie_matches_the_kept_template(station, lab):
    """After test_face_matching_enrollment kept the template: a later enrollment of the same document holder
    re-verifies the face against it (no portrait involved)."""
    p = lab.photos
    s = Session(station)
    with station.chip():
        s.start("selfie")
        s.read_chip()
        s.until("enrollment.stepRequired", key="MID_SELFIE_MATCHING")
        e = rpc_error(s.submit, "MID_SELFIE_MATCHING", {"images": [item(p.impostor)]})
        assert e.code == "FACE_MISMATCH", e
        s.until("enrollment.finished")
        s.c.call("enrollment.retry")
        s.until("enrollment.stepRequired", key="MID_SELFIE_MATCHING")
        s.submit("MID_SELFIE_MATCHING", {"images": [item(jpeg(lab.photos.obama, 480))]})
        s.until("enrollment.stepRequired", key="CONFIRM")
        s.submit("CONFIRM", {"ok": True})
        assert s.until("enrollment.finished")["outcome"] == "success"


def test_enroll_station_asks_for_image_files(station, lab):
    """`tessera enroll-station` in a terminal takes a face step's captures as image file paths (after
    test_face_matching_enrollment kept the template MID_SELFIE_MATCHING compares with)."""
    with station.chip(), StationCLI(station, "--workflow", "selfie") as cli:
        cli.until(lambda line: line.startswith("step NFC_MRZ"))
        cli.write("1\n" + MRZ_ANNA.replace("\n", " ") + "\n")
        cli.until(lambda line: line.startswith("step MID_SELFIE_MATCHING"), timeout=TIMEOUT)
        cli.write(f"{lab.crash}\n{lab.root / 'genuine.jpg'}\n")
        cli.until(lambda line: line.startswith("step CONFIRM"), timeout=TIMEOUT)
        cli.write("y\n")
        rest = cli.rest()
        assert cli.wait() == 0
        err = cli.stderr()
    assert "image files" in err and "not a JPEG" in err, err
    assert "done: MID_SELFIE_MATCHING" in "\n".join(cli.seen) and "enrollment succeeded" in rest, cli.seen


def test_face_matching_against_the_mdl_portrait(station, lab):
    """After MDOC_PHASE the reference is the mDL's portrait (requested although the step does not list it)."""
    p = lab.photos
    s = Session(station)
    with station.holder():
        s.start("mdl-face")
        s.until("enrollment.stepCompleted", key="MDOC_PHASE")
        s.until("enrollment.stepRequired", key="FACE_MATCHING")
        portrait = s.c.call("enrollment.transactionData")["data"]["facePortrait"]
        assert base64.b64decode(portrait["data"]) == p.portrait and portrait["mediaType"] == "image/jpeg"
        e = rpc_error(s.submit, "FACE_MATCHING", {"images": [item(p.impostor)]})
        assert e.code == "FACE_MISMATCH", e
        s.until("enrollment.finished")
        s.c.call("enrollment.retry")
        s.until("enrollment.stepRequired", key="FACE_MATCHING")
        s.submit("FACE_MATCHING", {"images": [item(p.genuine)]})
        s.until("enrollment.stepRequired", key="CONFIRM")
        s.submit("CONFIRM", {"ok": True})
        assert s.until("enrollment.finished")["outcome"] == "success"


def test_liveness_challenge(station, lab):
    """A random challenge of head turns (frames: the photo sheared so the nose moves against the eyes as in a head
    turn; the reference matcher's blink rule is checked on landmarks in test_reference_matcher_liveness_rules);
    still frames fail (LIVENESS_FAILED, and the retry draws a new challenge);
    frames that turn as asked pass."""
    p = lab.photos
    s = Session(station)
    with station.chip():
        s.start("liveness")
        s.read_chip()
        s.until("enrollment.stepRequired", key="FACE_MATCHING")
        s.submit("FACE_MATCHING", {"images": [item(p.genuine)]})
        req = s.until("enrollment.stepRequired", key="LIVENESS_CHALLENGE_PHASE")
        challenge = req["challenge"]
        assert len(challenge) == 2 and set(challenge) <= {"turnLeft", "turnRight"} and challenge[0] != challenge[1]
        e = rpc_error(s.submit, "LIVENESS_CHALLENGE_PHASE", {"images": [item(p.neutral)] * 3})
        assert e.code == "LIVENESS_FAILED" and e.data["liveness"]["passed"] is False, e
        s.until("enrollment.finished")
        assert s.c.call("enrollment.retry")["step"] == "LIVENESS_CHALLENGE_SESSION_CREATION"
        req = s.until("enrollment.stepRequired", key="LIVENESS_CHALLENGE_PHASE")
        frames = [item(p.neutral)] + [item(p.turns[a]) for a in req["challenge"]]
        s.submit("LIVENESS_CHALLENGE_PHASE", {"images": frames})
        s.until("enrollment.stepRequired", key="CONFIRM")
        s.submit("CONFIRM", {"ok": True})
        assert s.until("enrollment.finished")["outcome"] == "success"


def test_crashing_matcher_is_unavailable_never_a_match(lab, tmp_path):
    s = Station(lab, tmp_path / "crash", {"command": [str(lab.crash)]})
    try:
        c = s.client()
        e = rpc_error(c.call, "face.compare", {"reference": item(lab.photos.portrait),
                                               "probes": [item(lab.photos.genuine)]})
        assert e.code == "FACE_MATCHER_UNAVAILABLE" and e.data["retryable"] is True, e
        session = Session(s)
        with s.chip():
            session.start("face")
            session.read_chip()
            session.until("enrollment.stepRequired", key="FACE_MATCHING")
            e = rpc_error(session.submit, "FACE_MATCHING", {"images": [item(lab.photos.genuine)]})
            assert e.code == "FACE_MATCHER_UNAVAILABLE" and e.data["retryable"] is True, e
            fin = session.until("enrollment.finished")
            assert fin["outcome"] == "failedWithRetryPossibility" and fin["error"]["code"] == "FACE_MATCHER_UNAVAILABLE"
        # Its stderr went to the log.
        assert "matcher going down" in s.daemon.log.read_text()
    finally:
        s.stop()


def matcher_children(daemon: Daemon) -> dict[int, str]:
    """The daemon's child processes running the reference matcher: {pid: command line}."""
    found = {}
    for entry in pathlib.Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == daemon.proc.pid and "tessera_face_match.py" in cmdline:
            found[int(entry.name)] = cmdline
    return found


def test_reference_matcher_resident(lab, tmp_path):
    """The reference matcher without `command` is resident (faceMatching.resident defaults to true for it): one
    process loads the models once and answers comparison after comparison (the second faster than the first, which
    loads them); stopped after idleSeconds; the next comparison starts it again."""
    s = Station(lab, tmp_path / "resident", {"timeoutSeconds": TIMEOUT, "idleSeconds": 2})
    try:
        c = s.client()
        request = {"reference": item(lab.photos.portrait), "probes": [item(lab.photos.genuine)]}
        assert matcher_children(s.daemon) == {}
        times, pids = [], []
        for _ in range(2):
            t = time.monotonic()
            r = c.call("face.compare", request)
            times.append(time.monotonic() - t)
            assert r["decision"] == "match" and r["matcher"] == "tessera-face-match", r
            pids.append(matcher_children(s.daemon))
        print(f"\nresident reference matcher: first face.compare {times[0]:.2f} s (models loaded), "
              f"second {times[1]:.2f} s")
        assert len(pids[0]) == 1 and pids[0] == pids[1], pids
        assert "--resident" in next(iter(pids[0].values()))
        assert times[1] < times[0]
        # Idle for 2 s: stopped; the next comparison starts another.
        deadline = time.time() + 30
        while matcher_children(s.daemon) and time.time() < deadline:
            time.sleep(0.2)
        assert matcher_children(s.daemon) == {}
        assert c.call("face.compare", request)["decision"] == "match"
        again = matcher_children(s.daemon)
        assert len(again) == 1 and again.keys() != pids[0].keys()
    finally:
        s.stop()


def test_portrait_is_not_kept_across_a_restart(lab, tmp_path):
    """The portrait lives in the daemon's memory only: after a restart the face step fails retryable and the
    retry reads the chip again."""
    s = Station(lab, tmp_path / "restart", {"timeoutSeconds": TIMEOUT})
    try:
        session = Session(s)
        with s.chip():
            session.start("face")
            session.read_chip()
            session.until("enrollment.stepRequired", key="FACE_MATCHING")
            s.daemon.kill9()
            s.daemon.start()
            session = Session(s)
            assert session.c.call("enrollment.resume")["step"] == "FACE_MATCHING"
            fin = session.until("enrollment.finished")
            assert fin["outcome"] == "failedWithRetryPossibility", fin
            assert fin["error"]["code"] == "FACE_NOT_FOUND" and fin["error"]["reason"] == "portraitNotKept", fin
            assert session.c.call("enrollment.retry")["step"] == "NFC_PHASE"
            session.until("enrollment.stepCompleted", key="NFC_PHASE")
            session.until("enrollment.stepRequired", key="FACE_MATCHING")
            session.submit("FACE_MATCHING", {"images": [item(lab.photos.genuine)]})
            session.until("enrollment.stepRequired", key="PASSKEY_CREATION")
            assert session.c.call("enrollment.cancel")["cancelled"] is True
    finally:
        s.stop()


def test_reference_matcher_liveness_rules():
    """The reference matcher's liveness rules on 68-point landmarks: actions in order, relative to the first frame;
    a blink is open eyes then closed ones."""
    sys.path.insert(0, str(ROOT / "matcher"))
    import tessera_face_match as m

    def face(nose_dx: float = 0.0, eye_open: float = 1.0) -> list[tuple[float, float]]:
        points = [(0.0, 0.0)] * 68
        for start, cx in ((36, 100.0), (42, 160.0)):
            # p1, p2, p3, p4, p5, p6 of an eye 30 wide; its height sets the eye aspect ratio.
            h = 6.0 * eye_open
            points[start:start + 6] = [(cx - 15, 100), (cx - 5, 100 - h), (cx + 5, 100 - h), (cx + 15, 100),
                                       (cx + 5, 100 + h), (cx - 5, 100 + h)]
        points[30] = (130.0 + nose_dx, 140.0)
        return points

    neutral, left, right = face(), face(nose_dx=15), face(nose_dx=-15)
    closed = face(eye_open=0.2)
    ok = lambda actions, frames: all(s["frame"] is not None for s in m.liveness(actions, frames))
    assert ok(["turnLeft", "turnRight"], [neutral, left, right])
    assert not ok(["turnLeft", "turnRight"], [neutral, right, left])          # wrong order
    assert not ok(["turnLeft"], [neutral, neutral, neutral])                   # still frames
    assert ok(["blink"], [neutral, closed])
    assert not ok(["blink"], [closed, closed])                                 # never open first
    assert ok(["turnRight", "blink", "turnLeft"], [neutral, right, neutral, closed, left])
    assert [s["frame"] for s in m.liveness(["blink", "turnLeft"], [neutral, closed, None, left])] == [1, 3]


# --- a live face is live (issue 35) ----------------------------------------------------------------------------------

def copy_of(portrait: bytes) -> bytes:
    """The portrait as a camera frame would carry it: scaled up, re-encoded at another quality, on a 640x480 frame."""
    face = Image.open(io.BytesIO(portrait)).convert("RGB")
    face = face.resize((face.width * 3 // 2, face.height * 3 // 2))
    frame = Image.new("RGB", (640, 480), (128, 128, 128))
    frame.paste(face, ((640 - face.width) // 2, (480 - face.height) // 2))
    return jpeg(frame, 640, quality=70)


def test_the_chips_own_portrait_is_not_a_live_face(station, lab):
    """The portrait enrollment.transactionData hands back (the chip gives it to anyone holding the passport) as the
    "live" capture: FACE_REPLAY and the enrollment fails; the same bytes never reach the matcher, a scaled and
    re-encoded copy is known by the reference matcher's replay score (above 0.95; another photo of the person is
    below 0.5). The audit keeps the decision and the scores."""
    p = lab.photos
    s = Session(station)
    eids = []
    with station.chip():
        for name in ("same bytes", "copy"):
            eids.append(s.start("face"))
            s.read_chip()
            s.until("enrollment.stepRequired", key="FACE_MATCHING")
            portrait = base64.b64decode(s.c.call("enrollment.transactionData")["data"]["facePortrait"]["data"])
            probes = [portrait] if name == "same bytes" else [p.genuine, copy_of(portrait)]
            e = rpc_error(s.submit, "FACE_MATCHING", {"images": [item(x) for x in probes]})
            assert e.code == "FACE_REPLAY" and e.data["retryable"] is False and "score" not in e.data, (name, e)
            fin = s.until("enrollment.finished")
            assert fin["outcome"] == "failed" and fin["error"]["code"] == "FACE_REPLAY", (name, fin)
            assert rpc_error(s.c.call, "enrollment.retry").code in ("NO_ACTIVE_ENROLLMENT", "NOT_RETRYABLE")
    records = {r["enrollmentId"]: r for r in s.c.call("enrollment.audit", {"limit": 10})["records"]}
    same, copy = (records[eid]["faceChecks"] for eid in eids)
    assert [(c["decision"], c.get("identicalImage")) for c in same] == [("replay", True)], same
    assert "score" not in same[0]
    assert copy[0]["decision"] == "replay" and copy[0]["replayScore"] > 0.95, copy
    # face.compare refuses a probe that is the reference as well: the same pixels with a comment added, a copy.
    commented = p.portrait[:2] + b"\xff\xfe\x00\x09replay" + b"\x00" + p.portrait[2:]
    for probe in (commented, copy_of(p.portrait)):
        e = rpc_error(station.client().call, "face.compare", {"reference": item(p.portrait), "probes": [item(probe)]})
        assert e.code == "FACE_REPLAY", e


def test_face_comparisons_per_step_are_bounded(station, lab):
    """faceMatching.maxAttempts (default 5) comparisons per step, retries included: pictures without a face count,
    and the fifth failed comparison ends the enrollment with FACE_ATTEMPTS_EXCEEDED (not retryable); nothing is
    compared a sixth time."""
    p = lab.photos
    s = Session(station)
    with station.chip():
        eid = s.start("face")
        s.read_chip()
        s.until("enrollment.stepRequired", key="FACE_MATCHING")
        for left in (4, 3):
            e = rpc_error(s.submit, "FACE_MATCHING", {"images": [item(p.noface)]})
            assert e.code == "FACE_NOT_FOUND" and e.data["attemptsLeft"] == left, e
        for left in (2, 1):
            e = rpc_error(s.submit, "FACE_MATCHING", {"images": [item(p.impostor)]})
            assert e.code == "FACE_MISMATCH" and e.data["attemptsLeft"] == left, e
            s.until("enrollment.finished")
            s.c.call("enrollment.retry")
            s.until("enrollment.stepRequired", key="FACE_MATCHING")
        e = rpc_error(s.submit, "FACE_MATCHING", {"images": [item(p.impostor)]})
        assert e.code == "FACE_ATTEMPTS_EXCEEDED" and e.data["retryable"] is False and e.data["maxAttempts"] == 5, e
        fin = s.until("enrollment.finished")
        assert fin["outcome"] == "failed" and fin["error"]["code"] == "FACE_ATTEMPTS_EXCEEDED", fin
        # A sixth capture finds nothing to compare it with.
        assert rpc_error(s.submit, "FACE_MATCHING", {"images": [item(p.genuine)]}).code == "NO_ACTIVE_ENROLLMENT"
        assert rpc_error(s.c.call, "enrollment.retry").code in ("NO_ACTIVE_ENROLLMENT", "NOT_RETRYABLE")
    (record,) = [r for r in s.c.call("enrollment.audit", {"limit": 10})["records"] if r["enrollmentId"] == eid]
    assert [c["decision"] for c in record["faceChecks"]] == ["noFace", "noFace", "noMatch", "noMatch", "noMatch"]


def test_face_compare_scores_for_admins_one_matcher_per_uid_two_in_all(lab, tmp_path):
    """face.compare: the score only to administrators (root here; another uid gets the decision), and at most one
    matcher per uid and two at once (BUSY beyond). The matcher is the reference one, started 3 s late so that the
    calls overlap."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root to act as other uids (CI runs as root)")
    slow = tmp_path / "slow-matcher"
    slow.write_text(f"#!/bin/sh\nsleep 3\nexec {ROOT / 'matcher' / 'tessera-face-match'}\n")
    slow.chmod(0o755)
    s = Station(lab, tmp_path / "busy", {"command": [str(slow)], "timeoutSeconds": TIMEOUT}, {"socketMode": "0666"})
    try:
        let_other_uids_reach(s.daemon.socket)
        request = {"reference": item(lab.photos.portrait), "probes": [item(lab.photos.genuine)]}
        answers: dict = {}
        first = threading.Thread(target=lambda: answers.setdefault("root", s.client().call("face.compare", request)))
        first.start()
        time.sleep(0.5)
        busy = rpc_error(s.client().call, "face.compare", request)
        assert busy.code == "BUSY" and busy.data["retryable"] is True, busy
        other = AsUser(NOBODY, s.daemon.socket, lambda c, ready: c.call("face.compare", request))
        time.sleep(0.7)
        _, [third] = calls_as(NOBODY - 1, s.daemon.socket, [("face.compare", request)])
        assert third.get("code") == "BUSY", third
        first.join(TIMEOUT)
        mine, theirs = answers["root"], other.result(TIMEOUT)
        assert mine["match"] is True and mine["score"] > 0.4 and mine["replayScore"] < 0.95, mine
        assert theirs["match"] is True and theirs["decision"] == "match", theirs
        assert "score" not in theirs and "replayScore" not in theirs, theirs
        # Both ran: the slots are free again.
        assert s.client().call("face.compare", request)["match"] is True
    finally:
        s.stop()
