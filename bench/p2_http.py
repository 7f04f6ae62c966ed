"""P2: the auto tool-call loop against the loopback scripted server, per
iteration (one completion + one wasm tool call), vs bare httpx posting the
same request bodies to the same server."""

from __future__ import annotations

import json
from typing import Any

from bench.guests import LiveGuest
from bench.stats import Row, Series, Target, interleaved
from bench.upstream import BareClient, ServerProcess, tool_script
from spearpy import _native
from spearpy.host import Host
from spearpy.testing import ScriptedServer

TOOL_ITERATIONS = 5  # completions per send = TOOL_ITERATIONS + 1
PROMPT = "Add the numbers, please."


def recorded_bodies(script: dict[str, Any]) -> list[bytes]:
    """The exact JSON spearpy sends for one send, captured once in-process."""
    server = ScriptedServer(script).start()
    host = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
    guest = LiveGuest(host)
    try:
        fd = guest.session()
        guest.write_msg(fd, "user", PROMPT)
        guest.recv(guest.send(fd))
        return [json.dumps(r.body, separators=(",", ":"), ensure_ascii=False).encode()
                for r in server.requests]
    finally:
        guest.close()
        host.close()
        server.stop()


def run(quick: bool) -> list[Row]:
    repeats = 15 if quick else 60
    script = tool_script(TOOL_ITERATIONS)
    bodies = recorded_bodies(script)
    assert len(bodies) == TOOL_ITERATIONS + 1, len(bodies)
    with ServerProcess(script) as server:
        host = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
        guest = LiveGuest(host)
        bare = BareClient(server.base_url)
        ready: list[int] = []

        def prepare() -> None:
            # A fresh conversation per send, made outside the timed part.
            fd = guest.session()
            guest.write_msg(fd, "user", PROMPT)
            ready.append(fd)

        def spear_send() -> None:
            fd = ready.pop()
            body = guest.recv(guest.send(fd))
            guest.close_fd(fd)
            if b'"iterations":%d' % (TOOL_ITERATIONS + 1) not in body:
                raise RuntimeError(f"unexpected send result: {body[:300]!r}")

        def bare_round_trips() -> None:
            for body in bodies:
                bare.post(body)

        previous = _native.enter_run(guest.run)
        try:
            prepare()
            spear_send()
            result = interleaved({"spearpy": spear_send, "httpx": bare_round_trips}, batch=1,
                                 repeats=repeats, between=prepare)
        finally:
            _native.enter_run(previous)
            bare.close()
            guest.close()
            host.close()
    per_iteration = {k: Series([s / len(bodies) for s in v.samples]) for k, v in result.items()}
    return [Row("P2.loop_iteration.vs_httpx", "P2",
                "auto-loop iteration (completion + wasm tool) over loopback HTTP",
                "bare httpx POST of the same bodies", "us", per_iteration["spearpy"],
                per_iteration["httpx"], Target("<=", 1.2, "<= 1.2"),
                note=f"{len(bodies)} completions and {TOOL_ITERATIONS} tool calls per send; "
                     "server in its own process")]
