"""`daemon.methods` lists what the server serves, read when it is called (it once listed the table as it was when
`daemon.methods` itself was registered). Each listed method is probed with positional params, which the dispatcher
refuses (INVALID_INPUT) after finding the method and before running it: no side effects."""
from __future__ import annotations

import json

from tessera_harness import Client


def probe(c: Client, method: str) -> str:
    rid = c.next_id
    c.next_id += 1
    c.send_raw(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": []}).encode() + b"\n")
    while True:
        m = c.read_message()
        assert m is not None, "the daemon closed the connection"
        if m.get("id") == rid:
            return m["error"]["data"]["code"]


def test_daemon_methods_lists_what_is_served(daemon):
    c = daemon.client()
    methods = c.call("daemon.methods")["methods"]
    assert methods == sorted(set(methods))
    assert {"daemon.methods", "daemon.status", "tokens.list", "enrollment.cancel", "enrollment.audit"} <= set(methods)
    assert {m: probe(c, m) for m in methods} == {m: "INVALID_INPUT" for m in methods}
    assert probe(c, "daemon.nonexistent") == "METHOD_NOT_FOUND"
