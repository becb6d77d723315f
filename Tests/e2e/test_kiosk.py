"""The kiosk station's screen (docs/KIOSK.md) in a real browser: Debian's Chromium driven by Selenium (headless, a fake
camera playing a photo converted to Y4M), `tessera kiosk` bridging it to the real tesserad with a SoftHSM2 token, a
private pcscd whose vpcd reader holds the emulated passport, and the file-drop OTP notifier. The passkey is checked
with py_webauthn and python-fido2 (verify.py), the camera's capture with Pillow against the photo it played.

The face tests run the workflow "face" of test_face.py (NFC_MRZ, NFC_PHASE, FACE_MATCHING, PASSKEY_CREATION) against
the reference matcher and an emulated passport whose DG2 is obama.jpg; the fake camera plays another photo of the
same person (obama2.jpg), another person (biden.jpg) or no face. Test photos: the public-domain photos of the
face_recognition 1.3.0 source distribution (tests/test_images), fetched with pip by test_face.fetch_photos."""
from __future__ import annotations

import base64
import http.client
import io
import json
import pathlib
import os
import select
import socket
import stat
import subprocess
import time
import urllib.parse

import pytest
from PIL import Image
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from axe_selenium_python import Axe

from tessera_harness import BIN, stop_process
from test_enrollment import (CONFIRM, MRZ, NFC, PASSKEY, PHONE, PIN, RP, TERMS, WRONG_MRZ_FIELDS, Lab, Station,
                             check_credential)
from test_face import Lab as FaceLab
from test_face import Station as FaceStation
from test_face import fetch_photos
import mrz_images

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# A client step whose input takes images ({mediaType, data} items): the station draws the camera for it (as for
# FACE_MATCHING) and the daemon keeps the payload as it is.
SELFIE = {"key": "SELFIE", "client": True, "prompt": "Take a photo of your face",
          "input": {"type": "object", "required": ["images"],
                    "properties": {"images": {"type": "array", "items": {
                        "type": "object", "properties": {"mediaType": {"type": "string"}, "data": {"type": "string"}}}}}}}
WORKFLOWS = {
    # A workflow words its own steps, and any screen, in each language (its config's messages win over the
    # catalogue; a custom step without them shows its prompt).
    "kiosk-full": {"remote": True, "expected": {"surname": "ERIKSSON", "givenNames": "ANNA MARIA"},
                   "steps": ["PHONE_INFO", "PHONE_OTP", "NFC_MRZ", NFC, "ATTRIBUTE_MATCHING", SELFIE, TERMS, PASSKEY],
                   "messages": {"de": {"step.SELFIE.title": "Ein Foto Ihres Gesichts"}}},
    "kiosk-chip": {"remote": True, "steps": ["NFC_MRZ", NFC, CONFIRM],
                   "messages": {"en": {"step.CONFIRM.title": "Are these your details?",
                                       "step.CONFIRM.field.ok": "Yes, these are my details"},
                                "de": {"step.NFC_MRZ.title": "Ihr Ausweis, bitte",
                                       "step.CONFIRM.title": "Sind das Ihre Angaben?",
                                       "step.CONFIRM.field.ok": "Ja, das sind meine Angaben"}}},
}


# --- components ---------------------------------------------------------------------------------------------------

def fitted(photo: pathlib.Path | Image.Image, size=(640, 480)) -> Image.Image:
    """The photo fitted into `size` on grey."""
    img = (Image.open(photo) if isinstance(photo, pathlib.Path) else photo).convert("RGB")
    img.thumbnail(size)
    frame = Image.new("RGB", size, (128, 128, 128))
    frame.paste(img, ((size[0] - img.width) // 2, (size[1] - img.height) // 2))
    return frame


def write_frames(frames: list[Image.Image], out: pathlib.Path, fps: int = 30) -> None:
    """The frames (all of one size) as a YUV4MPEG2 (4:2:0) file at `fps`: Chromium's fake camera plays it in a loop."""
    w, h = frames[0].size
    data = bytearray(f"YUV4MPEG2 W{w} H{h} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
    for frame in frames:
        y, cb, cr = frame.convert("YCbCr").split()
        data += b"FRAME\n" + y.tobytes() + cb.resize((w // 2, h // 2)).tobytes() + cr.resize((w // 2, h // 2)).tobytes()
    out.write_bytes(bytes(data))


def write_y4m(photo: pathlib.Path, out: pathlib.Path, size=(640, 480)) -> Image.Image:
    """The photo, fitted into `size`, as a one-frame YUV4MPEG2 file: Chromium's fake camera plays it."""
    frame = fitted(photo, size)
    write_frames([frame], out)
    return frame


class Kiosk:
    """`tessera kiosk` on a free loopback port for one workflow of a station."""

    def __init__(self, station: Station, workflow: str, idle: int = 60, *args: str):
        self.log = station.root / f"kiosk-{workflow}.log"
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen([str(BIN / "tessera"), "--socket", station.daemon.socket, "kiosk", "--listen",
                                      "127.0.0.1:0", "--workflow", workflow, "--idle-timeout", str(idle), *args],
                                     stdout=subprocess.PIPE, stderr=self.logf, text=True)
        self.line = self.proc.stdout.readline()
        assert self.line.startswith("kiosk: serving http://127.0.0.1:"), (self.line, self.log.read_text())
        self.url = self.line.split()[2]
        parts = urllib.parse.urlsplit(self.url)
        self.port = parts.port
        # The printed URL's secret (none on the line with --url-file).
        self.token = urllib.parse.parse_qs(parts.query).get("token", [None])[0]
        # The station browser's session cookie, once it has exchanged the secret (see `running`).
        self.cookie: str | None = None

    def request(self, method: str, path: str, body: dict | None = None, headers: dict | None = None,
                cookie: str | None = "station"):
        """One request; with the station browser's cookie unless `cookie` says another (None: no cookie)."""
        cookie = self.cookie if cookie == "station" else cookie
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"content-type": "application/json", **({"cookie": f"tessera_kiosk={cookie}"} if cookie else {}),
                           **(headers or {})})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def exchange(self, cookie: str | None = None):
        """`GET /?token=` with the printed secret: (status, the cookie it sets or None, location)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", f"/?token={self.token}", headers={"cookie": f"tessera_kiosk={cookie}"} if cookie else {})
        r = c.getresponse()
        r.read()
        c.close()
        set_cookie = r.getheader("set-cookie")
        value = set_cookie.split(";")[0].split("=", 1)[1] if set_cookie else None
        return r.status, value, r.getheader("location"), set_cookie

    def stop(self) -> None:
        stop_process(self.proc)
        self.logf.close()


class Browser:
    """Headless Chromium (as root: --no-sandbox) with a fake camera playing `camera` (Y4M), asking for pages in
    `accept_language` (its Accept-Language header)."""

    def __init__(self, camera: pathlib.Path, accept_language: str = "en-US,en"):
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800",
                  "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                  f"--use-file-for-fake-video-capture={camera}", f"--lang={accept_language.split(',')[0]}"]:
            opts.add_argument(a)
        opts.add_experimental_option("prefs", {"intl.accept_languages": accept_language})
        self.d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        self.d.set_window_size(1280, 800)

    def screen(self, step: str, timeout: float = 30):
        """The screen root with data-step `step`, once it shows."""
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(
                lambda d: d.find_element(By.CSS_SELECTOR, f'main > section[data-step="{step}"]'))
        except TimeoutException:
            raise AssertionError(f"no screen {step} in {timeout} s; page: {self.text()}") from None

    def find(self, css: str, timeout: float = 15):
        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(
                lambda d: d.find_element(By.CSS_SELECTOR, css))
        except TimeoutException:
            raise AssertionError(f"no {css} in {timeout} s; page: {self.text()}") from None

    def click(self, action: str = "continue", timeout: float = 15) -> None:
        """Clicks the screen's button `data-action=action` once it is enabled."""
        css = f'main > section [data-action="{action}"]'
        try:
            button = WebDriverWait(self.d, timeout, poll_frequency=0.05).until(
                lambda d: (b := d.find_element(By.CSS_SELECTOR, css)).is_enabled() and b)
        except TimeoutException:
            raise AssertionError(f"no enabled {css}; page: {self.text()}") from None
        button.click()

    def type(self, name: str, text: str) -> None:
        self.find(f'main [name="{name}"]').send_keys(text)

    def text(self) -> str:
        try:
            return self.d.find_element(By.TAG_NAME, "main").get_attribute("outerHTML")[:3000]
        except Exception as e:  # noqa: BLE001 - only for failure messages
            return f"<unreadable: {e}>"

    def quit(self) -> None:
        self.d.quit()


# --- what a person sees: accessibility, layout at the common kiosk screens, screenshots -----------------------------

SIZES = [(1280, 800), (1920, 1080), (1080, 1920)]
SCREENSHOTS = pathlib.Path(__file__).parent / "screenshots"  # gitignored: for a person to look at
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]

# Every control must lie inside the window horizontally and not overlap another; the screen's action buttons must
# be fully in view without scrolling (the content above them scrolls in its own region).
LAYOUT_JS = """
const vw = window.innerWidth, vh = window.innerHeight, problems = [];
const sel = 'button, input, textarea, select, video, [role=progressbar]';
const shown = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 &&
  getComputedStyle(e).visibility !== 'hidden'; };
const name = (e) => e.tagName + (e.name ? '[name=' + e.name + ']' : '') +
  (e.dataset.action ? '[action=' + e.dataset.action + ']' : '') + (e.dataset.key ? '[key=' + e.dataset.key + ']' : '');
if (document.documentElement.scrollWidth > vw) problems.push('page wider than the window: ' + document.documentElement.scrollWidth);
const screen = document.querySelector('main > section');
for (const group of [screen.querySelector('.content'), screen.querySelector('.actions')]) {
  if (!group) continue;
  const els = [...group.querySelectorAll(sel)].filter(shown);
  const base = group.getBoundingClientRect(), top = group.scrollTop;
  const rects = els.map((e) => { const r = e.getBoundingClientRect(); return {e, l: r.left, r: r.right, t: r.top + top, b: r.bottom + top}; });
  for (const x of rects) {
    if (x.l < -0.5 || x.r > vw + 0.5) problems.push(name(x.e) + ' cut off horizontally ' + x.l + '..' + x.r);
    if (group.classList.contains('actions') && (x.t - top < -0.5 || x.b - top > vh + 0.5)) problems.push(name(x.e) + ' not in view: ' + x.t + '..' + x.b);
  }
  for (let i = 0; i < rects.length; i++) for (let j = i + 1; j < rects.length; j++) {
    const a = rects[i], b = rects[j];
    if (a.e.contains(b.e) || b.e.contains(a.e)) continue;
    if (Math.min(a.r, b.r) - Math.max(a.l, b.l) > 0.5 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 0.5)
      problems.push(name(a.e) + ' overlaps ' + name(b.e));
  }
}
const region = screen.querySelector('.content'), actions = screen.querySelector('.actions');
if (region && actions && region.getBoundingClientRect().bottom > actions.getBoundingClientRect().top + 0.5)
  problems.push('the content runs under the buttons');
return problems;
"""


def look(b: "Browser", name: str, language: str = "en") -> None:
    """The screen on show at each of SIZES: no control cut off or overlapping, zero WCAG 2.1 A/AA violations by
    axe-core; a screenshot of each size in SCREENSHOTS. Back to 1280×800 after."""
    SCREENSHOTS.mkdir(exist_ok=True)
    axe = Axe(b.d)
    for w, h in SIZES:
        b.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": False})
        time.sleep(0.3)
        problems = b.d.execute_script(LAYOUT_JS)
        assert not problems, f"{name} at {w}x{h}: {problems}"
        axe.inject()
        # The WCAG 2.0/2.1 A and AA tags the bundled axe-core knows (axe-selenium-python 2.1.6 bundles axe-core
        # 3.1.1, whose rules carry wcag2a/wcag2aa only; a newer axe-core adds wcag21a/wcag21aa by itself).
        result = b.d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const known = new Set(axe.getRules().flatMap((r) => r.tags));"
            "const tags = arguments[0].filter((t) => known.has(t));"
            "axe.run(document, {runOnly: {type: 'tag', values: tags}})"
            ".then((r) => done(r), (e) => done({error: String(e)}));", WCAG_TAGS)
        assert "error" not in result, result
        violations = result["violations"]
        assert not violations, f"{name} at {w}x{h}: " + axe.report(violations)
        b.d.execute_script("const c = document.querySelector('main .content'); if (c) c.scrollTop = 0;")
        b.d.save_screenshot(str(SCREENSHOTS / f"{name}-{language}-{w}x{h}.png"))
    b.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                        {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("kiosk"))
    yield lab
    lab.stop()


@pytest.fixture
def station(lab, tmp_path):
    s = Station(lab, tmp_path / "station", workflows=WORKFLOWS).start()
    yield s
    s.stop()


@pytest.fixture
def camera(tmp_path):
    y4m = tmp_path / "camera.y4m"
    frame = write_y4m(fetch_photos() / "obama.jpg", y4m)
    return y4m, frame


@pytest.fixture
def running(station, camera):
    """Starts kiosks and browsers; stops them after the test."""
    made: list = []

    def start(workflow: str, idle: int = 60, *args: str, video: pathlib.Path | None = None,
              accept_language: str = "en-US,en") -> tuple[Kiosk, Browser]:
        k = Kiosk(station, workflow, idle, *args)
        made.append(k)
        b = Browser(video or camera[0], accept_language)
        made.append(b)
        b.d.get(k.url)
        b.screen("start")
        k.cookie = b.d.get_cookie("tessera_kiosk")["value"]
        return k, b
    yield start
    for x in reversed(made):
        x.quit() if isinstance(x, Browser) else x.stop()


def status(station: Station) -> dict:
    return station.client().call("enrollment.status")


def enter_mrz(b: Browser, mrz: str = MRZ, look_as: str | None = None) -> None:
    """Types the MRZ (a wrong check digit first). `look_as`: also check the screen (look) in that language."""
    b.screen("NFC_MRZ")
    if look_as:
        look(b, "NFC_MRZ", look_as)
    area = b.find('main textarea[name="mrz"]')
    # The document number's check digit typed wrong: said in plain words as soon as the lines are complete (no
    # "check digit", no field name), Continue stays off.
    wrong = mrz.replace("L898902C36", "L898902C35")
    area.send_keys(wrong[:20])
    try:  # the answer to the 20th character (the empty form's "type the lines" may still show a moment)
        WebDriverWait(b.d, 10, poll_frequency=0.05).until(
            lambda d: "20" in d.find_element(By.CSS_SELECTOR, '[data-check="incomplete"]').text)
    except TimeoutException:
        raise AssertionError(f"no '20 of 88'; page: {b.text()}") from None
    assert "88" in b.find('[data-check="incomplete"]').text
    area.send_keys(wrong[20:])
    check = b.find('[data-check="invalid"]')
    assert check.text and "check digit" not in check.text and "documentNumber" not in check.text, check.text
    assert not b.find('[data-action="continue"]').is_enabled()
    area.clear()
    area.send_keys(mrz)
    b.find('[data-check="valid"]')
    b.click()


# --- tests --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("language", ["en", "de"])
def test_full_flow_enrolls_a_passkey(station, running, tmp_path, language):
    """Phone and code, the MRZ read from the camera (the fake camera plays the passport's data page, its MRZ in
    OCR-B, and a face, a second each: the reference reader through tesserad's mrz.read fills the lines once their
    check digits hold), the chip read with progress in plain stages, the camera, consent, the token PIN, in English
    and (chosen with the start screen's button) German: every screen at 1280×800, 1920×1080 and 1080×1920 without
    a control cut off and with zero axe-core WCAG 2.1 A/AA violations, screenshots written; the passkey verifies
    independently; the capture is one of the fake camera's frames; the log holds no personal data."""
    listener = station.session()
    frames = [fitted(mrz_images.page(MRZ), (1280, 720)), fitted(fetch_photos() / "obama.jpg", (1280, 720))]
    write_frames(frames, tmp_path / "document-and-face.y4m", fps=1)
    kiosk, b = running("kiosk-full", video=tmp_path / "document-and-face.y4m")
    if language != "en":
        b.find(f'[data-language="{language}"]').click()
    assert b.d.find_element(By.TAG_NAME, "html").get_attribute("lang") == language
    look(b, "start", language)
    b.click()
    b.screen("PHONE_INFO")
    look(b, "PHONE_INFO", language)
    b.type("phone", PHONE)
    b.click()
    b.screen("PHONE_OTP")
    eid = status(station)["enrollmentId"]
    code = station.otp(eid)["code"]
    wrong = f"{(int(code) + 1) % 1000000:06d}"
    b.type("otp", wrong)
    b.click()
    err = b.find('[data-answer-error][data-error-code="OTP_INVALID"]')
    assert "2" in err.text and "OTP" not in err.text, err.text
    look(b, "PHONE_OTP", language)
    field = b.find('main [name="otp"]')
    field.clear()
    field.send_keys(code)
    b.click()
    b.screen("NFC_MRZ")
    area = b.find('main textarea[name="mrz"][data-mrz-source="camera"]', timeout=90)
    # The line with the number and dates (what opens the chip, every field under a check digit) is the document's;
    # the name line has no check digit, so the person checks it (the chip's own name is what the result shows).
    read = area.get_attribute("value").split("\n")
    assert read[1] == MRZ.split("\n")[1] and read[0].startswith("P<UTOERIKSSON<<"), read
    b.find('[data-check="valid"]')
    assert b.find('[data-mrz-status="found"]').text
    look(b, "NFC_MRZ", language)
    b.click()
    b.screen("NFC_PHASE")
    assert b.find('[data-progress="waitingForCard"]')
    look(b, "NFC_PHASE", language)
    # Every stage the page shows, and when it shows it done, recorded as the page changes; and any file name the
    # person could read.
    b.d.execute_script("""
        window.seen = []; window.named = [];
        new MutationObserver(() => {
          document.querySelectorAll('li[data-stage], [data-progress]').forEach((e) => {
            const k = e.dataset.stage && e.tagName === 'LI' ? e.dataset.stage + ':' + e.dataset.done
                                                            : 'progress:' + e.dataset.progress;
            if (!window.seen.includes(k)) window.seen.push(k);
          });
          const text = (document.querySelector('main') || document.body).innerText;
          for (const w of text.match(/\\b(COM|SOD|DG\\d+|PACE|BAC)\\b/g) || []) window.named.push(w);
        }).observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});""")
    with station.chip():
        placed = time.monotonic()
        selfie = b.screen("SELFIE", timeout=60)
        assert selfie.find_element(By.TAG_NAME, "h1").text == {"en": "Take a photo of your face",
                                                               "de": "Ein Foto Ihres Gesichts"}[language]
        stages = b.d.execute_script("return window.seen")
        assert "progress:reading" in stages, stages
        order = [stages.index(f"{s}:true") for s in ["connect", "details", "photo"]]
        assert order == sorted(order), stages
        assert b.d.execute_script("return window.named") == []
        assert selfie.get_attribute("data-kind") == "camera"
        b.find('video[data-camera]')
        b.find('img[data-drawing="face-guide"]')
        look(b, "SELFIE", language)
        b.click(timeout=30)
        b.screen("TERMS_ACCEPTANCE")
        look(b, "TERMS_ACCEPTANCE", language)
        b.find('main input[name="accepted"]').click()
        b.click()
        b.screen("PASSKEY_CREATION")
        look(b, "PASSKEY_CREATION", language)
        b.type("pin", PIN)
        b.click()
        done = b.screen("done", timeout=60)
        enrolled = time.monotonic()
    assert b.d.find_element(By.TAG_NAME, "html").get_attribute("lang") == language
    print(f"\nkiosk: document placed → enrolled in {enrolled - placed:.2f} s (stages seen: {stages})")
    assert "ANNA MARIA ERIKSSON" in done.text
    finished = listener.expect("enrollment.finished")
    assert finished["outcome"] == "success", finished
    check_credential(listener, finished["credential"], None)
    assert finished["credential"]["rpId"] == RP

    # The capture shown is a frame the fake camera played (Pillow, independent of the page's code).
    src = b.find('figure[data-image="capture"] img').get_attribute("src")
    assert src.startswith("data:image/jpeg;base64,")
    shot = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB")
    # The capture is one of the frames the camera played: nearer (thumbnails, mean absolute difference) to one of
    # them, cropped to 4:3 or scaled, than the two frames are to each other.
    def thumb(img: Image.Image) -> list[int]:
        return list(img.convert("L").resize((32, 24)).tobytes())

    def distance(a: list[int], b_: list[int]) -> float:
        return sum(abs(x - y) for x, y in zip(a, b_)) / len(a)

    def crop(f: Image.Image) -> Image.Image:
        w = f.height * shot.width // shot.height
        return f.crop(((f.width - w) // 2, 0, (f.width + w) // 2, f.height))
    nearest = min(distance(thumb(shot), thumb(t(f))) for f in frames for t in (crop, lambda f: f))
    apart = distance(thumb(frames[0]), thumb(frames[1]))
    assert nearest < 0.3 * apart, (nearest, apart)
    print(f"kiosk: capture {nearest:.1f} from a played frame, the frames {apart:.1f} apart")

    look(b, "done", language)
    b.click()
    b.screen("start")
    assert "ERIKSSON" not in b.text()
    # Back to the start screen: back to the station's default language.
    assert b.d.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    log = kiosk.log.read_text()
    for secret in ["ERIKSSON", "L898902C3", "7408122", PHONE.split()[-1], code, "+49"]:
        assert secret not in log, secret
    assert "enrollment finished: success" in log


def test_the_language_comes_from_the_browser_or_the_station(station, running):
    """A German browser (Accept-Language) gets the page in German; `--language en` wins over it; the person switches
    on the start screen, and the idle wipe returns to the station's language."""
    kiosk, b = running("kiosk-chip", accept_language="de-DE,de;q=0.9,en;q=0.5")
    start = b.screen("start")
    assert b.d.find_element(By.TAG_NAME, "html").get_attribute("lang") == "de"
    assert b.find('[data-language="de"]').get_attribute("aria-pressed") == "true"
    assert b.find('[data-language="de"]').text == "Deutsch" and "Willkommen" in start.text
    assert b.d.title == "Registrierungsstation"

    kiosk2, b2 = running("kiosk-chip", 3, "--language", "en", accept_language="de-DE,de;q=0.9")
    assert b2.d.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    assert "Welcome" in b2.screen("start").text
    b2.find('[data-language="de"]').click()
    assert b2.d.find_element(By.TAG_NAME, "html").get_attribute("lang") == "de"
    # By keyboard alone: Tab to Start (its focus outline drawn), Enter.
    actions = ActionChains(b2.d)
    for _ in range(8):
        actions.send_keys(Keys.TAB).perform()
        if b2.d.switch_to.active_element.get_attribute("data-action") == "continue":
            break
    start_button = b2.d.switch_to.active_element
    assert start_button.get_attribute("data-action") == "continue"
    assert b2.d.execute_script("return getComputedStyle(arguments[0]).outlineStyle", start_button) != "none"
    actions.send_keys(Keys.ENTER).perform()
    mrz = b2.screen("NFC_MRZ")
    # The workflow's own title (its messages), the rest from the German catalogue; the title reaches the live region.
    assert mrz.find_element(By.TAG_NAME, "h1").text == "Ihr Ausweis, bitte" and "Weiter" in mrz.text
    WebDriverWait(b2.d, 5).until(lambda d: d.find_element(By.ID, "announce").get_attribute("textContent")
                                 == "Ihr Ausweis, bitte")
    start = b2.screen("start", timeout=20)  # the idle timeout (3 s)
    b2.find("[data-notice]")
    assert b2.d.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    assert "Welcome" in start.text and "Nobody used the station" in start.text


@pytest.mark.parametrize("language", ["en", "de"])
def test_card_pulled_mid_read_offers_retry(station, running, language):
    """A retryable failure's screen: what to do in plain words, "Try again" (retry) and "Cancel" (cancel: it was
    `continue` before), in both languages (German from the browser's Accept-Language)."""
    kiosk, b = running("kiosk-chip", accept_language="de-DE,de" if language == "de" else "en-US,en")
    with station.chip(True, "--remove-after-apdus", "40") as chip:
        b.click()
        enter_mrz(b)
        err = b.screen("error", timeout=60)
        assert b.find('[data-error-code="CARD_REMOVED"]')
        assert {"en": "reader", "de": "Lesegerät"}[language] in err.text and "CARD_REMOVED" not in err.text
        actions = [e.get_attribute("data-action") for e in err.find_elements(By.CSS_SELECTOR, "[data-action]")]
        assert actions == ["retry", "cancel"], actions
        look(b, "error", language)
        chip.wait_card(True)
        b.click("retry")
        confirm = b.screen("CONFIRM", timeout=60)
    assert confirm.find_element(By.TAG_NAME, "h1").text == {"en": "Are these your details?",
                                                            "de": "Sind das Ihre Angaben?"}[language]
    assert {"en": "Yes, these are my details", "de": "Ja, das sind meine Angaben"}[language] in confirm.text
    look(b, "CONFIRM", language)
    b.find('main input[name="ok"]').click()
    b.click()
    done = b.screen("done")
    assert "ANNA MARIA ERIKSSON" in done.text
    assert "CARD_REMOVED" in kiosk.log.read_text()


def test_wrong_document_data_says_so_and_retry_asks_again(station, running):
    """The fields tab (document number and dates): a birth date that is a valid date but not the document's makes the
    chip refuse access (ACCESS_DENIED): the error says to check the MRZ, and retry asks for it again."""
    kiosk, b = running("kiosk-chip")
    with station.chip():
        b.click()
        b.screen("NFC_MRZ")
        b.find('main button[data-alternative="1"]').click()
        b.find('main form[data-alternative="1"]')
        look(b, "NFC_MRZ-fields", "en")
        b.type("documentNumber", WRONG_MRZ_FIELDS["documentNumber"])
        # Dates as dates: day, month, year (in the catalogue's order); the page makes the MRZ's YYMMDD.
        parts = [e.get_attribute("data-date-part")
                 for e in b.d.find_elements(By.CSS_SELECTOR, '[data-date="dateOfBirth"] input')]
        assert parts == ["day", "month", "year"], parts
        birth, expiry = WRONG_MRZ_FIELDS["dateOfBirth"], WRONG_MRZ_FIELDS["dateOfExpiry"]
        b.type("dateOfBirth-day", "31")
        b.type("dateOfBirth-month", "02")
        b.type("dateOfBirth-year", "19" + birth[:2])
        assert b.find('[data-check="invalid"]').text  # 31 February is no date
        field = b.find('main [name="dateOfBirth-day"]')
        field.clear()
        field.send_keys(birth[4:])
        field = b.find('main [name="dateOfBirth-month"]')
        field.clear()
        field.send_keys(birth[2:4])
        assert b.find('[data-check="incomplete"]')  # no expiry yet
        b.type("dateOfExpiry-day", expiry[4:])
        b.type("dateOfExpiry-month", expiry[2:4])
        b.type("dateOfExpiry-year", "20" + expiry[:2])
        b.find('[data-check="valid"]')
        b.click()
        error = b.screen("error", timeout=60)
        assert b.find('[data-error-code="ACCESS_DENIED"]')
        assert "did not accept the details" in error.text
        for jargon in ["PACE", "6300", "MRZ", "ACCESS_DENIED", "mutual"]:
            assert jargon not in error.text, error.text
        b.click("retry")
        b.screen("NFC_MRZ")
        enter_mrz(b)
        b.screen("CONFIRM", timeout=60)


def test_an_enrollment_left_active_blocks_the_start_unless_take_over(station, running):
    left = station.client().call("enrollment.start", {"type": {"remote": {"candidate": "kiosk-chip"}}})["enrollmentId"]
    kiosk, b = running("kiosk-chip")
    b.click()
    b.screen("error")
    assert b.find('[data-error-code="ENROLLMENT_ACTIVE"]')
    assert status(station)["enrollmentId"] == left
    kiosk2, b2 = running("kiosk-chip", 60, "--take-over")
    b2.click()
    b2.screen("NFC_MRZ")
    now = status(station)
    assert now["active"] is True and now["enrollmentId"] != left
    audit = station.client().call("enrollment.audit", {"limit": 5})["records"]
    assert [r["outcome"] for r in audit if r["enrollmentId"] == left] == ["interrupted"], audit


def test_idle_timeout_cancels_and_wipes_the_page(station, running):
    kiosk, b = running("kiosk-chip", idle=3)
    b.click()
    b.screen("NFC_MRZ")
    b.type("mrz", MRZ[:50])
    eid = status(station)["enrollmentId"]
    start = b.screen("start", timeout=20)
    assert start.find_element(By.CSS_SELECTOR, "[data-notice]").text
    look(b, "start-after-idle", "en")
    page = b.d.page_source
    assert "ERIKSSON" not in page and "textarea" not in page
    s = status(station)
    assert s["active"] is False and s["lastOutcome"]["outcome"] == "cancelled", s
    assert s["lastOutcome"].get("enrollmentId", eid) == eid

    # The result screen is wiped as well.
    with station.chip():
        b.click()
        enter_mrz(b)
        b.screen("CONFIRM", timeout=60)
        b.find('main input[name="ok"]').click()
        b.click()
        assert "ERIKSSON" in b.screen("done").text
    b.screen("start", timeout=20)
    assert "ERIKSSON" not in b.d.page_source


def test_the_bridge_refuses_what_the_station_does_not_do(station, running):
    kiosk, b = running("kiosk-chip")
    # No daemon method by name, no step the daemon does not ask for, no retry without a failure.
    code, body = kiosk.request("POST", "/api/action", {"action": "call", "method": "credentials.list"})
    assert code == 400 and json.loads(body)["error"]["code"] == "INVALID_INPUT"
    code, body = kiosk.request("POST", "/api/action", {"action": "submit", "step": "CONFIRM", "payload": {"ok": True}})
    assert json.loads(body)["error"]["code"] == "STEP_NOT_EXPECTED"
    code, body = kiosk.request("POST", "/api/action", {"action": "retry"})
    assert json.loads(body)["error"]["code"] == "NOT_RETRYABLE"
    # Another origin (a web page elsewhere) or another host name (DNS rebinding) is refused.
    code, _ = kiosk.request("POST", "/api/action", {"action": "start"}, {"origin": "http://evil.example"})
    assert code == 403
    code, _ = kiosk.request("GET", "/", headers={"host": f"evil.example:{kiosk.port}"})
    assert code == 403
    # Camera frames go to the MRZ reader only while the daemon asks for an MRZ.
    code, body = kiosk.request("POST", "/api/mrz", {"image": {"mediaType": "image/jpeg", "data": "/9j/"}})
    assert code == 200 and json.loads(body)["error"]["code"] == "STEP_NOT_EXPECTED"
    # The catalogues and drawings are served; nothing else under /drawings/.
    code, body = kiosk.request("GET", "/catalogues.json")
    assert code == 200 and [l["code"] for l in json.loads(body)["languages"]] == ["en", "de"]
    assert kiosk.request("GET", "/drawings/passport-mrz.svg")[0] == 200
    assert kiosk.request("GET", "/drawings/../kiosk.js.svg")[0] == 404
    assert status(station)["active"] is False
    # An activation token is checked by the daemon (this one is not signed): the page shows the error.
    b.type("activationToken", "eyJhbGciOiJFUzI1NiJ9.e30.AAAA")
    b.click()
    b.screen("error")
    assert b.find("[data-error-code]").get_attribute("data-error-code").startswith("ACTIVATION_TOKEN_")


# --- the screen is the station's (issue 35) -------------------------------------------------------------------------

def test_the_screen_is_the_station_browsers_alone(station, running, camera):
    """The printed URL's secret is exchanged once for an HttpOnly, SameSite=Strict cookie and leaves the address bar;
    without that cookie nothing answers (no view, no action: another uid on this machine reads and does nothing), and
    a second browser cannot take the URL while the station's browser holds the session."""
    kiosk, b = running("kiosk-chip")
    assert len(kiosk.token) >= 22 and "token" not in b.d.current_url, b.d.current_url
    cookie = b.d.get_cookie("tessera_kiosk")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict", cookie
    for method, path, body in [("GET", "/", None), ("GET", "/index.html", None), ("GET", "/events", None),
                               ("GET", "/kiosk.js", None), ("POST", "/api/action", {"action": "start"}),
                               ("POST", "/api/action", {"action": "touch"}), ("POST", "/api/check", {"mrz": "P<"})]:
        for bad in (None, "A" * 43):
            code, data = kiosk.request(method, path, body, cookie=bad)
            assert code == 403 and b"kiosk-chip" not in data and b"<html" not in data, (method, path, code, data)
    assert status(station)["active"] is False
    # A wrong secret, and the right one while the station's browser holds the session: refused, no cookie.
    kiosk.token, token = "A" * 43, kiosk.token
    assert kiosk.exchange()[:2] == (403, None)
    kiosk.token = token
    code, value, _, _ = kiosk.exchange()
    assert (code, value) == (403, None)
    other = Browser(camera[0])
    try:
        other.d.get(kiosk.url)
        assert "another browser" in other.d.page_source and not other.d.get_cookie("tessera_kiosk")
    finally:
        other.quit()
    # The station's browser reloading the URL keeps its session; and it still walks a step.
    assert kiosk.exchange(kiosk.cookie)[:2] == (303, kiosk.cookie)
    b.click()
    b.screen("NFC_MRZ")
    code, body = kiosk.request("POST", "/api/action", {"action": "cancel"})
    assert code == 200 and json.loads(body) == {"ok": True}, body
    b.screen("start")


def test_take_over_lets_a_restarted_browser_in(station, running, camera):
    """--take-over: a browser restarted with the printed URL gets a new session; the old cookie stops working."""
    kiosk, b = running("kiosk-chip", 60, "--take-over")
    old = kiosk.cookie
    b.quit()
    again = Browser(camera[0])
    try:
        again.d.get(kiosk.url)
        again.screen("start")
        new = again.d.get_cookie("tessera_kiosk")["value"]
        assert new != old
        assert kiosk.request("POST", "/api/action", {"action": "touch"}, cookie=old)[0] == 403
        assert kiosk.request("GET", "/events", cookie=old)[0] == 403
        again.click()
        again.screen("NFC_MRZ")
    finally:
        again.quit()


def test_loopback_only_and_the_url_in_a_private_file(station, camera, tmp_path):
    out = subprocess.run([str(BIN / "tessera"), "--socket", station.daemon.socket, "kiosk", "--listen", "0.0.0.0:0",
                          "--workflow", "kiosk-chip"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 64 and "loopback" in out.stderr, out
    url_file = tmp_path / "kiosk.url"
    kiosk = Kiosk(station, "kiosk-chip", 60, "--url-file", str(url_file))
    b = None
    try:
        assert kiosk.token is None and "token" not in kiosk.line and str(url_file) in kiosk.line, kiosk.line
        st = url_file.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid(), oct(st.st_mode)
        url = url_file.read_text().strip()
        assert url.startswith(f"http://127.0.0.1:{kiosk.port}/?token="), url
        b = Browser(camera[0])
        b.d.get(url)
        b.screen("start")
    finally:
        if b:
            b.quit()
        kiosk.stop()
    assert not url_file.exists()


def vm_rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_idle_sockets_and_an_endless_body_leave_the_station_working(station, running):
    """300 sockets that never send a request and an 8 MiB body that never ends (with the station's own cookie):
    the idle ones are closed (8 connections at most, headers within 10 s), the body is refused from its
    Content-Length before it is read, and the real browser still walks a step; the kiosk's RSS stays flat."""
    kiosk, b = running("kiosk-chip")
    before = vm_rss_kib(kiosk.proc.pid)
    # Headers, then a body that never comes: closed after the 30 s body time.
    slow = socket.create_connection(("127.0.0.1", kiosk.port), timeout=10)
    slow.sendall((f"POST /api/check HTTP/1.1\r\nHost: 127.0.0.1:{kiosk.port}\r\nContent-Type: application/json\r\n"
                  f"Cookie: tessera_kiosk={kiosk.cookie}\r\nContent-Length: 100\r\n\r\n{{").encode())
    slow_since = time.monotonic()
    big = socket.create_connection(("127.0.0.1", kiosk.port), timeout=10)
    big.sendall((f"POST /api/action HTTP/1.1\r\nHost: 127.0.0.1:{kiosk.port}\r\nContent-Type: application/json\r\n"
                 f"Cookie: tessera_kiosk={kiosk.cookie}\r\nContent-Length: {8 << 20}\r\n\r\n").encode())
    # Refused from its Content-Length, before any of the body is sent.
    answer = big.recv(200)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    sent = 0
    try:
        while sent < (8 << 20) - 1:
            sent += big.send(b"x" * min(1 << 20, (8 << 20) - 1 - sent))
    except OSError:
        pass  # the kiosk closed it: the body is never read
    # A chunked body without a length is refused as soon as it passes the bound (8 KiB for the MRZ check).
    chunked = socket.create_connection(("127.0.0.1", kiosk.port), timeout=10)
    chunked.sendall((f"POST /api/check HTTP/1.1\r\nHost: 127.0.0.1:{kiosk.port}\r\nContent-Type: application/json\r\n"
                     f"Cookie: tessera_kiosk={kiosk.cookie}\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
    try:
        for _ in range(4):
            chunked.sendall(b"1000\r\n" + b"x" * 4096 + b"\r\n")
    except OSError:
        pass
    assert chunked.recv(200).startswith(b"HTTP/1.1 413")
    chunked.close()
    idle = [socket.create_connection(("127.0.0.1", kiosk.port), timeout=10) for _ in range(300)]
    # The browser walks a step meanwhile.
    b.click()
    b.screen("NFC_MRZ")
    b.type("mrz", MRZ[:44])
    b.find('[data-check="incomplete"]')
    b.click("cancel")
    b.screen("start")
    # Every idle socket is closed by the kiosk within the 10 s header time.
    deadline = time.monotonic() + 20
    open_ = set(idle)
    while open_ and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_), [], [], 1)
        for sock in ready:
            try:
                if not sock.recv(100):
                    open_.discard(sock)
            except OSError:
                open_.discard(sock)
    after = vm_rss_kib(kiosk.proc.pid)
    slow.settimeout(45)
    assert slow.recv(100) == b"", "the body that never came still holds its connection"
    slow_closed = time.monotonic() - slow_since
    assert 25 < slow_closed < 40, slow_closed
    for sock in idle + [big, slow]:
        sock.close()
    print(f"\nkiosk RSS before {before} KiB, after 300 idle sockets and an 8 MiB body {after} KiB "
          f"(body bytes the client got out: {sent})")
    assert not open_, f"{len(open_)} idle sockets still open"
    assert after - before < 4096, (before, after)


def test_an_event_stream_that_stops_reading_is_closed(station, running):
    """A client with the cookie that opens /events and never reads: the views it does not read are not queued
    without end; once 256 KiB wait unsent its stream is closed, while the browser's stream goes on."""
    kiosk, b = running("kiosk-chip")
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", kiosk.port))
    reader.sendall(f"GET /events HTTP/1.1\r\nHost: 127.0.0.1:{kiosk.port}\r\nCookie: tessera_kiosk={kiosk.cookie}"
                   "\r\n\r\n".encode())
    time.sleep(0.5)
    before = vm_rss_kib(kiosk.proc.pid)
    # "restart" on the start screen wipes it again: a new view for every subscriber, no daemon call.
    body = json.dumps({"action": "restart"})
    for _ in range(6000):
        c = http.client.HTTPConnection("127.0.0.1", kiosk.port, timeout=10)
        c.request("POST", "/api/action", body=body, headers={"content-type": "application/json",
                                                              "cookie": f"tessera_kiosk={kiosk.cookie}"})
        assert c.getresponse().read() == b'{"ok":true}'
        c.close()
    after = vm_rss_kib(kiosk.proc.pid)
    reader.settimeout(10)
    got = 0
    try:
        while chunk := reader.recv(65536):
            got += len(chunk)
    except (ConnectionResetError, socket.timeout) as e:
        assert isinstance(e, ConnectionResetError), f"the unread stream is still open after {got} bytes"
    reader.close()
    print(f"\nunread event stream closed after {got} bytes reached the client; kiosk RSS {before} → {after} KiB")
    assert got < 2 << 20, got
    # The browser's own stream still draws.
    b.click()
    b.screen("NFC_MRZ")


# --- face matching (the reference matcher) --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def face_lab(tmp_path_factory):
    lab = FaceLab(tmp_path_factory.mktemp("kiosk-face"))
    yield lab
    lab.stop()


class FaceRun:
    """A face station (its own tesserad), `tessera kiosk` for its workflow "face" and a browser whose camera plays
    `photo`."""

    def __init__(self, lab: FaceLab, root: pathlib.Path, photo: pathlib.Path, face: dict | None = None,
                 workflow: str = "face"):
        self.station = FaceStation(lab, root, face or {"timeoutSeconds": 300})
        self.root = root
        write_y4m(photo, root / "camera.y4m")
        self.kiosk = Kiosk(self.station, workflow)
        self.b = Browser(root / "camera.y4m")
        self.b.d.get(self.kiosk.url)
        self.b.screen("start")

    def to_camera(self) -> None:
        """Start, MRZ, the chip read: up to the camera screen, then capture."""
        b = self.b
        b.click()
        enter_mrz(b)
        with self.station.chip():
            self.placed = time.monotonic()
            b.screen("FACE_MATCHING", timeout=60)
        assert b.find('main > section[data-step="FACE_MATCHING"]').get_attribute("data-kind") == "camera"
        b.find("video[data-camera]")
        look(b, "face-camera")
        b.click(timeout=30)

    def stop(self) -> None:
        self.b.quit()
        self.kiosk.stop()
        self.station.stop()


@pytest.fixture
def face_run(face_lab, tmp_path):
    made: list[FaceRun] = []

    def start(photo: pathlib.Path, face: dict | None = None, workflow: str = "face") -> FaceRun:
        r = FaceRun(face_lab, tmp_path / f"run{len(made)}", photo, face, workflow)
        made.append(r)
        return r
    yield start
    for r in made:
        r.stop()


def test_face_of_the_holder_enrolls(face_lab, face_run):
    """The camera plays another photo of the passport's holder: matched, the passkey made, and the result screen
    shows the chip's portrait (DG2, as the daemon kept it) beside the capture."""
    r = face_run(fetch_photos() / "obama2.jpg")
    r.to_camera()
    b = r.b
    b.screen("PASSKEY_CREATION", timeout=300)
    b.type("pin", PIN)
    b.click()
    b.screen("done", timeout=60)
    enrolled = time.monotonic()
    print(f"\nkiosk (face): document placed → enrolled in {enrolled - r.placed:.2f} s")
    portrait = b.find('figure[data-image="portrait"] img').get_attribute("src")
    assert base64.b64decode(portrait.split(",", 1)[1]) == face_lab.photos.portrait
    assert b.find('figure[data-image="capture"] img').get_attribute("src").startswith("data:image/jpeg;base64,")
    audit = r.station.client().call("enrollment.audit", {"limit": 1})["records"][0]
    assert audit["outcome"] == "success" and audit["faceChecks"][0]["decision"] == "match", audit
    b.click()
    b.screen("start")
    assert "data:image" not in b.d.page_source


def test_another_persons_face_is_a_mismatch_with_retry(face_run):
    r = face_run(fetch_photos() / "biden.jpg")
    r.to_camera()
    b = r.b
    b.screen("error", timeout=300)
    assert b.find('[data-error-code="FACE_MISMATCH"]')
    b.find('[data-action="retry"]')
    b.click("retry")
    b.screen("FACE_MATCHING", timeout=60)
    audit_before = r.station.client().call("enrollment.status")
    assert audit_before["active"] is True


def test_no_face_asks_for_another_capture(face_lab, face_run):
    r = face_run(face_lab.root / "noface.jpg")
    r.to_camera()
    b = r.b
    err = b.find('main > section[data-step="FACE_MATCHING"] [data-answer-error][data-error-code="FACE_NOT_FOUND"]',
                 timeout=300)
    assert err.text
    assert b.find('[data-action="continue"]').is_enabled()


def test_a_crashing_matcher_is_unavailable_with_retry(face_lab, face_run):
    r = face_run(fetch_photos() / "obama2.jpg", {"command": [str(face_lab.crash)]})
    r.to_camera()
    b = r.b
    b.screen("error", timeout=120)
    assert b.find('[data-error-code="FACE_MATCHER_UNAVAILABLE"]')
    b.find('[data-action="retry"]')


def test_liveness_challenge_is_shown_and_a_still_photo_fails_it(face_run):
    """The workflow "liveness": after FACE_MATCHING, the challenge's actions are listed in order on the camera
    screen and frames are taken for each; a still photo does not turn its head: LIVENESS_FAILED, retry offered."""
    r = face_run(fetch_photos() / "obama2.jpg", workflow="liveness")
    r.to_camera()
    b = r.b
    screen = b.screen("LIVENESS_CHALLENGE_PHASE", timeout=300)
    assert screen.get_attribute("data-kind") == "camera"
    challenge = b.find("ol[data-challenge]")
    actions = challenge.get_attribute("data-challenge").split()
    assert sorted(actions) == ["turnLeft", "turnRight"], actions
    steps = [li.text for li in challenge.find_elements(By.TAG_NAME, "li")]
    assert steps == [{"turnLeft": "Turn your head to the left", "turnRight": "Turn your head to the right"}[a]
                     for a in actions]
    look(b, "liveness-camera")
    b.click(timeout=30)
    b.screen("error", timeout=300)
    assert b.find('[data-error-code="LIVENESS_FAILED"]')
    b.find('[data-action="retry"]')
    check = r.station.client().call("enrollment.audit", {"limit": 1})["records"]
    assert not check or check[0]["outcome"] != "success"
