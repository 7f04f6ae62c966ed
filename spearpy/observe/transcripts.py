"""`--transcript DIR`: each session's whole conversation as one JSON file.

A file is written when its session closes (cchat_close, or the run ending with
the session open): `<run_id>-fd<fd>.json`. It holds the messages exactly as
they went upstream (assistant tool_calls and tool results included), the
tools, the params (credential-named params removed), the usage summed over
the session's sends and their timings (each send, completion and tool call).
The messages list replays the conversation verbatim, except tool contents
over `max_tool_bytes`, which are cut with an explicit marker and listed
under "truncated".
"""

from __future__ import annotations

import copy
import json
import os
import threading
from pathlib import Path
from typing import Any

from spearpy._files import atomic_write
from spearpy.observe import events as ev
from spearpy.observe.redact import REDACTED, Redactor, is_secret_key, short_sha256

TRANSCRIPT_VERSION = 1


def truncation_marker(total_bytes: int, sha: str) -> str:
    return f"\n[spearpy: truncated, {total_bytes} bytes in full, sha256 {sha}]"


def _cut_utf8(text: str, limit: int) -> str:
    # Cutting bytes could split a character; decode with "ignore" drops the half.
    return text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


def truncate_tool_contents(messages: list[dict[str, Any]],
                           max_bytes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Copies of `messages` with tool contents cut to `max_bytes` (UTF-8), and
    what was cut: [{"index", "tool_call_id", "bytes", "sha256"}]."""
    out: list[dict[str, Any]] = []
    cut: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str):
            size = len(content.encode("utf-8", "surrogatepass"))
            if size > max_bytes:
                sha = short_sha256(content)
                message = {**message,
                           "content": _cut_utf8(content, max_bytes) + truncation_marker(size, sha)}
                cut.append({"index": index, "tool_call_id": message.get("tool_call_id"),
                            "bytes": size, "sha256": sha})
        out.append(message)
    return out, cut


def clean_params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: (REDACTED if is_secret_key(k) else v) for k, v in params.items()}


def _add_usage(total: dict[str, int], usage: Any) -> None:
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int):
                total[key] = total.get(key, 0) + value


class TranscriptWriter:
    """An event sink writing one JSON file per closed session into `directory`."""

    def __init__(self, directory: str | os.PathLike[str], *, max_tool_bytes: int | None = None,
                 redactor: Redactor | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_tool_bytes = max_tool_bytes
        # Transcripts are records: only known secrets are replaced, never
        # credential-looking words the conversation may legitimately hold.
        self._redactor = redactor or Redactor.from_env(patterns=False)
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, int], dict[str, Any]] = {}
        self.written: list[Path] = []

    def __call__(self, event: ev.Event) -> None:
        if event.fd is None:
            return
        key = (event.run_id, event.fd)
        if event.kind == ev.SEND_START:
            with self._lock:
                stats = self._sessions.setdefault(key, _new_stats())
                model = event.data.get("model")
                if model and model not in stats["models"]:
                    stats["models"].append(model)
                stats["send_started"] = event.ts
        elif event.kind == ev.SEND_END:
            with self._lock:
                stats = self._sessions.setdefault(key, _new_stats())
                stats["sends"] += 1
                stats["iterations"] += int(event.data.get("iterations") or 0)
                stats["tool_calls"] += int(event.data.get("tool_calls") or 0)
                _add_usage(stats["usage"], event.data.get("usage"))
                started = stats.pop("send_started", None)
                if isinstance(started, float):
                    stats["timings"]["sends_ms"].append(round((event.ts - started) * 1e3, 3))
        elif event.kind in (ev.COMPLETION_END, ev.TOOL_END):
            # Durations for readers of the conversation (`spearpy show`): which
            # completion or tool call took the time.
            with self._lock:
                timings = self._sessions.setdefault(key, _new_stats())["timings"]
                if event.kind == ev.COMPLETION_END:
                    timings["completions_ms"].append(event.data.get("latency_ms"))
                elif event.data.get("tool_call_id") is not None:
                    timings["tools_ms"][str(event.data["tool_call_id"])] = \
                        event.data.get("duration_ms")
        elif event.kind == ev.SESSION_CLOSE and event.content is not None:
            transcript = event.content.get("transcript")
            if isinstance(transcript, dict):
                with self._lock:
                    stats = self._sessions.pop(key, _new_stats())
                self.write(transcript, stats)

    def write(self, transcript: dict[str, Any], stats: dict[str, Any] | None = None) -> Path:
        """Write one transcript (as Host.transcript_of builds it); returns its path."""
        record = self.render(transcript, stats)
        name = f"{record.get('run_id', 'run')}-fd{record.get('session_fd', 0)}.json"
        path = self.directory / name
        atomic_write(path, _encode(record))  # readers never see half a transcript
        with self._lock:
            self.written.append(path)
        return path

    def render(self, transcript: dict[str, Any],
               stats: dict[str, Any] | None = None) -> dict[str, Any]:
        record: dict[str, Any] = {"version": TRANSCRIPT_VERSION, **copy.deepcopy(transcript)}
        record["params"] = clean_params(record.get("params") or {})
        messages = record.get("messages") or []
        cut: list[dict[str, Any]] = []
        if self.max_tool_bytes is not None:
            messages, cut = truncate_tool_contents(messages, self.max_tool_bytes)
        record["messages"] = messages
        record["truncated"] = cut
        stats = stats or _new_stats()
        record.update(models=stats["models"], sends=stats["sends"],
                      iterations=stats["iterations"],
                      tool_calls=stats["tool_calls"], usage=stats["usage"],
                      timings=stats["timings"])
        redacted: dict[str, Any] = self._redactor.value(record)
        return redacted


def _encode(record: dict[str, Any]) -> bytes:
    text = json.dumps(record, ensure_ascii=False, indent=2, default=str) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate that reached a record some other way than parsed
        # JSON: the ASCII form spells it as an escape, losing nothing.
        return (json.dumps(record, ensure_ascii=True, indent=2, default=str) + "\n").encode()


def _new_stats() -> dict[str, Any]:
    return {"models": [], "sends": 0, "iterations": 0, "tool_calls": 0,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            # milliseconds: each send and completion in order, each tool call by its id
            "timings": {"sends_ms": [], "completions_ms": [], "tools_ms": {}}}
