#!/usr/bin/env python3
"""Soak and load test of the real tesserad (issue 16): N clients × M requests of mixed methods against a daemon
with SoftHSM2 tokens on a private socket, with a kill -9 and restart of the daemon in the middle.

Mix per request: daemon.status, credentials.list, passkey.authenticate with the right PIN, passkey.authenticate
with a wrong PIN (only on a token kept for that: SoftHSM2 has no retry counter, so it cannot lock), malformed
frames, oversized frames, clients that connect, send and never read, and clients that disconnect mid-request.

Asserts: no unexpected error codes; every assertion verifies (py_webauthn + python-fido2) and signCounts never
repeat, increase strictly per client and per credential across the restart; the daemon's fd count returns to its
baseline; RSS grows less than 5 % between the second and the last thousand requests the restarted daemon served.
Prints requests/s, p50/p99 latencies, RSS and fd figures. Stops by itself (--time-limit). Loopback only.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import random
import socket
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))

from tessera_harness import SOFTHSM_MODULE, Client, Daemon, RPCError, SoftHSM, b64u, unb64u  # noqa: E402
from verify import verify_assertion  # noqa: E402

RP = "soak.example"
ORIGIN = f"https://{RP}"
PIN = "1234"
WRONG_PIN = "0000"
FRAME_LIMIT = 1 << 20
# Codes a well-behaved daemon may answer under load besides success (BUSY: server backpressure; PIN_BACKOFF:
# a PIN guard delaying the next try). PIN_INVALID only for the wrong-PIN requests.
LOAD_CODES = {"BUSY"}
WRONG_PIN_CODES = {"PIN_INVALID", "PIN_BACKOFF", "BUSY"}

MIX = [  # (kind, weight)
    ("status", 20), ("list", 14), ("auth", 36), ("wrong_pin", 8), ("malformed", 8), ("oversized", 3),
    ("never_read", 2), ("disconnect", 8),
]


class Restart:
    """The kill -9 window: clients that lose the daemon while `down` is set wait for `up` and reconnect.

    Wrong-PIN requests are held back around the kill (`quiet_pin`, `pin_in_flight`): SoftHSM2 rewrites the token's
    token.object in place on every failed C_Login, and a kill -9 in the middle of that write leaves it empty —
    the token is gone after the restart. That is SoftHSM2's storage, not the daemon's; right-PIN assertions keep
    running through the kill."""

    def __init__(self) -> None:
        self.down = threading.Event()
        self.up = threading.Event()
        self.up.set()
        self.quiet_pin = threading.Event()
        self.lock = threading.Lock()
        self.pin_in_flight = 0


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0
        self.counts: collections.Counter = collections.Counter()
        self.latencies: dict[str, list[float]] = collections.defaultdict(list)
        self.unexpected: list[str] = []
        self.assertions: list[tuple[int, int, dict, bytes]] = []  # (client, epoch, result, challenge)
        self.interrupted = 0

    def record(self, kind: str, outcome: str, latency: float | None = None) -> None:
        with self.lock:
            self.done += 1
            self.counts[(kind, outcome)] += 1
            if latency is not None:
                self.latencies[kind].append(latency)


def rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_targets(pid: int) -> str:
    kinds = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            kinds[os.readlink(f"/proc/{pid}/fd/{fd}").split(":[")[0]] += 1
        except OSError:
            pass
    return ", ".join(f"{k}×{n}" for k, n in sorted(kinds.items()))


def warm_up(daemon: Daemon) -> None:
    """Concurrent reads before the fd baseline, so that whatever the first burst opens and keeps (the credential
    store's connections are all open from the start: one writer, two readers) is in it."""
    def reads() -> None:
        c = daemon.client()
        for _ in range(10):
            c.call("credentials.list", {"rpId": RP})
        c.close()
    threads = [threading.Thread(target=reads) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def settled_fds(pid: int, target: int | None = None, timeout: float = 30) -> int:
    """The daemon's fd count once it stops changing (closed connections are reaped asynchronously), or as soon as
    it equals `target`."""
    deadline = time.time() + timeout
    last, stable_since = fd_count(pid), time.time()
    while time.time() < deadline:
        time.sleep(0.1)
        now = fd_count(pid)
        if target is not None and now == target:
            return now
        if now != last:
            last, stable_since = now, time.time()
        elif target is None and time.time() - stable_since >= 1.0:
            return now
    return fd_count(pid)


class Worker(threading.Thread):
    def __init__(self, index: int, args, daemon_ref: dict, creds: list[str], wrong_cred: str, restart: Restart,
                 stats: Stats, stop: threading.Event):
        super().__init__(name=f"soak-{index}", daemon=True)
        self.index, self.args, self.daemon_ref = index, args, daemon_ref
        self.creds, self.wrong_cred, self.restart, self.stats, self.stop = creds, wrong_cred, restart, stats, stop
        self.rng = random.Random(args.seed * 1000 + index)
        self.client: Client | None = None
        self.stalled: socket.socket | None = None
        self.stalled_left = 0

    @property
    def path(self) -> str:
        return self.daemon_ref["daemon"].socket

    def connect(self) -> Client:
        if self.client is None:
            self.client = Client(self.path, timeout=60)
        return self.client

    def drop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def run(self) -> None:
        kinds = [k for k, _ in MIX if k not in self.args.without]
        weights = [w for k, w in MIX if k not in self.args.without]
        n = 0
        while n < self.args.requests and not self.stop.is_set():
            kind = self.rng.choices(kinds, weights)[0]
            epoch = self.daemon_ref["epoch"]
            try:
                getattr(self, f"do_{kind}")(epoch)
                n += 1
            except (ConnectionError, FileNotFoundError, ConnectionRefusedError, BrokenPipeError, socket.timeout,
                    OSError) as e:
                self.drop()
                if self.restart.down.is_set() or epoch != self.daemon_ref["epoch"]:
                    with self.stats.lock:
                        self.stats.interrupted += 1
                    self.restart.up.wait()
                    continue  # the request was cut by the kill -9: not counted, tried again
                with self.stats.lock:
                    self.stats.unexpected.append(f"client {self.index} {kind}: {type(e).__name__}: {e}")
                n += 1
            self.tick_stalled()
        self.drop()
        self.release_stalled()

    # --- request kinds

    def timed_call(self, kind: str, method: str, params: dict | None = None,
                   expected: set[str] = LOAD_CODES) -> dict | None:
        c = self.connect()
        t0 = time.perf_counter()
        try:
            res = c.call(method, params)
            self.stats.record(kind, "ok", time.perf_counter() - t0)
            return res
        except RPCError as e:
            self.stats.record(kind, e.code or "?", time.perf_counter() - t0)
            if e.code not in expected:
                with self.stats.lock:
                    self.stats.unexpected.append(f"client {self.index} {method}: {e.code}: {e.error.get('message')}")
            return None

    def do_status(self, epoch: int) -> None:
        self.timed_call("status", "daemon.status")

    def do_list(self, epoch: int) -> None:
        self.timed_call("list", "credentials.list", {"rpId": RP})

    def do_auth(self, epoch: int) -> None:
        cred = self.rng.choice(self.creds)
        challenge = os.urandom(32)
        res = self.timed_call("auth", "passkey.authenticate",
                              {"rpId": RP, "challenge": b64u(challenge), "allowCredentials": [cred], "pin": PIN})
        if res is not None:
            with self.stats.lock:
                self.stats.assertions.append((self.index, epoch, res, challenge))

    def do_wrong_pin(self, epoch: int) -> None:
        with self.restart.lock:
            if self.restart.quiet_pin.is_set():
                quiet = True
            else:
                quiet = False
                self.restart.pin_in_flight += 1
        if quiet:
            return self.do_status(epoch)
        try:
            self.wrong_pin_call()
        finally:
            with self.restart.lock:
                self.restart.pin_in_flight -= 1

    def wrong_pin_call(self) -> None:
        res = self.timed_call("wrong_pin", "passkey.authenticate",
                              {"rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [self.wrong_cred],
                               "pin": WRONG_PIN}, expected=WRONG_PIN_CODES)
        if res is not None:
            with self.stats.lock:
                self.stats.unexpected.append(f"client {self.index}: a wrong PIN was accepted")

    def do_malformed(self, epoch: int) -> None:
        """Broken JSON, a non-request, or non-UTF-8 bytes: answered with an error (id null), connection kept."""
        c = self.connect()
        frame, code = self.rng.choice([
            (b'{"jsonrpc":"2.0","id":1,"method":', "PARSE_ERROR"),
            (b"\xff\xfe\x00garbage", "PARSE_ERROR"),
            (b'{"jsonrpc":"2.0","id":7,"method":"daemon.status","params":[1,2]}', "INVALID_INPUT"),
            (b'{"jsonrpc":"1.0","id":8}', "INVALID_REQUEST"),
            (b'[]', "INVALID_REQUEST"),
        ])
        t0 = time.perf_counter()
        c.send_raw(frame + b"\n")
        m = c.read_message()
        if m is None:
            raise ConnectionError("daemon closed the connection after a malformed frame")
        got = m.get("error", {}).get("data", {}).get("code") if isinstance(m, dict) else None
        self.stats.record("malformed", got or "?", time.perf_counter() - t0)
        if got != code:
            with self.stats.lock:
                self.stats.unexpected.append(f"client {self.index} malformed {frame[:20]!r}: {m}")

    def do_oversized(self, epoch: int) -> None:
        """A frame over the 1 MiB limit on its own connection: FRAME_TOO_LARGE, then the daemon closes it."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60)
        s.connect(self.path)
        t0 = time.perf_counter()
        try:
            payload = b'{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{"x":"' + b"A" * (FRAME_LIMIT + 64)
            try:
                s.sendall(payload + b'"}}\n')
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon may close before it has read everything
            buf = b""
            while b"\n" not in buf:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            if not buf:
                # Only a kill -9 closes without the answer; run() tells a restart from a defect.
                raise ConnectionError("daemon closed the connection without answering an oversized frame")
            got = json.loads(buf.split(b"\n")[0]).get("error", {}).get("data", {}).get("code")
            self.stats.record("oversized", got or "?", time.perf_counter() - t0)
            if got != "FRAME_TOO_LARGE":
                with self.stats.lock:
                    self.stats.unexpected.append(f"client {self.index} oversized: {buf[:200]!r}")
        finally:
            s.close()

    def do_never_read(self, epoch: int) -> None:
        """A connection that sends many requests and never reads their answers, kept open for the next
        requests of this client (one at a time, so at most one per client)."""
        self.release_stalled()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(self.path)
        frames = b"".join(
            json.dumps({"jsonrpc": "2.0", "id": i, "method": "credentials.list", "params": {}}).encode() + b"\n"
            for i in range(100))
        try:
            s.sendall(frames)
        except (socket.timeout, BrokenPipeError, ConnectionResetError):
            pass  # the daemon stopped reading (backpressure) or dropped the connection: both fine
        self.stalled, self.stalled_left = s, self.rng.randint(5, 40)
        self.stats.record("never_read", "sent")

    def do_disconnect(self, epoch: int) -> None:
        """Hangs up mid-request: half a frame, or a whole request closed before its answer."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.path)
        choice = self.rng.randrange(3)
        if choice == 0:
            s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"daemon.sta')
        elif choice == 1:
            s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "credentials.list"}).encode() + b"\n")
        else:
            s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "passkey.authenticate", "params": {
                "rpId": RP, "challenge": b64u(os.urandom(32)), "allowCredentials": [self.rng.choice(self.creds)],
                "pin": PIN}}).encode() + b"\n")
        s.close()
        self.stats.record("disconnect", ["half-frame", "list", "auth"][choice])

    def tick_stalled(self) -> None:
        if self.stalled is not None:
            self.stalled_left -= 1
            if self.stalled_left <= 0:
                self.release_stalled()

    def release_stalled(self) -> None:
        if self.stalled is not None:
            self.stalled.close()
            self.stalled = None


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1000, help="requests per client")
    ap.add_argument("--credentials", type=int, default=8, help="passkeys shared by the clients")
    ap.add_argument("--time-limit", type=float, default=1800, help="seconds; the soak fails when exceeded")
    ap.add_argument("--no-restart", action="store_true", help="skip the kill -9 and restart")
    ap.add_argument("--rss-limit", type=float, default=5.0, help="allowed RSS growth in percent")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--without", action="append", default=[], choices=[k for k, _ in MIX],
                    help="leave a request kind out of the mix (repeatable; for finding what a figure comes from)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (daemon logs)")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="tessera-soak-")
    root = pathlib.Path(tmp.name)
    hsm = SoftHSM(root)
    hsm.add_token("soak", pin=PIN)
    hsm.add_token("soak-wrong-pin", pin=PIN)
    # Every soak client is this process's uid, and the per-uid PIN back-off would turn most right-PIN assertions that
    # follow a wrong PIN into PIN_BACKOFF: the soak measures the daemon under a steady mix, so the back-off is off
    # here (it has its own end-to-end tests: test_piv.py, test_bad_input.py).
    config = root / "tesserad.json"
    # All of them also share one uid's connection bound (maxConnectionsPerUid, default 32): it is raised to fit
    # the clients and the abusive connections beside them.
    bound = min(65536, max(256, 4 * args.clients))
    config.write_text(json.dumps({"pinBackoff": {"initialSeconds": 0}, "maxConnections": bound,
                                  "maxConnectionsPerUid": bound}))
    daemon = Daemon(root, hsm.env, ["--pkcs11-module", SOFTHSM_MODULE, "--no-embedded-softhsm",
                                    "--config", str(config)]).start()
    failures: list[str] = []
    try:
        return run(args, root, hsm, daemon, failures)
    finally:
        daemon.stop()
        if args.keep:
            tmp._finalizer.detach()  # type: ignore[attr-defined]
            print(f"kept {root}")
        else:
            tmp.cleanup()


def run(args, root: pathlib.Path, hsm: SoftHSM, daemon: Daemon, failures: list[str]) -> int:
    c = daemon.client()
    tokens = {t["label"]: t["id"] for t in c.call("tokens.list")["tokens"]}
    keys: dict[str, bytes] = {}
    creds = []
    for i in range(args.credentials):
        reg = c.call("passkey.enroll", {
            "rpId": RP, "user": {"id": b64u(f"user-{i}".encode()), "name": f"user{i}"},
            "challenge": b64u(os.urandom(32)), "tokenId": tokens["soak"], "pin": PIN})
        creds.append(reg["credentialId"])
        keys[reg["credentialId"]] = unb64u(reg["publicKey"])
    wrong = c.call("passkey.enroll", {
        "rpId": RP, "user": {"id": b64u(b"wrong-pin"), "name": "wrong-pin"},
        "challenge": b64u(os.urandom(32)), "tokenId": tokens["soak-wrong-pin"], "pin": PIN})["credentialId"]
    c.close()

    daemon_ref = {"daemon": daemon, "epoch": 0}
    pids = [daemon.proc.pid]
    warm_up(daemon)
    fd_base = {0: settled_fds(daemon.proc.pid)}
    fd_kinds = {0: fd_targets(daemon.proc.pid)}
    restart, stats, stop = Restart(), Stats(), threading.Event()
    total = args.clients * args.requests
    rss: dict[int, list[tuple[int, int]]] = {0: [], 1: []}  # epoch → [(requests served by that process, KiB)]
    served_before = {0: 0}

    workers = [Worker(i, args, daemon_ref, creds, wrong, restart, stats, stop) for i in range(args.clients)]
    t_start = time.perf_counter()
    for w in workers:
        w.start()

    next_mark = 1000  # the next thousand requests served by the current process
    restarted = args.no_restart
    timed_out = False
    restart_seconds = 0.0
    while any(w.is_alive() for w in workers):
        time.sleep(0.02)
        if time.perf_counter() - t_start > args.time_limit:
            timed_out = True
            stop.set()
            break
        with stats.lock:
            done = stats.done
        epoch = daemon_ref["epoch"]
        if done - served_before[epoch] >= next_mark:
            rss[epoch].append((done - served_before[epoch], rss_kib(daemon.proc.pid)))
            next_mark += 1000
        if not restarted and done >= total // 2:
            restarted = True
            rss[0].append((done, rss_kib(daemon.proc.pid)))
            t0 = time.perf_counter()
            restart.quiet_pin.set()
            while True:
                with restart.lock:
                    if restart.pin_in_flight == 0:
                        break
                time.sleep(0.005)
            restart.up.clear()
            restart.down.set()
            daemon.kill9()
            daemon_ref["epoch"] = 1
            daemon.start()  # waits until it answers
            pids.append(daemon.proc.pid)
            warm_up(daemon)
            fd_base[1] = settled_fds(daemon.proc.pid)
            fd_kinds[1] = fd_targets(daemon.proc.pid)
            with stats.lock:
                served_before[1] = stats.done
            next_mark = 1000
            restart.down.clear()
            restart.up.set()
            restart.quiet_pin.clear()
            restart_seconds = time.perf_counter() - t0
    for w in workers:
        w.join(timeout=60)
    elapsed = time.perf_counter() - t_start
    last_epoch = daemon_ref["epoch"]
    pid = daemon.proc.pid
    if daemon.proc.poll() is not None:
        failures.append(f"tesserad exited with {daemon.proc.returncode}")
    else:
        rss[last_epoch].append((stats.done - served_before[last_epoch], rss_kib(pid)))
    if timed_out:
        failures.append(f"time limit of {args.time_limit:.0f} s exceeded ({stats.done}/{total} requests)")

    # --- checks
    failures.extend(stats.unexpected[:20])
    if len(stats.unexpected) > 20:
        failures.append(f"... {len(stats.unexpected) - 20} more unexpected outcomes")

    by_cred: dict[str, list[tuple[int, int, int]]] = collections.defaultdict(list)  # cred → (epoch, client, count)
    per_client: dict[tuple[int, str], int] = {}
    bad_sig = 0
    for client, epoch, res, challenge in stats.assertions:
        cred = res["credentialId"]
        count = res["signCount"]
        try:
            v = verify_assertion(res, challenge, RP, ORIGIN, keys[cred], count - 1, require_uv=True)
            if v.new_sign_count != count:
                failures.append(f"{cred}: authenticatorData signCount {v.new_sign_count} != result {count}")
        except Exception as e:  # noqa: BLE001 — any verifier failure is a soak failure
            bad_sig += 1
            if bad_sig <= 5:
                failures.append(f"assertion for {cred} (signCount {count}) does not verify: {e}")
        prev = per_client.get((client, cred))
        if prev is not None and count <= prev:
            failures.append(f"client {client}, {cred}: signCount {count} after {prev}")
        per_client[(client, cred)] = count
        by_cred[cred].append((epoch, client, count))
    for cred, seen in by_cred.items():
        counts = [n for _, _, n in seen]
        if len(set(counts)) != len(counts):
            failures.append(f"{cred}: repeated signCount {len(counts) - len(set(counts))} times")
        before = [n for e, _, n in seen if e == 0]
        after = [n for e, _, n in seen if e == 1]
        if before and after and min(after) <= max(before):
            failures.append(f"{cred}: signCount {min(after)} after the restart, {max(before)} before")

    fd_end = None
    if daemon.proc.poll() is None:
        fd_end = settled_fds(pid, target=fd_base[last_epoch])
        if fd_end != fd_base[last_epoch]:
            failures.append(f"fd count {fd_end} after the soak, baseline {fd_base[last_epoch]}: "
                            f"{fd_targets(pid)} (baseline {fd_kinds[last_epoch]})")
        try:
            c = daemon.client()
            c.call("daemon.status")
            c.close()
        except Exception as e:  # noqa: BLE001
            failures.append(f"daemon.status after the soak failed: {e}")

    rss_growth = {}
    for epoch, samples in rss.items():
        if len(samples) >= 3:  # the second thousand, ..., the last
            second, last = samples[1][1], samples[-1][1]
            rss_growth[epoch] = (second, last, 100.0 * (last - second) / second)
    if last_epoch in rss_growth and rss_growth[last_epoch][2] >= args.rss_limit:
        s, l, g = rss_growth[last_epoch]
        failures.append(f"RSS grew {g:.1f} % ({s} → {l} KiB) between the second and the last thousand requests")

    # --- figures
    rpc_lat = [x for k in ("status", "list", "auth", "wrong_pin", "malformed") for x in stats.latencies[k]]
    print(f"soak: {args.clients} clients × {args.requests} requests = {stats.done} requests in {elapsed:.1f} s "
          f"({stats.done / elapsed:.0f} requests/s); kill -9 + restart {'skipped' if args.no_restart else f'took {restart_seconds:.2f} s'}, "
          f"{stats.interrupted} requests cut by it and retried")
    print(f"  latency (RPC round trips): p50 {percentile(rpc_lat, 50) * 1000:.1f} ms, "
          f"p99 {percentile(rpc_lat, 99) * 1000:.1f} ms")
    for k in ("status", "list", "auth", "wrong_pin", "malformed", "oversized"):
        if stats.latencies[k]:
            print(f"    {k:10s} n={len(stats.latencies[k]):6d}  p50 {percentile(stats.latencies[k], 50) * 1000:7.1f} ms"
                  f"  p99 {percentile(stats.latencies[k], 99) * 1000:7.1f} ms")
    outcomes = collections.Counter()
    for (k, o), n in stats.counts.items():
        outcomes[f"{k}:{o}"] += n
    print("  outcomes: " + ", ".join(f"{k}={n}" for k, n in sorted(outcomes.items())))
    print(f"  assertions verified: {len(stats.assertions) - bad_sig}/{len(stats.assertions)} on "
          f"{len(by_cred)} credentials; signCount max " +
          ", ".join(str(max(n for _, _, n in v)) for v in by_cred.values()))
    for epoch, samples in sorted(rss.items()):
        if samples:
            g = rss_growth.get(epoch)
            print(f"  RSS pid {pids[epoch] if epoch < len(pids) else '?'}: start {samples[0][1]} KiB, end "
                  f"{samples[-1][1]} KiB ({len(samples)} samples)" +
                  (f", second→last thousand {g[0]} → {g[1]} KiB ({g[2]:+.1f} %)" if g else ""))
            step = max(1, len(samples) // 8)
            shown = samples[::step] + ([] if (len(samples) - 1) % step == 0 else samples[-1:])
            print("    RSS by requests served: " + ", ".join(f"{n}: {k}" for n, k in shown))
    print(f"  fds: baseline {fd_base.get(0)} (first process), {fd_base.get(1, '-')} (after restart), "
          f"end {fd_end}")
    if failures:
        print("SOAK FAILED:")
        for f in failures:
            print(f"  - {f}")
        print(f"  daemon log: {daemon.log}")
        return 1
    print("soak OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
