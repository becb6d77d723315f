"""libnfc readers end to end: `tessera lab pn532` (a software PN532 on a pty, the emulated passport in its field),
libnfc's real pn532_uart driver inside the real tesserad (--nfc-device), nfc-list, and APDU traces; card emulation
(lab.emulate: libnfc target mode in tesserad, a reader in the software PN532's field)."""
from __future__ import annotations

import json
import os
import pathlib
import queue
import shutil
import signal
import subprocess
import threading
import time

import pytest

from tessera_harness import BIN, PCSCD, Daemon, RPCError, make_passport_profile, unb64u

MRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"


def make_profile(root: pathlib.Path, name: str, *args: str) -> pathlib.Path:
    return make_passport_profile(root / f"profile-{name}", MRZ, *args)


class PN532:
    """`tessera lab pn532` running in the background."""

    def __init__(self, root: pathlib.Path, profile: pathlib.Path, *args: str, name: str = "pn532",
                 card: str = "--profile"):
        self.pty = root / name
        self.trace = root / f"{name}.pcap"
        self.log = open(root / f"{name}.log", "ab")
        self.proc = subprocess.Popen([str(BIN / "tessera"), "lab", "pn532", "--pty", str(self.pty),
                                      card, str(profile), "--trace", str(self.trace), *args],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("pn532 ready"), f"pn532 did not start: {line!r}"
        self.connstring = f"pn532_uart:{self.pty}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def nfc_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("nfc")
    bac = make_profile(root, "bac")
    pace = make_profile(root, "pace", "--pace", "ecdh-gm-p256-aes128", "--no-bac")
    readers = {"bac": PN532(root, bac, name="pn532-bac"),
               "pace": PN532(root, pace, name="pn532-pace"),
               "flaky": PN532(root, bac, "--remove-after-apdus", "8", name="pn532-flaky")}
    csca = [a for d in (bac, pace) for a in ("--csca", str(d / "csca.pem"))]
    nfc = [a for r in readers.values() for a in ("--nfc-device", r.connstring)]
    # No pcscd in this test: the PC/SC source is down and the daemon serves the libnfc readers alone.
    env = {"PCSCLITE_CSOCK_NAME": str(root / "no-pcscd.comm")}
    daemon = Daemon(root, env, ["--no-embedded-softhsm", *csca, *nfc]).start()
    yield root, readers, daemon
    daemon.stop()
    for r in readers.values():
        r.stop()


def test_nfc_list_sees_the_software_pn532(nfc_lab):
    root, readers, _ = nfc_lab
    out = subprocess.run(["nfc-list", "-t", "1"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "LIBNFC_DEFAULT_DEVICE": readers["bac"].connstring})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 ISO14443A passive target(s) found" in out.stdout, out.stdout
    assert "08  54  53  52" in out.stdout


def test_readers_list_shows_libnfc_readers(nfc_lab):
    _, readers, daemon = nfc_lab
    listed = daemon.client().call("readers.list")["readers"]
    by_name = {r["name"]: r for r in listed}
    for r in readers.values():
        assert by_name[r.connstring]["stack"] == "libnfc"
        assert by_name[r.connstring]["cardPresent"] is True
        assert by_name[r.connstring]["atr"]


@pytest.mark.parametrize("profile,expected", [("bac", "BAC"), ("pace", "PACE")])
def test_documents_read_through_libnfc(nfc_lab, profile, expected):
    _, readers, daemon = nfc_lab
    result = daemon.client().call("documents.read", {"mrz": MRZ, "reader": readers[profile].connstring})
    assert result["mrz"]["documentNumber"] == "L898902C3"
    assert result["accessProtocol"] == expected
    assert result["passiveAuthentication"]["status"] == "valid", result["passiveAuthentication"]


def test_target_lost_mid_read_then_next_read_works(nfc_lab):
    _, readers, daemon = nfc_lab
    c = daemon.client()
    with pytest.raises(RPCError) as e:
        c.call("documents.read", {"mrz": MRZ, "reader": readers["flaky"].connstring})
    assert e.value.code == "CARD_REMOVED", e.value
    again = c.call("documents.read", {"mrz": MRZ, "reader": readers["flaky"].connstring})
    assert again["mrz"]["documentNumber"] == "L898902C3"


def test_unknown_nfc_reader_is_no_reader(nfc_lab):
    _, _, daemon = nfc_lab
    with pytest.raises(RPCError) as e:
        daemon.client().call("documents.read", {"mrz": MRZ, "reader": "pn532_uart:/nonexistent"})
    assert e.value.code == "NO_READER"


def test_trace_is_printed_and_decoded_by_tshark(nfc_lab):
    root, readers, daemon = nfc_lab
    daemon.client().call("documents.read", {"mrz": MRZ, "reader": readers["bac"].connstring, "dataGroups": ["DG1"]})
    out = subprocess.run([str(BIN / "tessera"), "lab", "trace", str(readers["bac"].trace)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "GET CHALLENGE" in out.stdout and "EXTERNAL AUTHENTICATE" in out.stdout, out.stdout[:2000]
    tshark = shutil.which("tshark")
    assert tshark, "tshark is required (scripts/setup.sh installs it)"
    conf = root / "wireshark"
    conf.mkdir(exist_ok=True)
    (conf / "decode_as_entries").write_text("decode_as_entry: iso14443.subdissector,0,(none),ISO 7816\n")
    ts = subprocess.run([tshark, "-r", str(readers["bac"].trace), "-Y", "iso7816.apdu.ins == 0x84"],
                        capture_output=True, text=True, timeout=60, env={**os.environ, "WIRESHARK_CONFIG_DIR": str(conf)})
    assert ts.returncode == 0, ts.stderr
    assert "ISO 7816" in ts.stdout, ts.stdout


class ReaderPN532:
    """`tessera lab pn532 --reader-…`: a software PN532 whose field holds a reader that reads an emulated card once."""

    def __init__(self, root: pathlib.Path, *args: str, name: str = "pn532-reader"):
        self.pty = root / name
        self.connstring = f"pn532_uart:{self.pty}"
        self.proc = subprocess.Popen([str(BIN / "tessera"), "lab", "pn532", "--pty", str(self.pty), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        first = self.lines.get(timeout=30)
        assert first.startswith("pn532 ready"), f"pn532 did not start: {first!r}"

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, prefix: str, timeout: float = 60) -> list[str]:
        seen: list[str] = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                break
            seen.append(line)
            if line.startswith(prefix):
                return seen
        raise AssertionError(f"no {prefix!r} from the reader: {seen}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def test_lab_emulate_serves_a_reader_with_live_log_and_trace(nfc_lab):
    root, _, daemon = nfc_lab
    profile = make_profile(root, "emulated", "--pace", "ecdh-gm-p256-aes128")
    reader = ReaderPN532(root, "--reader-mrz", MRZ)
    trace = root / "emulated.pcap"
    try:
        c = daemon.client()
        c.sock.settimeout(60)
        c.send_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "lab.emulate",
                               "params": {"device": reader.connstring, "profile": str(profile), "trace": str(trace),
                                          "durationSeconds": 120}}).encode() + b"\n")
        seen = reader.wait_for("reader: done")
        assert any("reader: PACE DG1" in line and "document L898902C3" in line for line in seen), seen
        other = daemon.client()
        with pytest.raises(RPCError) as busy:
            other.call("lab.emulate", {"device": reader.connstring, "profile": str(profile)})
        assert busy.value.code == "DEVICE_BUSY"
        assert other.call("lab.stop", {"device": reader.connstring}) == {"stopped": True}
        notifications, result = [], None
        while result is None:
            m = c.read_message()
            assert m is not None, "daemon closed the connection"
            if "id" in m:
                assert "result" in m, m
                result = m["result"]
            else:
                notifications.append(m)
        assert result["reason"] == "stopped" and result["activations"] == 1, result
        apdus = [n["params"] for n in notifications if n["method"] == "lab.apdu"]
        events = [n["params"]["event"] for n in notifications if n["method"] == "lab.event"]
        assert len(apdus) == result["exchanges"] >= 6, result
        assert events[:3] == ["waiting", "activated", "fieldLost"], events
        assert all(a["delivered"] for a in apdus)
        assert unb64u(apdus[0]["command"])[:2] in (b"\x00\xb0", b"\x00\xa4"), apdus[0]
        assert any(unb64u(a["command"])[1] == 0x86 for a in apdus), "PACE GENERAL AUTHENTICATE went through"
    finally:
        reader.stop()
    out = subprocess.run([str(BIN / "tessera"), "lab", "trace", str(trace)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "GENERAL AUTHENTICATE" in out.stdout and "E080" in out.stdout, out.stdout[:2000]
    conf = root / "wireshark"
    conf.mkdir(exist_ok=True)
    (conf / "decode_as_entries").write_text("decode_as_entry: iso14443.subdissector,0,(none),ISO 7816\n")
    ts = subprocess.run([shutil.which("tshark") or "tshark", "-r", str(trace), "-Y", "iso7816.apdu.ins == 0x86"],
                        capture_output=True, text=True, timeout=60, env={**os.environ, "WIRESHARK_CONFIG_DIR": str(conf)})
    assert ts.returncode == 0 and "ISO 7816" in ts.stdout, ts.stdout + ts.stderr


def test_lab_emulate_scripted_card_and_bad_params(nfc_lab):
    root, _, daemon = nfc_lab
    script = root / "applet.txt"
    script.write_text("00A4 * => 9000\n00B0 * => CAFE 9000\n")
    reader = ReaderPN532(root, "--reader-apdu", "00A4040C02011E", "--reader-apdu", "00B0000002",
                         "--reader-apdu", "00CA000000", name="pn532-scripted")
    try:
        c = daemon.client()
        c.sock.settimeout(60)
        c.send_raw(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "lab.emulate",
                               "params": {"device": reader.connstring, "script": str(script),
                                          "durationSeconds": 3}}).encode() + b"\n")
        seen = reader.wait_for("reader: done")
        assert "reader: < CAFE9000" in seen and "reader: < 6D00" in seen, seen
        while True:
            m = c.read_message()
            assert m is not None
            if m.get("id") == 7:
                break
        assert m["result"]["reason"] == "duration" and m["result"]["exchanges"] == 3, m
    finally:
        reader.stop()
    c = daemon.client()
    for params, field in [({"device": "pn532_uart:/x", "script": "relative.txt"}, "script"),
                          ({"device": "pn532_uart:/x"}, None),
                          ({"device": "pn532_uart:/x", "script": str(script), "durationSeconds": 0}, "durationSeconds")]:
        with pytest.raises(RPCError) as e:
            c.call("lab.emulate", params)
        assert e.value.code == "INVALID_INPUT", params
    assert c.call("lab.stop", {"device": "pn532_uart:/nothing"}) == {"stopped": False}


def test_emulate_passport_behind_vpcd_writes_a_trace(tmp_path):
    profile = make_profile(tmp_path, "vpcd")
    pcscd = PCSCD(tmp_path).start()
    daemon = Daemon(tmp_path, pcscd.env, ["--no-embedded-softhsm", "--csca", str(profile / "csca.pem")]).start()
    trace = tmp_path / "vpcd.pcap"
    chip = subprocess.Popen([str(BIN / "tessera"), "lab", "emulate-passport", "--profile", str(profile),
                             "--vpcd", f"127.0.0.1:{pcscd.port}", "--trace", str(trace)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert chip.stdout.readline().startswith("inserted")
        c = daemon.client()
        deadline = time.time() + 15
        while not any(r["name"] == pcscd.readers[0] and r["cardPresent"] for r in c.call("readers.list")["readers"]):
            assert time.time() < deadline, "the emulated passport never appeared in the vpcd reader"
            time.sleep(0.05)
        result = c.call("documents.read", {"mrz": MRZ, "reader": pcscd.readers[0], "dataGroups": ["DG1"]})
        assert result["mrz"]["documentNumber"] == "L898902C3"
    finally:
        chip.terminate()
        chip.wait(10)
        daemon.stop()
        pcscd.stop()
    out = subprocess.run([str(BIN / "tessera"), "lab", "trace", str(trace)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "field on" in out.stdout and "GET CHALLENGE" in out.stdout and "EXTERNAL AUTHENTICATE" in out.stdout, out.stdout
    conf = tmp_path / "wireshark"
    conf.mkdir()
    (conf / "decode_as_entries").write_text("decode_as_entry: iso14443.subdissector,0,(none),ISO 7816\n")
    ts = subprocess.run([shutil.which("tshark") or "tshark", "-r", str(trace), "-Y", "iso7816.apdu.ins == 0x84"],
                        capture_output=True, text=True, timeout=60, env={**os.environ, "WIRESHARK_CONFIG_DIR": str(conf)})
    assert ts.returncode == 0 and "ISO 7816" in ts.stdout, ts.stdout + ts.stderr


def test_daemon_shutdown_ends_an_emulation(tmp_path):
    script = tmp_path / "applet.txt"
    script.write_text("* => 9000\n")
    reader = ReaderPN532(tmp_path, "--reader-apdu", "00A4040C02011E")
    daemon = Daemon(tmp_path, {"PCSCLITE_CSOCK_NAME": str(tmp_path / "no-pcscd.comm")}, ["--no-embedded-softhsm"]).start()
    try:
        c = daemon.client()
        c.sock.settimeout(30)
        c.send_raw(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "lab.emulate",
                               "params": {"device": reader.connstring, "script": str(script)}}).encode() + b"\n")
        reader.wait_for("reader: done")
        started = time.time()
        daemon.proc.send_signal(signal.SIGTERM)
        while True:
            m = c.read_message()
            assert m is not None, "the request must be answered before the daemon exits"
            if m.get("id") == 1:
                break
        assert m["result"]["reason"] == "stopped" and m["result"]["exchanges"] == 1, m
        assert daemon.proc.wait(10) == 0
        assert time.time() - started < 5
    finally:
        daemon.stop()
        reader.stop()
