"""Shared helpers of the routing tests (no tests here): a config with routing
tables over loopback servers, a refused port, and a probe guest that sends."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.context import RunOptions
from spearpy.host import Host
from spearpy.observe.events import Event
from spearpy.testing.instance import LiveInstance
from tests.probe import Probe, tool_schema, wat_module

ECHO = tool_schema("echo", {"text": {"type": "string"}})  # probe.wat's table[0]


def refused_url() -> str:
    """A loopback URL nothing listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def routing_config(path: Path, backends: dict[str, str | dict[str, Any]], tables: str = "",
                   default: str | None = None) -> Path:
    """backends: name -> base URL (an OpenAI-compatible server needing no key)
    or a full table; `tables`: the routing TOML, appended as written; the
    default backend is the first unless named."""
    lines = [f"default = {json.dumps(default or next(iter(backends)))}"]
    for name, value in backends.items():
        table = value if isinstance(value, dict) else {"base_url": value}
        table = {"api_key_env": "", "model": f"{name}-model", **table}
        lines.append(f"[backends.{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n" + tables)
    return path


class Guest(Probe):
    """probe.wat with its events collected; `send` is one guest send."""

    def __init__(self, host: Host) -> None:
        self.events: list[Event] = []
        LiveInstance.__init__(self, host, host.load(wat_module("probe.wat")),
                              RunOptions(capture_output=True, sinks=[self.events.append]))

    def send(self, text: str = "hello", *, model: str | None = None,
             backend: str | None = None, params: dict[str, Any] | None = None,
             auto: bool = False, tools: bool = False) -> dict[str, Any]:
        fd = self.hc("cchat_create")
        assert self.write_msg(fd, "user", text) == 0
        for key, value in {"model": model, "backend": backend, **(params or {})}.items():
            if value is not None:
                assert self.set_param(fd, key, value) == 0
        if tools:
            assert self.write_fn(fd, 0, ECHO) == 0
        body = self.recv_json(self.hc("cchat_send", fd,
                                      abi.SEND_AUTO_TOOL_CALL if auto else 0))
        self.hc("cchat_close", fd)
        return body

    def routes(self) -> list[dict[str, Any]]:
        """The routing record of every completion so far, in order."""
        return [e.data["route"] for e in self.events
                if e.kind == "completion_end" and "route" in e.data]


def content(body: dict[str, Any]) -> str | None:
    choices = body.get("choices") or [{}]
    text = choices[0].get("message", {}).get("content")
    return text if isinstance(text, str) else None


@pytest.fixture
def guests() -> Iterator[Any]:
    """guests(**host_config) -> a Guest on a fresh Host (no retries, no disk
    cache); both closed after the test."""
    made: list[tuple[Guest, Host]] = []

    def make(**config: Any) -> Guest:
        config.setdefault("cache_dir", None)
        config.setdefault("max_retries", 0)
        host = Host(**config)
        guest = Guest(host)
        made.append((guest, host))
        return guest

    yield make
    for guest, host in made:
        guest.close()
        host.close()
