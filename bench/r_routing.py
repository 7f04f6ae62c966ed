"""R: what routing adds to a completion, against the tool loop's own cost per
iteration (P5's spearpy loop, measured in the same run).

The router holds 20 routes, each with two content regexes (a plain word and
a case-insensitive `\\b...\\b` one) that never match, so every completion
reads every route; the history is 50 messages of 100-300 characters.

- warm: one loop iteration as the router sees it: the assistant reply and a
  tool result are appended (P5's `{"sum":N}`, or a 2 KiB tool output), then
  RoutedBackend.complete runs (scan of the new messages, the memoised
  decision, policy, health, the record) around an instant in-process backend;
- cold: the first completion of a session whose 50 messages the router has
  never read (every message scanned).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from bench.p5_loop import K_HI, K_LO, SpearLoop
from bench.stats import Row, Series, Target, interleaved
from spearpy import _native
from spearpy.backends.base import CompletionRequest
from spearpy.backends.router import RoutedBackend, Router, SessionRouting
from spearpy.backends.routing.spec import MatchSpec, RouteSpec, RoutingSpec
from spearpy.chat.protocol import CompletionResult

ROUTES = 20
HISTORY = 50
ITERATIONS = 20  # loop iterations timed per batch (the history grows by 2 each)
WORDS = ("the", "of", "and", "model", "tool", "result", "value", "request", "answer", "agent",
         "backend", "session", "history", "route", "local", "hosted", "guest", "call", "sum",
         "product", "text", "data")
TOOLS = [{"type": "function", "function": {"name": "sum", "parameters": {"type": "object"}}}]


class Instant:
    """A backend that answers at once: the routing is all that is timed."""

    name = "a"
    default_model = "bench"

    def __init__(self) -> None:
        self._result = CompletionResult("a", "bench", body={"choices": []})

    def complete(self, request: CompletionRequest) -> CompletionResult:
        return self._result

    def close(self) -> None:
        pass


def router() -> Router:
    routes = tuple(RouteSpec(name=f"r{i}", to=["a", "b"], lock=i % 2 == 0,
                             match=MatchSpec(content=[f"secret-{i}-word",
                                                      rf"(?i)\bproject{i}x\b"]))
                   for i in range(ROUTES))
    backend = Instant()
    return Router(RoutingSpec(routes=routes), "a", lambda _name: (backend, None),
                  lambda _name: "bench")


def history(rng: random.Random) -> list[dict[str, Any]]:
    def text(chars: int) -> str:
        out: list[str] = []
        while sum(len(w) + 1 for w in out) < chars:
            out.append(rng.choice(WORDS))
        return " ".join(out)

    messages: list[dict[str, Any]] = [{"role": "system", "content": text(200)}]
    roles = ("user", "assistant", "tool")
    while len(messages) < HISTORY:
        role = roles[len(messages) % 3]
        messages.append({"role": role, "content": text(rng.randint(100, 300))})
    return messages


class Loop:
    """One session's history as the router sees it during a send."""

    def __init__(self, base: list[dict[str, Any]], tool_output: str) -> None:
        self.router = router()
        self.base = base
        self.tool_output = tool_output
        self.reset()

    def reset(self) -> None:
        # The loop's own work (new messages, the request over the session's
        # list, which it mutates in place) is done here, outside the timing.
        self.messages = list(self.base)
        self.request = CompletionRequest("bench", self.messages, TOOLS)
        self.new = [({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "sum", "arguments": '{"a":1,"b":2}'}}]},
                     {"role": "tool", "tool_call_id": f"call_{i}",
                      "content": self.tool_output.replace("N", str(i))})
                    for i in range(ITERATIONS)]
        self.state = SessionRouting()
        self.backend = RoutedBackend(self.router, "", None, Instant(), self.state)
        self.backend.complete(self.request)  # the send's first completion read the history

    def iterate(self) -> None:
        messages, backend, request = self.messages, self.backend, self.request
        for reply, result in self.new:
            messages.append(reply)
            messages.append(result)
            backend.complete(request)


def cold(base: list[dict[str, Any]]) -> Callable[[], None]:
    shared = router()
    request = CompletionRequest("bench", base, TOOLS)

    def op() -> None:
        for _ in range(ITERATIONS):
            RoutedBackend(shared, "", None, Instant(), SessionRouting()).complete(request)

    return op


def run(quick: bool) -> list[Row]:
    repeats = 7 if quick else 25
    base = history(random.Random(21))
    small = Loop(base, '{"sum":N}')
    large = Loop(base, '{"rows":"' + "x" * 2030 + 'N"}')
    record = small.backend.last_record
    assert record is not None and record["reason"] == "default", record
    spear = SpearLoop()
    ops: dict[str, Callable[[], Any]] = {
        "loop@lo": lambda: spear.run(K_LO),
        "loop@hi": lambda: spear.run(K_HI),
        "warm": small.iterate,
        "warm_2k": large.iterate,
        "cold": cold(base),
    }

    def between() -> None:
        spear.prepare()
        small.reset()
        large.reset()

    previous = _native.enter_run(spear.guest.run)
    try:
        spear.prepare()
        timed = interleaved(ops, batch=1, repeats=repeats, between=between)
    finally:
        _native.enter_run(previous)
        spear.close()
    loop = Series([(hi - lo) / (K_HI - K_LO) for lo, hi in
                   zip(timed["loop@lo"].samples, timed["loop@hi"].samples, strict=True)])
    per = {name: Series([s / ITERATIONS for s in timed[name].samples])
           for name in ("warm", "warm_2k", "cold")}
    loop_text = "spearpy loop iteration (P5: in-process model + wasm sum)"
    setup = f"{ROUTES} routes x 2 content regexes, {HISTORY}-message history"
    return [
        Row("R.decision.warm_vs_loop", "R", f"routing one loop iteration ({setup})", loop_text,
            "us", per["warm"], loop, Target("<=", 0.02, "<= 2 %"),
            note='new messages scanned: the reply and a tool result {"sum":N}'),
        Row("R.decision.warm_2k_tool_vs_loop", "R", "routing one loop iteration, 2 KiB tool "
            "result", loop_text, "us", per["warm_2k"], loop,
            note="information: the scan grows with the new text"),
        Row("R.decision.cold_vs_loop", "R", f"routing a session's first completion ({setup})",
            loop_text, "us", per["cold"], loop,
            note="information: every message read once; later completions are warm"),
    ]
