#!/usr/bin/env python3
"""A building at scale (docs/ACCESS.md, "A building"): a badge office tesserad with 100,000 badges and 1,000 doors
publishes its signed door list; a door tesserad follows it from the office's directory. Measured: the publication
(time, list and CRL size), the door's apply (time, RSS growth), and access.check with an emulated badge at the
door (pcscd + vpcd) with a list of 10 badges and one of 100,000: the lookup must not grow with the list.
TESSERA_BIN_DIR picks the build (scripts/bench.sh: the release build; default the debug build). One run."""
import hashlib
import json
import os
import pathlib
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time

from cryptography import x509
from cryptography.hazmat.primitives import serialization

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))
from tessera_harness import BIN, PCSCD, SOFTHSM_MODULE, Daemon, SoftHSM, unb64u  # noqa: E402
from test_access import Badge, card_object, check, make_badge, tlv_items  # noqa: E402
from test_building import import_key, make_cert, make_key, until  # noqa: E402

BADGES = int(os.environ.get("BUILDING_BADGES", "100000"))
DOORS = int(os.environ.get("BUILDING_DOORS", "1000"))
CHECKS = int(os.environ.get("BUILDING_CHECKS", "20"))
rng = random.Random(37)


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def add_badges(db: pathlib.Path, count: int, certificate: bytes, first: tuple[bytes, str] | None) -> None:
    """Badge records straight into the office's credential store (its schema, the daemon stopped): `first` is the
    real badge, the rest have random card UUIDs and the same certificate; one in a hundred is suspended."""
    # The pin as `access.register` records it: 9E ‖ SHA-256 of the certificate's SubjectPublicKeyInfo.
    spki = x509.load_der_x509_certificate(certificate).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    pin = b"\x9e" + hashlib.sha256(spki).digest()
    con = sqlite3.connect(db)
    columns = [row[1] for row in con.execute("PRAGMA table_info(credential)")]
    rows = []
    for i in range(count):
        cid, holder = first if (first and i == 0) else (b"\x34" + rng.randbytes(16), f"holder-{rng.randrange(10**9)}")
        values = {"credentialId": cid, "rpId": "tessera.badge", "userId": holder.encode(), "userName": holder,
                  "userDisplayName": holder, "tokenId": cid.hex(), "backend": "piv-badge", "keyHandle": pin,
                  "publicKey": certificate, "counterReserved": 0, "createdAt": "2026-11-29 00:00:00.000",
                  "state": "suspended" if i % 100 == 99 else "active", "ownerUid": 0}
        rows.append(tuple(values.get(c) for c in columns))
    con.executemany(f"INSERT INTO credential ({','.join(columns)}) VALUES ({','.join('?' * len(columns))})", rows)
    con.commit()
    con.close()


def office_config(path: pathlib.Path, root: pathlib.Path, token: str, holder: str) -> None:
    doors = {f"door-{i:04d}": {"readers": [f"Reader {i:04d}"],
                               "allow": [holder] + [f"holder-{i}-{j}" for j in range(9)]} for i in range(DOORS)}
    doors["door-0000"]["readers"] = ["Tessera VPCD 00 00"]
    path.write_text(json.dumps({"pinFiles": {"badges": str(root / "badges.pin")}, "accessControl": {
        "anchors": [str(root / "lab-ca" / "badge-ca.pem")], "doors": doors,
        "publisher": {"tokenId": token, "keyLabel": "publisher", "certificate": str(root / "publisher.pem"),
                      "directory": str(root / "published"), "validitySeconds": 86400}}}))


def published_ms(log: pathlib.Path, number: int) -> int:
    m = re.findall(rf"ms=(\d+) number={number} .*door list published", log.read_text())
    return int(m[-1])


def applied_ms(log: pathlib.Path, number: int) -> int | None:
    m = re.findall(rf"ms=(\d+) number={number} .*door list applied", log.read_text())
    return int(m[-1]) if m else None


def checks(door: Daemon, pcscd: PCSCD, state: pathlib.Path) -> list[float]:
    c = door.client()
    times = []
    with Badge(pcscd, state, 1, c):
        check(c)  # the card is in; the first check warms the path
        for _ in range(CHECKS):
            started = time.perf_counter()
            d = c.call("access.check", {})
            times.append((time.perf_counter() - started) * 1000)
            assert d["decision"] == "granted", d
    return times


def main() -> None:
    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-building-"))
    hsm = SoftHSM(root)
    hsm.add_token("badges")
    key = make_key(root / "publisher.key")
    make_cert(root / "publisher.pem", "Bench office", key, ca=True)
    import_key(hsm, root / "publisher.key", "publisher", "0c0c")
    (root / "badges.pin").write_text("1234\n")
    (root / "published").mkdir()
    state = root / "badge.json"
    badge_id = make_badge(root / "lab-ca", state, "Bench Holder", 1)
    certificate = tlv_items(card_object(state, "5fc101"))[0x70]
    real = (unb64u(badge_id), "bench-holder")
    pcscd = PCSCD(root).start()
    config = root / "office.json"
    office_config(config, root, "TOKEN", real[1])
    args = ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config", str(config)]
    office = Daemon(root, hsm.env, args, name="office").start()
    token = next(t["id"] for t in office.client().call("tokens.list")["tokens"] if t.get("label") == "badges")
    office.stop()
    office_config(config, root, token, real[1])
    add_badges(office.state / "tessera.sqlite", 10, certificate, real)

    (root / "door").mkdir()
    door_config = root / "door" / "tesserad.json"
    door_config.write_text(json.dumps({"accessControl": {"anchors": [str(root / "lab-ca" / "badge-ca.pem")],
                                                         "registry": {"directory": str(root / "published"),
                                                                      "publisher": str(root / "publisher.pem"),
                                                                      "maxAgeSeconds": 86400, "pollSeconds": 1}}}))
    door = None
    try:
        office = Daemon(root, hsm.env, args, name="office").start()
        small = until(lambda: office.client().call("access.status").get("number"), timeout=120)
        door = Daemon(root / "door", {**SoftHSM(root / "door").env, **pcscd.env},
                      ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm", "--config", str(door_config)],
                      name="door").start()
        until(lambda: door.client().call("access.status").get("number") == small, timeout=120)
        small_checks = checks(door, pcscd, state)
        small_bytes = office.client().call("access.status")["bytes"]

        office.stop()
        add_badges(office.state / "tessera.sqlite", BADGES - 10, certificate, None)
        rss_before, hwm_before = rss_kib(door.proc.pid), rss_kib(door.proc.pid, "VmHWM")
        office = Daemon(root, hsm.env, args, name="office").start()
        large = until(lambda: office.client().call("access.status").get("number"), timeout=300)
        start_publish_ms = published_ms(office.log, large)
        started = time.perf_counter()
        status = office.client().call("access.publish")
        publish_rpc_ms = (time.perf_counter() - started) * 1000
        forced = status["number"]
        until(lambda: door.client().call("access.status").get("number") == forced, timeout=300)
        apply_ms = until(lambda: applied_ms(door.log, forced), timeout=60)
        # After the apply the door saves its copy (fsync of the whole list) and then returns the parse's free memory.
        time.sleep(8)
        rss_after, hwm_after = rss_kib(door.proc.pid), rss_kib(door.proc.pid, "VmHWM")
        large_checks = checks(door, pcscd, state)
        crl_bytes = (root / "published" / "badges.crl").stat().st_size
        print(f"building benchmark ({BIN.name} build of {BIN}; one run)")
        print(f"  office: {status['badges']} badges (1 in 100 suspended; the CRL lists {status['revoked']}: the filler "
              f"badges' certificate is another CA's), {DOORS} doors")
        print(f"  publish: {start_publish_ms} ms at start, access.publish {publish_rpc_ms:.0f} ms "
              f"(in the daemon {published_ms(office.log, forced)} ms)")
        print(f"  list: {status['bytes']} bytes signed ({small_bytes} bytes with 10 badges); CRL {crl_bytes} bytes")
        print(f"  door apply: {apply_ms} ms; RSS {rss_before} → {rss_after} KiB "
              f"(+{(rss_after - rss_before) / 1024:.1f} MiB), peak +{(hwm_after - hwm_before) / 1024:.1f} MiB")
        print(f"  access.check (pcscd + vpcd), median of {CHECKS}: {statistics.median(small_checks):.1f} ms at 10 "
              f"badges, {statistics.median(large_checks):.1f} ms at {status['badges']}")
    finally:
        if door:
            door.stop()
        office.stop()
        pcscd.stop()


if __name__ == "__main__":
    main()
