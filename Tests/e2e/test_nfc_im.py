"""PACE Integrated Mapping over libnfc: an IM-only emulated passport in the field of `tessera lab pn532` (a software
PN532 on a pty), read by the real tesserad through libnfc's pn532_uart driver."""
from __future__ import annotations

from tessera_harness import Daemon
from test_nfc import MRZ, PN532, make_profile


def test_integrated_mapping_through_libnfc(tmp_path):
    profile = make_profile(tmp_path, "im", "--pace", "ecdh-im-p256-aes128", "--no-bac")
    reader = PN532(tmp_path, profile, name="pn532-im")
    # No pcscd: the PC/SC source is down and the daemon serves the libnfc reader alone.
    env = {"PCSCLITE_CSOCK_NAME": str(tmp_path / "no-pcscd.comm")}
    daemon = Daemon(tmp_path, env, ["--no-embedded-softhsm", "--csca", str(profile / "csca.pem"),
                                    "--nfc-device", reader.connstring]).start()
    try:
        result = daemon.client().call("documents.read", {"mrz": MRZ, "reader": reader.connstring})
    finally:
        daemon.stop()
        reader.stop()
    assert (result["accessProtocol"], result["paceMapping"]) == ("PACE", "IM")
    assert result["mrz"]["documentNumber"] == "L898902C3"
    assert result["passiveAuthentication"]["status"] == "valid", result["passiveAuthentication"]
