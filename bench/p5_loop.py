"""P5: the tool loop's own cost per iteration, all in-process: spearpy's
ToolLoop driving a wasm `sum` tool against an in-process model, vs LangGraph,
LangChain, the OpenAI Agents SDK (fake model, Python tool) and a minimal
hand-written Python loop (the floor), with and without a wasm tool.

Per iteration = (time of a run with K_HI tool rounds - time with K_LO) /
(K_HI - K_LO), from pairs timed back to back: the slope leaves out each
framework's fixed cost per run (building a state, an event loop, a send).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from bench import fakemodel
from bench.guests import SUM, LiveGuest, RawToolCall
from bench.peers import PEERS, PROMPT
from bench.stats import Row, Series, Target, interleaved
from bench.upstream import install_backend
from spearpy import _native
from spearpy.host import Host

K_LO, K_HI = 1, 9
PROFILE_ROUNDS = 100  # below the sessions' max_iterations (128)
BUDGET_US = 20.0  # issue 19's target per iteration, the wasm tool call included


def minimal_loop(tool: Callable[[str], str]) -> Callable[[int], str]:
    """The least a Python program can do: call the model, run the calls, repeat."""

    def run(k: int) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
        while True:
            message = fakemodel.reply(messages, k)["choices"][0]["message"]
            messages.append(message)
            calls = message.get("tool_calls")
            if not calls:
                return str(message["content"])
            for call in calls:
                output = tool(call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})

    return run


def python_sum(arguments: str) -> str:
    args = json.loads(arguments)
    return f'{{"sum":{args["a"] + args["b"]}}}'


class SpearLoop:
    """A guest session sending with AUTO_TOOL_CALL against the in-process model."""

    def __init__(self) -> None:
        self.host = Host(cache_dir=None, model="bench", base_url="http://127.0.0.1:9/v1")
        self.backend = fakemodel.InProcessBackend(K_LO)
        install_backend(self.host, self.backend)
        self.guest = LiveGuest(self.host)
        self._ready: list[int] = []
        self._used: list[int] = []

    def prepare(self) -> None:
        for fd in self._used:
            self.guest.close_fd(fd)
        self._used.clear()
        while len(self._ready) < 2:
            fd = self.guest.session()
            self.guest.write_msg(fd, "user", PROMPT)
            self._ready.append(fd)

    def run(self, k: int) -> str:
        self.backend.tool_iterations = k
        fd = self._ready.pop()
        rfd = self.guest.send(fd)
        self._used += (fd, rfd)
        return self.guest.recv(rfd).decode()

    def close(self) -> None:
        self.guest.close()
        self.host.close()


def run(quick: bool) -> list[Row]:
    repeats = 7 if quick else 25
    spear = SpearLoop()
    raw_sum = RawToolCall(spear.guest, SUM)
    runners: dict[str, Callable[[int], str]] = {
        "spearpy": spear.run,
        "minimal loop + wasm tool": minimal_loop(raw_sum),
        "minimal loop": minimal_loop(python_sum),
    }
    missing: dict[str, str] = {}
    for name, (factory, package) in PEERS.items():
        try:
            runners[name] = factory()
        except ImportError as exc:
            missing[name] = f"{package} is not installed here ({exc.name}); " \
                            "tools/bench_env.sh installs it"
    previous = _native.enter_run(spear.guest.run)
    try:
        spear.prepare()
        for name, runner in runners.items():
            if '{"sum":' not in runner(K_LO).replace('\\"', '"'):
                raise RuntimeError(f"{name}: the loop did not reach the tool")
        ops: dict[str, Callable[[], Any]] = {}
        for name, runner in runners.items():
            for k in (K_LO, K_HI):
                ops[f"{name}@{k}"] = (lambda r=runner, k=k: r(k))
        timed = interleaved(ops, batch=1, repeats=repeats, between=spear.prepare)
    finally:
        _native.enter_run(previous)
        spear.close()
    per_iter = {
        name: Series([(hi - lo) / (K_HI - K_LO) for lo, hi in
                      zip(timed[f"{name}@{K_LO}"].samples, timed[f"{name}@{K_HI}"].samples,
                          strict=True)])
        for name in runners
    }
    ours = per_iter["spearpy"]
    rows = [
        Row("P5.iteration.absolute", "P5", "spearpy loop iteration (in-process model + wasm sum)",
            f"{BUDGET_US:g} us budget", "us", ours, Series([BUDGET_US * 1e-6]),
            Target("<=", 1.0, f"<= {BUDGET_US:g} us"),
            note=f"slope between {K_LO} and {K_HI} tool rounds per send"),
        Row("P5.iteration.vs_floor_wasm", "P5", "spearpy loop iteration",
            "minimal Python loop + raw wasm tool call (the floor)", "us", ours,
            per_iter["minimal loop + wasm tool"], Target("<=", 2.0, "<= 2"),
            note="the floor is measured here, in the same run: docs quote this row"),
        Row("P5.iteration.vs_floor_python", "P5", "spearpy loop iteration",
            "minimal Python loop + Python tool", "us", ours, per_iter["minimal loop"],
            note="information: the floor with no wasm at all"),
    ]
    for name, (_factory, _package) in PEERS.items():
        rows.append(Row(f"P5.iteration.vs_{_slug(name)}", "P5", "spearpy loop iteration",
                        f"{name} (fake model, Python tool)", "us", ours, per_iter.get(name),
                        Target("<=", 0.01, "<= 0.01"), note=missing.get(name, "")))
    return rows


def profile(seconds: float = 20.0) -> None:
    """spearpy's side alone, for `python -m bench --profile`: sends of many
    tool rounds each, so the per-iteration path, not the session set-up
    between sends, fills the flame graph."""
    spear = SpearLoop()
    previous = _native.enter_run(spear.guest.run)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            spear.prepare()
            spear.run(PROFILE_ROUNDS)
    finally:
        _native.enter_run(previous)
        spear.close()


def _slug(name: str) -> str:
    return name.split()[0].replace("-", "_")
