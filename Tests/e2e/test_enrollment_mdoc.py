"""Enrollment with MDOC_PHASE (docs/ENROLLMENT.md): the real tesserad with an `enrollment` configuration and an IACA,
a private pcscd whose vpcd reader holds an mDL presented by `tessera lab emulate-mdoc`. MDOC_PHASE reads it the way
`mdoc.read` does and feeds ATTRIBUTE_MATCHING: matching attributes complete (also across a daemon restart, without a
second read), mismatching ones fail with ATTRIBUTE_MISMATCH, an mDL of an IACA the station does not trust fails with
DOCUMENT_NOT_AUTHENTIC, and a passkey created after it (SoftHSM2 token) carries the mDL holder's identity binding."""
from __future__ import annotations

import json
import pathlib
import sqlite3
import time

import pytest

from tessera_harness import PCSCD, SOFTHSM_MODULE, Daemon, RPCError, SoftHSM
from test_mdoc import EmulatedMDoc, make_mdoc

DOCTYPE = "org.iso.18013.5.1.mDL"
# `tessera lab make-mdoc` without a profile: Erika Mustermann of Utopia ("UT" in the mDL, "UTO" in Doc 9303).
MATCH = {"surname": "Mustermann", "givenNames": "Erika", "dateOfBirth": "1964-08-12", "documentNumber": "T22000129",
         "issuingState": "UTO", "nationality": "UTO", "dateOfExpiry": "2034-01-14", "sex": "F"}
MDOC = {"key": "MDOC_PHASE", "cardWaitSeconds": 20}
PIN = "1234"
RP = "badge.example.com"
CONFIRM = {"key": "CONFIRM", "client": True, "prompt": "Confirm",
           "input": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}}
WORKFLOWS = {
    "mdl": {"remote": True, "expected": MATCH, "steps": [MDOC, CONFIRM, "ATTRIBUTE_MATCHING"]},
    "mdl-mismatch": {"remote": True, "expected": {**MATCH, "surname": "Eriksson", "issuingState": "FRA"},
                     "steps": [MDOC, "ATTRIBUTE_MATCHING"]},
    "mdl-passkey": {"remote": True, "expected": MATCH,
                    "steps": [{**MDOC, "elements": ["portrait"]}, "ATTRIBUTE_MATCHING",
                              {"key": "PASSKEY_CREATION", "rpId": RP}]},
}


class Lab:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.pcscd = PCSCD(root).start()
        self.mdl = make_mdoc(root / "mdl")
        # Same data, another IACA: not trusted by the station.
        self.untrusted = make_mdoc(root / "untrusted")
        config = root / "tesserad.json"
        config.write_text(json.dumps({"enrollment": {"workflows": WORKFLOWS}}))
        self.hsm = SoftHSM(root)
        self.hsm.add_token("kiosk", pin=PIN)
        self.daemon = Daemon(root, {**self.hsm.env, **self.pcscd.env},
                             ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config", str(config),
                              "--iaca", str(self.mdl / "iaca.pem")]).start()
        self.reader = self.pcscd.readers[0]

    def wait_card(self, present: bool) -> None:
        deadline = time.time() + 15
        while time.time() < deadline:
            readers = self.daemon.client().call("readers.list")["readers"]
            if any(r["name"] == self.reader and r["cardPresent"] for r in readers) == present:
                return
            time.sleep(0.05)
        raise TimeoutError(f"card never became {'present' if present else 'absent'}")

    def holder(self, mdl: pathlib.Path) -> EmulatedMDoc:
        return EmulatedMDoc(self.root, self.pcscd.port, mdl, self.wait_card)

    def stop(self) -> None:
        self.daemon.stop()
        self.pcscd.stop()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = Lab(tmp_path_factory.mktemp("enrollment-mdoc"))
    yield lab
    lab.stop()


class Session:
    def __init__(self, daemon: Daemon):
        self.c = daemon.client()
        self.c.call("enrollment.subscribe")
        self.log: list[dict] = []

    def call(self, method: str, params: dict | None = None) -> dict:
        return self.c.call(method, params)

    def expect(self, method: str, timeout: float = 60, **match) -> dict:
        while True:
            n = self.c.next_notification(timeout)
            if not n["method"].startswith("enrollment."):
                continue
            self.log.append(n)
            p = n["params"]
            if n["method"] == method and all(p.get(k) == v for k, v in match.items()):
                return p
            assert n["method"] != "enrollment.finished", f"finished while waiting for {method} {match}: {p}"

    def seen(self, method: str) -> list[dict]:
        return [n["params"] for n in self.log if n["method"] == method]


def test_mdoc_phase_feeds_attribute_matching_and_survives_a_restart(lab):
    c = Session(lab.daemon)
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "mdl"}}})["enrollmentId"]
    with lab.holder(lab.mdl):
        busy = c.expect("enrollment.busy", step="MDOC_PHASE")
        assert busy["enrollmentId"] == eid and busy["expectedInterval"] == "long"
        c.expect("enrollment.stepCompleted", key="MDOC_PHASE")
    # Progress like mdoc.read's, each phase once and in order, for this enrollment and step.
    progress = c.seen("enrollment.progress")
    assert all(p["step"] == "MDOC_PHASE" and p["enrollmentId"] == eid for p in progress), progress
    # {step: waitingForCard} first (started before the mDL was presented), as NFC_PHASE announces it.
    assert [p["progress"] for p in progress if "phase" not in p["progress"]] in ([], [{"step": "waitingForCard"}])
    assert "phase" not in progress[0]["progress"] or len(progress) == 5
    phases = [p["progress"] for p in progress if "phase" in p["progress"]]
    assert [p["phase"] for p in phases] == ["engagement", "session", "request", "response", "verify"]
    assert phases[-1]["apdus"] > 0 and phases[-1]["bytes"] > 0
    c.expect("enrollment.stepRequired", key="CONFIRM")
    data = c.call("enrollment.transactionData")["data"]
    document = data["document"]
    assert document["verdict"] == "authentic" and document["documentType"] == DOCTYPE
    assert document["issuingState"] == "UTO" and document["surname"] == "MUSTERMANN"
    assert document["dateOfBirth"] == "1964-08-12" and document["deviceAuthentication"] == "deviceSignature"
    assert data["documentAttributes"] == {"surname": "MUSTERMANN", "givenNames": "ERIKA", "dateOfBirth": "1964-08-12",
                                          "documentNumber": "T22000129", "issuingState": "UTO", "nationality": "UTO",
                                          "dateOfExpiry": "2034-01-14", "sex": "F", "documentType": DOCTYPE}
    # The read is committed: after a restart (the mDL gone) the enrollment goes on without reading again.
    lab.daemon.kill9()
    lab.daemon.start()
    c = Session(lab.daemon)
    assert c.call("enrollment.status")["completedSteps"] == ["MDOC_PHASE"]
    c.call("enrollment.resume")
    c.expect("enrollment.stepRequired", key="CONFIRM")
    c.call("enrollment.submit", {"stepKey": "CONFIRM", "payload": {"ok": True}})
    c.expect("enrollment.stepCompleted", key="ATTRIBUTE_MATCHING")
    done = c.expect("enrollment.finished")
    assert done["outcome"] == "success", done
    assert done["document"]["verdict"] == "authentic"
    assert c.seen("enrollment.progress") == []


def test_mismatching_expected_attributes_fail(lab):
    c = Session(lab.daemon)
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "mdl-mismatch"}}, "force": True})["enrollmentId"]
    with lab.holder(lab.mdl):
        c.expect("enrollment.stepCompleted", key="MDOC_PHASE")
        done = c.expect("enrollment.finished")
    assert done["outcome"] == "failed" and done["enrollmentId"] == eid, done
    error = done["error"]
    assert error["code"] == "ATTRIBUTE_MISMATCH", error
    assert {m["attribute"]: (m["expected"], m["actual"]) for m in error["mismatches"]} == {
        "surname": ("ERIKSSON", "MUSTERMANN"), "issuingState": ("FRA", "UTO")}
    (record,) = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert record["errorCode"] == "ATTRIBUTE_MISMATCH"


def test_mdl_of_an_untrusted_iaca_is_not_authentic(lab):
    c = Session(lab.daemon)
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "mdl"}}, "force": True})["enrollmentId"]
    with lab.holder(lab.untrusted):
        done = c.expect("enrollment.finished")
    assert done["enrollmentId"] == eid and done["outcome"] == "failed", done
    error = done["error"]
    assert error["code"] == "DOCUMENT_NOT_AUTHENTIC" and error["retryable"] is False, error
    assert error["verdict"] == "notAuthentic" and error["reasons"] == ["UNTRUSTED_ISSUER"], error
    assert [x["key"] for x in c.seen("enrollment.stepCompleted")] == []
    (record,) = [r for r in c.call("enrollment.audit")["records"] if r["enrollmentId"] == eid]
    assert record["errorCode"] == "DOCUMENT_NOT_AUTHENTIC"
    with pytest.raises(RPCError) as e:
        c.call("enrollment.retry")
    assert e.value.code in ("NOT_RETRYABLE", "NO_ACTIVE_ENROLLMENT")


def test_passkey_after_mdoc_phase_is_bound_to_the_mdl_holder(lab):
    c = Session(lab.daemon)
    eid = c.call("enrollment.start", {"type": {"remote": {"candidate": "mdl-passkey"}}, "force": True,
                                      "userVerification": "required"})["enrollmentId"]
    with lab.holder(lab.mdl):
        c.expect("enrollment.stepCompleted", key="MDOC_PHASE")
    c.expect("enrollment.stepCompleted", key="ATTRIBUTE_MATCHING")
    c.expect("enrollment.stepRequired", key="PASSKEY_CREATION")
    c.call("enrollment.submit", {"stepKey": "PASSKEY_CREATION", "payload": {"pin": PIN}})
    done = c.expect("enrollment.finished")
    assert done["outcome"] == "success" and done["enrollmentId"] == eid, done
    cid = done["credential"]["credentialId"]
    assert c.call("credentials.get", {"credentialId": cid})["identityBinding"] == {"issuingState": "UTO"}
    db = sqlite3.connect(lab.daemon.state / "tessera.sqlite")
    try:
        (stored,) = db.execute("SELECT identityBinding FROM credential WHERE identityBinding IS NOT NULL").fetchone()
    finally:
        db.close()
    binding = json.loads(stored)
    assert binding["issuingState"] == "UTO" and binding["documentType"] == DOCTYPE
    assert binding["enrollmentId"] == eid
    # Only hashes of the person's data.
    assert not any(x in stored for x in ("MUSTERMANN", "ERIKA", "T22000129", "1964-08-12"))
