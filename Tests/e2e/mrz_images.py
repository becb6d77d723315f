"""MRZ images for the reader's tests and its measurement (docs/KIOSK.md): a document page drawn with Pillow, its MRZ
set in OCR-B (Debian's fonts-ocr-b), photographed badly on purpose: blur, perspective, glare.

The MRZs are the ICAO 9303 specimens (TD3, TD2, TD1 of "ANNA MARIA ERIKSSON", Utopia) and generated ones with right
check digits from a seeded generator."""
from __future__ import annotations

import random
import string

from PIL import Image, ImageDraw, ImageFilter, ImageFont

OCRB = "/usr/share/fonts/opentype/ocr-b/OCRB.otf"
SANS = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

SPECIMENS = {
    "td3": "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10",
    "td2": "I<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<\nD231458907UTO7408122F1204159<<<<<<<6",
    "td1": "I<UTOD231458907<<<<<<<<<<<<<<<\n7408122F1204159UTO<<<<<<<<<<<6\nERIKSSON<<ANNA<MARIA<<<<<<<<<<",
}


def check_digit(text: str) -> str:
    total = 0
    for i, c in enumerate(text):
        v = int(c) if c.isdigit() else (ord(c) - 55 if c.isalpha() else 0)
        total += v * (7, 3, 1)[i % 3]
    return str(total % 10)


def generated_td3(rng: random.Random) -> str:
    """A passport MRZ (TD3) with a random name, number and dates, every check digit right."""
    surname = "".join(rng.choice(string.ascii_uppercase) for _ in range(rng.randint(4, 10)))
    given = "".join(rng.choice(string.ascii_uppercase) for _ in range(rng.randint(3, 8)))
    line1 = f"P<UTO{surname}<<{given}".ljust(44, "<")[:44]
    number = "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(9))
    birth = f"{rng.randint(40, 99):02d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
    expiry = f"{rng.randint(27, 35):02d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
    optional = "<" * 14
    body = (number + check_digit(number) + "UTO" + birth + check_digit(birth) + rng.choice("MF<") + expiry
            + check_digit(expiry) + optional + check_digit(optional))
    composite = body[0:10] + body[13:20] + body[21:43]
    return line1 + "\n" + body + check_digit(composite)


def page(mrz: str, size=(1280, 720)) -> Image.Image:
    """A document's page held up to the camera: a light card on a darker background, a photo, printed lines, and
    the MRZ in OCR-B across the bottom."""
    lines = mrz.split("\n")
    width = len(lines[0])
    img = Image.new("RGB", size, (70, 74, 80))
    card_w = int(size[0] * 0.86)
    font_size = 40
    mrz_font = ImageFont.truetype(OCRB, font_size)
    font_size = int(font_size * card_w * 0.92 / mrz_font.getlength(lines[0]))
    mrz_font = ImageFont.truetype(OCRB, font_size)
    text_font = ImageFont.truetype(SANS, max(14, font_size // 2))
    line_h = int(font_size * 1.35)
    card_h = min(size[1] - 40, int(card_w * (0.7 if width == 44 else 0.63)))
    x0, y0 = (size[0] - card_w) // 2, (size[1] - card_h) // 2
    d = ImageDraw.Draw(img)
    d.rounded_rectangle([x0, y0, x0 + card_w, y0 + card_h], radius=18, fill=(246, 242, 230))
    d.rectangle([x0 + 24, y0 + 24, x0 + 24 + card_w // 5, y0 + 24 + int(card_w / 5 * 1.3)], fill=(190, 200, 214))
    for i, text in enumerate(["UTOPIA", "Surname / Nom", "Given names / Prénoms", "Date of birth", "Sex  Place"]):
        d.text((x0 + card_w // 4 + 20, y0 + 28 + i * int(font_size * 1.1)), text, fill=(90, 80, 70), font=text_font)
    top = y0 + card_h - line_h * len(lines) - 18
    for i, text in enumerate(lines):
        d.text((x0 + int(card_w * 0.04), top + i * line_h), text, fill=(18, 18, 18), font=mrz_font)
    return img


def blur(img: Image.Image, radius: float) -> Image.Image:
    return img.filter(ImageFilter.GaussianBlur(radius))


def perspective(img: Image.Image, amount: float, rng: random.Random) -> Image.Image:
    """The page tilted: each corner moved by up to `amount` of the size."""
    w, h = img.size
    dx, dy = w * amount, h * amount
    quad = [rng.uniform(0, dx), rng.uniform(0, dy), rng.uniform(0, dx), h - rng.uniform(0, dy),
            w - rng.uniform(0, dx), h - rng.uniform(0, dy), w - rng.uniform(0, dx), rng.uniform(0, dy)]
    return img.transform(img.size, Image.QUAD, quad, resample=Image.BICUBIC, fillcolor=(70, 74, 80))


def glare(img: Image.Image, strength: float, rng: random.Random) -> Image.Image:
    """A soft white reflection over part of the page."""
    w, h = img.size
    mask = Image.new("L", img.size, 0)
    cx, cy = rng.uniform(0.2, 0.8) * w, rng.uniform(0.3, 0.8) * h
    r = 0.22 * w
    ImageDraw.Draw(mask).ellipse([cx - r, cy - r * 0.6, cx + r, cy + r * 0.6], fill=int(255 * strength))
    mask = mask.filter(ImageFilter.GaussianBlur(r / 3))
    return Image.composite(Image.new("RGB", img.size, (255, 255, 255)), img, mask)


def image_set(rng: random.Random, generated: int = 12) -> list[tuple[str, str, Image.Image]]:
    """(name, mrz, image): each specimen clean and in each distortion, and `generated` random TD3s each with one."""
    out = []
    kinds = [("clean", lambda i: i), ("blur", lambda i: blur(i, 1.6)),
             ("perspective", lambda i: perspective(i, 0.06, rng)), ("glare", lambda i: glare(i, 0.55, rng))]
    for name, mrz in SPECIMENS.items():
        for kind, f in kinds:
            out.append((f"{name}-{kind}", mrz, f(page(mrz))))
    for n in range(generated):
        mrz = generated_td3(rng)
        kind, f = kinds[n % len(kinds)]
        out.append((f"gen{n}-{kind}", mrz, f(page(mrz))))
    return out


def write_y4m(img: Image.Image, path, size=(1280, 720)) -> None:
    """`img` as a one-frame YUV4MPEG2 (4:2:0) file for Chromium's fake camera."""
    frame = img.convert("RGB").resize(size)
    y, cb, cr = frame.convert("YCbCr").split()
    half = (size[0] // 2, size[1] // 2)
    path.write_bytes(f"YUV4MPEG2 W{size[0]} H{size[1]} F30:1 Ip A1:1 C420jpeg\n".encode() + b"FRAME\n" + y.tobytes()
                     + cb.resize(half).tobytes() + cr.resize(half).tobytes())
