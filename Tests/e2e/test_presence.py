"""The one presence broker (presence.command / presence.confirm) end to end: the retired per-door keys stop
start-up, and a request is answerable on the socket only by its own uid (or an admin)."""
import hashlib
import json
import os
import subprocess
import threading

import pytest
from fido2.ctap import CtapError
from fido2.ctap2 import Ctap2

from tessera_harness import BIN, NOBODY, AsUser, as_nobody, calls_as
from tessera_harness import let_other_uids_reach
from test_ctap import RP, CTAPDaemon


@pytest.mark.parametrize("section, key, replacement", [
    ("ctap", "presenceCommand", "presence.command"),
    ("ctap", "presenceTimeoutSeconds", "presence.timeoutSeconds"),
    ("ctap", "confirmOnSocket", "presence.confirmOnSocket"),
    ("mdoc", "presenceCommand", "presence.command"),
    ("mdoc", "presenceTimeoutSeconds", "presence.timeoutSeconds"),
    ("sshAgent", "presenceCommand", "presence.command"),
    ("sshAgent", "presenceTimeoutSeconds", "presence.timeoutSeconds"),
])
def test_the_old_per_door_presence_keys_stop_start_up(tmp_path, section, key, replacement):
    config = tmp_path / "tesserad.json"
    value = ["/bin/true"] if key == "presenceCommand" else (True if key == "confirmOnSocket" else 30)
    config.write_text(json.dumps({section: {key: value}}))
    out = subprocess.run([str(BIN / "tesserad"), "--socket", str(tmp_path / "s.sock"), "--state-dir",
                          str(tmp_path / "state"), "--no-embedded-softhsm", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0, out.stderr
    assert f"{section}.{key} is no longer read" in out.stderr and f"use {replacement}" in out.stderr, out.stderr


def test_another_uids_presence_confirm_cannot_answer_my_request(tmp_path, softhsm):
    """A CTAP request of root waits for presence (confirmOnSocket): nobody neither sees it (presence.list, the
    presence.request notification) nor answers it (presence.confirm, presence.deny); root's own presence.confirm
    does, and root's subscribed connection is told when it starts and ends."""
    let_other_uids_reach(tmp_path)
    d = CTAPDaemon(tmp_path, softhsm, presence=False, presence_extra={"confirmOnSocket": True},
                   top={"socketMode": "0666"}).start()
    try:
        ctap2 = Ctap2(d.device())
        out = {}

        def make():
            try:
                out["r"] = ctap2.make_credential(hashlib.sha256(b"p").digest(), {"id": RP}, {"id": b"u", "name": "u"},
                                                 [{"type": "public-key", "alg": -7}])
            except CtapError as e:
                out["e"] = e

        t = threading.Thread(target=make)
        # nobody subscribes too: it must not be told about root's request.
        def nobody_listens(c, ready):
            c.call("presence.subscribe")
            ready()
            try:
                return c.next_notification(timeout=3)
            except (TimeoutError, OSError):
                return "nothing"

        listener = AsUser(NOBODY, d.daemon.socket, nobody_listens)
        listener.wait_ready()
        c = d.daemon.client()
        c.call("presence.subscribe")
        t.start()
        notified = c.wait_notification("presence.request")
        assert notified["door"] == "ctap" and notified["operation"] == "makeCredential", notified
        pending = c.call("presence.list", {})["requests"]
        assert pending[0]["door"] == "ctap" and pending[0]["uid"] == os.getuid(), pending
        rid = pending[0]["requestId"]
        assert notified["requestId"] == rid
        assert listener.result() == "nothing"
        seen = as_nobody(d.daemon.socket, [("presence.confirm", {"requestId": rid}), ("presence.deny", {}),
                                           ("presence.confirm", {})])
        assert seen == {"presence.confirm": "PRESENCE_NOT_PENDING", "presence.deny": "PRESENCE_NOT_PENDING"}, seen
        _, listed = calls_as(NOBODY, d.daemon.socket, [("presence.list", {})])
        assert listed == [{"result": {"requests": []}}], listed
        assert [r["requestId"] for r in c.call("presence.list", {})["requests"]] == [rid]
        c.call("presence.confirm", {"requestId": rid})
        t.join(60)
        assert "r" in out, out
        assert out["r"].auth_data.is_user_present()
        assert c.wait_notification("presence.resolved") == {"requestId": rid, "answer": "confirmed"}
    finally:
        d.daemon.stop()
