"""Tessera's reference MRZ reader: the mrzReader protocol (docs/KIOSK.md, "The MRZ from the camera").

Resident: one request per line on stdin, one answer per line on stdout, until stdin closes.
request: {"image": {"mediaType": "image/jpeg"|"image/png", "data": base64}}
answer:  {"lines": ["P<UTO...", "L898..."]} | {"found": false} | {"error": "..."}

The OCR is Debian's tesseract-ocr (5.x, its LSTM `eng` model from tesseract-ocr-eng) restricted to the MRZ
alphabet (A-Z, 0-9, <) on the frame's MRZ band. Debian ships no OCR-B model; the OCR-B part is here: the band is
found by its shape (two or three long, evenly dense text rows at the bottom of the document), each crop is tried
as it is and binarized, the rows are fitted to the ICAO 9303 formats (TD1 3×30, TD2 2×36, TD3 2×44) and the
characters OCR-B makes ambiguous (0/O, 1/I, 2/Z, 5/S, 8/B) are resolved by the field's kind (digits where the
format has digits). Of the candidates, the first whose check digits hold is answered, else the best-formed one:
the daemon's client (the kiosk) decides with Tessera's own MRZ parser, never this program.
"""

import base64
import io
import json
import subprocess
import sys

import numpy as np
from PIL import Image, ImageFilter, ImageOps

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789<"
TESSERACT = ["tesseract", "stdin", "stdout", "--psm", "6", "-l", "eng", "--oem", "1",
             "-c", "tessedit_char_whitelist=" + ALPHABET, "-c", "load_system_dawg=0", "-c", "load_freq_dawg=0"]
TO_DIGIT = {"O": "0", "Q": "0", "D": "0", "I": "1", "L": "1", "Z": "2", "S": "5", "B": "8", "G": "6", "T": "7"}
TO_LETTER = {v: k for k, v in {"O": "0", "I": "1", "Z": "2", "S": "5", "B": "8", "G": "6"}.items()}


def check_digit(text):
    weights = (7, 3, 1)
    total = 0
    for i, c in enumerate(text):
        v = int(c) if c.isdigit() else (ord(c) - 55 if c.isalpha() else 0)
        total += v * weights[i % 3]
    return str(total % 10)


# Per format: (line, start, end) of digit-only spans, and the check digit groups (line, start, end, check position).
DIGITS = {
    44: [(1, 9, 10), (1, 13, 20), (1, 21, 28), (1, 42, 44)],
    36: [(1, 9, 10), (1, 13, 20), (1, 21, 28), (1, 35, 36)],
    30: [(0, 14, 15), (1, 0, 7), (1, 8, 15), (1, 29, 30)],
}
CHECKS = {
    44: [(1, 0, 9, 9), (1, 13, 19, 19), (1, 21, 27, 27)],
    36: [(1, 0, 9, 9), (1, 13, 19, 19), (1, 21, 27, 27)],
    30: [(0, 5, 14, 14), (1, 0, 6, 6), (1, 8, 14, 14)],
}
LETTERS = {44: [(0, 0, 5), (1, 10, 13)], 36: [(0, 0, 5), (1, 10, 13)], 30: [(0, 0, 5), (1, 15, 18)]}


# The name lines (line index per format) and the optional-data spans that are usually all fillers.
NAMES = {44: 0, 36: 0, 30: 2}
OPTIONAL = {44: [(1, 28, 42)], 36: [(1, 28, 35)], 30: [(0, 15, 30), (1, 18, 29)]}


def shorten(row, width):
    """Drops characters the OCR added: LSTM reads OCR-B's wide '<' as '<K' or 'K<' at times."""
    row = list(row)
    while len(row) > width:
        for i in range(1, len(row)):
            if row[i] in "KX" and (row[i - 1] == "<" or (i + 1 < len(row) and row[i + 1] == "<")):
                del row[i]
                break
        else:
            del row[width:]
    return "".join(row)


def tidy_names(line):
    """After the names' end ('<<' after the given names), only fillers; a 'K' or 'X' run there is fillers."""
    first = line.find("<<", 2)
    if first < 0:
        return line
    end = line.find("<", first + 2)
    while end >= 0 and end + 1 < len(line) and line[end + 1] not in "<KX":
        end = line.find("<", end + 1)
    if end < 0:
        return line
    return line[:end] + "<" * (len(line) - end)


def fits(rows):
    """Each way the rows can be an MRZ (2×44, 2×36 or 3×30), with the field kinds applied."""
    rows = [r.replace(" ", "").upper() for r in rows]
    rows = ["".join(c for c in r if c in ALPHABET) for r in rows]
    rows = [r for r in rows if len(r) >= 26]
    out = []
    for width, count in ((44, 2), (36, 2), (30, 3)):
        near = [r for r in rows if width - 5 <= len(r) <= width + 6]
        if len(near) < count:
            continue
        lines = []
        for r in near[-count:]:
            r = shorten(r, width) if len(r) > width else r + "<" * (width - len(r))
            lines.append(list(r))
        if lines[0][1] in "KX":
            lines[0][1] = "<"
        for line, a, b in DIGITS[width]:
            for i in range(a, b):
                lines[line][i] = TO_DIGIT.get(lines[line][i], lines[line][i])
        for line, a, b in LETTERS[width]:
            for i in range(a, b):
                lines[line][i] = TO_LETTER.get(lines[line][i], lines[line][i])
        for line, a, b in OPTIONAL[width]:
            # Mostly fillers (a run of '<' read partly as K or X): all fillers; the composite check digit tells.
            span = lines[line][a:b]
            fillers, like = span.count("<"), sum(span.count(c) for c in "<KX")
            if fillers * 10 >= len(span) * 3 and like * 10 >= len(span) * 8:
                lines[line][a:b] = ["<"] * (b - a)
        text = ["".join(x) for x in lines]
        n = NAMES[width]
        text[n] = text[n][:5] + tidy_names(text[n][5:]) if width != 30 else tidy_names(text[n])
        out.append(text)
    return out


AMBIGUOUS = {"0": "O", "O": "0", "1": "I", "I": "1", "5": "S", "S": "5", "8": "B", "B": "8", "2": "Z", "Z": "2"}


def resolve_number(lines):
    """The document number may hold letters and digits, so 0/O, 1/I, … stay open after reading: when its check
    digit fails, the one spelling (of at most 3 open characters) that satisfies it is taken."""
    width = len(lines[0])
    line, a, b, c = CHECKS[width][0]
    text = lines[line]
    field, check = text[a:b], text[c]
    if check_digit(field) == check:
        return lines
    open_at = [i for i, ch in enumerate(field) if ch in AMBIGUOUS]
    if not 0 < len(open_at) <= 3:
        return lines
    found = []
    for mask in range(1, 1 << len(open_at)):
        chars = list(field)
        for bit, i in enumerate(open_at):
            if mask >> bit & 1:
                chars[i] = AMBIGUOUS[chars[i]]
        if check_digit("".join(chars)) == check:
            found.append("".join(chars))
    if len(found) != 1:
        return lines
    out = list(lines)
    out[line] = text[:a] + found[0] + text[b:]
    return out


def score(lines):
    """How many of the format's check digits hold (the composite one included)."""
    width = len(lines[0])
    n = sum(check_digit(lines[l][a:b]) == lines[l][c] for l, a, b, c in CHECKS[width])
    return n + (1 if composite_holds(lines) else 0)


def checks_hold(lines):
    return score(lines) == len(CHECKS[len(lines[0])]) + 1


def composite_holds(lines):
    width = len(lines[0])
    if width == 44:
        l2 = lines[1]
        return check_digit(l2[0:10] + l2[13:20] + l2[21:43]) == l2[43]
    if width == 36:
        l2 = lines[1]
        return check_digit(l2[0:10] + l2[13:20] + l2[21:35]) == l2[35]
    l1, l2 = lines[0], lines[1]
    return check_digit(l1[5:30] + l2[0:7] + l2[8:15] + l2[18:29]) == l2[29]


def ocr(image):
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    out = subprocess.run(TESSERACT, input=buffer.getvalue(), capture_output=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError("tesseract failed: " + out.stderr.decode(errors="replace").strip()[:200])
    return [line for line in out.stdout.decode(errors="replace").splitlines() if line.strip()]


def band(gray):
    """The MRZ band of a grayscale frame: the lowest run of 2-3 long text rows (dark-pixel density by row)."""
    a = np.asarray(gray, dtype=np.float32)
    # Ink: darker than its neighbourhood (a dark background around the document is not ink).
    local = np.asarray(gray.filter(ImageFilter.BoxBlur(max(8, gray.width // 60))), dtype=np.float32)
    dark = a < local - 30
    h, w = dark.shape
    density = dark.mean(axis=1)
    # A row darker than ink ever is (the document's edge against the background) is no text row.
    density[density > 0.6] = 0
    if density.max() <= 0:
        return None
    # MRZ rows run across the document: the densest rows of the frame.
    rows = density > 0.3 * density.max()
    runs, start = [], None
    for y in range(h):
        if rows[y] and start is None:
            start = y
        elif not rows[y] and start is not None:
            if y - start >= 4:
                runs.append((start, y))
            start = None
    if start is not None and h - start >= 4:
        runs.append((start, h))
    if len(runs) < 2:
        return None
    # The last 3 runs (or 2), with a margin of half a row.
    chosen = runs[-3:] if len(runs) >= 3 else runs[-2:]
    top, bottom = chosen[0][0], chosen[-1][1]
    margin = max(4, (bottom - top) // 4)
    cols = np.where(dark[top:bottom].mean(axis=0) > 0.02)[0]
    left, right = (int(cols[0]), int(cols[-1])) if len(cols) else (0, w)
    return (max(0, left - margin), max(0, top - margin), min(w, right + margin), min(h, bottom + margin))


def candidates(image):
    gray = ImageOps.grayscale(image)
    if max(gray.size) > 1600:
        gray.thumbnail((1600, 1600))
    box = band(gray)
    crops = []
    if box:
        crops.append(gray.crop(box))
    crops.append(gray)
    for crop in crops:
        scale = max(1.0, 900 / max(1, crop.width))
        if scale > 1:
            crop = crop.resize((int(crop.width * scale), int(crop.height * scale)), Image.LANCZOS)
        sharp = ImageOps.autocontrast(crop.filter(ImageFilter.MedianFilter(3)))
        threshold = int(np.asarray(sharp).mean() * 0.85)
        binary = sharp.point(lambda p: 255 if p > threshold else 0)
        for variant in (sharp, binary):
            yield variant


def read(image):
    best, best_score = None, -1
    for variant in candidates(image):
        for lines in fits(ocr(variant)):
            lines = resolve_number(lines)
            if checks_hold(lines):
                return lines
            if score(lines) > best_score:
                best, best_score = lines, score(lines)
    return best


def answer(request):
    img = request.get("image") or {}
    if img.get("mediaType") not in ("image/jpeg", "image/png") or not isinstance(img.get("data"), str):
        return {"error": "image must be {mediaType: image/jpeg or image/png, data: base64}"}
    try:
        image = Image.open(io.BytesIO(base64.b64decode(img["data"]))).convert("RGB")
    except Exception as e:  # noqa: BLE001 - any undecodable image is the same answer
        return {"error": "cannot decode the image: %s" % type(e).__name__}
    lines = read(image)
    return {"lines": lines} if lines else {"found": False}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = answer(json.loads(line))
        except Exception as e:  # noqa: BLE001 - the daemon gets an error answer, the reader stays up
            out = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
