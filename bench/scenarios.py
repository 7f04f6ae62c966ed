"""Agent-runtime scenarios over loopback HTTP: short answer (no tools), one
tool hop, a multi-hop chain, and recovery from a malformed tool call. Each is
one guest send; reported: p50/p95 against bare httpx posting the same bodies,
steps to completion (completions in the send) and the peak Python memory of
one send (tracemalloc)."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from bench.guests import LiveGuest
from bench.stats import Row, interleaved
from bench.upstream import BareClient, ServerProcess
from spearpy import _native
from spearpy.host import Host
from spearpy.testing import ScriptedServer


def _call(a: int, b: int) -> dict[str, Any]:
    return {"tool_calls": [{"name": "sum", "arguments": {"a": a, "b": b}}]}


# name -> (prompt, rules); the prompt selects the rules on the shared server.
SCENARIOS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "short_answer": ("short: say hi", []),
    "single_tool_hop": ("single: add 7 and 35", [
        {"when": {"last_user_contains": "single", "tool_messages": 0}, "reply": _call(7, 35)}]),
    "multi_hop_chain": ("chain: add up four pairs", [
        {"when": {"last_user_contains": "chain", "tool_messages": i}, "reply": _call(i, 35)}
        for i in range(4)]),
    "malformed_recovery": ("malformed: add 1 and 2", [
        {"when": {"last_user_contains": "malformed", "tool_messages": 0},
         "reply": {"tool_calls": [{"name": "sum", "arguments": "{\"a\": 1, \"b\": "}]}},
        {"when": {"last_user_contains": "malformed", "tool_messages": 1},
         "reply": _call(1, 2)}]),
}
SCRIPT: dict[str, Any] = {
    "rules": [rule for _prompt, rules in SCENARIOS.values() for rule in rules],
    "default": {"content": "Done: {{last_tool}}"},
}


def _bodies(prompt: str) -> tuple[list[bytes], int]:
    """The bodies spearpy sends for this scenario, and its steps, captured in-process."""
    server = ScriptedServer(SCRIPT).start()
    host = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
    guest = LiveGuest(host)
    previous = _native.enter_run(guest.run)
    try:
        fd = guest.session()
        guest.write_msg(fd, "user", prompt)
        body = json.loads(guest.recv(guest.send(fd)))
        if "error" in body:
            raise RuntimeError(f"scenario {prompt!r} failed: {body['error']}")
        return ([json.dumps(r.body, separators=(",", ":"), ensure_ascii=False).encode()
                 for r in server.requests], int(body["_spear"]["iterations"]))
    finally:
        _native.enter_run(previous)
        guest.close()
        host.close()
        server.stop()


def run(quick: bool) -> list[Row]:
    repeats = 10 if quick else 40
    rows = []
    with ServerProcess(SCRIPT) as server:
        host = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
        guest = LiveGuest(host)
        bare = BareClient(server.base_url)
        previous = _native.enter_run(guest.run)
        try:
            for name, (prompt, _rules) in SCENARIOS.items():
                bodies, steps = _bodies(prompt)
                ready: list[int] = []

                def prepare(prompt: str = prompt, ready: list[int] = ready) -> None:
                    if not ready:
                        fd = guest.session()
                        guest.write_msg(fd, "user", prompt)
                        ready.append(fd)

                def send(ready: list[int] = ready) -> None:
                    fd = ready.pop()
                    guest.recv(guest.send(fd))
                    guest.close_fd(fd)

                def bare_trips(bodies: list[bytes] = bodies) -> None:
                    for body in bodies:
                        bare.post(body)

                timed = interleaved({"spearpy": send, "httpx": bare_trips}, batch=1,
                                    repeats=repeats, between=prepare)
                prepare()
                tracemalloc.start()
                send()
                _current, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                rows.append(Row(f"S.{name}", "scenarios", f"{name}: one guest send",
                                "bare httpx POST of the same bodies", "ms",
                                timed["spearpy"], timed["httpx"],
                                extra={"steps": steps, "py_peak_kb": round(peak / 1024, 1)},
                                peak_kb=peak / 1024, note=f"{steps} steps to completion"))
        finally:
            _native.enter_run(previous)
            bare.close()
            guest.close()
            host.close()
    return rows
