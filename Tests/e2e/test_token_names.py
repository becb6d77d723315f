"""One rule for naming a token wherever one is named: its id, or its label when exactly one present token has it
(docs/API.md, "Naming a token"). Checked on the real daemon with SoftHSM2 tokens, through the CLI and the socket."""
import subprocess

import pytest
from tessera_harness import BIN, SOFTHSM_MODULE, Daemon, RPCError, cli


def test_enroll_and_keygen_take_a_label_or_an_id(daemon):
    c = daemon.client()
    token = next(t for t in c.call("tokens.list")["tokens"] if t["label"] == "tessera-test")
    for name in ("tessera-test", token["id"]):
        out = cli(daemon, "--json", "enroll", "--rp-id", "example.com", "--user-name", f"alice-{name}",
                  "--token", name, "--pin-stdin", input="1234\n")
        assert f'"tokenId":"{token["id"]}"' in out.stdout.replace(" ", ""), out.stdout
        key = c.call("ssh.keygen", {"tokenId": name, "comment": f"k-{len(name)}", "pin": "1234"})
        assert key["tokenId"] == token["id"]
    with pytest.raises(RPCError) as missing:
        c.call("ssh.keygen", {"tokenId": "no such token", "pin": "1234"})
    assert missing.value.code == "TOKEN_NOT_PRESENT"
    assert "no token with id or label 'no such token'" in str(missing.value)
    c.close()


def test_an_ambiguous_label_is_refused_naming_the_ids(tmp_path, softhsm):
    softhsm.add_token("tessera-test", pin="1234")  # a second token with the same label
    d = Daemon(tmp_path, softhsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm"]).start()
    try:
        c = d.client()
        ids = [t["id"] for t in c.call("tokens.list")["tokens"] if t["label"] == "tessera-test"]
        assert len(ids) == 2
        with pytest.raises(RPCError) as ambiguous:
            c.call("ssh.keygen", {"tokenId": "tessera-test", "pin": "1234"})
        assert ambiguous.value.code == "INVALID_INPUT"
        assert all(i in str(ambiguous.value) for i in ids)
        # By id each is still reachable.
        assert c.call("ssh.keygen", {"tokenId": ids[1], "comment": "second", "pin": "1234"})["tokenId"] == ids[1]
        c.close()
        out = subprocess.run([str(BIN / "tessera"), "--socket", d.socket, "enroll", "--rp-id", "example.com",
                              "--user-name", "bob", "--token", "tessera-test", "--pin-stdin"], input="1234\n",
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "INVALID_INPUT" in out.stderr, out.stderr
    finally:
        d.stop()
