"""Tessera's reference face matcher: the face matcher protocol (docs/ENROLLMENT.md, "Face matching") on dlib.

stdin:  {"reference": {mediaType, data}, "probes": [{mediaType, data}], "challenge"?: {"actions": [...]}}
stdout: {"decision": "match"|"noMatch"|"noFace"|"error", "score", "replayScore", "faceFound", "liveness"?,
         "template"?}
--resident: the same, one request per line and one answer per line, the models loaded once.

Faces are found with dlib's HOG detector, described with dlib's ResNet face descriptor (128-d, 99.38 % on LFW;
weights from face-recognition-models, public domain) and compared by Euclidean distance: score = 1 - distance,
a match when every probe with a face is closer than 0.6 (dlib's usual threshold). replayScore: how much a probe is
a copy of the reference image (re-encoded, scaled, framed): the highest correlation of the aligned face crops,
30 x 30 grey levels (a copy: above 0.98; another photo of the same person: below 0.5). Not a certified matcher; the
liveness check (head yaw and eye aspect ratio from the 68 landmarks) is not certified presentation-attack
detection: a replayed video of the person passes it.
"""

import base64
import io
import json
import struct
import sys

THRESHOLD = 0.6
TEMPLATE_TYPE = "application/vnd.tessera.dlib-descriptor"
MAX_SIDE = 1024
CROP = 150
POOL = 5  # the 150 px aligned crop averaged over 5 x 5 blocks: what survives re-encoding and scaling
YAW = 0.12  # nose tip offset from the eyes' midpoint, in eye distances
EAR_CLOSED = 0.2
EAR_OPEN = 0.25


class Models:
    def __init__(self):
        import dlib
        import face_recognition_models as m

        self.dlib = dlib
        self.detector = dlib.get_frontal_face_detector()
        self.landmarks = dlib.shape_predictor(m.pose_predictor_model_location())
        self.encoder = dlib.face_recognition_model_v1(m.face_recognition_model_location())


def b64(text):
    """Standard or URL-safe base64, padded or not."""
    text = text.replace("-", "+").replace("_", "/").rstrip("=")
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def decode_image(item):
    import numpy as np
    from PIL import Image

    data = b64(item["data"])
    image = Image.open(io.BytesIO(data))
    image = image.convert("RGB")
    if max(image.size) > MAX_SIDE:
        scale = MAX_SIDE / max(image.size)
        image = image.resize((round(image.width * scale), round(image.height * scale)))
    return np.asarray(image)


def face(models, pixels):
    """(descriptor, landmarks, crop) of the largest face, or None; crop: the aligned face in grey levels, pooled."""
    import numpy as np

    upsample = 1 if max(pixels.shape[:2]) < 800 else 0
    found = models.detector(pixels, upsample)
    if not found:
        return None
    box = max(found, key=lambda r: r.width() * r.height())
    shape = models.landmarks(pixels, box)
    descriptor = np.array(models.encoder.compute_face_descriptor(pixels, shape, 1))
    points = [(p.x, p.y) for p in shape.parts()]
    chip = np.asarray(models.dlib.get_face_chip(pixels, shape, size=CROP, padding=0.1), dtype=np.float64)
    crop = chip.mean(axis=2).reshape(CROP // POOL, POOL, CROP // POOL, POOL).mean(axis=(1, 3))
    return descriptor, points, crop


def correlation(a, b):
    """Normalized cross-correlation of two crops (1: the same picture up to brightness and contrast)."""
    a = a - a.mean()
    b = b - b.mean()
    norm = float((a * a).sum() * (b * b).sum()) ** 0.5
    return float((a * b).sum()) / norm if norm > 0 else 0.0


def yaw(points):
    left_eye = [sum(p[0] for p in points[36:42]) / 6, sum(p[1] for p in points[36:42]) / 6]
    right_eye = [sum(p[0] for p in points[42:48]) / 6, sum(p[1] for p in points[42:48]) / 6]
    mid = (left_eye[0] + right_eye[0]) / 2
    distance = max(1.0, abs(right_eye[0] - left_eye[0]))
    return (points[30][0] - mid) / distance


def eye_aspect_ratio(points):
    def ear(e):
        d = lambda a, b: ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5
        return (d(e[1], e[5]) + d(e[2], e[4])) / (2 * max(1e-6, d(e[0], e[3])))

    return (ear(points[36:42]) + ear(points[42:48])) / 2


def performed(action, points, state):
    """Whether this frame shows `action`: the person's left/right in an unmirrored camera image, as the nose tip
    moving from where it was in the first frame (by more than YAW eye distances); a blink as the eye aspect ratio
    dropping below EAR_CLOSED after open eyes."""
    if action == "turnLeft":
        return yaw(points) - state["baseline"] > YAW
    if action == "turnRight":
        return yaw(points) - state["baseline"] < -YAW
    if action == "blink":
        ratio = eye_aspect_ratio(points)
        if ratio > EAR_OPEN:
            state["open"] = True
        return state.get("open", False) and ratio < EAR_CLOSED
    return False


def liveness(actions, frames):
    """The actions must show up in order over the frames (the first frame with a face is the neutral pose)."""
    faces = [p for p in frames if p is not None]
    baseline = yaw(faces[0]) if faces else 0.0
    found = []
    index = 0
    for action in actions:
        state = {"baseline": baseline}
        hit = None
        while index < len(frames):
            points = frames[index]
            index += 1
            if points is not None and performed(action, points, state):
                hit = index - 1
                break
        found.append({"action": action, "frame": hit})
    return found


def template_of(descriptors):
    import numpy as np

    mean = np.mean(np.array(descriptors), axis=0)
    raw = struct.pack("<128f", *[float(x) for x in mean])
    return {"mediaType": TEMPLATE_TYPE, "data": base64.b64encode(raw).decode()}


def answer(request, models):
    import numpy as np

    reference = request["reference"]
    if reference.get("mediaType") == TEMPLATE_TYPE:
        raw = b64(reference["data"])
        if len(raw) != 512:
            return {"decision": "error", "score": None, "faceFound": False, "reason": "bad template"}
        ref = np.array(struct.unpack("<128f", raw))
        ref_crop = None
    else:
        try:
            pixels = decode_image(reference)
        except Exception as e:  # noqa: BLE001 - an unreadable reference is the matcher's error
            return {"decision": "error", "score": None, "faceFound": False, "reason": f"reference: {e}"}
        found = face(models, pixels)
        if found is None:
            return {"decision": "noFace", "score": None, "faceFound": False, "reason": "no face in the reference"}
        ref, ref_crop = found[0], found[2]

    distances, descriptors, landmarks, copies = [], [], [], []
    for probe in request.get("probes", []):
        try:
            found = face(models, decode_image(probe))
        except Exception:  # noqa: BLE001 - an undecodable capture holds no face
            found = None
        landmarks.append(found[1] if found else None)
        if found is not None:
            descriptors.append(found[0])
            distances.append(float(np.linalg.norm(found[0] - ref)))
            if ref_crop is not None:
                copies.append(correlation(ref_crop, found[2]))
    if not distances:
        return {"decision": "noFace", "score": None, "replayScore": None, "faceFound": False}
    worst = max(distances)
    out = {
        "decision": "match" if worst < THRESHOLD else "noMatch",
        "score": round(1 - worst, 4),
        "replayScore": round(max(copies), 4) if copies else None,
        "faceFound": True,
        "template": template_of(descriptors),
    }
    challenge = request.get("challenge")
    if challenge is not None:
        actions = challenge.get("actions", []) if isinstance(challenge, dict) else list(challenge)
        same = len(distances) == len(landmarks) and worst < THRESHOLD
        steps = liveness(actions, landmarks)
        out["liveness"] = {
            "passed": bool(same and all(s["frame"] is not None for s in steps)),
            "sameFace": bool(same),
            "actions": steps,
            "method": "landmarks: head yaw, eye aspect ratio (not certified presentation-attack detection)",
        }
    return out


def resident():
    """--resident: the models loaded once, then one request per stdin line, one answer per stdout line, until
    end of input (the daemon's resident mode)."""
    models = Models()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = answer(json.loads(line), models)
        except Exception as e:  # noqa: BLE001 - a bad request is this request's error, the matcher stays up
            print(f"tessera-face-match: {type(e).__name__}: {e}", file=sys.stderr)
            out = {"decision": "error", "score": None, "faceFound": False}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


def main():
    if sys.argv[1:] == ["--resident"]:
        return resident()
    if sys.argv[1:]:
        print("usage: tessera-face-match [--resident]", file=sys.stderr)
        return 2
    try:
        request = json.load(sys.stdin)
    except ValueError as e:
        print(f"tessera-face-match: the request is not JSON: {e}", file=sys.stderr)
        json.dump({"decision": "error", "score": None, "faceFound": False}, sys.stdout)
        return 0
    json.dump(answer(request, Models()), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
