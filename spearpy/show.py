"""`spearpy show`: a finished run's conversation, rendered for a terminal.

Reads the files `--transcript DIR` writes (spearpy/observe/transcripts.py):
one per session, `<run_id>-fd<fd>.json`. Roles are labelled, each tool call
is a box with its arguments, its result follows in a box of its own, with
durations and token usage where the transcript has them. rich decides about
colour: on a terminal, not when piped or when NO_COLOR is set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.json import JSON
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from spearpy._term import block, one_line
from spearpy.errors import SpearpyError

DEFAULT_DIR_ENV = "SPEARPY_TRANSCRIPT_DIR"
DEFAULT_MAX_LINES = 40
_ROLE_STYLES = {"system": "magenta", "user": "bold green", "assistant": "bold cyan",
                "tool": "yellow"}


class TranscriptNotFound(SpearpyError, LookupError):
    """Neither a transcript file nor a run id found in the directory."""


def default_dir() -> Path:
    return Path(os.environ.get(DEFAULT_DIR_ENV) or "transcripts")


def find(target: str, directory: Path) -> list[Path]:
    """The transcript file `target`, or every session file of run `target`
    (an id or a unique prefix of one) in `directory`."""
    path = Path(target)
    if path.is_file():
        return [path]
    runs: dict[str, list[Path]] = {}
    if directory.is_dir():
        for file in sorted(directory.glob("*-fd*.json")):
            runs.setdefault(file.name.rsplit("-fd", 1)[0], []).append(file)
    matches = [run for run in runs if run == target] or \
        [run for run in runs if run.startswith(target)]
    if len(matches) == 1:
        return sorted(runs[matches[0]], key=_fd_order)
    if len(matches) > 1:
        raise TranscriptNotFound(f"run id {target!r} is ambiguous in {directory}: "
                                 f"{', '.join(sorted(matches))}")
    latest = sorted(runs, key=lambda run: max(p.stat().st_mtime for p in runs[run]))
    known = ", ".join(reversed(latest[-5:])) or "none"
    raise TranscriptNotFound(
        f"{target!r} is not a transcript file, and no run {target!r} has transcripts in "
        f"{directory} (--transcript-dir or {DEFAULT_DIR_ENV}; latest runs there: {known})")


def _fd_order(path: Path) -> int:
    digits = path.stem.rsplit("-fd", 1)[-1]
    return int(digits) if digits.isdigit() else 0


def load(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TranscriptNotFound(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TranscriptNotFound(f"{path} is not a transcript (not JSON: {exc})") from exc
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        raise TranscriptNotFound(f"{path} is not a transcript (no messages list)")
    return record


# ---- rendering -------------------------------------------------------------------


def _ms(value: object) -> str:
    if not isinstance(value, int | float):
        return ""
    return f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def _body(content: object, max_lines: int | None) -> RenderableType:
    """Text, or indented JSON when it parses as an object or list; long
    contents cut to `max_lines` with a note."""
    if content is None:
        return Text("(no content)", style="dim")
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    stripped = content.strip()
    if stripped[:1] in "[{" and stripped:
        try:
            pretty = json.dumps(json.loads(stripped), indent=2, ensure_ascii=False)
        except json.JSONDecodeError:
            pass
        else:
            cut, note = _cut(pretty, max_lines)
            return Group(JSON(cut), note) if note else JSON(cut)
    # What a tool, a server or the model wrote: its escapes are shown, not run.
    cut, note = _cut(block(content), max_lines)
    text = Text(cut)
    return Group(text, note) if note else text


def _cut(text: str, max_lines: int | None) -> tuple[str, Text | None]:
    lines = text.splitlines()
    if max_lines is None or len(lines) <= max_lines:
        return text, None
    rest = len(lines) - max_lines
    return "\n".join(lines[:max_lines]), Text(f"... {rest} more lines (--full shows them)",
                                              style="dim italic")


def _header(record: dict[str, Any]) -> RenderableType:
    usage = record.get("usage") or {}
    models = one_line(", ".join(map(str, record.get("models") or []))) or "?"
    title = Text()
    title.append(f"run {one_line(str(record.get('run_id', '?')), 80)}", style="bold")
    title.append(f" · session fd {one_line(str(record.get('session_fd', '?')), 20)} · "
                 f"model {models}")
    sends = (record.get("timings") or {}).get("sends_ms") or []
    took = f" ({', '.join(_ms(s) for s in sends)})" if sends else ""
    counts = (f"{record.get('sends', 0)} send(s){took} · {record.get('iterations', 0)} "
              f"completion(s) · {record.get('tool_calls', 0)} tool call(s)")
    closed = record.get("closed_at")
    if isinstance(closed, int | float):
        when = datetime.fromtimestamp(closed, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        title.append(f"\nclosed {when}", style="dim")
    tokens = (f"tokens: {usage.get('prompt_tokens', 0)} prompt + "
              f"{usage.get('completion_tokens', 0)} completion = "
              f"{usage.get('total_tokens', 0)}")
    parts: list[RenderableType] = [title, Text(counts, style="dim"), Text(tokens, style="dim")]
    tools = [t.get("function", {}).get("name", "?") for t in record.get("tools") or []
             if isinstance(t, dict)]
    if tools:
        parts.append(Text(one_line(f"tools offered: {', '.join(map(str, tools))}"),
                          style="dim"))
    return Group(*parts)


def _messages(record: dict[str, Any], max_lines: int | None) -> Iterable[RenderableType]:
    timings = record.get("timings") or {}
    tools_ms: dict[str, Any] = timings.get("tools_ms") or {}
    completions: list[Any] = list(timings.get("completions_ms") or [])
    names: dict[str, str] = {}
    truncated = {t.get("index") for t in record.get("truncated") or [] if isinstance(t, dict)}
    for index, message in enumerate(record["messages"]):
        if not isinstance(message, dict):
            continue
        role = one_line(str(message.get("role", "?")), 40)
        style = _ROLE_STYLES.get(role, "bold")
        if role == "assistant":
            took = _ms(completions.pop(0)) if completions else ""
            label = Text("assistant", style=style)
            if took:
                label.append(f"  ({took})", style="dim")
            yield label
            if message.get("content"):
                yield _body(message["content"], max_lines)
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                call_id = str(call.get("id", ""))
                names[call_id] = one_line(str(fn.get("name", "?")), 80)
                # Text, not str: rich reads a str title as markup.
                yield Panel(_body(fn.get("arguments"), max_lines), box=box.ROUNDED,
                            title=Text(f"tool call: {names[call_id]}"), title_align="left",
                            subtitle=Text(one_line(call_id, 80)), subtitle_align="right",
                            border_style="cyan")
            if not message.get("content") and not message.get("tool_calls"):
                yield Text("(empty)", style="dim")
        elif role == "tool":
            call_id = str(message.get("tool_call_id", ""))
            title = f"result: {names.get(call_id, '?')}"
            took = _ms(tools_ms.get(call_id))
            subtitle = one_line(call_id, 80) + (f", {took}" if took else "")
            if index in truncated:
                subtitle += ", cut in the transcript"
            yield Panel(_body(message.get("content"), max_lines), box=box.ROUNDED,
                        title=Text(title), title_align="left", subtitle=Text(subtitle),
                        subtitle_align="right", border_style="yellow")
        else:
            yield Text(role, style=style)
            yield _body(message.get("content"), max_lines)


def render(records: list[dict[str, Any]], console: Console, *,
           max_lines: int | None = DEFAULT_MAX_LINES) -> None:
    for number, record in enumerate(records):
        if number:
            console.print()
        console.print(Rule(style="dim"))
        console.print(_header(record))
        console.print(Rule(style="dim"))
        for item in _messages(record, max_lines):
            console.print(item)
