"""P2: the auto tool-call loop over loopback HTTP, per iteration (one
completion + one wasm tool call), against a fair hand-written client: one
pooled httpx connection that encodes each request from the same Python
objects spearpy sends, parses each reply and closes every response.

The growth rows show what a long conversation adds: the overhead per
iteration (spearpy's CPU time minus that of posting the same bytes, prepared,
to the same server) with 200 messages of history against 2. CPU time, not
wall: on a shared 2-core machine the wall-time difference of two ~1 ms
exchanges is mostly other processes' noise.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.guests import LiveGuest
from bench.stats import Row, Series, Target, interleaved
from bench.upstream import ServerProcess, install_backend, tool_script
from spearpy import _native
from spearpy.backends.openai import OpenAIBackend
from spearpy.backends.wire import Wire
from spearpy.host import Host
from spearpy.retry import RetryPolicy
from spearpy.testing import ScriptedServer

TOOL_ITERATIONS = 5  # completions per send = TOOL_ITERATIONS + 1
PROMPT = "Add the numbers, please."
LONG_HISTORY = 200  # messages before the send, in the growth rows
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def recorded_requests(script: dict[str, Any]) -> list[dict[str, Any]]:
    """The requests spearpy makes for one send (as the server parsed them),
    captured once in-process."""
    server = ScriptedServer(script).start()
    host = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
    guest = LiveGuest(host)
    try:
        fd = _conversation(guest, 0)
        rfd = guest.send(fd)
        guest.recv(rfd)
        guest.close_fd(rfd)
        return [r.body for r in server.requests if r.body is not None]
    finally:
        guest.close()
        host.close()
        server.stop()


def _conversation(guest: LiveGuest, history: int) -> int:
    """A session holding `history` earlier turns and the prompt."""
    fd = guest.session()
    for i in range(history):
        role = "user" if i % 2 == 0 else "assistant"
        guest.write_msg(fd, role, f"turn {i}: " + "a conversation goes on, ünïcödé and all. " * 3)
    guest.write_msg(fd, "user", PROMPT)
    return fd


class FairClient:
    """What a careful hand-written loop pays per exchange: encode the request
    from Python objects, POST it on one pooled keep-alive connection, parse
    the reply, close the response."""

    def __init__(self, base_url: str) -> None:
        self._client = httpx.Client(trust_env=False)
        self._url = base_url.rstrip("/") + "/chat/completions"

    def exchange(self, request: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(request, separators=(",", ":"), ensure_ascii=False).encode()

        response = self._client.post(self._url, content=payload, headers=HEADERS)
        try:
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
            reply: dict[str, Any] = json.loads(response.content)
            return reply
        finally:
            response.close()

    def close(self) -> None:
        self._client.close()


class _Sends:
    """Fresh conversations for one guest, made outside the timed part."""

    def __init__(self, guest: LiveGuest, history: int) -> None:
        self.guest, self.history = guest, history
        self._ready: list[int] = []
        self._spent: list[int] = []

    def prepare(self) -> None:
        """One conversation ready for the next send (the harness calls this
        before every timed op, not only this one's). Conversations already
        sent are closed here: closing one frees its whole history, once per
        conversation, which the timed send must not charge to its iterations."""
        for fd in self._spent:
            self.guest.close_fd(fd)
        self._spent.clear()
        if not self._ready:
            self._ready.append(self._new())

    def _new(self) -> int:
        return _conversation(self.guest, self.history)

    def send(self) -> None:
        guest = self.guest
        fd = self._ready.pop()
        rfd = guest.send(fd)
        body = guest.recv(rfd)
        guest.close_fd(rfd)
        self._spent.append(fd)
        if b'"iterations":%d' % (TOOL_ITERATIONS + 1) not in body:
            raise RuntimeError(f"unexpected send result: {body[:300]!r}")


def _timed(guest: LiveGuest, ops: dict[str, Callable[[], None]], sends: list[_Sends],
           repeats: int, clock: Callable[[], float] | None = None) -> dict[str, Series]:
    """Interleaved timings of `ops`: wall time, or with `clock` (process CPU
    time) an interleaved loop of the same shape measuring that instead."""
    def prepare() -> None:
        for s in sends:
            s.prepare()

    previous = _native.enter_run(guest.run)
    try:
        for s in sends:  # one warm-up send each, outside the timing
            s.prepare()
            s.send()
        if clock is None:
            return interleaved(ops, batch=1, repeats=repeats, between=prepare)
        series = {name: Series() for name in ops}
        order = list(ops)
        for round_ in range(repeats):
            # The op before another warms or cools it by ~100 us on a busy
            # machine: each round starts one op further along.
            shift = round_ % len(order)
            for name in order[shift:] + order[:shift]:
                op = ops[name]
                prepare()
                gc.collect()
                gc.disable()
                try:
                    started = clock()
                    op()
                    series[name].add(clock() - started)
                finally:
                    gc.enable()
        return series
    finally:
        _native.enter_run(previous)


def loop_iteration(repeats: int) -> Row:
    script = tool_script(TOOL_ITERATIONS)
    requests = recorded_requests(script)
    assert len(requests) == TOOL_ITERATIONS + 1, len(requests)
    with ServerProcess(script) as server:
        host = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
        guest = LiveGuest(host)
        fair = FairClient(server.base_url)
        sends = _Sends(guest, 0)

        def by_hand() -> None:
            for request in requests:
                fair.exchange(request)

        try:
            result = _timed(guest, {"spearpy": sends.send, "by_hand": by_hand}, [sends], repeats)
        finally:
            fair.close()
            guest.close()
            host.close()
    per_iteration = {k: Series([s / len(requests) for s in v.samples]) for k, v in result.items()}
    return Row("P2.loop_iteration.vs_httpx", "P2",
               "auto-loop iteration (completion + wasm tool) over loopback HTTP",
               "hand-written httpx loop: same request objects encoded, reply parsed, "
               "one pooled connection", "us", per_iteration["spearpy"], per_iteration["by_hand"],
               Target("<=", 1.05, "<= 1.05"),
               note=f"{len(requests)} completions and {TOOL_ITERATIONS} tool calls per send; "
                    "scripted server in its own process")


class _Recorder(httpx.BaseTransport):
    """Keeps the bytes of every request the backend sends."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.bodies: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class _GrownSends(_Sends):
    """A conversation that has gone on: `history` earlier messages, one
    earlier send (so every message was sent once before, as in a
    conversation that grew), then the timed send's prompt."""

    def _new(self) -> int:
        guest = self.guest
        fd = _conversation(guest, self.history)
        rfd = guest.send(fd)
        guest.recv(rfd)
        guest.close_fd(rfd)
        guest.write_msg(fd, "user", PROMPT)
        return fd


def history_growth(repeats: int) -> list[Row]:
    """Overhead per iteration (spearpy minus its own request bytes posted
    through its own transport) at
    LONG_HISTORY messages of history vs 2, against a server that does not parse."""
    argv = [sys.executable, "-m", "bench.latency_server", "0", str(TOOL_ITERATIONS)]
    with ServerProcess(None, argv) as server:
        recorders: list[_Recorder] = []

        def record(inner: httpx.BaseTransport) -> httpx.BaseTransport:
            recorders.append(_Recorder(inner))
            return recorders[-1]

        host = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
        install_backend(host, OpenAIBackend(base_url=server.base_url, default_model="bench",
                                            api_key_env="", retry=RetryPolicy(max_retries=0),
                                            wrap_transport=record))
        guest = LiveGuest(host)
        # The exchange spearpy cannot avoid: its own transport posting its own bytes.
        raw = Wire(server.base_url.rstrip("/") + "/chat/completions", HEADERS)
        # 1 + the prompt; LONG_HISTORY - 13 + an earlier send's 11 + the prompt.
        short, long = _Sends(guest, 1), _GrownSends(guest, LONG_HISTORY - 13)
        previous = _native.enter_run(guest.run)
        try:
            sent = recorders[0].bodies
            bodies = {}
            for name, sends in (("short", short), ("long", long)):
                sends.prepare()
                first = len(sent)
                sends.send()
                bodies[name] = sent[first:]
        finally:
            _native.enter_run(previous)
        n = len(bodies["short"])
        assert n == len(bodies["long"]) == TOOL_ITERATIONS + 1, (n, len(bodies["long"]))
        messages = json.loads(bodies["long"][0])["messages"]
        assert len(messages) == LONG_HISTORY, len(messages)
        # Timed without the recorder: a wrapped transport takes the httpx
        # path, and the baseline below posts through the backends' own pool.
        install_backend(host, OpenAIBackend(base_url=server.base_url, default_model="bench",
                                            api_key_env="", retry=RetryPolicy(max_retries=0)))

        def post_all(name: str) -> Callable[[], None]:
            def op() -> None:
                for body in bodies[name]:
                    response = raw.post(body, 60.0)
                    try:
                        b"".join(response.iter_bytes())
                    finally:
                        response.close()
            return op

        try:
            result = _timed(guest, {"short": short.send, "short_raw": post_all("short"),
                                    "long": long.send, "long_raw": post_all("long")},
                            [short, long], repeats, clock=time.process_time)
        finally:
            raw.close()
            guest.close()
            host.close()

    def overhead(name: str) -> Series:
        # Each send less the median exchange: its p50 is the difference of the
        # two medians, which held still between runs where the median of
        # per-round differences (two noisy ~1 ms samples) moved by 30 %.
        exchange = result[name + "_raw"].p50
        return Series([max(s - exchange, 1e-9) / n for s in result[name].samples])

    note = (f"{n} completions per send; process CPU time (the server is another process): "
            "overhead = spearpy's send minus the median of posting its own request bytes, "
            "prepared, through its own transport, to a server that does not parse them")
    return [
        Row("P2.history_growth.overhead_200_vs_2", "P2",
            f"overhead per loop iteration with {LONG_HISTORY} messages of history",
            "the same with 2 messages", "us", overhead("long"), overhead("short"),
            Target("<=", 1.2, "<= 1.2"), note=note),
        Row("P2.history_growth.iteration_200", "P2",
            f"loop iteration with {LONG_HISTORY} messages of history",
            "posting its request bytes, prepared", "us",
            Series([s / n for s in result["long"].samples]),
            Series([s / n for s in result["long_raw"].samples]),
            note="information: the whole iteration, and the exchange it cannot avoid"),
    ]


def run(quick: bool) -> list[Row]:
    repeats = 15 if quick else 60
    # The growth ratio is a difference of ~1 ms medians over another: it
    # needs more rounds than the ratio of two medians to hold still.
    return [loop_iteration(repeats), *history_growth(3 * repeats)]
