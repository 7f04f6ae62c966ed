"""What a person watching `spearpy run` sees on stderr while the agent works.

On a terminal the lines are styled with rich; otherwise they are plain ASCII,
one line per step, for logs and CI. The view only appends lines, never redraws
one: the guest writes to the same terminal straight through WASI, and a
redrawn status line would overwrite what the guest printed.
"""

from __future__ import annotations

import sys
import threading
from typing import IO, TYPE_CHECKING, Any

from spearpy._term import one_line
from spearpy.observe import events as ev

if TYPE_CHECKING:
    from rich.console import Console


def _ms(value: Any) -> str:
    ms = float(value or 0.0)
    if ms >= 1000.0:
        return f"{ms / 1000.0:.2f} s"
    return f"{ms:.1f} ms" if ms >= 1.0 else f"{ms:.3f} ms"  # guest tools often take µs


# Tool names and call ids are the model's: a line shows at most this much of
# one, on one line (a newline in a name must not forge a line of its own).
_SHOWN_CHARS = 64


def _shown(value: Any) -> str:
    return one_line(value if isinstance(value, str) else str(value), _SHOWN_CHARS)


def _tokens(usage: Any) -> str:
    if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int):
        return f", {usage['total_tokens']} tokens"
    return ""


def describe(event: ev.Event) -> tuple[str, str] | None:
    """(text, rich style) of the line for an event, or None for no line."""
    d = event.data
    fd = f"[fd {event.fd}] " if event.fd is not None else ""
    match event.kind:
        case ev.RUN_START:
            return f"run {event.run_id}: {d.get('module')}", "bold"
        case ev.SEND_START:
            mode = "auto tool calls" if d.get("auto") else "plain"
            return f"{fd}send ({mode}, model {d.get('model') or '?'})", "cyan"
        case ev.COMPLETION_START:
            return f"{fd}iteration {d.get('iteration')}: asking the model", "dim"
        case ev.COMPLETION_END:
            if d.get("error"):
                status = f" HTTP {d['status']}" if d.get("status") else ""
                return (f"{fd}iteration {d.get('iteration')}: upstream error {d['error']}"
                        f"{status} after {_ms(d.get('latency_ms'))}"), "red"
            calls = int(d.get("tool_calls") or 0)
            asked = f", {calls} tool call{'s' if calls != 1 else ''}" if calls else ", answer"
            return (f"{fd}iteration {d.get('iteration')}: model replied in "
                    f"{_ms(d.get('latency_ms'))}{asked}{_tokens(d.get('usage'))}"), "dim"
        case ev.TOOL_START:
            if d.get("executed") is False:
                return None  # answered without running: the tool_end line says why
            return f"{fd}  calling {_shown(d.get('name'))} ({_shown(d.get('tool_call_id'))})", ""
        case ev.TOOL_END:
            return _tool_end(fd, d)
        case ev.LIMIT_HIT:
            return f"{fd}limit reached: {d.get('limit')} = {d.get('value')}", "yellow"
        case ev.SEND_END:
            state = "ok" if d.get("outcome") == "ok" else f"error {d.get('error')}"
            return (f"{fd}send {state}: {d.get('iterations', 0)} iteration(s), "
                    f"{d.get('tool_calls', 0)} tool call(s){_tokens(d.get('usage'))}",
                    "green" if d.get("outcome") == "ok" else "red")
        case ev.SOURCE_UNAVAILABLE:
            return (f"{fd}tool source {_shown(d.get('server'))} unavailable: "
                    f"{_printable(d.get('reason'))}"), "yellow"
        case ev.AUDIO_CLOSE:
            return _audio_close(fd, d)
        case ev.RUN_END:
            ok = d.get("outcome") == "exited" and d.get("exit_code") == 0
            return (f"run {event.run_id}: {d.get('outcome')}, exit code {d.get('exit_code')}, "
                    f"{_ms(d.get('elapsed_ms'))}", "bold green" if ok else "bold red")
    return None


def _printable(value: Any) -> str:
    # A device's or server's own message: longer than a name, still one line.
    return one_line(value if isinstance(value, str) else str(value), 512)


def _audio_close(fd: str, d: dict[str, Any]) -> tuple[str, str]:
    device = d.get("device")
    if d.get("last_error"):
        return f"{fd}{device} failed: {_printable(d['last_error'])}", "red"
    moved = (f"{d.get('bytes_read', 0)} bytes read" if device == "mic" else
             f"{d.get('audio_bytes_written', 0)} bytes sent, "
             f"{d.get('events_received', 0)} events received")
    return f"{fd}{device} closed: {moved}", "dim"


def _tool_end(fd: str, d: dict[str, Any]) -> tuple[str, str]:
    name = _shown(d.get("name"))
    if d.get("cached"):
        return f"{fd}  {name}: cached result reused", "dim"
    error = d.get("error")
    if d.get("executed") is False:
        return f"{fd}  {name} ({_shown(d.get('tool_call_id'))}) not run: {error}", "yellow"
    took = _ms(d.get("duration_ms"))
    if error is not None:
        rc = f", rc {d['rc']}" if d.get("rc") not in (None, 0) else ""
        return f"{fd}  {name} failed after {took}: {error}{rc}", "red"
    return f"{fd}  {name} done in {took}, {d.get('output_bytes', 0)} bytes", "green"


class LiveView:
    """An event sink printing progress lines to a stream (stderr by default)."""

    def __init__(self, stream: IO[str] | None = None, *, rich_output: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        styled = rich_output if rich_output is not None else bool(
            getattr(self._stream, "isatty", bool)())
        self._console: Console | None = None
        if styled:
            # rich only for a terminal: plain lines must not pay its import.
            from rich.console import Console

            self._console = Console(file=self._stream, highlight=False, soft_wrap=True)
        self._lock = threading.Lock()

    @property
    def styled(self) -> bool:
        return self._console is not None

    def __call__(self, event: ev.Event) -> None:
        line = describe(event)
        if line is None:
            return
        text, style = line
        with self._lock:
            if self._console is not None:
                from rich.text import Text

                self._console.print(Text(text, style=style or ""))
            else:
                self._stream.write(f"spearpy: {text}\n")
                self._stream.flush()
