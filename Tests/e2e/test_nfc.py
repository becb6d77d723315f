"""libnfc readers end to end: `tessera lab pn532` (a software PN532 on a pty, the emulated passport in its field),
libnfc's real pn532_uart driver inside the real tesserad (--nfc-device), nfc-list, and APDU traces."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from tessera_harness import BIN, Daemon, RPCError

MRZ = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<\nL898902C36UTO7408122F1204159ZE184226B<<<<<10"


def make_profile(root: pathlib.Path, name: str, *args: str) -> pathlib.Path:
    d = root / f"profile-{name}"
    out = subprocess.run([str(BIN / "tessera"), "lab", "make-profile", str(d), "--mrz", MRZ, *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return d


class PN532:
    """`tessera lab pn532` running in the background."""

    def __init__(self, root: pathlib.Path, profile: pathlib.Path, *args: str, name: str = "pn532"):
        self.pty = root / name
        self.trace = root / f"{name}.pcap"
        self.log = open(root / f"{name}.log", "ab")
        self.proc = subprocess.Popen([str(BIN / "tessera"), "lab", "pn532", "--pty", str(self.pty),
                                      "--profile", str(profile), "--trace", str(self.trace), *args],
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
